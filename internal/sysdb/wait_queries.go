package sysdb

// WaitQueries are the statements of durable waits, messages and events.
type WaitQueries struct {
	Park           string
	HandBack       string
	Unpark         string
	HasMessage     string
	NextWake       string
	Send           string
	Receive        string
	SetEvent       string
	GetEvent       string
	SetWaitTopic   string
	ClearWaitTopic string
}

// NewWaitQueries renders the wait statements for schema; channel is the
// schema's notification channel ("": none sent, see notifier).
func NewWaitQueries(schema, channel string) *WaitQueries {
	n := notifier(channel)
	r := func(s string) string { return Render(s, schema) }
	return &WaitQueries{
		// Park hands the run back as rows: no owner, a wake-up time. The
		// epoch check keeps a fenced executor from parking a run it lost.
		// $1 id, $2 epoch, $3 wake_at, $4 wait_topic.
		// A run of a queue that releases parked slots goes back to its
		// queue, delayed until its wake-up time.
		Park: r(`UPDATE {{schema}}.workflows w SET executor_id = NULL, wake_at = $3, wait_topic = $4, updated_at = now(),
	status = CASE WHEN rq.name IS NULL THEN w.status ELSE 'enqueued' END,
	not_before = CASE WHEN rq.name IS NULL THEN w.not_before ELSE $3 END
FROM (SELECT $1::text AS id) x
LEFT JOIN {{schema}}.queues rq ON rq.release_parked AND rq.name = (SELECT queue_name FROM {{schema}}.workflows WHERE id = $1)
WHERE w.id = x.id AND w.epoch = $2 AND w.status = 'pending'`),

		// HandBack parks a run that Shutdown stopped at a step boundary,
		// due at once, and says so to the executors that may take it: a
		// queued run goes back to its queue (its slot is taken again
		// through the limits), any other is claimed by a sweep. A parked
		// run's claim counts no recovery attempt. Fenced like Park.
		// $1 id, $2 epoch.
		HandBack: r(`WITH u AS (
	UPDATE {{schema}}.workflows SET executor_id = NULL, wake_at = now(), wait_topic = NULL, updated_at = now(),
		status = CASE WHEN queue_name IS NULL THEN status ELSE 'enqueued' END,
		not_before = CASE WHEN queue_name IS NULL THEN not_before ELSE now() END
	WHERE id = $1 AND epoch = $2 AND status = 'pending'
	RETURNING id, queue_name)
SELECT ` + n(`CASE WHEN queue_name IS NULL THEN 'n:' || id ELSE 'q:' || queue_name END`) + `::text FROM u`),

		Unpark: r(`WITH u AS (
	UPDATE {{schema}}.workflows SET wake_at = CASE WHEN status = 'pending' THEN now() ELSE wake_at END,
		not_before = CASE WHEN status = 'enqueued' THEN now() ELSE not_before END
	WHERE id = $1 AND executor_id IS NULL AND wake_at IS NOT NULL AND status IN ('pending', 'enqueued')
	RETURNING id, status, queue_name)
SELECT ` + n(`CASE WHEN status = 'enqueued' THEN 'q:' || queue_name ELSE 'n:' || id END`) + ` FROM u`),

		// $1 workflow_id, $2 topic.
		HasMessage: r(`SELECT EXISTS (SELECT 1 FROM {{schema}}.messages WHERE workflow_id = $1 AND topic = $2 AND consumed_at IS NULL)`),

		NextWake: r(`SELECT min(wake_at) - now() FROM {{schema}}.workflows
WHERE status = 'pending' AND executor_id IS NULL AND wake_at > now()`),

		// Send inserts the message and touches the receiver's row in one
		// statement. The update always matches the row, so it also sees a
		// park that commits concurrently, and wakes a run parked on the
		// topic. $1 workflow_id, $2 topic, $3 payload, $4 idem_key.
		// Returns (receiver pending or queued, inserted).
		Send: r(`WITH w AS (
	UPDATE {{schema}}.workflows
	SET wake_at = CASE WHEN executor_id IS NULL AND wait_topic = $2 AND status = 'pending' THEN now() ELSE wake_at END,
		not_before = CASE WHEN executor_id IS NULL AND wait_topic = $2 AND status = 'enqueued' THEN now() ELSE not_before END
	WHERE id = $1 AND status IN ('pending', 'enqueued')
	RETURNING id, (executor_id IS NULL AND wait_topic = $2) AS parked, status, queue_name),
ins AS (
	INSERT INTO {{schema}}.messages (workflow_id, topic, payload, idem_key)
	SELECT id, $2, $3, $4 FROM w
	ON CONFLICT (workflow_id, idem_key) WHERE idem_key IS NOT NULL DO NOTHING
	RETURNING id)
SELECT (SELECT count(*) FROM w), (SELECT count(*) FROM ins),
	(SELECT ` + n(`CASE WHEN NOT parked THEN 'm:' || id
		WHEN status = 'enqueued' THEN 'q:' || queue_name ELSE 'n:' || id END`) + ` FROM w)::text`),

		// Receive consumes the oldest unconsumed message of the topic and
		// records it as the step's output in one statement: the message is
		// marked consumed only if the fenced checkpoint was written.
		// $1 workflow_id, $2 epoch, $3 topic, $4 pos, $5 step name, $6 started_at.
		Receive: r(`WITH w AS (
	SELECT id FROM {{schema}}.workflows WHERE id = $1 AND epoch = $2 AND status = 'pending' FOR SHARE),
msg AS (
	SELECT m.id, m.payload FROM {{schema}}.messages m, w
	WHERE m.workflow_id = w.id AND m.topic = $3 AND m.consumed_at IS NULL
	ORDER BY m.id LIMIT 1 FOR UPDATE OF m SKIP LOCKED),
ins AS (
	INSERT INTO {{schema}}.steps (workflow_id, pos, name, status, output, attempts, started_at)
	SELECT $1, $4, $5, 'done', json_build_object('ok', true, 'msg', msg.payload), 1, $6 FROM msg
	ON CONFLICT (workflow_id, pos) DO NOTHING
	RETURNING output),
upd AS (
	UPDATE {{schema}}.messages SET consumed_at = now()
	WHERE id IN (SELECT id FROM msg) AND EXISTS (SELECT 1 FROM ins)
	RETURNING id)
SELECT output::text FROM ins, upd`),

		// SetEvent records the step and publishes the value together.
		// $1 workflow_id, $2 epoch, $3 pos, $4 step name, $5 key, $6 value, $7 started_at.
		SetEvent: r(`WITH ins AS (
	INSERT INTO {{schema}}.steps (workflow_id, pos, name, status, output, attempts, started_at)
	SELECT $1, $3, $4, 'done', 'null', 1, $7
	FROM {{schema}}.workflows w WHERE w.id = $1 AND w.epoch = $2 AND w.status = 'pending'
	FOR SHARE OF w
	ON CONFLICT (workflow_id, pos) DO NOTHING
	RETURNING workflow_id),
ev AS (
	INSERT INTO {{schema}}.events (workflow_id, key, value)
	SELECT workflow_id, $5, $6 FROM ins
	ON CONFLICT (workflow_id, key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()
	RETURNING workflow_id)
SELECT ` + n(`'e:' || workflow_id`) + `::text FROM ev`),

		// $1 workflow_id, $2 key. Returns the workflow's status too.
		GetEvent: r(`SELECT w.status, e.value::text, e.workflow_id IS NOT NULL
FROM {{schema}}.workflows w LEFT JOIN {{schema}}.events e ON e.workflow_id = w.id AND e.key = $2
WHERE w.id = $1`),

		// SetWaitTopic records the topic a run waits on in memory (Recv
		// found no message), so listings can show it; ClearWaitTopic
		// removes it once the wait is over. Both are fenced by the epoch.
		// $1 id, $2 epoch, $3 topic.
		SetWaitTopic: r(`UPDATE {{schema}}.workflows SET wait_topic = $3
WHERE id = $1 AND epoch = $2 AND status = 'pending' AND executor_id IS NOT NULL`),
		ClearWaitTopic: r(`UPDATE {{schema}}.workflows SET wait_topic = NULL
WHERE id = $1 AND epoch = $2 AND wait_topic = $3 AND executor_id IS NOT NULL`),
	}
}
