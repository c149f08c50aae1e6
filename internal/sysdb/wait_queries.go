package sysdb

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// WaitQueries are the statements of durable waits, messages and events.
type WaitQueries struct {
	park             string
	handBack         string
	unpark           string
	hasMessage       string
	nextWake         string
	send             string
	receive          string
	receiveAny       string
	setEvent         string
	wakeEventWaiters string
	lockRun          string
	getEvent         string
	setWaitTopic     string
	markWaits        string
	clearWaits       string
	clearWaitTopic   string
}

// NewWaitQueries renders the wait statements for schema; channel is the
// schema's notification channel ("": none sent, see notifier).
func NewWaitQueries(schema, channel string) *WaitQueries {
	n := notifier(channel)
	r := func(s string) string { return Render(s, schema) }
	return &WaitQueries{
		// Park hands the run back as rows: no owner, a wake-up time. The
		// epoch check keeps a fenced executor from parking a run it lost.
		// $1 id, $2 epoch, $3 wake_at, $4 wait_topic, $5 wait_any (a
		// Select's waits: see WaitKeys).
		// A run of a queue that releases parked slots goes back to its
		// queue, delayed until its wake-up time.
		// A run a Cancel asked to compensate (cancel_requested, set while
		// it ran on to this park, committed before or concurrently: read
		// from the row the update writes) is due at once instead: its
		// next execution compensates. So is a run nudged while it executed
		// (a message sent to it, a child of it finished: see Send and
		// finishMany): its process looks once more after the park commits,
		// but a process killed with its park in flight never does, and the
		// park lands anyway; the nudge is read from the row the update
		// writes, so one made concurrently counts too (the nudging statement
		// holds the row until it commits).
		park: r(`UPDATE {{schema}}.workflows w SET executor_id = NULL, wait_topic = $4, wait_any = $5, updated_at = now(),
	wake_at = CASE WHEN w.cancel_requested OR w.nudged THEN now() ELSE $3 END, nudged = NULL,
	status = CASE WHEN rq.name IS NULL THEN w.status ELSE 'enqueued' END,
	not_before = CASE WHEN rq.name IS NULL THEN w.not_before WHEN w.cancel_requested OR w.nudged THEN now() ELSE $3 END
FROM (SELECT $1::text AS id) x
LEFT JOIN {{schema}}.queues rq ON rq.release_parked AND rq.name = (SELECT queue_name FROM {{schema}}.workflows WHERE id = $1)
WHERE w.id = x.id AND w.epoch = $2 AND w.status = 'pending'`),

		// HandBack parks a run that Shutdown stopped at a step boundary,
		// due at once, and says so to the executors that may take it: a
		// queued run goes back to its queue (its slot is taken again
		// through the limits), any other is claimed by a sweep. A parked
		// run's claim counts no recovery attempt. Fenced like Park.
		// $1 id, $2 epoch.
		handBack: r(`WITH u AS (
	UPDATE {{schema}}.workflows SET executor_id = NULL, wake_at = now(), wait_topic = NULL, wait_any = NULL, updated_at = now(),
		status = CASE WHEN queue_name IS NULL THEN status ELSE 'enqueued' END,
		not_before = CASE WHEN queue_name IS NULL THEN not_before ELSE now() END
	WHERE id = $1 AND epoch = $2 AND status = 'pending'
	RETURNING id, queue_name)
SELECT ` + n(`CASE WHEN queue_name IS NULL THEN 'n:' || id ELSE 'q:' || queue_name END`) + `::text FROM u`),

		unpark: r(`WITH u AS (
	UPDATE {{schema}}.workflows SET wake_at = CASE WHEN status = 'pending' THEN now() ELSE wake_at END,
		not_before = CASE WHEN status = 'enqueued' THEN now() ELSE not_before END
	WHERE id = $1 AND executor_id IS NULL AND wake_at IS NOT NULL AND status IN ('pending', 'enqueued')
	RETURNING id, status, queue_name)
SELECT ` + n(`CASE WHEN status = 'enqueued' THEN 'q:' || queue_name ELSE 'n:' || id END`) + ` FROM u`),

		// $1 workflow_id, $2 topics.
		hasMessage: r(`SELECT EXISTS (SELECT 1 FROM {{schema}}.messages WHERE workflow_id = $1 AND topic = ANY($2::text[]) AND consumed_at IS NULL)`),

		// The first entry of the parked runs' index past now. Not min():
		// with statistics taken before the runs parked, the planner read
		// min() from every entry of the index (and their rows), 47 ms with
		// 100,000 parked runs, at every sweep.
		nextWake: r(`SELECT wake_at - now() FROM {{schema}}.workflows
WHERE status = 'pending' AND executor_id IS NULL AND wake_at > now()
ORDER BY wake_at LIMIT 1`),

		// Send inserts the message and touches the receiver's row in one
		// statement. The update always matches the row, so it also sees a
		// park that commits concurrently, and wakes a run parked on the
		// topic, or in a Select with a case on it; a run that executes is
		// nudged, so a park of it that commits later is due at once (see
		// Park). $1 workflow_id, $2 topic, $3 payload, $4 idem_key.
		// Returns (receiver pending or queued, inserted).
		send: r(`WITH w AS (
	UPDATE {{schema}}.workflows
	SET wake_at = CASE WHEN executor_id IS NULL AND coalesce(wait_topic = $2 OR 'msg:' || $2 = ANY(wait_any), false) AND status = 'pending' THEN now() ELSE wake_at END,
		nudged = CASE WHEN executor_id IS NOT NULL THEN true ELSE nudged END,
		not_before = CASE WHEN executor_id IS NULL AND coalesce(wait_topic = $2 OR 'msg:' || $2 = ANY(wait_any), false) AND status = 'enqueued' THEN now() ELSE not_before END
	WHERE id = $1 AND status IN ('pending', 'enqueued')
	RETURNING id, (executor_id IS NULL AND coalesce(wait_topic = $2 OR 'msg:' || $2 = ANY(wait_any), false)) AS parked, status, queue_name),
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
		receive: r(receive(`json_build_object('ok', true, 'msg', msg.payload)`, `m.topic = $3`)),
		// ReceiveAny is Receive for a Select: the oldest message of the
		// first topic of $3 with one, recorded with its case ($7[i] for
		// topic $3[i]).
		receiveAny: r(receive(`json_build_object('case', ($7::int[])[array_position($3::text[], msg.topic)], 'value', msg.payload)`,
			`m.topic = ANY($3::text[])`, `array_position($3::text[], m.topic), `)),

		// SetEvent records the step and publishes the value together; the
		// step's fence holds the run's row (FOR SHARE) until commit (see
		// LockRun). $1 workflow_id, $2 epoch, $3 pos, $4 step name, $5 key,
		// $6 value, $7 started_at.
		setEvent: r(`WITH ins AS (
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

		// The second statement of SetEvent's transaction: wakes the runs
		// parked in a Select with a case on the event, if it is set (a GIN
		// lookup of workflows_wait_any_idx). Its own statement, so its
		// snapshot is taken once the first holds the run's row: a Select
		// that marked its waits (MarkWaits) and then locked that row
		// (LockRun) either waited for this transaction, and sees the event
		// when it looks next, or marked before this snapshot and is woken
		// or nudged here. $1 workflow_id, $2 key.
		wakeEventWaiters: r(wakeWaiters(n, `wait_any @> ARRAY['event:' || length($1::text) || ':' || $1::text || $2::text]
		AND EXISTS (SELECT 1 FROM {{schema}}.events WHERE workflow_id = $1 AND key = $2)`)),

		// LockRun waits for the writes in flight that hold run $1's row
		// (a SetEvent, a step): a Select with a case on the run's event
		// takes it once it marked its waits, before it looks again, so a
		// SetEvent is either committed when it looks or sees its mark (see
		// wakeEventWaiters).
		lockRun: r(`SELECT 1 FROM {{schema}}.workflows WHERE id = $1 FOR NO KEY UPDATE`),

		// $1 workflow_id, $2 key. Returns the workflow's status too.
		getEvent: r(`SELECT w.status, e.value::text, e.workflow_id IS NOT NULL, w.notify
FROM {{schema}}.workflows w LEFT JOIN {{schema}}.events e ON e.workflow_id = w.id AND e.key = $2
WHERE w.id = $1`),

		// MarkWaits writes the waits of a Select that waits in memory on
		// its run's row (wait_any, as a park would): SetEvent and
		// WakeWatchers then find it and nudge it (see wakeOrNudge), so a
		// park of it that lands late is due at once. ClearWaits removes
		// them once the Select chose. Both fenced by the epoch; owned is
		// tested through coalesce, as SetWaitTopic's is (see there).
		// $1 id, $2 epoch, $3 waits.
		markWaits: r(`UPDATE {{schema}}.workflows SET wait_any = $3
WHERE id = $1 AND epoch = $2 AND status = 'pending' AND coalesce(executor_id, '') <> ''`),
		clearWaits: r(`UPDATE {{schema}}.workflows SET wait_any = NULL
WHERE id = $1 AND epoch = $2 AND status = 'pending' AND coalesce(executor_id, '') <> '' AND wait_any IS NOT NULL`),

		// SetWaitTopic records the topic a run waits on in memory (Recv
		// found no message), so listings can show it; ClearWaitTopic
		// removes it once the wait is over. Both are fenced by the epoch.
		// $1 id, $2 epoch, $3 topic.
		// Owned, tested through coalesce: "status = 'pending' AND
		// executor_id IS NOT NULL" is the predicate of workflows_owned_idx,
		// which would let the planner scan every owned run for this one.
		setWaitTopic: r(`UPDATE {{schema}}.workflows SET wait_topic = $3
WHERE id = $1 AND epoch = $2 AND status = 'pending' AND coalesce(executor_id, '') <> ''`),
		clearWaitTopic: r(`UPDATE {{schema}}.workflows SET wait_topic = NULL
WHERE id = $1 AND epoch = $2 AND wait_topic = $3 AND executor_id IS NOT NULL`),
	}
}

// receive renders the statement that consumes the oldest unconsumed
// message matching topicCond (first by order, a prefix of the ORDER BY) and
// records it as the step's output (built by output) in one statement: the
// message is marked consumed only if the fenced checkpoint was written.
// The message's lock is waited for, not skipped: the only other taker of
// a run's unconsumed messages is an earlier try of the same receive whose
// transaction is still open (its answer lost). If it commits, the retry
// finds the message consumed and the step recorded; if it rolls back, the
// retry takes that message. Skipping it would take the next message, and
// consume the run's messages out of order.
// $1 workflow_id, $2 epoch, $3 topic(s), $4 pos, $5 step name, $6 started_at.
func receive(output, topicCond string, order ...string) string {
	return `WITH w AS (
	SELECT id FROM {{schema}}.workflows WHERE id = $1 AND epoch = $2 AND status = 'pending' FOR SHARE),
msg AS (
	SELECT m.id, m.topic, m.payload FROM {{schema}}.messages m, w
	WHERE m.workflow_id = $1 AND m.workflow_id = w.id AND ` + topicCond + ` AND m.consumed_at IS NULL
	ORDER BY ` + strings.Join(order, "") + `m.id LIMIT 1 FOR UPDATE OF m),
ins AS (
	INSERT INTO {{schema}}.steps (workflow_id, pos, name, status, output, attempts, started_at)
	SELECT $1, $4, $5, 'done', ` + output + `, 1, $6 FROM msg
	ON CONFLICT (workflow_id, pos) DO NOTHING
	RETURNING output),
upd AS (
	UPDATE {{schema}}.messages SET consumed_at = now()
	WHERE workflow_id = $1 AND id IN (SELECT id FROM msg) AND EXISTS (SELECT 1 FROM ins)
	RETURNING id)
SELECT output::text FROM ins, upd`
}

// wakeOrNudge is the SET list of a wake-up found through wait_any: a
// parked run is due at once (a parked queued run through its queue), an
// executing Select that marked its waits (MarkWaits) is nudged.
const wakeOrNudge = `wake_at = CASE WHEN executor_id IS NULL AND status = 'pending' THEN now() ELSE wake_at END,
		not_before = CASE WHEN status = 'enqueued' THEN now() ELSE not_before END,
		nudged = CASE WHEN executor_id IS NOT NULL THEN true ELSE nudged END`

// wakeWaiters is the statement that wakes (or nudges, see wakeOrNudge)
// the waiting runs that match waits, a condition on wait_any, and tells
// the sweepers or the queue's dispatchers of the parked ones it woke.
func wakeWaiters(n func(payload string) string, waits string) string {
	return `WITH u AS (
	UPDATE {{schema}}.workflows SET ` + wakeOrNudge + `
	WHERE ` + waits + `
		AND status IN ('pending', 'enqueued')
	RETURNING id, status, queue_name, executor_id)
SELECT ` + n(`CASE WHEN status = 'enqueued' THEN 'q:' || queue_name ELSE 'n:' || id END`) + `::text FROM u
WHERE executor_id IS NULL`
}

// MarkWaits writes the waits of a Select waiting in memory on its row
// (see markWaits). false: the run is not owned and pending at epoch.
func (q *WaitQueries) MarkWaits(ctx context.Context, db DBTX, id string, epoch int64, waits []string) (bool, error) {
	tag, err := db.Exec(ctx, q.markWaits, id, epoch, waits)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

// ClearWaits removes what MarkWaits wrote.
func (q *WaitQueries) ClearWaits(ctx context.Context, db DBTX, id string, epoch int64) error {
	_, err := db.Exec(ctx, q.clearWaits, id, epoch)
	return err
}

// WaitKeys are what a run parked in a Select waits for, as its wait_any
// entries: a message on a topic ("msg:" topic), the finish of a run
// ("child:" id, for a child of the run; "done:" id, for any run) or an
// event of a run ("event:" length of the id in characters ":" id key,
// unambiguous whatever the two hold; and "done:" id, as a run that
// finishes without setting it ends the wait too). Send, a run's finish
// and SetEvent wake the runs whose entries name them; a finish looks for
// "done:" entries only when a waiter watches the run (WatchWorkflow), as
// the Select does before it parks.
func WaitKeys(topics, runs []string, events [][2]string) []string {
	var keys []string
	for _, t := range topics {
		keys = append(keys, "msg:"+t)
	}
	done := map[string]bool{}
	for _, id := range runs {
		keys = append(keys, "child:"+id)
		done[id] = true
	}
	for _, e := range events {
		keys = append(keys, "event:"+strconv.Itoa(utf8.RuneCountInString(e[0]))+":"+e[0]+e[1])
		done[e[0]] = true
	}
	for _, id := range slices.Sorted(maps.Keys(done)) {
		keys = append(keys, "done:"+id)
	}
	return keys
}

// ParkParams hand run ID back to the database until WakeAt.
type ParkParams struct {
	ID     string
	Epoch  int64 // the parking executor's
	WakeAt time.Time
	Topic  string   // the message topic that wakes it early; "": none
	Any    []string // a Select's waits (WaitKeys), any of which wakes it early; nil: none
}

// Park hands the run back as rows, unowned until p.WakeAt (a run of a
// queue that releases parked slots goes back to its queue). false: the run
// is not pending at p.Epoch, and nothing changed.
func (q *WaitQueries) Park(ctx context.Context, db DBTX, p ParkParams) (bool, error) {
	var topic any
	if p.Topic != "" {
		topic = p.Topic
	}
	tag, err := db.Exec(ctx, q.park, p.ID, p.Epoch, p.WakeAt, topic, p.Any)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

// HandBackParams name a run stopped by Shutdown and its owner's epoch.
type HandBackParams struct {
	ID    string
	Epoch int64
}

// HandBack parks the run due at once and notifies the executors that may
// take it. false: the run is not pending at p.Epoch, and nothing changed.
func (q *WaitQueries) HandBack(ctx context.Context, db DBTX, p HandBackParams) (bool, error) {
	tag, err := db.Exec(ctx, q.handBack, p.ID, p.Epoch)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

// Unpark makes parked run id due now (a queued one, through its queue)
// and notifies the executors that may take it. false: the run is not
// parked.
func (q *WaitQueries) Unpark(ctx context.Context, db DBTX, id string) (bool, error) {
	tag, err := db.Exec(ctx, q.unpark, id)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

// HasMessageParams name a run and topics.
type HasMessageParams struct {
	WorkflowID string
	Topics     []string
}

// HasMessage reports whether an unconsumed message on any of p.Topics
// waits for run p.WorkflowID.
func (q *WaitQueries) HasMessage(ctx context.Context, db DBTX, p HasMessageParams) (bool, error) {
	var has bool
	err := db.QueryRow(ctx, q.hasMessage, p.WorkflowID, p.Topics).Scan(&has)
	return has, err
}

// NextWake returns how long until the next parked run is due; ok is false
// when no parked run is due later than now.
func (q *WaitQueries) NextWake(ctx context.Context, db DBTX) (d time.Duration, ok bool, err error) {
	var next time.Duration
	switch err := db.QueryRow(ctx, q.nextWake).Scan(&next); {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	return next, true, nil
}

// SendParams are one message.
type SendParams struct {
	WorkflowID     string // the receiver
	Topic          string
	Payload        json.RawMessage
	IdempotencyKey string // a second send with the same key is a no-op; "": none
}

// SendRow is what a Send did.
type SendRow struct {
	Found    bool // the receiver is pending or queued (else nothing was written)
	Inserted bool // the message was stored (false for a repeated key)
}

// Send stores the message for its receiver, if pending or queued, and
// wakes it when it waits on the topic, parked or in memory.
func (q *WaitQueries) Send(ctx context.Context, db DBTX, p SendParams) (SendRow, error) {
	var key any
	if p.IdempotencyKey != "" {
		key = p.IdempotencyKey
	}
	var found, inserted int64
	var notified *string // pg_notify's void, or NULL
	if err := db.QueryRow(ctx, q.send, p.WorkflowID, p.Topic, p.Payload, key).Scan(&found, &inserted, &notified); err != nil {
		return SendRow{}, err
	}
	return SendRow{Found: found > 0, Inserted: inserted > 0}, nil
}

// ReceiveParams are one Recv's try to take a message: the step it is
// recorded as and the run's owner.
type ReceiveParams struct {
	WorkflowID string
	Epoch      int64
	Topic      string
	Pos        int    // the step's position
	Name       string // the step's name
	StartedAt  time.Time
}

// Receive consumes the oldest unconsumed message on p.Topic and records
// it as the step's output, both or neither, and returns that output. nil:
// nothing was consumed (no message, the run is not pending at p.Epoch, or
// the step is already recorded).
func (q *WaitQueries) Receive(ctx context.Context, db DBTX, p ReceiveParams) ([]byte, error) {
	return scanOutput(db.QueryRow(ctx, q.receive, p.WorkflowID, p.Epoch, p.Topic, p.Pos, p.Name, p.StartedAt))
}

// ReceiveAnyParams are one Select's try to take a message on any of
// its topics: Topics[i] is the topic of case Cases[i].
type ReceiveAnyParams struct {
	WorkflowID string
	Epoch      int64
	Topics     []string // in order of preference
	Cases      []int
	Pos        int    // the step's position
	Name       string // the step's name
	StartedAt  time.Time
}

// ReceiveAny is Receive over several topics: it consumes the oldest
// message of the first of p.Topics that has one and records the step's
// output {"case": its case, "value": the message}. nil: nothing was
// consumed, as for Receive.
func (q *WaitQueries) ReceiveAny(ctx context.Context, db DBTX, p ReceiveAnyParams) ([]byte, error) {
	return scanOutput(db.QueryRow(ctx, q.receiveAny, p.WorkflowID, p.Epoch, p.Topics, p.Pos, p.Name, p.StartedAt, p.Cases))
}

// scanOutput reads the recorded output a Receive returns; nil when it
// consumed nothing.
func scanOutput(row pgx.Row) ([]byte, error) {
	var out *string
	err := row.Scan(&out)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, err
	case out == nil:
		return nil, nil
	}
	return []byte(*out), nil
}

// SetEventParams are one SetEvent: the step it is recorded as, the run's
// owner and the value.
type SetEventParams struct {
	WorkflowID string
	Epoch      int64
	Pos        int    // the step's position
	Name       string // the step's name
	Key        string
	Value      json.RawMessage
	StartedAt  time.Time
}

// BatchDB runs a batch of statements: a pool, a connection or a
// transaction.
type BatchDB interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// SetEvent records the step and publishes the value, both or neither,
// then wakes the runs parked on the event, in one transaction (db's, if
// it is one) sent as one batch. false: nothing was written (the run is not
// pending at p.Epoch, or the step is already recorded).
func (q *WaitQueries) SetEvent(ctx context.Context, db BatchDB, p SetEventParams) (written bool, err error) {
	_, inTx := db.(pgx.Tx)
	b := &pgx.Batch{}
	if !inTx {
		b.Queue("BEGIN")
	}
	set := b.Queue(q.setEvent, p.WorkflowID, p.Epoch, p.Pos, p.Name, p.Key, p.Value, p.StartedAt)
	set.Query(func(rows pgx.Rows) error {
		written = rows.Next()
		rows.Close()
		return rows.Err()
	})
	b.Queue(q.wakeEventWaiters, p.WorkflowID, p.Key)
	if !inTx {
		b.Queue("COMMIT")
	}
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return false, err
	}
	return written, nil
}

// LockRun waits for the writes in flight that hold run id's row (see
// wakeEventWaiters); it holds the row only for its statement.
func (q *WaitQueries) LockRun(ctx context.Context, db DBTX, id string) error {
	_, err := db.Exec(ctx, q.lockRun, id)
	return err
}

// GetEventParams name an event of a run.
type GetEventParams struct {
	WorkflowID string
	Key        string
}

// GetEventRow is an event and the status of its run.
type GetEventRow struct {
	Status  string
	Found   bool   // the event is set
	Value   []byte // its value, as JSON text
	Watched bool   // a waiter asked for the notification of the run's finish (WatchWorkflow)
}

// GetEvent reads event p.Key of run p.WorkflowID. pgx.ErrNoRows: the run
// does not exist.
func (q *WaitQueries) GetEvent(ctx context.Context, db DBTX, p GetEventParams) (GetEventRow, error) {
	var g GetEventRow
	var value *string
	if err := db.QueryRow(ctx, q.getEvent, p.WorkflowID, p.Key).Scan(&g.Status, &value, &g.Found, &g.Watched); err != nil {
		return GetEventRow{}, err
	}
	if value != nil {
		g.Value = []byte(*value)
	}
	return g, nil
}

// WaitTopicParams name the topic run ID, owned at Epoch, waits on in
// memory.
type WaitTopicParams struct {
	ID    string
	Epoch int64
	Topic string
}

// SetWaitTopic records the topic, for listings. false: the run is not
// owned and pending at p.Epoch, and nothing changed.
func (q *WaitQueries) SetWaitTopic(ctx context.Context, db DBTX, p WaitTopicParams) (bool, error) {
	tag, err := db.Exec(ctx, q.setWaitTopic, p.ID, p.Epoch, p.Topic)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

// ClearWaitTopic removes the topic SetWaitTopic recorded. false: the run
// is not owned at p.Epoch or waits on another topic, and nothing changed.
func (q *WaitQueries) ClearWaitTopic(ctx context.Context, db DBTX, p WaitTopicParams) (bool, error) {
	tag, err := db.Exec(ctx, q.clearWaitTopic, p.ID, p.Epoch, p.Topic)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}
