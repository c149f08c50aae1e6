package sysdb

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// ControlQueries are the statements of run control by an operator
// (cancel, resume and fork) and by a workflow's retry policy.
type ControlQueries struct {
	cancel         string
	resume         string
	dropFailedStep string
	forkRun        string
	forkSteps      string
	countSteps     string
	retries        string
	retryLater     string
	continueAs     string
	cancelAsked    string
}

// NewControlQueries renders the control statements for schema; channel is
// the schema's notification channel ("": none sent, see notifier).
func NewControlQueries(schema, channel string) *ControlQueries {
	n := notifier(channel)
	r := func(s string) string { return Render(s, schema) }
	return &ControlQueries{
		// Cancels a run and, with $2, its descendants, telling the
		// executor of each ('c:') and its waiters ('d:'). Both terms of the
		// recursion name the same collation, whichever the ID column has
		// (C in an install made since migration 015, the database's
		// default in an older one); the default one then yields to the
		// column's in the comparisons, which keeps them on its indexes.
		// With $4 (compensate), a run that has executed (epoch > 0) is
		// not ended here: it is marked cancel_requested and made due (a
		// parked or queued one at once), so that an execution replays it,
		// runs its compensations and ends it as cancelled; its waiters are
		// told only then.
		// $1 id, $2 with children, $3 error, $4 compensate.
		cancel: r(`WITH RECURSIVE tree(id) AS (
	SELECT $1::text COLLATE "default"
	UNION
	SELECT c.id COLLATE "default" FROM {{schema}}.workflows c JOIN tree t ON c.parent_id = t.id WHERE $2::bool),
target AS (
	SELECT x.id, $4::bool AND x.epoch > 0 AS comp FROM tree JOIN {{schema}}.workflows x ON x.id = tree.id),
u AS (
	UPDATE {{schema}}.workflows w SET status = CASE WHEN target.comp THEN w.status ELSE 'cancelled' END,
		error = CASE WHEN target.comp THEN w.error ELSE $3 END,
		cancel_requested = CASE WHEN target.comp THEN true END,
		wake_at = CASE WHEN NOT target.comp THEN NULL
			WHEN w.executor_id IS NULL AND w.status = 'pending' AND w.wake_at IS NOT NULL THEN now() ELSE w.wake_at END,
		not_before = CASE WHEN target.comp AND w.status = 'enqueued' THEN now() ELSE w.not_before END,
		wait_topic = CASE WHEN target.comp THEN w.wait_topic END, wait_any = CASE WHEN target.comp THEN w.wait_any END, updated_at = now()
	FROM target WHERE w.id = target.id AND w.status IN ('pending', 'enqueued')
	RETURNING w.id, w.epoch, w.status, w.executor_id, w.queue_name)
SELECT id, ` + n(`'c:' || epoch || ':' || id`) + `::text, (CASE WHEN status = 'cancelled' THEN ` + n(`'d:' || id`) + `
	WHEN status = 'enqueued' THEN ` + n(`'q:' || queue_name`) + ` WHEN executor_id IS NULL THEN ` + n(`'n:' || id`) + ` END)::text FROM u`),

		// Resumes a cancelled, dead-lettered or failed run from its last
		// checkpoint: unowned and pending again (queued runs go back to
		// their queue); not a cancelled queued run whose code is still
		// stopping (it holds its slot: see stopping). Its recovery attempts
		// and workflow retries, and the failed attempts of its unrecorded
		// steps start again from zero. $1 id.
		resume: r(`WITH u AS (
	UPDATE {{schema}}.workflows SET status = CASE WHEN queue_name IS NULL THEN 'pending' ELSE 'enqueued' END,
		executor_id = NULL, epoch = epoch + 1, recovery_attempts = 0, retries = NULL, error = NULL, output = NULL, cancel_requested = NULL,
		wake_at = NULL, wait_topic = NULL, wait_any = NULL, updated_at = now()
	WHERE id = $1 AND status IN ('cancelled', 'dead', 'error') AND NOT (` + stopping + `)
	RETURNING id, queue_name),
a AS (DELETE FROM {{schema}}.step_attempts WHERE workflow_id IN (SELECT id FROM u))
SELECT ` + n(`CASE WHEN queue_name IS NULL THEN 'n:' || id ELSE 'q:' || queue_name END`) + `::text FROM u`),

		// Deletes the last recorded step of run $1 when it recorded a
		// failure.
		dropFailedStep: r(`DELETE FROM {{schema}}.steps s WHERE s.workflow_id = $1 AND s.status = 'error'
AND s.pos = (SELECT max(pos) FROM {{schema}}.steps WHERE workflow_id = $1)`),

		// Copies run $1 as a new unowned run $2, without parent, with its
		// tags unless $7 (then $6's).
		// $3 app_version, $4 trace_context, $5 workflow (NULL: $1's).
		forkRun: r(`WITH ins AS (
	INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, input, parent_id, trace_context, tags)
	SELECT $2, coalesce($5, name), 'pending', $3, NULL, 0, input, NULL, $4,
		CASE WHEN $7::bool THEN $6::jsonb ELSE tags END
	FROM {{schema}}.workflows WHERE id = $1
	RETURNING id)
SELECT ` + n(`'n:' || id`) + `::text FROM ins`),

		// Copies the steps run $1 recorded before position $3 to run $2,
		// except intents whose outcome is not recorded: the fork runs those
		// steps as new.
		forkSteps: r(`INSERT INTO {{schema}}.steps (workflow_id, pos, name, status, output, error, attempts, started_at, finished_at)
SELECT $2, pos, name, status, output, error, attempts, started_at, finished_at
FROM {{schema}}.steps WHERE workflow_id = $1 AND pos < $3 AND status <> 'intent'`),

		countSteps: r(`SELECT count(*) FROM {{schema}}.steps WHERE workflow_id = $1`),

		retries: r(`SELECT coalesce(retries, 0) FROM {{schema}}.workflows WHERE id = $1`),

		// Links run $1 to the run $3 it continues as, fenced by the epoch
		// $2, and returns its parent (the continuation's too) and its tags
		// (the continuation's by default).
		// Idempotent: a replay of the link writes the same value.
		// Whether a Cancel asked run $1, still pending at epoch $2, to
		// compensate and end as cancelled.
		cancelAsked: r(`SELECT EXISTS (SELECT 1 FROM {{schema}}.workflows
WHERE id = $1 AND epoch = $2 AND status = 'pending' AND cancel_requested)`),

		continueAs: r(`UPDATE {{schema}}.workflows SET continued_as = $3
WHERE id = $1 AND epoch = $2 AND status = 'pending'
RETURNING coalesce(parent_id, ''), tags::text, coalesce(queue_name, ''), coalesce(partition_key, ''), priority`),

		// Schedules run $1, whose code failed, to run again from its last
		// checkpoint at $3: parked as a sleep is (back to its queue when
		// the queue releases parked slots), its retries counted, its last
		// step removed when it recorded a failure (so that step runs
		// again), and the failed attempts of its unrecorded steps
		// forgotten (a new budget for each). Fenced by the epoch $2 and by
		// the retries read before ($4), so that two decisions never count
		// as one. The deletes act only on a run the update changed.
		retryLater: r(`WITH u AS (
	UPDATE {{schema}}.workflows w SET executor_id = NULL, wake_at = $3, wait_topic = NULL, updated_at = now(),
		retries = coalesce(w.retries, 0) + 1, wait_any = NULL,
		status = CASE WHEN rq.name IS NULL THEN w.status ELSE 'enqueued' END,
		not_before = CASE WHEN rq.name IS NULL THEN w.not_before ELSE $3 END
	FROM (SELECT $1::text AS id) x
	LEFT JOIN {{schema}}.queues rq ON rq.release_parked AND rq.name = (SELECT queue_name FROM {{schema}}.workflows WHERE id = $1)
	WHERE w.id = x.id AND w.epoch = $2 AND w.status = 'pending' AND coalesce(w.retries, 0) = $4
	RETURNING w.id),
s AS (DELETE FROM {{schema}}.steps st WHERE st.workflow_id IN (SELECT id FROM u) AND st.status = 'error'
	AND st.pos = (SELECT max(pos) FROM {{schema}}.steps WHERE workflow_id = $1)),
a AS (DELETE FROM {{schema}}.step_attempts sa WHERE sa.workflow_id IN (SELECT id FROM u))
SELECT count(*) FROM u`),
	}
}

// CancelParams names the runs to cancel.
type CancelParams struct {
	ID       string
	Children bool            // also the run's descendants, recursively
	Error    json.RawMessage // the error recorded as their outcome
	// Compensate leaves the runs that executed pending, marked
	// cancel_requested and due, for an execution to compensate and end.
	Compensate bool
}

// Cancel cancels the runs p names that are still pending or queued, and
// returns their IDs. A finished run is left as it is.
func (q *ControlQueries) Cancel(ctx context.Context, db DBTX, p CancelParams) ([]string, error) {
	rows, err := db.Query(ctx, q.cancel, p.ID, p.Children, p.Error, p.Compensate)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (string, error) {
		var id string
		var cancelNote, doneNote *string
		err := row.Scan(&id, &cancelNote, &doneNote)
		return id, err
	})
}

// Resume makes run id, if cancelled, dead or failed (and not stopping),
// pending again at a new epoch, and reports whether it did.
func (q *ControlQueries) Resume(ctx context.Context, db DBTX, id string) (bool, error) {
	rows, err := db.Query(ctx, q.resume, id)
	if err != nil {
		return false, err
	}
	resumed := rows.Next()
	rows.Close()
	return resumed, rows.Err()
}

// DropFailedStep deletes the last step run id recorded if it recorded a
// failure, and reports whether it did.
func (q *ControlQueries) DropFailedStep(ctx context.Context, db DBTX, id string) (bool, error) {
	tag, err := db.Exec(ctx, q.dropFailedStep, id)
	return tag.RowsAffected() == 1, err
}

// ForkRunParams names a run to copy and its copy.
type ForkRunParams struct {
	SourceID     string
	ID           string // the new run
	AppVersion   string
	TraceContext string // W3C traceparent; "": none
	Workflow     string // the new run's workflow; "": the source's
	// ReplaceTags gives the new run Tags (nil: none) instead of the
	// source's tags.
	ReplaceTags bool
	Tags        json.RawMessage
}

// ForkRun inserts run p.ID, pending and unowned, with the name and input
// of run p.SourceID. An existing p.ID fails it with a unique violation.
func (q *ControlQueries) ForkRun(ctx context.Context, db DBTX, p ForkRunParams) error {
	var traceCtx *string
	if p.TraceContext != "" {
		traceCtx = &p.TraceContext
	}
	var workflow *string
	if p.Workflow != "" {
		workflow = &p.Workflow
	}
	rows, err := db.Query(ctx, q.forkRun, p.SourceID, p.ID, p.AppVersion, traceCtx, workflow, p.Tags, p.ReplaceTags)
	if err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

// ForkStepsParams names the steps to copy into a fork.
type ForkStepsParams struct {
	SourceID string
	ID       string // the fork
	Before   int    // steps at positions before this one
}

// ForkSteps copies the steps p selects (intents left out) and returns how
// many.
func (q *ControlQueries) ForkSteps(ctx context.Context, db DBTX, p ForkStepsParams) (int64, error) {
	tag, err := db.Exec(ctx, q.forkSteps, p.SourceID, p.ID, p.Before)
	return tag.RowsAffected(), err
}

// CountSteps returns how many steps run id recorded.
func (q *ControlQueries) CountSteps(ctx context.Context, db DBTX, id string) (int, error) {
	var n int
	err := db.QueryRow(ctx, q.countSteps, id).Scan(&n)
	return n, err
}

// Retries returns how many times run id was scheduled to run again by its
// workflow's retry policy.
func (q *ControlQueries) Retries(ctx context.Context, db DBTX, id string) (int, error) {
	var n int
	err := db.QueryRow(ctx, q.retries, id).Scan(&n)
	return n, err
}

// RetryLaterParams name a failed run, its owner's epoch, the retries read
// before the decision, and when the run goes on.
type RetryLaterParams struct {
	ID      string
	Epoch   int64
	Retries int
	WakeAt  time.Time
}

// RetryLater schedules run p.ID to run again from its last checkpoint at
// p.WakeAt. false: the run is not pending at p.Epoch with p.Retries, and
// nothing changed.
func (q *ControlQueries) RetryLater(ctx context.Context, db DBTX, p RetryLaterParams) (bool, error) {
	var n int
	err := db.QueryRow(ctx, q.retryLater, p.ID, p.Epoch, p.WakeAt, p.Retries).Scan(&n)
	return n == 1, err
}

// ContinuedRow is what ContinueAs returns of the run it linked.
type ContinuedRow struct {
	Parent string          // "": none
	Tags   json.RawMessage // nil: none
	// The queue the run came from ("": none), its partition key and its
	// priority: a queued run's continuation is enqueued there too.
	Queue, PartitionKey string
	Priority            int
}

// ContinueAs links run id, owned at epoch, to the run next it continues
// as, and returns id's parent, tags and queue. false: the run is not pending at
// that epoch, and nothing changed.
func (q *ControlQueries) ContinueAs(ctx context.Context, db DBTX, id string, epoch int64, next string) (row ContinuedRow, ok bool, err error) {
	var tags *string
	err = db.QueryRow(ctx, q.continueAs, id, epoch, next).Scan(&row.Parent, &tags, &row.Queue, &row.PartitionKey, &row.Priority)
	if errors.Is(err, pgx.ErrNoRows) {
		return row, false, nil
	}
	if tags != nil {
		row.Tags = json.RawMessage(*tags)
	}
	return row, err == nil, err
}

// CancelRequested reports whether a Cancel with Compensate asked run id,
// pending at epoch, to run its compensations and end as cancelled.
func (q *ControlQueries) CancelRequested(ctx context.Context, db DBTX, id string, epoch int64) (bool, error) {
	var asked bool
	err := db.QueryRow(ctx, q.cancelAsked, id, epoch).Scan(&asked)
	return asked, err
}
