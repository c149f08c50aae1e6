package sysdb

import (
	"context"
	"encoding/json"
	"time"
)

// StreamQueries are the statements of workflow streams.
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
