package sysdb

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// BatchQueries are the statements that create many runs in one statement
// (EnqueueMany, StartMany), rendered for one schema. They write the rows
// and send the notifications of Enqueue and of an unowned InsertWorkflow,
// one notification per statement.
type BatchQueries struct {
	enqueueMany string
	startMany   string
}

// NewBatchQueries renders the batch statements for schema; channel is the
// schema's notification channel ("": none sent, see notifier).
func NewBatchQueries(schema, channel string) *BatchQueries {
	n := notifier(channel)
	r := func(s string) string { return Render(s, schema) }
	return &BatchQueries{
		// Enqueue for many runs of one workflow on one queue: it checks
		// the queue exists, inserts each run unless its ID or its dedup ID
		// is taken, and with $12 wakes the dispatchers on commit, once.
		// Rows are inserted in ID order, so that two batches with IDs in
		// common wait for each other instead of deadlocking.
		// $1 queue, $2 workflow, $3 app_version, $4 ids, $5 inputs,
		// $6 priorities, $7 partition keys, $8 dedup ids, $9 not_before,
		// $10 deadlines, $11 trace_context (one for all), $12 notify (bool),
		// $13 tags (NULL: none for all).
		// Columns: queue found, the IDs inserted, (notify).
		enqueueMany: r(`WITH q AS (SELECT name FROM {{schema}}.queues WHERE name = $1),
ins AS (
	INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, input,
		queue_name, priority, partition_key, dedup_id, not_before, deadline, trace_context, tags)
	SELECT u.id, $2, 'enqueued', $3, NULL, 0, u.input, q.name, u.priority, u.partition_key, u.dedup_id,
		u.not_before, u.deadline, $11, u.tags::jsonb
	FROM q, (SELECT * FROM unnest($4::text[], $5::json[], $6::int[], $7::text[], $8::text[], $9::timestamptz[], $10::timestamptz[],
		$13::json[]) AS u(id, input, priority, partition_key, dedup_id, not_before, deadline, tags) ORDER BY u.id) u
	ON CONFLICT DO NOTHING
	RETURNING id)
SELECT (SELECT count(*) FROM q) > 0, ARRAY(SELECT id FROM ins),
	(SELECT CASE WHEN $12::bool AND count(*) > 0 THEN ` + n(`'q:' || $1::text`) + ` END FROM ins)::text`),

		// InsertWorkflow for many unowned runs of one workflow (StartTx's
		// runs): pending at epoch 0, for any executor running the workflow
		// to claim when woken by the one notification the commit sends.
		// Rows are inserted in ID order (see enqueueMany).
		// $1 workflow, $2 app_version, $3 ids, $4 inputs, $5 deadlines,
		// $6 trace_context (one for all), $7 tags (NULL: none for all).
		// Columns: the IDs inserted, (notify).
		startMany: r(`WITH ins AS (
	INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, input, deadline, trace_context, tags)
	SELECT u.id, $1, 'pending', $2, NULL, 0, u.input, u.deadline, $6, u.tags::jsonb
	FROM (SELECT * FROM unnest($3::text[], $4::json[], $5::timestamptz[], $7::json[]) AS u(id, input, deadline, tags)
		ORDER BY u.id) u
	ON CONFLICT (id) DO NOTHING
	RETURNING id)
SELECT ARRAY(SELECT id FROM ins), (SELECT CASE WHEN count(*) > 0 THEN ` + n(`'n:' || min(id)`) + ` END FROM ins)::text`),
	}
}

// QueuedRun is one run of EnqueueMany.
type QueuedRun struct {
	ID           string
	Input        json.RawMessage
	Priority     int32
	PartitionKey string          // "": none
	DedupID      string          // "": none
	NotBefore    *time.Time      // nil: ready at once
	Deadline     *time.Time      // nil: none
	Tags         json.RawMessage // a JSON object of strings; nil: none
}

// EnqueueManyParams are runs of one workflow to put on one queue.
type EnqueueManyParams struct {
	Queue, Workflow, AppVersion string
	Runs                        []QueuedRun
	// Notify makes the commit wake the queue's dispatchers (see
	// EnqueueParams.Notify).
	Notify       bool
	TraceContext string // W3C traceparent of every run; "": none
}

// EnqueueManyRow says what EnqueueMany did.
type EnqueueManyRow struct {
	QueueFound bool // the queue exists; if not, nothing was inserted
	// Inserted[i] reports whether Runs[i] was inserted: not when its ID or
	// its dedup ID was taken, by an existing run or by another run of the
	// batch inserted before it (in ID order).
	Inserted []bool
}

// EnqueueMany inserts the runs of p, queued, in one statement, each
// unless its ID or its dedup ID is taken; nothing when the queue does not
// exist.
func (q *BatchQueries) EnqueueMany(ctx context.Context, db DBTX, p EnqueueManyParams) (EnqueueManyRow, error) {
	n := len(p.Runs)
	ids := make(textArray, n)
	inputs := make(jsonArray, n)
	prios := make(int4Array, n)
	keys, dedups := make(valuerArray[pgtype.Text], n), make(valuerArray[pgtype.Text], n)
	notBefore, deadlines := make(valuerArray[pgtype.Timestamptz], n), make(valuerArray[pgtype.Timestamptz], n)
	var tags jsonArray // nil (NULL: none for all) unless a run has some
	for i, r := range p.Runs {
		ids[i], inputs[i], prios[i] = r.ID, r.Input, r.Priority
		keys[i] = pgtype.Text{String: r.PartitionKey, Valid: r.PartitionKey != ""}
		dedups[i] = pgtype.Text{String: r.DedupID, Valid: r.DedupID != ""}
		notBefore[i], deadlines[i] = timestamptz(r.NotBefore), timestamptz(r.Deadline)
		tags = addTags(tags, n, i, r.Tags)
	}
	var row EnqueueManyRow
	var inserted []string
	var note *string
	err := db.QueryRow(ctx, q.enqueueMany, p.Queue, p.Workflow, p.AppVersion, ids, inputs, prios, keys, dedups,
		notBefore, deadlines, orNull(p.TraceContext), p.Notify, tags).Scan(&row.QueueFound, &inserted, &note)
	if err != nil {
		return EnqueueManyRow{}, err
	}
	row.Inserted = insertedFlags(ids, inserted)
	return row, nil
}

// StartedRun is one run of StartMany.
type StartedRun struct {
	ID       string
	Input    json.RawMessage
	Deadline *time.Time      // nil: none
	Tags     json.RawMessage // a JSON object of strings; nil: none
}

// StartManyParams are unowned runs of one workflow to insert.
type StartManyParams struct {
	Workflow, AppVersion string
	Runs                 []StartedRun
	TraceContext         string // W3C traceparent of every run; "": none
}

// StartMany inserts the runs of p, pending and unowned, in one statement,
// each unless its ID exists; inserted[i] reports whether Runs[i] was. The
// commit sends one notification, which wakes the executors' sweepers.
func (q *BatchQueries) StartMany(ctx context.Context, db DBTX, p StartManyParams) (inserted []bool, err error) {
	n := len(p.Runs)
	ids := make(textArray, n)
	inputs := make(jsonArray, n)
	deadlines := make(valuerArray[pgtype.Timestamptz], n)
	var tags jsonArray // nil (NULL: none for all) unless a run has some
	for i, r := range p.Runs {
		ids[i], inputs[i], deadlines[i] = r.ID, r.Input, timestamptz(r.Deadline)
		tags = addTags(tags, n, i, r.Tags)
	}
	var got []string
	var note *string
	err = db.QueryRow(ctx, q.startMany, p.Workflow, p.AppVersion, ids, inputs, deadlines, orNull(p.TraceContext), tags).
		Scan(&got, &note)
	if err != nil {
		return nil, err
	}
	return insertedFlags(ids, got), nil
}

// addTags sets the tags of run i of n in the batch column col, made on
// the first run with tags: a batch without any sends NULL.
func addTags(col jsonArray, n, i int, tags json.RawMessage) jsonArray {
	if tags == nil {
		return col
	}
	if col == nil {
		col = make(jsonArray, n)
	}
	col[i] = tags
	return col
}

// timestamptz is t as a nullable array element.
func timestamptz(t *time.Time) pgtype.Timestamptz {
	if t == nil {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: *t, Valid: true}
}

// insertedFlags flags the IDs of ids that inserted holds; of an ID given
// twice, the first.
func insertedFlags(ids, inserted []string) []bool {
	got := make(map[string]bool, len(inserted))
	for _, id := range inserted {
		got[id] = true
	}
	out := make([]bool, len(ids))
	for i, id := range ids {
		if got[id] {
			out[i], got[id] = true, false
		}
	}
	return out
}
