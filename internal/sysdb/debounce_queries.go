package sysdb

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// DebounceQueries are the statements of debounced enqueues: enqueues with
// the same debounce key on a queue, while its run is still queued,
// collapse into that run (workflows_queue_debounce_idx).
type DebounceQueries struct {
	upsert string
	lock   string
	update string
}

// NewDebounceQueries renders the debounce statements for schema; channel
// is the schema's notification channel ("": none sent).
func NewDebounceQueries(schema, channel string) *DebounceQueries {
	n := notifier(channel)
	r := func(s string) string { return Render(s, schema) }
	// The start of a collapsed run moves to the new one, but not past its
	// bound (debounce_until, set by the first enqueue).
	const start = `CASE WHEN w.debounce_until IS NULL THEN EXCLUDED.not_before
		ELSE least(EXCLUDED.not_before, w.debounce_until) END`
	return &DebounceQueries{
		// Inserts the run, queued until $9, or, when a run of the same
		// workflow with the key is queued, gives it the new input, start
		// and deadline. A run of another workflow with the key is left
		// alone (no row from ins: the caller reports it). A new run wakes
		// the dispatchers on commit (it may start before their next look).
		// $1 id, $2 name, $3 app_version, $4 input, $5 queue, $6 priority,
		// $7 partition_key, $8 debounce key, $9 start, $10 start bound,
		// $11 deadline, $12 notify (bool), $13 trace_context, $14 insert
		// only (bool: a merge collapses the run itself), $15 tags (a
		// collapse keeps the run's own, as its priority and partition key).
		upsert: r(`WITH q AS (SELECT name FROM {{schema}}.queues WHERE name = $5),
ins AS (
	INSERT INTO {{schema}}.workflows AS w (id, name, status, app_version, executor_id, epoch, input,
		queue_name, priority, partition_key, not_before, deadline, trace_context, debounce_key, debounce_until, tags)
	SELECT $1, $2, 'enqueued', $3, NULL, 0, $4, q.name, $6, $7, $9, $11, $13, $8, $10, $15::jsonb FROM q
	ON CONFLICT (queue_name, debounce_key) WHERE debounce_key IS NOT NULL AND status = 'enqueued'
	DO UPDATE SET input = EXCLUDED.input, not_before = ` + start + `,
		deadline = EXCLUDED.deadline, updated_at = now()
	WHERE w.name = EXCLUDED.name AND NOT $14::bool
	RETURNING w.id, w.xmax = 0 AS inserted)
SELECT (SELECT count(*) FROM q), (SELECT id FROM ins), coalesce((SELECT inserted FROM ins), false),
	(SELECT CASE WHEN $12::bool AND inserted THEN ` + n(`'q:' || $5::text`) + ` END FROM ins)::text`),

		// The queued run holding the key, locked until the transaction
		// ends: a merge reads its input and writes the merged one. A run
		// a dispatch is claiming is waited for, and then no longer queued.
		// $1 queue, $2 key.
		lock: r(`SELECT id, name, input FROM {{schema}}.workflows
WHERE queue_name = $1 AND debounce_key = $2 AND status = 'enqueued' FOR UPDATE`),

		// A closed run starts at once, and gives its key up: the next
		// enqueue with the key makes a new run. Closing wakes the queue's
		// dispatchers on commit. $1 id, $2 input, $3 start, $4 deadline,
		// $5 close (bool), $6 notify (bool).
		update: r(`WITH u AS (
	UPDATE {{schema}}.workflows w SET input = $2,
		not_before = CASE WHEN $5::bool THEN now() WHEN w.debounce_until IS NULL THEN $3
			ELSE least($3::timestamptz, w.debounce_until) END,
		debounce_key = CASE WHEN $5::bool THEN NULL ELSE w.debounce_key END,
		deadline = $4, updated_at = now()
	WHERE id = $1 AND status = 'enqueued'
	RETURNING queue_name)
SELECT count(*), (SELECT CASE WHEN $5::bool AND $6::bool THEN ` + n(`'q:' || queue_name`) + ` END FROM u)::text FROM u`),
	}
}

// DebounceParams are a debounced enqueue.
type DebounceParams struct {
	ID           string // the new run's ID, if one is inserted
	Workflow     string
	AppVersion   string
	Input        []byte // JSON
	Queue        string
	Priority     int
	PartitionKey string // "": none
	Key          string // the debounce key
	Start        time.Time
	StartBound   *time.Time // the latest start of the run; nil: none
	Deadline     *time.Time // nil: none
	Notify       bool       // a new run wakes the queue's dispatchers on commit
	TraceContext string
	// NoCollapse inserts the run or does nothing: a merge, which reads the
	// queued input first, collapses into the run itself.
	NoCollapse bool
	Tags       json.RawMessage // of a new run (a JSON object of strings); nil: none
}

// DebounceRow says what Upsert did.
type DebounceRow struct {
	QueueFound bool
	// ID is the run: the new one, or the queued run of the key that took
	// the new input; "" when the key is held by a run of another workflow.
	ID       string
	Inserted bool
}

// Upsert inserts the debounced run p, or collapses it into the queued run
// of the same workflow holding its key.
func (q *DebounceQueries) Upsert(ctx context.Context, db DBTX, p DebounceParams) (DebounceRow, error) {
	var r DebounceRow
	var found int
	var id, note *string
	err := db.QueryRow(ctx, q.upsert, p.ID, p.Workflow, p.AppVersion, json.RawMessage(p.Input), p.Queue, p.Priority,
		orNull(p.PartitionKey), p.Key, p.Start, p.StartBound, p.Deadline, p.Notify, orNull(p.TraceContext), p.NoCollapse, p.Tags).
		Scan(&found, &id, &r.Inserted, &note)
	r.QueueFound = found > 0
	if id != nil {
		r.ID = *id
	}
	return r, err
}

// DebouncedRow is the queued run holding a debounce key.
type DebouncedRow struct {
	ID       string
	Workflow string
	Input    []byte
}

// Lock returns the queued run of queue holding debounce key, locked until
// the end of tx; found is false when none does.
func (q *DebounceQueries) Lock(ctx context.Context, tx DBTX, queue, key string) (r DebouncedRow, found bool, err error) {
	err = tx.QueryRow(ctx, q.lock, queue, key).Scan(&r.ID, &r.Workflow, &r.Input)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, false, nil
	}
	return r, err == nil, err
}

// DebounceUpdateParams are the new input and times of a debounced run.
type DebounceUpdateParams struct {
	ID       string
	Input    []byte
	Start    time.Time // moved no later than the run's bound
	Deadline *time.Time
	// Close starts the run at once and frees its key (a full batch);
	// with Notify its commit wakes the queue's dispatchers.
	Close, Notify bool
}

// Update gives the queued run p.ID its merged input and new start, and
// reports whether it was still queued.
func (q *DebounceQueries) Update(ctx context.Context, tx DBTX, p DebounceUpdateParams) (bool, error) {
	var n int
	var note *string
	err := tx.QueryRow(ctx, q.update, p.ID, json.RawMessage(p.Input), p.Start, p.Deadline, p.Close, p.Notify).Scan(&n, &note)
	return n == 1, err
}
