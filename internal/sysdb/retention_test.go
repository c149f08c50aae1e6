package sysdb

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPruneBatch: a batch deletes finished runs older than the cutoff with
// every row keyed by their IDs, and holds back what must stay: pending and
// recent runs, the child of a parent that stays, a queued run whose start
// still counts toward its queue's rate limit, rows locked by others. The
// batches walk forward: a run held back is not read again.
func TestPruneBatch(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	on(t, pool, schema, `INSERT INTO {{schema}}.queues (name, rate_limit, rate_period_ms) VALUES ('rated', 1, 3600000)`)
	on(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, parent_id, queue_name, rate_start, updated_at) VALUES
	('a-old', 'w', 'success', 'v', NULL, NULL, NULL, now() - interval '3 hours'),
	('b-old-error', 'w', 'error', 'v', NULL, NULL, NULL, now() - interval '3 hours' + interval '1 second'),
	('c-child-of-old', 'w', 'cancelled', 'v', 'a-old', NULL, NULL, now() - interval '3 hours' + interval '2 seconds'),
	('d-old-dead', 'w', 'dead', 'v', NULL, NULL, NULL, now() - interval '3 hours' + interval '3 seconds'),
	('pending-parent', 'w', 'pending', 'v', NULL, NULL, NULL, now() - interval '3 hours'),
	('child-of-pending', 'w', 'success', 'v', 'pending-parent', NULL, NULL, now() - interval '3 hours'),
	('recent-parent', 'w', 'success', 'v', NULL, NULL, NULL, now()),
	('child-of-recent', 'w', 'success', 'v', 'recent-parent', NULL, NULL, now() - interval '3 hours'),
	('rate-counted', 'w', 'success', 'v', NULL, 'rated', now() - interval '30 minutes', now() - interval '3 hours'),
	('a-locked', 'w', 'success', 'v', NULL, NULL, NULL, now() - interval '3 hours' + interval '1 second')`)
	on(t, pool, schema, `INSERT INTO {{schema}}.steps (workflow_id, pos, name, status) VALUES ('a-old', 0, 's', 'done'), ('a-old', 1, 's', 'done'), ('recent-parent', 0, 's', 'done')`)
	on(t, pool, schema, `INSERT INTO {{schema}}.messages (workflow_id, topic) VALUES ('a-old', 't'), ('b-old-error', 't'), ('recent-parent', 't')`)
	on(t, pool, schema, `INSERT INTO {{schema}}.events (workflow_id, key) VALUES ('a-old', 'k')`)
	on(t, pool, schema, `INSERT INTO {{schema}}.streams (workflow_id, key, off) VALUES ('d-old-dead', 'k', 0), ('d-old-dead', 'k', 1)`)
	var before time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT now() - interval '1 hour'`).Scan(&before))

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, Render(`SELECT 1 FROM {{schema}}.workflows WHERE id = 'a-locked' FOR UPDATE`, schema))
	require.NoError(t, err)

	q := NewRetentionQueries(schema)
	// A walk of batches of two.
	p := PruneBatchParams{Before: before, Limit: 2}
	bounded, cancel := context.WithTimeout(ctx, 10*time.Second) // a walk that waits for the locked run fails
	defer cancel()
	b, err := q.PruneBatch(bounded, pool, p)
	require.NoError(t, err)
	require.Equal(t, int64(2), b.Runs)
	require.Equal(t, int64(2), b.Steps)
	require.Equal(t, int64(2), b.Messages)
	require.Equal(t, int64(1), b.Events)
	require.Zero(t, b.Streams)
	require.NotNil(t, b.LastID)
	require.Equal(t, "b-old-error", *b.LastID, "oldest first, past the locked run")
	// The locked run, held back, stays behind the walk: later batches do
	// not read it again, even once it is free, though it finished at the
	// same time as the last run picked (the walk's position is the time and
	// the ID).
	require.NoError(t, tx.Rollback(ctx))
	p.AfterAt, p.AfterID = *b.LastAt, *b.LastID
	b, err = q.PruneBatch(ctx, pool, p)
	require.NoError(t, err)
	require.Equal(t, PruneBatchRow{Runs: 2, Streams: 2, LastAt: b.LastAt, LastID: b.LastID}, b)
	require.Equal(t, "d-old-dead", *b.LastID)
	p.AfterAt, p.AfterID = *b.LastAt, *b.LastID
	b, err = q.PruneBatch(ctx, pool, p)
	require.NoError(t, err)
	require.Equal(t, PruneBatchRow{}, b, "nothing else may go")

	for _, id := range []string{"a-old", "b-old-error", "c-child-of-old", "d-old-dead"} {
		require.Equal(t, "none", runState(t, pool, schema, id), id)
	}
	for _, id := range []string{"pending-parent", "child-of-pending", "recent-parent", "child-of-recent", "rate-counted", "a-locked"} {
		require.NotEqual(t, "none", runState(t, pool, schema, id), id)
	}
	var left int
	require.NoError(t, pool.QueryRow(ctx, Render(`SELECT (SELECT count(*) FROM {{schema}}.steps) + (SELECT count(*) FROM {{schema}}.messages)
	+ (SELECT count(*) FROM {{schema}}.events) + (SELECT count(*) FROM {{schema}}.streams)`, schema)).Scan(&left))
	require.Equal(t, 2, left, "the rows of recent-parent stay")
	var logged []string
	require.NoError(t, pool.QueryRow(ctx, Render(`SELECT coalesce(array_agg(run_id ORDER BY run_id), '{}') FROM {{schema}}.workflows_created`,
		schema)).Scan(&logged))
	require.Equal(t, []string{"a-locked", "child-of-pending", "child-of-recent", "pending-parent", "rate-counted", "recent-parent"}, logged,
		"the creation log keeps the entries of the runs left")
}

// TestRetentionTryLock: one transaction at a time holds the retention
// lock; another's try fails at once, and succeeds once the holder ended.
func TestRetentionTryLock(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := NewRetentionQueries(schema)
	// The holder's connection stays out of the pool to the end, so that
	// every other try runs in another session.
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	holder, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	got, err := q.TryLock(ctx, holder)
	require.NoError(t, err)
	require.True(t, got)

	try := func(q *RetentionQueries) bool {
		t.Helper()
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		got, err := q.TryLock(ctx, tx)
		require.NoError(t, err)
		return got
	}
	require.False(t, try(q), "held by another transaction")
	require.True(t, try(NewRetentionQueries(schema+"_other")), "another schema's lock is another lock")

	require.NoError(t, holder.Commit(ctx))
	require.True(t, try(q), "the lock ends with its transaction, not its session")
}
