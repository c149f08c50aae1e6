package sysdb

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// The typed statements of a run's start and finish, and of waiting for a
// finish. Payload arguments of json columns are json.RawMessage, never
// []byte: pgx sends a json.RawMessage as json in every query exec mode,
// while a []byte is bytea (as text, "\x...") in the exec and simple
// protocol modes that poolers without prepared statements need. A nil one
// is NULL.

// nullIfEmpty is s, or NULL for "".
func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// InsertWorkflowParams are the arguments of InsertWorkflow.
type InsertWorkflowParams struct {
	ID, Name, AppVersion string
	ExecutorID           string // "": unowned
	Epoch                int64
	Input                json.RawMessage
	ParentID             string          // "": none
	NotifyPayload        string          // sent on the schema's channel when the insert commits; "": none
	Deadline             *time.Time      // nil: none
	TraceContext         string          // "": none
	Tags                 json.RawMessage // a JSON object of strings; nil: none
}

// InsertWorkflow inserts a run unless its ID exists; inserted reports
// whether it did. The notification is only delivered when the inserting
// transaction commits, which is what a start inside the caller's
// transaction relies on.
func (q *Queries) InsertWorkflow(ctx context.Context, db DBTX, p InsertWorkflowParams) (inserted bool, err error) {
	rows, err := db.Query(ctx, q.insertWorkflow, p.ID, p.Name, p.AppVersion, nullIfEmpty(p.ExecutorID), p.Epoch, p.Input,
		nullIfEmpty(p.ParentID), nullIfEmpty(p.NotifyPayload), p.Deadline, nullIfEmpty(p.TraceContext), p.Tags)
	if err != nil {
		return false, err
	}
	inserted = rows.Next()
	rows.Close()
	return inserted, rows.Err()
}

// OwnedRun is a run this executor starts and owns from its first
// statement (InsertOwned, InsertWorkflows), at epoch 1.
type OwnedRun struct {
	ID, Name     string
	Input        json.RawMessage
	ParentID     string          // "": none
	Deadline     *time.Time      // nil: none
	TraceContext string          // W3C trace context of the start; "": none
	Tags         json.RawMessage // a JSON object of strings; nil: none
}

// InsertOwnedParams are the arguments of InsertOwned.
type InsertOwnedParams struct {
	AppVersion, ExecutorID string
	Run                    *OwnedRun
}

// InsertOwned inserts one run owned by executor p.ExecutorID unless its ID
// exists; inserted reports whether it did.
func (q *Queries) InsertOwned(ctx context.Context, db DBTX, p InsertOwnedParams) (inserted bool, err error) {
	r := p.Run
	tag, err := db.Exec(ctx, q.insertOwned, r.ID, r.Name, p.AppVersion, p.ExecutorID, r.Input, nullIfEmpty(r.ParentID), r.Deadline,
		nullIfEmpty(r.TraceContext), r.Tags)
	return tag.RowsAffected() == 1, err
}

// InsertWorkflowsParams are the arguments of InsertWorkflows.
type InsertWorkflowsParams struct {
	AppVersion, ExecutorID string
	Runs                   []*OwnedRun
}

// InsertWorkflows is InsertOwned for many runs in one statement (group
// commit). inserted[i] reports whether Runs[i] was inserted: not when its
// ID existed, nor when an earlier run of the batch has the same ID (the
// first start wins). On an error no run is reported inserted: the
// statement failed as a whole.
func (q *Queries) InsertWorkflows(ctx context.Context, db DBTX, p InsertWorkflowsParams) (inserted []bool, err error) {
	n := len(p.Runs)
	ids, names := make(textArray, n), make(textArray, n)
	inputs := make(jsonArray, n)
	parents := make(valuerArray[pgtype.Text], n)
	deadlines := make(valuerArray[pgtype.Timestamptz], n)
	var traces valuerArray[pgtype.Text] // nil (NULL: none for all) unless a run has one
	var tags jsonArray                  // likewise
	index := make(map[string]int, n)
	for i, r := range p.Runs {
		ids[i], names[i], inputs[i] = r.ID, r.Name, r.Input
		parents[i] = pgtype.Text{String: r.ParentID, Valid: r.ParentID != ""}
		if r.Deadline != nil {
			deadlines[i] = pgtype.Timestamptz{Time: *r.Deadline, Valid: true}
		}
		if r.TraceContext != "" {
			if traces == nil {
				traces = make(valuerArray[pgtype.Text], n)
			}
			traces[i] = pgtype.Text{String: r.TraceContext, Valid: true}
		}
		tags = addTags(tags, n, i, r.Tags)
		if _, dup := index[r.ID]; !dup {
			index[r.ID] = i
		}
	}
	rows, err := db.Query(ctx, q.insertWorkflows, ids, names, p.AppVersion, p.ExecutorID, inputs, parents, deadlines, traces, tags)
	return markWritten(rows, err, n, func(rows pgx.Rows) (int, error) {
		var id string
		err := rows.Scan(&id)
		i, ok := index[id]
		if !ok {
			i = -1
		}
		return i, err
	})
}

// markWritten reads the rows of a multi-row write, each naming one of n
// items (at returns its index, or -1 for a row that names none), into
// flags of the items written. The statement's error may also come with the rows or
// after some of them: then it is returned with no flags.
func markWritten(rows pgx.Rows, err error, n int, at func(pgx.Rows) (int, error)) ([]bool, error) {
	if err != nil {
		return nil, err
	}
	out := make([]bool, n)
	for rows.Next() {
		i, err := at(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		if i >= 0 {
			out[i] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// WorkflowByIDRow is a stored run.
type WorkflowByIDRow struct {
	ID, Name, Status, AppVersion string
	ExecutorID                   *string
	Epoch                        int64
	RecoveryAttempts             int
	Notify                       bool // a waiter in another process asked for the notification of the finish
	ParentID                     *string
	Input, Output, Error         []byte
	CreatedAt, UpdatedAt         time.Time
	QueueName                    *string
	Deadline                     *time.Time
	ContinuedAs                  *string // the next run of its chain
}

// WorkflowByID reads run id; found is false when there is none.
func (q *Queries) WorkflowByID(ctx context.Context, db DBTX, id string) (row *WorkflowByIDRow, found bool, err error) {
	row = &WorkflowByIDRow{}
	err = db.QueryRow(ctx, q.workflowByID, id).Scan(&row.ID, &row.Name, &row.Status, &row.AppVersion, &row.ExecutorID, &row.Epoch,
		&row.RecoveryAttempts, &row.Notify, &row.ParentID, &row.Input, &row.Output, &row.Error, &row.CreatedAt, &row.UpdatedAt,
		&row.QueueName, &row.Deadline, &row.ContinuedAs)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return row, true, nil
}

// WatchWorkflow asks whoever finishes run id to notify its finish (a
// waiter in another process). watched is false when the run is not
// pending or queued any more (or does not exist): then no notification
// will come. A run not claimed yet wakes the executors that may claim it
// (its queue's dispatchers, or the takeover sweepers).
func (q *Queries) WatchWorkflow(ctx context.Context, db DBTX, id string) (watched bool, err error) {
	return someRow(db.Query(ctx, q.watchWorkflow, id))
}

// FinishOneParams are the arguments of FinishOne: a run's final outcome,
// written only while the run is pending at Epoch.
type FinishOneParams struct {
	ID            string
	Epoch         int64
	Status        string
	Output, Error json.RawMessage
}

// FinishOneRow is what a finish returns.
type FinishOneRow struct {
	Notify   bool   // a waiter in another process asked for the notification of the finish (NotifyDone)
	ParentID string // "": none
	// Watched: a waiter asked to be told of the finish (WatchWorkflow),
	// with or without notifications: a Select may be parked on it
	// (WakeWatchers).
	Watched bool
}

// FinishOne records the outcome of run p.ID; finished is false when the run
// is not pending at p.Epoch (fenced, or already finished).
func (q *Queries) FinishOne(ctx context.Context, db DBTX, p FinishOneParams) (row FinishOneRow, finished bool, err error) {
	return scanFinish(db.QueryRow(ctx, q.finishOne, p.ID, p.Epoch, p.Status, p.Output, p.Error))
}

// FinishOneStepsParams are the arguments of FinishOneSteps.
type FinishOneStepsParams struct {
	FinishOneParams
	Steps []*InsertStepParams // of the run; their WorkflowID and Epoch are not read
	// HandOn names the run's queue when its finish may hand the run's
	// slot to the next run of the queue (commit.Writer); not written.
	HandOn string
}

// FinishOneSteps is FinishOne that also records the run's last step
// checkpoints, only when it finishes the run.
func (q *Queries) FinishOneSteps(ctx context.Context, db DBTX, p FinishOneStepsParams) (row FinishOneRow, finished bool, err error) {
	c := stepColumnsOf(p.Steps)
	return scanFinish(db.QueryRow(ctx, q.finishOneSteps, p.ID, p.Epoch, p.Status, p.Output, p.Error,
		c.pos, c.names, c.statuses, c.outputs, c.errs, c.attempts, c.started))
}

func scanFinish(r pgx.Row) (row FinishOneRow, finished bool, err error) {
	var notify bool
	var parent *string
	err = r.Scan(&notify, &parent, &row.Watched)
	if errors.Is(err, pgx.ErrNoRows) {
		return row, false, nil
	}
	if err != nil {
		return FinishOneRow{}, false, err
	}
	row.Notify = notify
	if parent != nil {
		row.ParentID = *parent
	}
	return row, true, nil
}

// FinishWorkflows is FinishOne for many runs in one statement (group
// commit), which also wakes their parked parents and notifies the waiters
// that asked. finished[i] reports whether it finished runs[i]. On an error
// no run is reported finished: the statement failed as a whole.
func (q *Queries) FinishWorkflows(ctx context.Context, db DBTX, runs []*FinishOneParams) (finished []bool, watched []string, err error) {
	f := newFinishColumns(runs)
	rows, err := queryIndexPlanned(ctx, db, q.finishWorkflows, f.args()...)
	return f.finished(rows, err)
}

// FinishStepsManyParams are the arguments of FinishStepsMany.
type FinishStepsManyParams struct {
	Runs  []*FinishOneParams
	Steps []*InsertStepParams // of any of Runs, by WorkflowID; their Epoch is not read
}

// FinishStepsMany is FinishWorkflows that also records the runs' last
// step checkpoints, for the runs it finishes.
func (q *Queries) FinishStepsMany(ctx context.Context, db DBTX, p FinishStepsManyParams) (finished []bool, watched []string, err error) {
	f := newFinishColumns(p.Runs)
	rows, err := queryIndexPlanned(ctx, db, q.finishStepsMany, append(f.args(), stepColumnsOf(p.Steps).finishArgs()...)...)
	return f.finished(rows, err)
}

// HandOnParams hand the slots of the runs a batch finish finishes to the
// next ready runs of their queues, claimed for executor ExecutorID.
type HandOnParams struct {
	IDs     []string // the runs of the batch whose slots may be handed on
	Queues  []string
	Running []int // per queue: its runs executing here, the finishing ones included
	// ExecutorID and AppVersion are the claiming executor's; it runs
	// Workflows.
	ExecutorID, AppVersion string
	Workflows              []string
}

// FinishHandOn is FinishWorkflows (FinishStepsMany with steps) that also,
// in the same statement, claims for each queue of h as many of its next
// ready runs as the runs of h.IDs it finished, within what the queue's
// limits leave (see handOnQueue; a queue that does not qualify gets
// none). The claimed runs are the executor's once the statement commits.
func (q *Queries) FinishHandOn(ctx context.Context, db DBTX, runs []*FinishOneParams, steps []*InsertStepParams,
	h HandOnParams) (finished []bool, watched []string, claimed []ClaimedRow, err error) {
	f := newFinishColumns(runs)
	sql, args := q.finishHandOn, f.args()
	if steps != nil {
		sql, args = q.finishStepsHandOn, append(args, stepColumnsOf(steps).finishArgs()...)
	}
	rows, err := queryIndexPlanned(ctx, db, sql, append(args, h.IDs, h.Queues, h.Running, h.ExecutorID, h.AppVersion, h.Workflows)...)
	var id, ignored, cid *string // id is NULL on a claimed run's row, cid on the others
	var w bool
	var c ClaimedRow
	dest := append([]any{&id, &ignored, &w}, c.dest()...)
	dest[3] = &cid
	finished, err = markWritten(rows, err, len(f.ids), func(rows pgx.Rows) (int, error) {
		if err := rows.Scan(dest...); err != nil {
			return -1, err
		}
		if id == nil { // a run claimed
			if cid != nil {
				c.ID = *cid
				claimed = append(claimed, c)
			}
			return -1, nil
		}
		return f.at(*id, w, &watched), nil
	})
	if err != nil {
		return nil, nil, nil, err
	}
	return finished, watched, claimed, nil
}

// oneShotPlan makes Postgres plan a statement at each execution, for the
// table as it is then: the description is cached (one round trip), the
// statement is not prepared by name, so no generic plan is kept. The
// wake-up of watchers (a Select's rare batch) goes with it; the batch
// statements of the hot paths keep their plans (queryIndexPlanned).
const oneShotPlan = pgx.QueryExecModeCacheDescribe

// finishColumns are runs' outcomes as the arguments of the batch finish
// statements.
type finishColumns struct {
	ids, statuses textArray
	epochs        int8Array
	outputs, errs jsonArray
	index         map[string]int
}

// args are the columns as the batch finishes' arguments $1-$5.
func (f *finishColumns) args() []any { return []any{f.ids, f.epochs, f.statuses, f.outputs, f.errs} }

func newFinishColumns(runs []*FinishOneParams) *finishColumns {
	n := len(runs)
	f := &finishColumns{ids: make(textArray, n), statuses: make(textArray, n), epochs: make(int8Array, n),
		outputs: make(jsonArray, n), errs: make(jsonArray, n), index: make(map[string]int, n)}
	for i, r := range runs {
		f.ids[i], f.epochs[i], f.statuses[i], f.outputs[i], f.errs[i] = r.ID, r.Epoch, r.Status, r.Output, r.Error
		f.index[r.ID] = i
	}
	return f
}

// at returns the index in the batch of the run of a finish's row (-1: a
// parent's row) and adds it to watched if a waiter watches it.
func (f *finishColumns) at(id string, w bool, watched *[]string) int {
	i, ok := f.index[id]
	if ok && w {
		*watched = append(*watched, id)
	}
	if !ok {
		return -1
	}
	return i
}

// finished reads the rows of a batch finish: one per run finished (its ID,
// its notification and whether a waiter watches it), then one per parent
// woken (an empty ID). watched are the runs finished that a waiter
// watches: a Select may be parked on them (WakeWatchers).
func (f *finishColumns) finished(rows pgx.Rows, err error) (finished []bool, watched []string, _ error) {
	var id string // scanned into row after row: they escape once per batch
	var ignored *string
	var w bool
	finished, err = markWritten(rows, err, len(f.ids), func(rows pgx.Rows) (int, error) {
		err := rows.Scan(&id, &ignored, &w)
		return f.at(id, w, &watched), err
	})
	if err != nil {
		return nil, nil, err
	}
	return finished, watched, nil
}

// NotifyDone notifies the finish of run id to the waiters in other
// processes (the 'd:' payload). Without notifications (New's notify
// false) it does nothing.
func (q *Queries) NotifyDone(ctx context.Context, db DBTX, id string) error {
	if q.NotifyTo == "" {
		return nil
	}
	_, err := db.Exec(ctx, q.notifyDone, id)
	return err
}

// Notify sends payload on the schema's channel. Without notifications
// (New's notify false) it does nothing.
func (q *Queries) Notify(ctx context.Context, db DBTX, payload string) error {
	if q.NotifyTo == "" {
		return nil
	}
	_, err := db.Exec(ctx, q.notify, payload)
	return err
}

// WakeParentParams are the arguments of WakeParent.
type WakeParentParams struct {
	ChildID, ParentID string
}

// WakeParent wakes run p.ParentID if it is parked waiting for child
// p.ChildID (Await), and notifies the executors that may claim it; woken
// reports whether it was.
func (q *Queries) WakeParent(ctx context.Context, db DBTX, p WakeParentParams) (woken bool, err error) {
	rows, err := db.Query(ctx, q.wakeParent, p.ChildID, p.ParentID)
	if err != nil {
		return false, err
	}
	woken = rows.Next()
	rows.Close()
	return woken, rows.Err()
}

// WakeWatchers wakes the runs parked in a Select on the finish of runs
// ids (a result case, or an event case of theirs): for finished runs a
// waiter watched (FinishOneRow.Watched, the watched IDs of
// FinishWorkflows), once their finish committed.
func (q *Queries) WakeWatchers(ctx context.Context, db DBTX, ids []string) error {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = "done:" + id
	}
	_, err := db.Exec(ctx, q.wakeWatchers, oneShotPlan, keys)
	return err
}

// ListenSQL is the LISTEN command on the schema's channel, for the
// connection that receives the notifications.
func (q *Queries) ListenSQL() string { return q.listen }
