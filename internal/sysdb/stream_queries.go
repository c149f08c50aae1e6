package sysdb

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
)

// StreamQueries are the statements of workflow streams. The listing of
// workflows (ListWorkflows) lives here too.
type StreamQueries struct {
	append   string
	keyState string
	read     string
	runState string
}

// NewStreamQueries renders the stream statements for schema; channel is the
// schema's notification channel ("": none sent, see notifier).
func NewStreamQueries(schema, channel string) *StreamQueries {
	n := notifier(channel)
	r := func(s string) string { return Render(s, schema) }
	return &StreamQueries{
		// A batch of entries of any number of runs in one statement. Only
		// the entries of runs still pending at the writer's epoch are
		// written: FOR SHARE makes a concurrent change of owner wait for
		// this write (or this write see the new owner), so a fenced
		// executor can never append. Runs are found by primary key (see
		// InsertSteps). An entry already present (a retry after a lost
		// acknowledgement) is skipped. Returns the (id, epoch) pairs whose
		// entries were accepted and, when $8, notifies 's:<id>' for those a
		// reader in another process watches (workflows.notify, set by
		// WatchWorkflow): runs nobody reads remotely stream without NOTIFY,
		// which keeps their commits off the notification lock.
		// $1 workflow_ids, $2 keys, $3 offsets, $4 values, $5 closed flags,
		// $6 workflow-code sequence numbers (NULL: written by a step),
		// $7 epochs, $8 notify.
		append: r(`WITH u AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::json[], $5::bool[], $6::bigint[], $7::bigint[])
		AS u(workflow_id, key, off, value, closed, wseq, epoch)),
ok AS (
	SELECT x.workflow_id AS id, x.epoch, w.notify
	FROM (SELECT DISTINCT workflow_id, epoch FROM u ORDER BY workflow_id) x
	CROSS JOIN LATERAL (SELECT w.notify FROM {{schema}}.workflows w
		WHERE w.id = x.workflow_id AND w.epoch = x.epoch AND w.status = 'pending' FOR SHARE) w),
ins AS (
	INSERT INTO {{schema}}.streams (workflow_id, key, off, value, closed, wseq)
	SELECT u.workflow_id, u.key, u.off, u.value, u.closed, u.wseq
	FROM u JOIN ok ON ok.id = u.workflow_id AND ok.epoch = u.epoch
	ON CONFLICT (workflow_id, key, off) DO NOTHING)
SELECT id, epoch, (CASE WHEN $8::bool AND notify THEN ` + n(`'s:' || id`) + ` END)::text FROM ok`),

		// Where a run's writer resumes a stream: the last entry (offset and
		// whether it is the close marker) and the highest sequence number
		// written by workflow code, which a replay must not write again.
		// $1 workflow_id, $2 key.
		keyState: r(`SELECT l.off, l.closed,
	(SELECT max(wseq) FROM {{schema}}.streams WHERE workflow_id = $1 AND key = $2 AND wseq IS NOT NULL)
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (SELECT off, closed FROM {{schema}}.streams
	WHERE workflow_id = $1 AND key = $2 ORDER BY off DESC LIMIT 1) l ON true`),

		// The run's status, whether the stream's last entry is the close
		// marker, and up to $4 entries from offset $3, read in one snapshot:
		// when the status is final, every entry is visible. No row: the
		// workflow does not exist; a row with a NULL offset: no entry from
		// $3 on.
		// $1 workflow_id, $2 key, $3 from offset, $4 limit.
		read: r(`SELECT w.status,
	(SELECT t.closed FROM {{schema}}.streams t WHERE t.workflow_id = w.id AND t.key = $2 ORDER BY t.off DESC LIMIT 1),
	s.off, s.value, s.closed, s.created_at
FROM {{schema}}.workflows w
LEFT JOIN LATERAL (SELECT off, value, closed, created_at FROM {{schema}}.streams
	WHERE workflow_id = w.id AND key = $2 AND off >= $3 ORDER BY off LIMIT $4) s ON true
WHERE w.id = $1
ORDER BY s.off`),

		// $1 workflow_id.
		runState: r(`SELECT status, epoch FROM {{schema}}.workflows WHERE id = $1`),
	}
}

// AppendParams are the entries of one Append, column by column: entry i
// is WorkflowIDs[i], Keys[i], ... Every slice has the same length.
type AppendParams struct {
	WorkflowIDs []string
	Keys        []string
	Offsets     []int64
	Values      []json.RawMessage // nil for a close marker
	Closed      []bool            // the entry is the close marker
	Wseqs       []*int64          // rank among the run's workflow-code writes; nil: written by a step
	Epochs      []int64           // the writer's epoch of each entry's run
	Notify      bool              // notify readers in other processes that watch a run
}

// AppendRow is a run whose entries Append accepted: pending at the epoch
// its entries carried.
type AppendRow struct {
	WorkflowID string
	Epoch      int64
}

// Append writes the entries of the runs still pending at their writer's
// epoch, skipping entries already stored, and returns those runs. The
// entries of any other run are not written.
func (q *StreamQueries) Append(ctx context.Context, db DBTX, p AppendParams) ([]AppendRow, error) {
	rows, err := db.Query(ctx, q.append, p.WorkflowIDs, p.Keys, p.Offsets, p.Values, p.Closed, p.Wseqs, p.Epochs, p.Notify)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []AppendRow
	for rows.Next() {
		var a AppendRow
		var notified *string // pg_notify's void, or NULL
		if err := rows.Scan(&a.WorkflowID, &a.Epoch, &notified); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// KeyStateParams name one stream of a run.
type KeyStateParams struct {
	WorkflowID string
	Key        string
}

// KeyStateRow is where a stream stands.
type KeyStateRow struct {
	LastOffset *int64 // offset of the last entry; nil: the stream is empty
	Closed     bool   // the last entry is the close marker
	MaxWseq    *int64 // highest rank written by workflow code; nil: none
}

// KeyState reads where stream p.Key of run p.WorkflowID stands.
func (q *StreamQueries) KeyState(ctx context.Context, db DBTX, p KeyStateParams) (KeyStateRow, error) {
	var k KeyStateRow
	var closed *bool
	if err := db.QueryRow(ctx, q.keyState, p.WorkflowID, p.Key).Scan(&k.LastOffset, &closed, &k.MaxWseq); err != nil {
		return KeyStateRow{}, err
	}
	k.Closed = closed != nil && *closed
	return k, nil
}

// ReadParams select entries of one stream.
type ReadParams struct {
	WorkflowID string
	Key        string
	From       int64 // first offset
	Limit      int   // most entries
}

// ReadRow is one entry of a Read, with the run's status and whether the
// stream's last entry is the close marker (the same in every row). A row
// with a nil Offset stands for no entry: the run exists, no entry is at or
// after From.
type ReadRow struct {
	Status     string
	TailClosed bool
	Offset     *int64
	Value      []byte // nil for the close marker
	Closed     bool   // the entry is the close marker
	CreatedAt  time.Time
}

// Read returns up to p.Limit entries of stream p.Key of run p.WorkflowID
// from offset p.From, in offset order, read in one snapshot with the
// run's status: when it is final, every entry is visible. No row: the run
// does not exist.
func (q *StreamQueries) Read(ctx context.Context, db DBTX, p ReadParams) ([]ReadRow, error) {
	rows, err := db.Query(ctx, q.read, p.WorkflowID, p.Key, p.From, p.Limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ReadRow
	for rows.Next() {
		var e ReadRow
		var tail, closed *bool
		var at *time.Time
		if err := rows.Scan(&e.Status, &tail, &e.Offset, &e.Value, &closed, &at); err != nil {
			return nil, err
		}
		e.TailClosed = tail != nil && *tail
		e.Closed = closed != nil && *closed
		if at != nil {
			e.CreatedAt = *at
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// RunStateRow is the status and epoch of a run.
type RunStateRow struct {
	Status string
	Epoch  int64
}

// RunState reads the status and epoch of run id: why a writer's entries
// were not accepted. pgx.ErrNoRows: the run does not exist.
func (q *StreamQueries) RunState(ctx context.Context, db DBTX, id string) (RunStateRow, error) {
	var s RunStateRow
	if err := db.QueryRow(ctx, q.runState, id).Scan(&s.Status, &s.Epoch); err != nil {
		return RunStateRow{}, err
	}
	return s, nil
}

// ListFilter selects workflows for ListWorkflows. Zero fields do not filter.
type ListFilter struct {
	IDs      []string // any of these runs (nil: no filter)
	Statuses []string // run statuses (see statusArms); any of them
	Name     string
	Queue    string
	Parent   string
	IDPrefix string
	// WaitTopicPrefix keeps pending or queued runs waiting on a topic
	// starting with it.
	WaitTopicPrefix string
	From, To        time.Time // created_at in [From, To)
	// After is the keyset cursor: rows strictly older than (AfterAt, AfterID)
	// in (created_at DESC, id DESC) order.
	AfterAt  time.Time
	AfterID  string
	HasAfter bool
	Limit    int
	Payloads bool // select input and output
}

// ListWorkflows renders the listing statement of schema for f, and its
// arguments. The statement text depends only on which filters are set, so
// each combination gets its own plan. Columns: id, name, status,
// app_version, executor_id, parent_id, queue_name, created_at, updated_at,
// recovery_attempts, deadline, error, started_at, input, output, the
// wait_topic of a pending or queued run, and trace_context.
func ListWorkflows(schema string, f ListFilter) (string, []any) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.IDs != nil {
		where = append(where, "id = ANY("+arg(f.IDs)+"::text[])")
	}
	if len(f.Statuses) > 0 {
		where = append(where, statusCond(f.Statuses))
	}
	if f.Name != "" {
		where = append(where, "name = "+arg(f.Name))
	}
	if f.Queue != "" {
		where = append(where, "queue_name = "+arg(f.Queue))
	}
	if f.Parent != "" {
		where = append(where, "parent_id = "+arg(f.Parent))
	}
	if f.IDPrefix != "" {
		where = append(where, "id LIKE "+arg(likePrefix(f.IDPrefix))+` ESCAPE '\'`)
	}
	if f.WaitTopicPrefix != "" {
		where = append(where, statusCond(liveStatuses)+" AND wait_topic LIKE "+arg(likePrefix(f.WaitTopicPrefix))+` ESCAPE '\'`)
	}
	if !f.From.IsZero() {
		where = append(where, "created_at >= "+arg(f.From))
	}
	if !f.To.IsZero() {
		where = append(where, "created_at < "+arg(f.To))
	}
	if f.HasAfter {
		where = append(where, "(created_at, id) < ("+arg(f.AfterAt)+"::timestamptz, "+arg(f.AfterID)+"::text)")
	}
	payloads := "NULL::json, NULL::json"
	if f.Payloads {
		payloads = "input, output"
	}
	var b strings.Builder
	// Two kinds of listing are planned in a CTE of their own, which is
	// planned for all its rows (the outer LIMIT would reach into a
	// subquery), and ordered after it:
	//   - by IDs: the runs are found by primary key first. Under the LIMIT
	//     the planner would otherwise walk the listing index from the
	//     newest run, testing each against the IDs (the whole table when
	//     they are old). At most len(f.IDs) rows are materialized.
	//   - by status, awaited topic (which implies a status) or ID prefix,
	//     for a page smaller than a default one: it is planned for a
	//     default page. Under a LIMIT of a few rows the planner bets that
	//     the listing index soon yields matching runs, and loses the whole
	//     history when they are rare and old; for a page of a hundred it
	//     reads them from their partial indexes (see statusArms), or an ID
	//     prefix from the primary key (with IDs in the C collation,
	//     migration 015). Execution still stops after the rows asked for.
	byIDs := f.IDs != nil
	cte := byIDs || ((len(f.Statuses) > 0 || f.WaitTopicPrefix != "" || f.IDPrefix != "") && f.Limit < minStatusPlanRows)
	if cte {
		b.WriteString("WITH r AS MATERIALIZED (\n")
	}
	b.WriteString(`SELECT id, name, status, app_version, executor_id, parent_id, queue_name, created_at, updated_at,
	recovery_attempts, deadline, error, started_at, ` + payloads + `,
	CASE WHEN status IN ('pending', 'enqueued') THEN wait_topic END, trace_context
FROM {{schema}}.workflows`)
	if len(where) > 0 {
		b.WriteString("\nWHERE ")
		b.WriteString(strings.Join(where, " AND "))
	}
	if cte {
		if !byIDs {
			b.WriteString("\nORDER BY created_at DESC, id DESC LIMIT " + strconv.Itoa(minStatusPlanRows))
		}
		b.WriteString(")\nSELECT * FROM r")
	}
	b.WriteString("\nORDER BY created_at DESC, id DESC LIMIT " + arg(f.Limit))
	return Render(b.String(), schema), args
}

// minStatusPlanRows is the fewest rows a listing by status, awaited topic
// or ID prefix is planned for: a default page of ListWorkflows and the row
// that tells whether another follows.
const minStatusPlanRows = 101

// statusArm is the listing's condition for one status.
type statusArm struct{ status, cond string }

// statusArms are the listing's conditions for each status, in a fixed
// order. Each arm implies the predicate of a partial index that holds the
// runs in that status (pending runs are split as the takeover sweep's
// indexes split them: owned, unowned, parked; a queued run always has its
// queue; failed, cancelled and dead runs are in workflows_failed_idx), so
// the planner can read a rare status's runs from those indexes instead of
// walking the listing index from the newest run through the whole history.
// The arms are written into the statement, not passed as a parameter: a
// parameter's value is not known when a generic plan is made, so no
// partial index could be proven to apply.
var statusArms = []statusArm{
	{"enqueued", "(status = 'enqueued' AND queue_name IS NOT NULL)"},
	{"pending", "(status = 'pending' AND executor_id IS NOT NULL)" +
		" OR (status = 'pending' AND executor_id IS NULL AND wake_at IS NULL)" +
		" OR (status = 'pending' AND executor_id IS NULL AND wake_at IS NOT NULL)"},
	{"success", "status = 'success'"},
	{"error", "status = 'error'"},
	{"cancelled", "status = 'cancelled'"},
	{"dead", "status = 'dead'"},
}

// liveStatuses are the statuses of runs that may wait on a topic.
var liveStatuses = []string{"pending", "enqueued"}

// statusCond is the condition keeping runs in any of statuses: the OR of
// their arms. A status without an arm (ListParams.filter lets none through)
// keeps no run.
func statusCond(statuses []string) string {
	var arms []string
	for _, a := range statusArms {
		if slices.Contains(statuses, a.status) {
			arms = append(arms, a.cond)
		}
	}
	if len(arms) == 0 {
		return "false"
	}
	return "(" + strings.Join(arms, " OR ") + ")"
}

// likePrefix turns s into a LIKE pattern matching the strings that start
// with s, with LIKE's special characters escaped.
func likePrefix(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return r.Replace(s) + "%"
}
