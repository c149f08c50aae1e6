package sysdb

import (
	"context"
	"time"
)

// RetentionQueries are the statements of retention (pruning finished runs).
type RetentionQueries struct {
	pruneBatch string
	tryLock    string
	lockKey    string
}

// NewRetentionQueries renders the retention statements for schema.
func NewRetentionQueries(schema string) *RetentionQueries {
	r := func(s string) string { return Render(s, schema) }
	return &RetentionQueries{
		// One batch, in one statement (its own short transaction): pick up
		// to $4 finished runs whose finish (updated_at) is before $1, oldest
		// first, walking (updated_at, id) forward from ($2, $3) so a run
		// held back stays behind the walk instead of being read again by
		// every batch; lock them, skipping rows locked by anyone else (a
		// Resume in flight), and delete them with everything keyed by their
		// ID (the failed attempts of their steps too: not counted; their
		// entries of the creation log too). Runs
		// held back:
		//   - a child whose parent exists and is not itself finished before
		//     $1: a pending parent may still await it (and a resumed parent
		//     replay it), so a child goes with or after its parent;
		//   - a queued run whose start still counts toward its queue's rate
		//     limit (rate_start within the period): the limit counts
		//     recent starts from these rows.
		// The walk's position is bound twice: updated_at >= $2 gives
		// workflows_finish_time_idx (keyed by the time alone) the start
		// of its range, the row comparison skips the runs of that time up
		// to the cursor's ID.
		// The runs and their creation log entries are deleted by key (an
		// array, not a join: a join may scan either table whole while it
		// is small enough to hash).
		// Returns the counts per table and the last (updated_at, id) picked.
		pruneBatch: r(`WITH victims AS (
	SELECT w.id, w.updated_at FROM {{schema}}.workflows w
	LEFT JOIN {{schema}}.workflows p ON p.id = w.parent_id
	WHERE w.status IN ('success', 'error', 'cancelled', 'dead')
		AND w.updated_at < $1
		AND w.updated_at >= $2::timestamptz AND (w.updated_at, w.id) > ($2::timestamptz, $3::text)
		AND (p.id IS NULL OR (p.status IN ('success', 'error', 'cancelled', 'dead') AND p.updated_at < $1))
		AND (w.rate_start IS NULL OR w.rate_start <= now() - coalesce(
			(SELECT q.rate_period_ms FROM {{schema}}.queues q WHERE q.name = w.queue_name), 0) * interval '1 millisecond')
	ORDER BY w.updated_at, w.id
	LIMIT $4
	FOR UPDATE OF w SKIP LOCKED),
s AS (DELETE FROM {{schema}}.steps WHERE workflow_id IN (SELECT id FROM victims) RETURNING 1),
sa AS (DELETE FROM {{schema}}.step_attempts WHERE workflow_id IN (SELECT id FROM victims)),
m AS (DELETE FROM {{schema}}.messages WHERE workflow_id IN (SELECT id FROM victims) RETURNING 1),
e AS (DELETE FROM {{schema}}.events WHERE workflow_id IN (SELECT id FROM victims) RETURNING 1),
st AS (DELETE FROM {{schema}}.streams WHERE workflow_id IN (SELECT id FROM victims) RETURNING 1),
w AS (DELETE FROM {{schema}}.workflows WHERE id = ANY(ARRAY(SELECT id FROM victims)) RETURNING 1),
c AS (DELETE FROM {{schema}}.workflows_created WHERE run_id = ANY(ARRAY(SELECT id FROM victims))),
last AS (SELECT updated_at, id FROM victims ORDER BY updated_at DESC, id DESC LIMIT 1)
SELECT (SELECT count(*) FROM w), (SELECT count(*) FROM s), (SELECT count(*) FROM m),
	(SELECT count(*) FROM e), (SELECT count(*) FROM st),
	(SELECT updated_at FROM last), (SELECT id FROM last)`),

		// One executor at a time runs a batch of the background retention
		// pass of a schema: a transaction advisory lock, tried, never
		// waited for.
		tryLock: `SELECT pg_try_advisory_xact_lock(hashtext($1))`,
		lockKey: retentionLockKey(schema),
	}
}

// retentionLockKey is the advisory lock key of the retention pass of schema.
func retentionLockKey(schema string) string { return "durable.retention:" + schema }

// PruneBatchParams are the arguments of PruneBatch.
type PruneBatchParams struct {
	Before time.Time // runs that finished before this
	// The walk goes on after the run (AfterAt, AfterID), the last one of
	// the previous batch (the zero values for the first).
	AfterAt time.Time
	AfterID string
	Limit   int
}

// PruneBatchRow counts what PruneBatch deleted, with the last run it
// picked (the position of the next batch; nil when it picked none).
type PruneBatchRow struct {
	Runs, Steps, Messages, Events, Streams int64
	LastAt                                 *time.Time
	LastID                                 *string
}

// PruneBatch deletes up to p.Limit runs that finished before p.Before,
// walking (updated_at, id) forward from the position of p, with their
// steps, messages, events and stream entries. It skips rows locked by
// others, children whose parent is kept, and queued runs whose start
// still counts toward their queue's rate limit.
func (q *RetentionQueries) PruneBatch(ctx context.Context, db DBTX, p PruneBatchParams) (PruneBatchRow, error) {
	var b PruneBatchRow
	err := db.QueryRow(ctx, q.pruneBatch, p.Before, p.AfterAt, p.AfterID, p.Limit).
		Scan(&b.Runs, &b.Steps, &b.Messages, &b.Events, &b.Streams, &b.LastAt, &b.LastID)
	return b, err
}

// TryLock tries the schema's retention lock in transaction db, without
// waiting: got is false when another transaction holds it. The lock
// lasts until db's transaction ends.
func (q *RetentionQueries) TryLock(ctx context.Context, db DBTX) (got bool, err error) {
	err = db.QueryRow(ctx, q.tryLock, q.lockKey).Scan(&got)
	return got, err
}
