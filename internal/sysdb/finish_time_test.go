package sysdb

import (
	"context"
	"testing"
	"time"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/stretchr/testify/require"
)

// TestFinishTimeReadersReadFewRows: retention's batches and the
// dashboard's activity find finished runs by finish time in
// workflows_finish_time_idx, keyed by the time alone, where the runs of
// one finish statement share a key: a batch of the oldest, a batch from
// the middle of the walk, and the newest runs each read about a batch of
// rows (the runs of one finish time are read whole, to be ordered by ID),
// never the history, even with the steps table's statistics stale.
func TestFinishTimeReadersReadFewRows(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	const history, group, recent = 20000, 500, 300
	// The history finished 3 to 2 hours ago, 500 runs per finish time; the
	// recent runs in the last minute, 100 per finish time.
	on(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, created_at, updated_at)
		SELECT 'h' || lpad(i::text, 6, '0'), 'w', 'success', 'v', now() - interval '4 hours',
			now() - interval '3 hours' + (i / $2) * interval '1 minute'
		FROM generate_series(1, $1) i`, history, group)
	on(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, created_at, updated_at)
		SELECT 'n' || lpad(i::text, 6, '0'), 'w', 'error', 'v', now() - interval '1 minute',
			now() - interval '30 seconds' + (i / 100) * interval '1 second'
		FROM generate_series(1, $1) i`, recent)
	// The steps table's statistics are stale, as after a TRUNCATE: they
	// say no step has a start time, so a join of the runs with the steps
	// that qualify looks nearly free from either side. The step latency
	// must not trust them.
	on(t, pool, schema, `INSERT INTO {{schema}}.steps (workflow_id, pos, name, status)
		SELECT 'gone', i, 's', 'done' FROM generate_series(1, 100) i`)
	on(t, pool, schema, `ANALYZE {{schema}}.steps`)
	on(t, pool, schema, `DELETE FROM {{schema}}.steps`)
	on(t, pool, schema, `INSERT INTO {{schema}}.steps (workflow_id, pos, name, status, started_at)
		SELECT id, 0, 's', 'done', updated_at - interval '1 second' FROM {{schema}}.workflows`)
	on(t, pool, schema, `VACUUM ANALYZE {{schema}}.workflows`)
	var mid time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT now() - interval '3 hours' + 20 * interval '1 minute'`).Scan(&mid))

	rq := NewRetentionQueries(schema)
	mq := NewMetricsQueries(schema)
	before := time.Now().Add(-time.Hour)
	cases := []struct {
		name string
		sql  string
		args []any
	}{
		{"retention, first batch", rq.pruneBatch, []any{before, time.Time{}, "", 100}},
		{"retention, a batch from the middle", rq.pruneBatch, []any{before, mid, "h010250", 100}},
		{"activity, runs finished per minute", mq.finishedPerMinute, []any{time.Now().Add(-5 * time.Minute)}},
		{"activity, step latency", mq.stepLatency, []any{time.Now().Add(-5 * time.Minute), 100}},
	}
	for _, c := range cases {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			n, plan := pgtest.ExplainRows(ctx, t, pool, mode, c.sql, c.args)
			require.LessOrEqual(t, n, 2*group, "%s, %s: read %d rows of %d runs; plan: %s", c.name, mode, n, history+recent, plan)
		}
	}
}
