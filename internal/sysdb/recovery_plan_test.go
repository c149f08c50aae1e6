package sysdb

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/durable-go/durable/internal/pgtest"
)

// TestSweepReadsOnlyLiveRuns: the takeover sweep, which every executor
// runs every second or so and at every wake-up, reads the runs that can be
// taken over, not the history nor the parked runs not due: with 3,000
// finished runs and 3,000 parked ones its statements (ClaimOrphans,
// CountOtherVersions) read a handful of rows.
func TestSweepReadsOnlyLiveRuns(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	on(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, epoch)
SELECT 'done-' || i, 'w', 'success', 'v', 1 FROM generate_series(1, 3000) i`)
	on(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, epoch, wake_at)
SELECT 'parked-' || i, 'w', 'pending', 'v' || (i % 2), 1, now() + interval '1 hour' FROM generate_series(1, 3000) i`)
	orphanRuns(t, pool, schema)
	on(t, pool, schema, `ANALYZE {{schema}}.workflows`)
	q := NewRecoveryQueries(schema, "")
	for _, mode := range planModes {
		for _, c := range []struct {
			name string
			sql  string
			args []any
		}{
			{"ClaimOrphans", q.claimOrphans, []any{"me", "v", []string{"w"}, 100, true}},
			{"CountOtherVersions", q.countOtherVersions, []any{"v", []string{"w"}}},
		} {
			if looked, plan := pgtest.ExplainRows(context.Background(), t, pool, mode, c.sql, c.args); looked > 50 {
				t.Errorf("%s (%s): the plan looked at %d rows of workflows; want <= 50\n%s", c.name, mode, looked, plan)
			}
		}
	}
}

// TestDeadLetterFindsRunByPrimaryKey: DeadLetter finds its run by primary
// key even when the statistics say almost no run is pending (analyzed
// while all were finished, as before a burst): a plan that trusted them
// would scan every pending run.
func TestDeadLetterFindsRunByPrimaryKey(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	on(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, epoch)
SELECT 'r' || i, 'w', 'success', 'v', 1 FROM generate_series(1, 3000) i`)
	on(t, pool, schema, `ANALYZE {{schema}}.workflows`)
	on(t, pool, schema, `UPDATE {{schema}}.workflows SET status = 'pending', epoch = 2, executor_id = 'x'`)
	q := NewRecoveryQueries(schema, ChannelName(schema))
	for _, mode := range planModes {
		if looked, plan := pgtest.ExplainRows(context.Background(), t, pool, mode, q.deadLetter, []any{"r7", 2, json.RawMessage(`1`)}); looked > 50 {
			t.Errorf("DeadLetter (%s): the plan looked at %d rows of workflows; want <= 50\n%s", mode, looked, plan)
		}
	}
}
