package sysdb

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/pgtest"
)

// The doctor's statements, each with the problem it reports planted by
// hand (where this server allows it) beside rows it must not report.

// flushStats makes the statistics of this connection's work visible to
// other sessions at once (Postgres 15 and later; before, they show within
// about half a second).
func flushStats(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	var v int
	require.NoError(t, conn.QueryRow(context.Background(), "SELECT current_setting('server_version_num')::int").Scan(&v))
	if v >= 150000 {
		_, err := conn.Exec(context.Background(), "SELECT pg_stat_force_next_flush()")
		require.NoError(t, err)
	}
}

func TestDoctorTableHealth(t *testing.T) {
	t.Parallel()
	pool, schema := migratedFresh(t) // a table never vacuumed
	c := coreOn(t, pool, schema)
	q := NewDoctorQueries(c.schema)
	conn, err := c.pool.Acquire(c.ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(c.ctx, Render(`ALTER TABLE {{schema}}.workflows SET (autovacuum_enabled = false);
		INSERT INTO {{schema}}.workflows (id, name, status, app_version) SELECT 'r' || i, 'w', 'success', 'v' FROM generate_series(1, 500) i;
		DELETE FROM {{schema}}.workflows WHERE id <> 'r1' AND id < 'r4'`, c.schema))
	require.NoError(t, err)
	flushStats(t, conn.Conn())

	find := func() TableHealthRow {
		rows, err := q.TableHealth(c.ctx, c.pool, c.schema)
		require.NoError(t, err)
		for _, r := range rows {
			if r.Table == "workflows" {
				return r
			}
		}
		t.Fatalf("workflows not in %+v", rows)
		return TableHealthRow{}
	}
	var w TableHealthRow
	require.Eventually(t, func() bool { w = find(); return w.Dead >= 300 }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, TableHealthRow{Table: "workflows", Live: w.Live, Dead: w.Dead, Autovacuum: false}, w, "never vacuumed, autovacuum off")
	rows, err := q.TableHealth(c.ctx, c.pool, c.schema)
	require.NoError(t, err)
	names := map[string]bool{}
	for _, r := range rows {
		names[r.Table] = true
	}
	require.True(t, names["steps"] && names["step_attempts"] && names["executors"], "%v", names)

	_, err = conn.Exec(c.ctx, Render(`VACUUM {{schema}}.workflows`, c.schema))
	require.NoError(t, err)
	flushStats(t, conn.Conn())
	// (Its dead rows may stay: another test's open snapshot can hold them.)
	require.Eventually(t, func() bool { w = find(); return w.SinceVacuum != nil }, 10*time.Second, 20*time.Millisecond)
	require.Less(t, *w.SinceVacuum, 3600.0)
}

func TestDoctorStatsVisibility(t *testing.T) {
	c := newCore(t)
	var super bool
	require.NoError(t, c.pool.QueryRow(c.ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&super))
	all, err := NewDoctorQueries(c.schema).StatsVisibility(c.ctx, c.pool)
	require.NoError(t, err)
	if super {
		require.True(t, all)
	}
}

func TestDoctorXminHolders(t *testing.T) {
	c := newCore(t)
	q := NewDoctorQueries(c.schema)
	holder, err := pgx.Connect(c.ctx, pgtest.DirectURL(t))
	require.NoError(t, err)
	defer holder.Close(context.Background())
	var pid int
	require.NoError(t, holder.QueryRow(c.ctx, "SELECT pg_backend_pid()").Scan(&pid))
	tx, err := holder.BeginTx(c.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	_, err = tx.Exec(c.ctx, "SELECT count(*) FROM pg_class") // takes the snapshot, then idles
	require.NoError(t, err)

	mine := func(older time.Duration) *XminHolderRow {
		rows, err := q.XminHolders(c.ctx, c.pool, XminHoldersParams{OlderThan: older, Limit: 1000})
		require.NoError(t, err)
		for i := range rows {
			if rows[i].PID == pid {
				return &rows[i]
			}
		}
		return nil
	}
	var got *XminHolderRow
	require.Eventually(t, func() bool { got = mine(0); return got != nil && got.State == "idle in transaction" },
		10*time.Second, 10*time.Millisecond, "the idle transaction holds xmin")
	require.Contains(t, got.Query, "pg_class")
	require.Greater(t, got.XIDAge, int64(-1))
	require.Nil(t, mine(time.Hour), "not an hour old")
	require.NoError(t, tx.Commit(c.ctx))
	require.Nil(t, mine(0), "released with its transaction")
}

func TestDoctorPreparedXacts(t *testing.T) {
	c := newCore(t)
	q := NewDoctorQueries(c.schema)
	var max int
	require.NoError(t, c.pool.QueryRow(c.ctx, "SELECT current_setting('max_prepared_transactions')::int").Scan(&max))
	_, err := q.PreparedXacts(c.ctx, c.pool, 0)
	require.NoError(t, err)
	if max == 0 {
		t.Skip("max_prepared_transactions is 0 on this server: no prepared transaction to plant")
	}
	gid := fmt.Sprintf("durable-doctor-%s", c.schema)
	conn, err := pgx.Connect(c.ctx, pgtest.DirectURL(t))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(c.ctx, Render("BEGIN; INSERT INTO {{schema}}.executors (id, incarnation, app_version, lease_expires_at) VALUES ('x', 'i', 'v', now()); PREPARE TRANSACTION '"+gid+"'", c.schema))
	require.NoError(t, err)
	defer func() { _, _ = c.pool.Exec(context.Background(), "ROLLBACK PREPARED '"+gid+"'") }()
	rows, err := q.PreparedXacts(c.ctx, c.pool, 0)
	require.NoError(t, err)
	found := false
	for _, r := range rows {
		found = found || r.GID == gid
	}
	require.True(t, found, "%+v", rows)
}

func TestDoctorReplicationSlotsAndXIDAge(t *testing.T) {
	c := newCore(t)
	q := NewDoctorQueries(c.schema)
	_, err := q.ReplicationSlots(c.ctx, c.pool) // a slot holding xmin needs a replica or logical decoding to plant
	require.NoError(t, err)
	d, err := q.DatabaseXIDAge(c.ctx, c.pool)
	require.NoError(t, err)
	require.Positive(t, d.Age)
	require.Positive(t, d.FreezeMaxAge)
}

func TestDoctorLongPending(t *testing.T) {
	c := newCore(t)
	c.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, wake_at, created_at) VALUES
		('old-owned', 'w', 'pending', 'v', 'x', NULL, now() - interval '3 hours'),
		('old-unowned', 'w', 'pending', 'v', NULL, NULL, now() - interval '2 hours'),
		('old-parked', 'w', 'pending', 'v', NULL, now() + interval '1 day', now() - interval '5 hours'),
		('old-done', 'w', 'success', 'v', NULL, NULL, now() - interval '5 hours'),
		('new', 'w', 'pending', 'v', 'x', NULL, now())`)
	q := NewDoctorQueries(c.schema)
	rows, err := q.LongPending(c.ctx, c.pool, LongPendingParams{OlderThan: time.Hour, Limit: 1})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, []any{"old-owned", "w", "x", int64(2)}, []any{rows[0].ID, rows[0].Name, rows[0].ExecutorID, rows[0].Total})
	require.InDelta(t, 3*3600, rows[0].Seconds, 60)
	rows, err = q.LongPending(c.ctx, c.pool, LongPendingParams{OlderThan: time.Hour, Limit: 10})
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.Equal(t, "old-unowned", rows[1].ID)
	require.Equal(t, "", rows[1].ExecutorID)
}

func TestDoctorStrayRuns(t *testing.T) {
	c := newCore(t)
	c.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, wake_at, updated_at) VALUES
		('u1', 'w', 'pending', 'v1', NULL, NULL, now() - interval '2 hours'),
		('u2', 'w', 'pending', 'v1', NULL, NULL, now() - interval '1 hour'),
		('u3', 'w', 'pending', 'v2', NULL, NULL, now() - interval '1 hour'),
		('just-handed-back', 'w', 'pending', 'v1', NULL, NULL, now()),
		('owned', 'w', 'pending', 'v1', 'x', NULL, now() - interval '2 hours'),
		('due', 'p', 'pending', 'v1', NULL, now() - interval '30 minutes', now() - interval '1 day'),
		('sleeping', 'p', 'pending', 'v1', NULL, now() + interval '1 hour', now() - interval '1 day'),
		('done', 'w', 'success', 'v1', NULL, NULL, now() - interval '2 hours')`)
	rows, err := NewDoctorQueries(c.schema).StrayRuns(c.ctx, c.pool, 5*time.Minute)
	require.NoError(t, err)
	require.Len(t, rows, 3)
	for i := range rows {
		rows[i].Seconds = float64(int(rows[i].Seconds/600) * 600) // to 10 minutes
	}
	require.Equal(t, []StrayRunsRow{
		{Kind: "overdue", Name: "p", AppVersion: "v1", Count: 1, ExampleID: "due", Seconds: 1800},
		{Kind: "unowned", Name: "w", AppVersion: "v1", Count: 2, ExampleID: "u1", Seconds: 7200},
		{Kind: "unowned", Name: "w", AppVersion: "v2", Count: 1, ExampleID: "u3", Seconds: 3600},
	}, rows)
}

func TestDoctorQueueBacklog(t *testing.T) {
	c := newCore(t)
	c.exec(`INSERT INTO {{schema}}.queues (name, paused) VALUES ('slow', false), ('stopped', true), ('fine', false)`)
	c.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, queue_name, not_before, created_at) VALUES
		('a', 'w', 'enqueued', 'v', 'slow', NULL, now() - interval '2 hours'),
		('b', 'w', 'enqueued', 'v', 'slow', now() - interval '90 minutes', now() - interval '3 hours'),
		('c', 'w', 'enqueued', 'v', 'slow', now() + interval '1 hour', now() - interval '3 hours'),
		('d', 'w', 'enqueued', 'v', 'stopped', NULL, now() - interval '1 day'),
		('e', 'w', 'enqueued', 'v', 'fine', NULL, now()),
		('f', 'w', 'pending', 'v', 'fine', NULL, now() - interval '1 day')`)
	rows, err := NewDoctorQueries(c.schema).QueueBacklog(c.ctx, c.pool, time.Hour)
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.Equal(t, []any{"slow", false, int64(2)}, []any{rows[0].Queue, rows[0].Paused, rows[0].Count})
	require.InDelta(t, 7200, rows[0].Seconds, 60)
	require.Equal(t, []any{"stopped", true, int64(1)}, []any{rows[1].Queue, rows[1].Paused, rows[1].Count})
}

func TestDoctorDeadExecutorsAndLiveVersions(t *testing.T) {
	c := newCore(t)
	c.exec(`INSERT INTO {{schema}}.executors (id, incarnation, app_version, hostname, pid, lease_expires_at) VALUES
		('dead', 'i', 'v1', 'h1', 11, now() - interval '1 hour'),
		('dead-idle', 'i', 'v1', 'h2', 12, now() - interval '1 hour'),
		('just-expired', 'i', 'v1', 'h3', 13, now() - interval '1 second'),
		('live', 'i', 'v2', 'h4', 14, now() + interval '1 minute')`)
	c.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id) VALUES
		('r1', 'w', 'pending', 'v1', 'dead'), ('r2', 'w', 'pending', 'v1', 'dead'), ('r3', 'w', 'success', 'v1', 'dead-idle'),
		('r4', 'w', 'pending', 'v1', 'just-expired'), ('r5', 'w', 'pending', 'v2', 'live'), ('r6', 'w', 'pending', 'v1', 'gone')`)
	q := NewDoctorQueries(c.schema)
	rows, err := q.DeadExecutors(c.ctx, c.pool, time.Minute)
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.Equal(t, []any{"dead", "v1", "h1", 11, int64(2)}, []any{rows[0].ID, rows[0].AppVersion, rows[0].Hostname, rows[0].PID, rows[0].Owned})
	require.NotNil(t, rows[0].SinceExpiry)
	require.InDelta(t, 3600, *rows[0].SinceExpiry, 60)
	require.Equal(t, []any{"gone", int64(1)}, []any{rows[1].ID, rows[1].Owned})
	require.Nil(t, rows[1].SinceExpiry, "no executor row")

	live, err := q.LiveVersions(c.ctx, c.pool)
	require.NoError(t, err)
	require.Equal(t, []LiveVersionRow{{AppVersion: "v2", Executors: 1}}, live)
}

// TestDoctorReadsOnlyLiveRuns: the doctor's statements on the runs read
// the live ones from their partial indexes, not 3,000 finished runs.
func TestDoctorReadsOnlyLiveRuns(t *testing.T) {
	c := newCore(t)
	c.exec(`INSERT INTO {{schema}}.queues (name) VALUES ('q')`)
	c.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, queue_name, created_at, updated_at)
		SELECT 'done-' || i, 'w', 'success', 'v', CASE WHEN i % 2 = 0 THEN 'q' END, now() - interval '1 day', now() - interval '1 day'
		FROM generate_series(1, 3000) i`)
	c.exec(`ANALYZE {{schema}}.workflows`)
	q := NewDoctorQueries(c.schema)
	for _, mode := range planModes {
		for _, s := range []struct {
			name string
			sql  string
			args []any
		}{
			{"LongPending", q.longPending, []any{int64(0), 10}},
			{"StrayRuns", q.strayRuns, []any{int64(0)}},
			{"QueueBacklog", q.queueBacklog, []any{int64(0)}},
			{"DeadExecutors", q.deadExecutors, []any{int64(0)}},
		} {
			if looked, plan := pgtest.ExplainRows(c.ctx, t, c.pool, mode, s.sql, s.args); looked > 50 {
				t.Errorf("%s (%s): the plan read %d runs; want <= 50\n%s", s.name, mode, looked, plan)
			}
		}
	}
}
