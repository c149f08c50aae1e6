package sysdb

// StreamQueries are the statements of workflow streams.
type StreamQueries struct {
	Append   string
	KeyState string
	Read     string
	RunState string
}

// NewStreamQueries renders the stream statements for schema; channel is the
// schema's notification channel ("": none sent, see notifier).
func NewStreamQueries(schema, channel string) *StreamQueries {
	n := notifier(channel)
	r := func(s string) string { return Render(s, schema) }
	return &StreamQueries{
		// Appends a batch of entries of any number of runs in one statement.
		// Only the entries of runs still pending at the writer's epoch are
		// written: FOR SHARE makes a concurrent change of owner wait for this
		// write (or this write see the new owner), so a fenced executor can
		// never append. Runs are found by primary key (see InsertSteps). An entry already present (a retry after a lost
		// acknowledgement) is skipped. Returns the (id, epoch) pairs whose
		// entries were accepted and, when $8, notifies 's:<id>' for those a
		// reader in another process watches (workflows.notify, set by
		// WatchWorkflow): runs nobody reads remotely stream without NOTIFY,
		// which keeps their commits off the notification lock.
		// $1 workflow_ids, $2 keys, $3 offsets, $4 values, $5 closed flags,
		// $6 workflow-code sequence numbers (NULL: written by a step),
		// $7 epochs, $8 notify.
		Append: r(`WITH u AS (
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
		KeyState: r(`SELECT l.off, l.closed,
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
		Read: r(`SELECT w.status,
	(SELECT t.closed FROM {{schema}}.streams t WHERE t.workflow_id = w.id AND t.key = $2 ORDER BY t.off DESC LIMIT 1),
	s.off, s.value, s.closed, s.created_at
FROM {{schema}}.workflows w
LEFT JOIN LATERAL (SELECT off, value, closed, created_at FROM {{schema}}.streams
	WHERE workflow_id = w.id AND key = $2 AND off >= $3 ORDER BY off LIMIT $4) s ON true
WHERE w.id = $1
ORDER BY s.off`),

		// $1 workflow_id.
		RunState: r(`SELECT status, epoch FROM {{schema}}.workflows WHERE id = $1`),
	}
}
