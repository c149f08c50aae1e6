package sysdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/pgtest"
)

// waitDB is a migrated schema with its wait and stream statements, and a
// connection listening on the schema's notification channel.
type waitDB struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	schema string
	wq     *WaitQueries
	sq     *StreamQueries
	listen *pgx.Conn
}

func newWaitDB(t *testing.T) *waitDB {
	t.Helper()
	pgtest.SkipIfPooled(t, "the statement tests listen for their notifications")
	pool, schema := migrated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	channel := ChannelName(schema)
	conn, err := pgx.Connect(ctx, pgtest.DirectURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize())
	require.NoError(t, err)
	return &waitDB{t: t, ctx: ctx, pool: pool, schema: schema,
		wq: NewWaitQueries(schema, channel), sq: NewStreamQueries(schema, channel), listen: conn}
}

// exec runs sql with {{schema}} rendered.
func (d *waitDB) exec(sql string, args ...any) {
	d.t.Helper()
	_, err := d.pool.Exec(d.ctx, Render(sql, d.schema), args...)
	require.NoError(d.t, err)
}

// scan reads one row of sql into dst.
func (d *waitDB) scan(sql string, args []any, dst ...any) {
	d.t.Helper()
	require.NoError(d.t, d.pool.QueryRow(d.ctx, Render(sql, d.schema), args...).Scan(dst...))
}

// run inserts a workflow row: pending and owned by "x" at epoch 2 unless
// set is given, an SQL SET list applied after the insert.
func (d *waitDB) run(id string, set string) {
	d.t.Helper()
	d.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch)
VALUES ($1, 'w', 'pending', 'v', 'x', 2)`, id)
	if set != "" {
		d.exec(`UPDATE {{schema}}.workflows SET `+set+` WHERE id = $1`, id)
	}
}

// runRow is the part of a workflow row the wait statements change.
type runRow struct {
	Status    string
	Executor  *string
	WakeAt    *time.Time
	Topic     *string
	NotBefore *time.Time
}

func (d *waitDB) row(id string) runRow {
	d.t.Helper()
	var r runRow
	d.scan(`SELECT status, executor_id, wake_at, wait_topic, not_before FROM {{schema}}.workflows WHERE id = $1`,
		[]any{id}, &r.Status, &r.Executor, &r.WakeAt, &r.Topic, &r.NotBefore)
	return r
}

// notified returns the payload of the next notification: sent by the
// statements under test, or by mark. Statements that must not notify are
// checked by sending a mark after them: it comes first.
func (d *waitDB) notified() string {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
	defer cancel()
	n, err := d.listen.WaitForNotification(ctx)
	require.NoError(d.t, err)
	return n.Payload
}

func (d *waitDB) mark() {
	d.t.Helper()
	_, err := d.pool.Exec(d.ctx, "SELECT pg_notify($1, 'mark')", ChannelName(d.schema))
	require.NoError(d.t, err)
}

// recent reports whether t is within a minute of the database's now.
func (d *waitDB) recent(t *time.Time) bool {
	d.t.Helper()
	var now time.Time
	d.scan(`SELECT now()`, nil, &now)
	return t != nil && t.Sub(now).Abs() < time.Minute
}

func TestWaitPark(t *testing.T) {
	t.Parallel()
	d := newWaitDB(t)
	wake := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	d.run("a", "")
	ok, err := d.wq.Park(d.ctx, d.pool, ParkParams{ID: "a", Epoch: 2, WakeAt: wake, Topic: "t"})
	require.NoError(t, err)
	require.True(t, ok)
	r := d.row("a")
	require.Equal(t, "pending", r.Status)
	require.Nil(t, r.Executor, "a parked run has no owner")
	require.True(t, wake.Equal(*r.WakeAt))
	require.Equal(t, "t", *r.Topic)

	d.run("no-topic", "")
	ok, err = d.wq.Park(d.ctx, d.pool, ParkParams{ID: "no-topic", Epoch: 2, WakeAt: wake})
	require.NoError(t, err)
	require.True(t, ok)
	require.Nil(t, d.row("no-topic").Topic, `"" parks on no topic`)

	d.run("stale", "")
	ok, err = d.wq.Park(d.ctx, d.pool, ParkParams{ID: "stale", Epoch: 1, WakeAt: wake})
	require.NoError(t, err)
	require.False(t, ok, "a stale epoch parks nothing")
	require.Equal(t, "x", *d.row("stale").Executor)

	d.run("done", "status = 'success'")
	ok, err = d.wq.Park(d.ctx, d.pool, ParkParams{ID: "done", Epoch: 2, WakeAt: wake})
	require.NoError(t, err)
	require.False(t, ok, "a finished run is not parked")

	// A queue that releases parked slots takes the run back, delayed.
	d.exec(`INSERT INTO {{schema}}.queues (name, release_parked) VALUES ('rq', true), ('hq', false)`)
	d.run("released", "queue_name = 'rq'")
	d.run("held", "queue_name = 'hq'")
	for _, id := range []string{"released", "held"} {
		ok, err = d.wq.Park(d.ctx, d.pool, ParkParams{ID: id, Epoch: 2, WakeAt: wake})
		require.NoError(t, err)
		require.True(t, ok)
	}
	r = d.row("released")
	require.Equal(t, "enqueued", r.Status)
	require.True(t, wake.Equal(*r.NotBefore))
	r = d.row("held")
	require.Equal(t, "pending", r.Status)
	require.Nil(t, r.NotBefore)
}

func TestWaitHandBack(t *testing.T) {
	t.Parallel()
	d := newWaitDB(t)
	d.run("a", "wait_topic = 't'")
	ok, err := d.wq.HandBack(d.ctx, d.pool, HandBackParams{ID: "a", Epoch: 2})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "n:a", d.notified(), "the sweepers are told")
	r := d.row("a")
	require.Equal(t, "pending", r.Status)
	require.Nil(t, r.Executor)
	require.Nil(t, r.Topic)
	require.True(t, d.recent(r.WakeAt), "due at once")

	d.exec(`INSERT INTO {{schema}}.queues (name) VALUES ('q')`)
	d.run("queued", "queue_name = 'q'")
	ok, err = d.wq.HandBack(d.ctx, d.pool, HandBackParams{ID: "queued", Epoch: 2})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "q:q", d.notified(), "the queue's dispatchers are told")
	r = d.row("queued")
	require.Equal(t, "enqueued", r.Status, "a queued run goes back to its queue")
	require.True(t, d.recent(r.NotBefore))

	d.run("stale", "")
	ok, err = d.wq.HandBack(d.ctx, d.pool, HandBackParams{ID: "stale", Epoch: 3})
	require.NoError(t, err)
	require.False(t, ok, "a stale epoch hands nothing back")
	require.Equal(t, "x", *d.row("stale").Executor)
	d.mark()
	require.Equal(t, "mark", d.notified(), "nothing handed back, nothing notified")
}

func TestWaitUnpark(t *testing.T) {
	t.Parallel()
	d := newWaitDB(t)
	d.run("parked", "executor_id = NULL, wake_at = now() + interval '1 hour'")
	ok, err := d.wq.Unpark(d.ctx, d.pool, "parked")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "n:parked", d.notified())
	require.True(t, d.recent(d.row("parked").WakeAt), "due now")

	d.run("queued", "executor_id = NULL, status = 'enqueued', queue_name = 'q', wake_at = now() + interval '1 hour', not_before = now() + interval '1 hour'")
	ok, err = d.wq.Unpark(d.ctx, d.pool, "queued")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "q:q", d.notified())
	require.True(t, d.recent(d.row("queued").NotBefore), "its queue may take it now")

	d.run("owned", "wake_at = now() + interval '1 hour'")
	d.run("not-parked", "executor_id = NULL")
	for _, id := range []string{"owned", "not-parked", "missing"} {
		ok, err = d.wq.Unpark(d.ctx, d.pool, id)
		require.NoError(t, err)
		require.False(t, ok, id)
	}
	d.mark()
	require.Equal(t, "mark", d.notified())
}

func TestWaitHasMessage(t *testing.T) {
	t.Parallel()
	d := newWaitDB(t)
	d.run("a", "")
	has := func(topic string) bool {
		t.Helper()
		ok, err := d.wq.HasMessage(d.ctx, d.pool, HasMessageParams{WorkflowID: "a", Topics: []string{topic}})
		require.NoError(t, err)
		return ok
	}
	require.False(t, has("t"))
	d.exec(`INSERT INTO {{schema}}.messages (workflow_id, topic, payload, consumed_at) VALUES ('a', 't', '1', now())`)
	require.False(t, has("t"), "a consumed message does not count")
	d.exec(`INSERT INTO {{schema}}.messages (workflow_id, topic, payload) VALUES ('a', 't', '2')`)
	require.True(t, has("t"))
	require.False(t, has("other"))
}

func TestWaitNextWake(t *testing.T) {
	t.Parallel()
	d := newWaitDB(t)
	_, ok, err := d.wq.NextWake(d.ctx, d.pool)
	require.NoError(t, err)
	require.False(t, ok, "no parked run")
	d.run("owned", "wake_at = now() + interval '1 minute'")
	d.run("due", "executor_id = NULL, wake_at = now() - interval '1 minute'")
	d.run("done", "executor_id = NULL, status = 'success', wake_at = now() + interval '1 minute'")
	_, ok, err = d.wq.NextWake(d.ctx, d.pool)
	require.NoError(t, err)
	require.False(t, ok, "only parked runs due later count")
	d.run("later", "executor_id = NULL, wake_at = now() + interval '2 hours'")
	d.run("sooner", "executor_id = NULL, wake_at = now() + interval '1 hour'")
	next, ok, err := d.wq.NextWake(d.ctx, d.pool)
	require.NoError(t, err)
	require.True(t, ok)
	require.InDelta(t, time.Hour.Seconds(), next.Seconds(), 60)
}

// TestWaitNextWakeReadsOneEntry: the sweep's NextWake, at every pass,
// reads the first parked run due later, not every parked run, even with
// statistics taken before they parked.
func TestWaitNextWakeReadsOneEntry(t *testing.T) {
	t.Parallel()
	d := newWaitDB(t)
	d.exec(`ANALYZE {{schema}}.workflows`)
	d.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, epoch, wake_at)
SELECT 'parked-' || i, 'w', 'pending', 'v', 1, now() + i * interval '1 second' FROM generate_series(1, 3000) i`)
	for _, mode := range planModes {
		if looked, plan := pgtest.ExplainRows(d.ctx, t, d.pool, mode, d.wq.nextWake, nil); looked > 50 {
			t.Errorf("NextWake (%s): the plan looked at %d rows of workflows; want <= 50\n%s", mode, looked, plan)
		}
	}
	next, ok, err := d.wq.NextWake(d.ctx, d.pool)
	require.NoError(t, err)
	require.True(t, ok)
	require.InDelta(t, 1, next.Seconds(), 1)
}

func TestWaitSend(t *testing.T) {
	t.Parallel()
	d := newWaitDB(t)
	send := func(id, topic, key string) SendRow {
		t.Helper()
		row, err := d.wq.Send(d.ctx, d.pool, SendParams{WorkflowID: id, Topic: topic, Payload: json.RawMessage(`{"n":1}`), IdempotencyKey: key})
		require.NoError(t, err)
		return row
	}
	d.run("a", "")
	require.Equal(t, SendRow{Found: true, Inserted: true}, send("a", "t", ""))
	require.Equal(t, "m:a", d.notified(), "a receiver in memory is told")
	require.Equal(t, SendRow{Found: true, Inserted: true}, send("a", "t", "k"))
	require.Equal(t, "m:a", d.notified())
	require.Equal(t, SendRow{Found: true, Inserted: false}, send("a", "t", "k"), "a repeated key stores nothing")
	require.Equal(t, "m:a", d.notified())
	var n int
	var payload string
	d.scan(`SELECT count(*), max(payload::text) FROM {{schema}}.messages WHERE workflow_id = 'a' AND topic = 't'`, nil, &n, &payload)
	require.Equal(t, 2, n)
	require.JSONEq(t, `{"n":1}`, payload)

	d.run("done", "status = 'success'")
	require.Equal(t, SendRow{}, send("done", "t", ""), "a finished run takes no message")
	require.Equal(t, SendRow{}, send("missing", "t", ""))
	d.scan(`SELECT count(*) FROM {{schema}}.messages WHERE workflow_id IN ('done', 'missing')`, nil, &n)
	require.Zero(t, n)

	// A run parked on the topic is due now; one parked on another topic
	// is not.
	d.run("parked", "executor_id = NULL, wake_at = now() + interval '1 hour', wait_topic = 't'")
	d.run("elsewhere", "executor_id = NULL, wake_at = now() + interval '1 hour', wait_topic = 'u'")
	require.True(t, send("parked", "t", "").Found)
	require.Equal(t, "n:parked", d.notified(), "the sweepers are told")
	require.True(t, d.recent(d.row("parked").WakeAt))
	require.True(t, send("elsewhere", "t", "").Inserted)
	require.Equal(t, "m:elsewhere", d.notified())
	require.False(t, d.recent(d.row("elsewhere").WakeAt))

	d.run("queued", "executor_id = NULL, status = 'enqueued', queue_name = 'q', wake_at = now() + interval '1 hour', not_before = now() + interval '1 hour', wait_topic = 't'")
	require.True(t, send("queued", "t", "").Inserted)
	require.Equal(t, "q:q", d.notified(), "a parked queued run's dispatchers are told")
	require.True(t, d.recent(d.row("queued").NotBefore))
}

func TestWaitReceive(t *testing.T) {
	t.Parallel()
	d := newWaitDB(t)
	started := time.Now().Truncate(time.Millisecond)
	receive := func(id string, epoch int64, pos int) []byte {
		t.Helper()
		out, err := d.wq.Receive(d.ctx, d.pool, ReceiveParams{WorkflowID: id, Epoch: epoch, Topic: "t", Pos: pos, Name: "recv", StartedAt: started})
		require.NoError(t, err)
		return out
	}
	unconsumed := func(id string) int {
		t.Helper()
		var n int
		d.scan(`SELECT count(*) FROM {{schema}}.messages WHERE workflow_id = $1 AND consumed_at IS NULL`, []any{id}, &n)
		return n
	}
	d.run("a", "")
	require.Nil(t, receive("a", 2, 0), "no message")
	d.exec(`INSERT INTO {{schema}}.messages (workflow_id, topic, payload) VALUES ('a', 't', '"first"'), ('a', 't', '"second"'), ('a', 'u', '"other"')`)

	require.Nil(t, receive("a", 1, 0), "a stale epoch consumes nothing")
	require.Equal(t, 3, unconsumed("a"))

	out := receive("a", 2, 0)
	require.JSONEq(t, `{"ok": true, "msg": "first"}`, string(out), "the oldest message")
	var status, name, output string
	var at time.Time
	d.scan(`SELECT status, name, output::text, started_at FROM {{schema}}.steps WHERE workflow_id = 'a' AND pos = 0`, nil, &status, &name, &output, &at)
	require.Equal(t, []string{"done", "recv"}, []string{status, name})
	require.JSONEq(t, string(out), output, "recorded as the step's output")
	require.True(t, started.Equal(at))
	require.Equal(t, 2, unconsumed("a"))

	require.Nil(t, receive("a", 2, 0), "a recorded step consumes nothing")
	require.Equal(t, 2, unconsumed("a"))
	require.JSONEq(t, `{"ok": true, "msg": "second"}`, string(receive("a", 2, 1)))
	require.Nil(t, receive("a", 2, 2), "no message left on the topic")
	require.Equal(t, 1, unconsumed("a"))

	d.run("done", "status = 'success'")
	d.exec(`INSERT INTO {{schema}}.messages (workflow_id, topic, payload) VALUES ('done', 't', '1')`)
	require.Nil(t, receive("done", 2, 0), "a finished run consumes nothing")
	require.Equal(t, 1, unconsumed("done"))
}

// TestWaitReceiveWaitsForATryInFlight: a receive retried while its first
// try's transaction is still open (its answer lost, its backend not yet
// gone) waits for that try instead of taking the next message: if the
// first try rolls back, the retry consumes the oldest message, in order;
// if it commits, the retry consumes nothing (the step is recorded).
func TestWaitReceiveWaitsForATryInFlight(t *testing.T) {
	t.Parallel()
	d := newWaitDB(t)
	for _, commit := range []bool{false, true} {
		id := fmt.Sprint("a-", commit)
		d.run(id, "")
		d.exec(`INSERT INTO {{schema}}.messages (workflow_id, topic, payload) VALUES ($1, 't', '"first"'), ($1, 't', '"second"')`, id)
		p := ReceiveParams{WorkflowID: id, Epoch: 2, Topic: "t", Pos: 0, Name: "recv", StartedAt: time.Now()}
		first, err := d.pool.Begin(d.ctx)
		require.NoError(t, err)
		out, err := d.wq.Receive(d.ctx, first, p)
		require.NoError(t, err)
		require.JSONEq(t, `{"ok": true, "msg": "first"}`, string(out))

		ctx, cancel := context.WithTimeout(d.ctx, 10*time.Second) // a wait that never ends fails here
		type result struct {
			out []byte
			err error
		}
		retry := make(chan result, 1)
		go func() {
			out, err := d.wq.Receive(ctx, d.pool, p)
			retry <- result{out, err}
		}()
		require.Eventually(t, func() bool {
			var n int
			require.NoError(t, d.pool.QueryRow(d.ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE wait_event_type = 'Lock' AND position($1 in query) > 0`, pgx.Identifier{d.schema}.Sanitize()).Scan(&n))
			return n > 0
		}, 10*time.Second, 2*time.Millisecond, "the retry waits for the first try")
		if commit {
			require.NoError(t, first.Commit(d.ctx))
		} else {
			require.NoError(t, first.Rollback(d.ctx))
		}
		r := <-retry
		cancel()
		require.NoError(t, r.err)
		var unconsumed []string
		rows, err := d.pool.Query(d.ctx, Render(`SELECT payload::text FROM {{schema}}.messages
			WHERE workflow_id = $1 AND consumed_at IS NULL ORDER BY id`, d.schema), id)
		require.NoError(t, err)
		unconsumed, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		if commit {
			require.Nil(t, r.out, "the first try recorded the step")
		} else {
			require.JSONEq(t, `{"ok": true, "msg": "first"}`, string(r.out), "the oldest message, not the next")
		}
		require.Equal(t, []string{`"second"`}, unconsumed)
	}
}

func TestWaitSetEvent(t *testing.T) {
	t.Parallel()
	d := newWaitDB(t)
	set := func(id string, epoch int64, pos int, value string) bool {
		t.Helper()
		ok, err := d.wq.SetEvent(d.ctx, d.pool, SetEventParams{WorkflowID: id, Epoch: epoch, Pos: pos, Name: "event",
			Key: "k", Value: json.RawMessage(value), StartedAt: time.Now()})
		require.NoError(t, err)
		return ok
	}
	value := func(id string) string {
		t.Helper()
		var v string
		d.scan(`SELECT coalesce((SELECT value::text FROM {{schema}}.events WHERE workflow_id = $1 AND key = 'k'), '')`, []any{id}, &v)
		return v
	}
	d.run("a", "")
	require.False(t, set("a", 1, 0, `1`), "a stale epoch publishes nothing")
	require.Empty(t, value("a"))
	d.mark()
	require.Equal(t, "mark", d.notified())

	require.True(t, set("a", 2, 0, `1`))
	require.Equal(t, "e:a", d.notified(), "waiters are told")
	require.Equal(t, `1`, value("a"))
	var output string
	d.scan(`SELECT output::text FROM {{schema}}.steps WHERE workflow_id = 'a' AND pos = 0`, nil, &output)
	require.Equal(t, "null", output, "the step is recorded")

	require.False(t, set("a", 2, 0, `2`), "a recorded step publishes nothing")
	require.Equal(t, `1`, value("a"))
	require.True(t, set("a", 2, 1, `{"v": 2}`), "a later step replaces the value")
	require.Equal(t, "e:a", d.notified())
	require.JSONEq(t, `{"v": 2}`, value("a"))
}

func TestWaitGetEvent(t *testing.T) {
	t.Parallel()
	d := newWaitDB(t)
	_, err := d.wq.GetEvent(d.ctx, d.pool, GetEventParams{WorkflowID: "missing", Key: "k"})
	require.True(t, errors.Is(err, pgx.ErrNoRows), "no run: %v", err)

	d.run("a", "")
	ev, err := d.wq.GetEvent(d.ctx, d.pool, GetEventParams{WorkflowID: "a", Key: "k"})
	require.NoError(t, err)
	require.Equal(t, GetEventRow{Status: "pending"}, ev)

	d.exec(`INSERT INTO {{schema}}.events (workflow_id, key, value) VALUES ('a', 'k', '{"v": 1}'), ('a', 'other', '2')`)
	d.exec(`UPDATE {{schema}}.workflows SET status = 'success' WHERE id = 'a'`)
	ev, err = d.wq.GetEvent(d.ctx, d.pool, GetEventParams{WorkflowID: "a", Key: "k"})
	require.NoError(t, err)
	require.Equal(t, "success", ev.Status)
	require.True(t, ev.Found)
	require.JSONEq(t, `{"v": 1}`, string(ev.Value))
}

func TestWaitTopic(t *testing.T) {
	t.Parallel()
	d := newWaitDB(t)
	topic := func(id string) *string {
		t.Helper()
		return d.row(id).Topic
	}
	p := WaitTopicParams{ID: "a", Epoch: 2, Topic: "t"}
	d.run("a", "")
	ok, err := d.wq.SetWaitTopic(d.ctx, d.pool, WaitTopicParams{ID: "a", Epoch: 1, Topic: "t"})
	require.NoError(t, err)
	require.False(t, ok, "a stale epoch records nothing")
	require.Nil(t, topic("a"))
	ok, err = d.wq.SetWaitTopic(d.ctx, d.pool, p)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "t", *topic("a"))

	ok, err = d.wq.ClearWaitTopic(d.ctx, d.pool, WaitTopicParams{ID: "a", Epoch: 2, Topic: "u"})
	require.NoError(t, err)
	require.False(t, ok, "another topic's wait is not cleared")
	ok, err = d.wq.ClearWaitTopic(d.ctx, d.pool, WaitTopicParams{ID: "a", Epoch: 1, Topic: "t"})
	require.NoError(t, err)
	require.False(t, ok, "a stale epoch clears nothing")
	require.Equal(t, "t", *topic("a"))
	ok, err = d.wq.ClearWaitTopic(d.ctx, d.pool, p)
	require.NoError(t, err)
	require.True(t, ok)
	require.Nil(t, topic("a"))

	// A parked run's topic belongs to the park: neither statement touches it.
	d.run("parked", "executor_id = NULL, wake_at = now() + interval '1 hour', wait_topic = 'p'")
	ok, err = d.wq.SetWaitTopic(d.ctx, d.pool, WaitTopicParams{ID: "parked", Epoch: 2, Topic: "t"})
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = d.wq.ClearWaitTopic(d.ctx, d.pool, WaitTopicParams{ID: "parked", Epoch: 2, Topic: "p"})
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, "p", *topic("parked"))
}

// TestWaitSelect: a run parked with a Select's waits is woken by a message
// on any of its topics, by its event being set (found through
// workflows_wait_any_idx) and by a waited run's finish, and by nothing
// else; ReceiveAny takes the first listed topic's message and records its
// case.
func TestWaitSelect(t *testing.T) {
	t.Parallel()
	d := newWaitDB(t)
	require.Equal(t, []string{"msg:a", "child:c1", "event:3:é:xk", "done:c1", "done:é:x"},
		WaitKeys([]string{"a"}, []string{"c1"}, [][2]string{{"é:x", "k"}}),
		"an event's key counts the characters of its run ID; the runs' finishes are waited for too")
	require.Equal(t, []string{"event:1:xa", "event:1:xb", "done:x"}, WaitKeys(nil, nil, [][2]string{{"x", "a"}, {"x", "b"}}),
		"one finish entry per run")
	wake := time.Now().Add(time.Hour)
	park := func(id string, keys []string) {
		t.Helper()
		d.run(id, "")
		ok, err := d.wq.Park(d.ctx, d.pool, ParkParams{ID: id, Epoch: 2, WakeAt: wake, Any: keys})
		require.NoError(t, err)
		require.True(t, ok)
	}
	woken := func(id string) bool {
		t.Helper()
		return d.row(id).WakeAt.Before(wake.Add(-time.Minute))
	}
	keys := WaitKeys([]string{"a", "b"}, []string{"kid"}, [][2]string{{"pub", "ready"}})
	for _, id := range []string{"by-msg", "by-other-msg", "by-event", "by-other-event"} {
		park(id, keys)
	}
	var stored []string
	d.scan(`SELECT wait_any FROM {{schema}}.workflows WHERE id = 'by-msg'`, nil, &stored)
	require.Equal(t, keys, stored)

	_, err := d.wq.Send(d.ctx, d.pool, SendParams{WorkflowID: "by-msg", Topic: "b", Payload: json.RawMessage(`1`)})
	require.NoError(t, err)
	require.True(t, woken("by-msg"), "a message on the second topic wakes it")
	_, err = d.wq.Send(d.ctx, d.pool, SendParams{WorkflowID: "by-other-msg", Topic: "kid", Payload: json.RawMessage(`1`)})
	require.NoError(t, err)
	require.False(t, woken("by-other-msg"), "a topic named like another wait does not")

	// Many unrelated runs: the event's wake-up reads only the runs that
	// wait for it.
	d.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, epoch, wake_at)
SELECT 'filler-' || g, 'w', 'pending', 'v', 1, now() + interval '1 hour' FROM generate_series(1, 3000) g`)
	d.exec(`ANALYZE {{schema}}.workflows`)
	d.run("pub", "")
	set := func(key string) {
		t.Helper()
		var pos int
		d.scan(`SELECT count(*) FROM {{schema}}.steps WHERE workflow_id = 'pub'`, nil, &pos)
		ok, err := d.wq.SetEvent(d.ctx, d.pool, SetEventParams{WorkflowID: "pub", Epoch: 2, Pos: pos, Name: "event", Key: key, Value: json.RawMessage(`1`), StartedAt: time.Now()})
		require.NoError(t, err)
		require.True(t, ok)
	}
	set("other")
	require.False(t, woken("by-event"), "another key of the run wakes nothing")
	set("ready")
	require.True(t, woken("by-event"))
	require.True(t, woken("by-other-event"), "every run waiting for the event")
	var others int
	d.scan(`SELECT count(*) FROM {{schema}}.workflows WHERE id LIKE 'filler-%' AND wake_at < now() + interval '30 minutes'`, nil, &others)
	require.Zero(t, others, "and no other run")
	for _, mode := range planModes {
		n, plan := pgtest.ExplainRows(d.ctx, t, d.pool, mode, Render(d.wq.setEvent, d.schema),
			[]any{"pub", int64(2), 99, "event", "ready", json.RawMessage(`2`), time.Now()})
		require.Less(t, n, 50, "%s: the event's write reads its run, not every run:\n%s", mode, plan)
		n, plan = pgtest.ExplainRows(d.ctx, t, d.pool, mode, Render(d.wq.wakeEventWaiters, d.schema), []any{"pub", "ready"})
		require.Less(t, n, 50, "%s: the wake-up reads the runs waiting, not every run:\n%s", mode, plan)
	}

	// A finish wakes the parent waiting for it among other waits.
	park("parent", WaitKeys(nil, []string{"kid"}, nil))
	d.run("kid", "parent_id = 'parent'")
	q := New(d.schema, true)
	_, err = q.WakeParent(d.ctx, d.pool, WakeParentParams{ChildID: "kid", ParentID: "parent"})
	require.NoError(t, err)
	require.True(t, woken("parent"))

	// ReceiveAny prefers the first listed topic; the case is recorded.
	d.run("r", "")
	d.exec(`INSERT INTO {{schema}}.messages (workflow_id, topic, payload) VALUES ('r', 'late', '"l"'), ('r', 'early', '"e"')`)
	take := func(epoch int64, pos int) []byte {
		t.Helper()
		out, err := d.wq.ReceiveAny(d.ctx, d.pool, ReceiveAnyParams{WorkflowID: "r", Epoch: epoch, Topics: []string{"early", "late"},
			Cases: []int{3, 5}, Pos: pos, Name: "durable.select", StartedAt: time.Now()})
		require.NoError(t, err)
		return out
	}
	require.Nil(t, take(1, 0), "a stale epoch takes nothing")
	require.JSONEq(t, `{"case": 3, "value": "e"}`, string(take(2, 0)))
	require.Nil(t, take(2, 0), "a recorded step takes nothing")
	require.JSONEq(t, `{"case": 5, "value": "l"}`, string(take(2, 1)))
	require.Nil(t, take(2, 2))
}

// TestWaitParkCancelRequested: a run a Cancel asked to compensate while
// it ran parks due at once (through its queue when it releases parked
// slots), so that its next execution compensates.
func TestWaitParkCancelRequested(t *testing.T) {
	t.Parallel()
	d := newWaitDB(t)
	wake := time.Now().Add(time.Hour)
	d.run("asked", "cancel_requested = true")
	d.run("plain", "")
	for _, id := range []string{"asked", "plain"} {
		ok, err := d.wq.Park(d.ctx, d.pool, ParkParams{ID: id, Epoch: 2, WakeAt: wake, Topic: "t"})
		require.NoError(t, err)
		require.True(t, ok)
	}
	require.True(t, d.recent(d.row("asked").WakeAt), "due now")
	require.True(t, wake.Sub(*d.row("plain").WakeAt).Abs() < time.Second, "due at its wake-up time")

	d.exec(`INSERT INTO {{schema}}.queues (name, release_parked) VALUES ('rq', true)`)
	d.run("queued", "cancel_requested = true, queue_name = 'rq'")
	ok, err := d.wq.Park(d.ctx, d.pool, ParkParams{ID: "queued", Epoch: 2, WakeAt: wake})
	require.NoError(t, err)
	require.True(t, ok)
	r := d.row("queued")
	require.Equal(t, "enqueued", r.Status)
	require.True(t, d.recent(r.NotBefore), "back in its queue, due now")
}

// nudged reports whether run id is nudged (see Park).
func (d *waitDB) nudged(id string) bool {
	d.t.Helper()
	var b *bool
	d.scan(`SELECT nudged FROM {{schema}}.workflows WHERE id = $1`, []any{id}, &b)
	return b != nil && *b
}

// parkBehind parks run id on a connection of its own while nudge, in a
// transaction that holds the run's row, is not yet committed: the park
// waits for the row, then sees what nudge wrote.
func (d *waitDB) parkBehind(id string, wake time.Time, nudge func(tx pgx.Tx)) {
	d.t.Helper()
	tx, err := d.pool.Begin(d.ctx)
	require.NoError(d.t, err)
	defer func() { _ = tx.Rollback(d.ctx) }()
	nudge(tx)
	conn, err := d.pool.Acquire(d.ctx)
	require.NoError(d.t, err)
	defer conn.Release()
	var pid int
	require.NoError(d.t, conn.QueryRow(d.ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	done := make(chan error, 1)
	go func() {
		ok, err := d.wq.Park(d.ctx, conn, ParkParams{ID: id, Epoch: 2, WakeAt: wake, Topic: "t"})
		if err == nil && !ok {
			err = errors.New("not parked")
		}
		done <- err
	}()
	require.Eventually(d.t, func() bool {
		var waiting bool
		d.scan(`SELECT wait_event_type IS NOT DISTINCT FROM 'Lock' FROM pg_stat_activity WHERE pid = $1`, []any{pid}, &waiting)
		return waiting
	}, 10*time.Second, 5*time.Millisecond, "the park waits for the row")
	require.NoError(d.t, tx.Commit(d.ctx))
	require.NoError(d.t, <-done)
}

// TestWaitParkNudged: a wake-up that comes while a run executes (a
// message sent to it, a child of it finished) nudges it, and its park is
// then due at once, whether the wake-up committed before the park began
// or while the park waited for the row: a process killed with its park
// in flight never looks for the wake-up again, and the park lands anyway.
// The park clears the nudge; a run not nudged parks until its time.
func TestWaitParkNudged(t *testing.T) {
	t.Parallel()
	d := newWaitDB(t)
	q := New(d.schema, true)
	wake := time.Now().Add(time.Hour)
	park := func(id string) {
		t.Helper()
		ok, err := d.wq.Park(d.ctx, d.pool, ParkParams{ID: id, Epoch: 2, WakeAt: wake, Topic: "t"})
		require.NoError(t, err)
		require.True(t, ok)
	}
	send := func(db DBTX, id string) {
		t.Helper()
		_, err := d.wq.Send(d.ctx, db, SendParams{WorkflowID: id, Topic: "other", Payload: json.RawMessage(`1`)})
		require.NoError(t, err)
	}
	finishChild := func(db DBTX, child string) {
		t.Helper()
		written, _, err := q.FinishWorkflows(d.ctx, db, []*FinishOneParams{{ID: child, Epoch: 2, Status: "success", Output: json.RawMessage(`1`)}})
		require.NoError(t, err)
		require.Equal(t, []bool{true}, written)
	}

	d.run("plain", "")
	park("plain")
	require.False(t, d.recent(d.row("plain").WakeAt), "not nudged: parked until its time")

	d.run("sent", "")
	send(d.pool, "sent")
	require.True(t, d.nudged("sent"), "a message to a run that executes nudges it")
	park("sent")
	require.True(t, d.recent(d.row("sent").WakeAt), "due at once")
	require.False(t, d.nudged("sent"), "the park clears the nudge")

	d.run("sent-meanwhile", "")
	d.parkBehind("sent-meanwhile", wake, func(tx pgx.Tx) { send(tx, "sent-meanwhile") })
	require.True(t, d.recent(d.row("sent-meanwhile").WakeAt), "a send the park waited for counts")

	// A child's finish, in a batch (with a run whose parent finishes in
	// the same batch) and alone (WakeParent, after FinishOne).
	d.run("parent", "")
	d.run("child", "parent_id = 'parent'")
	d.run("self-parent", "")
	d.run("self-child", "parent_id = 'self-parent'")
	written, _, err := q.FinishWorkflows(d.ctx, d.pool, []*FinishOneParams{
		{ID: "child", Epoch: 2, Status: "success", Output: json.RawMessage(`1`)},
		{ID: "self-child", Epoch: 2, Status: "success", Output: json.RawMessage(`1`)},
		{ID: "self-parent", Epoch: 2, Status: "success", Output: json.RawMessage(`2`)}})
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, true}, written)
	require.True(t, d.nudged("parent"), "a child's finish nudges its parent that executes")
	require.Equal(t, "success", d.row("self-parent").Status, "a parent the batch finishes is finished, not nudged")
	park("parent")
	require.True(t, d.recent(d.row("parent").WakeAt))

	d.run("parent2", "")
	d.run("child2", "parent_id = 'parent2'")
	d.parkBehind("parent2", wake, func(tx pgx.Tx) { finishChild(tx, "child2") })
	require.True(t, d.recent(d.row("parent2").WakeAt), "a finish the park waited for counts")

	d.run("parent3", "")
	woken, err := q.WakeParent(d.ctx, d.pool, WakeParentParams{ChildID: "c3", ParentID: "parent3"})
	require.NoError(t, err)
	require.False(t, woken, "an executing parent is nudged, not woken")
	require.True(t, d.nudged("parent3"))
	d.run("parent4", "executor_id = NULL, wake_at = now() + interval '1 hour', wait_topic = 'child:c4'")
	woken, err = q.WakeParent(d.ctx, d.pool, WakeParentParams{ChildID: "c4", ParentID: "parent4"})
	require.NoError(t, err)
	require.True(t, woken)
	require.True(t, d.recent(d.row("parent4").WakeAt))
}

// TestWaitFinishWakesWatchers: a batch finish reports the runs finished
// that a waiter watches, and WakeWatchers wakes the runs parked in a
// Select on their finish ("done:" entries); a parked queued run is made
// due through its queue. Among many parked runs, it reads the index of
// the Selects.
func TestWaitFinishWakesWatchers(t *testing.T) {
	t.Parallel()
	d := newWaitDB(t)
	q := New(d.schema, true)
	parkedOn := func(id string, keys ...string) {
		d.run(id, "executor_id = NULL, wake_at = now() + interval '1 hour'")
		d.exec(`UPDATE {{schema}}.workflows SET wait_any = $2 WHERE id = $1`, id, keys)
	}
	d.run("watched", "notify = true")
	d.run("unwatched", "")
	d.run("fenced", "notify = true, epoch = 3")
	var runs []*FinishOneParams
	for _, id := range []string{"watched", "unwatched", "fenced"} {
		runs = append(runs, &FinishOneParams{ID: id, Epoch: 2, Status: "success", Output: json.RawMessage(`1`)})
	}
	written, watched, err := q.FinishWorkflows(d.ctx, d.pool, runs)
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, false}, written)
	require.Equal(t, []string{"watched"}, watched, "the runs finished that a waiter watches")

	parkedOn("w1", "msg:t", "done:watched")
	parkedOn("w2", "done:unwatched")
	d.exec(`INSERT INTO {{schema}}.queues (name, release_parked) VALUES ('rq', true)`)
	d.run("w3", "executor_id = NULL, status = 'enqueued', queue_name = 'rq', not_before = now() + interval '1 hour'")
	d.exec(`UPDATE {{schema}}.workflows SET wait_any = ARRAY['done:watched'] WHERE id = 'w3'`)
	require.NoError(t, q.WakeWatchers(d.ctx, d.pool, watched))
	require.True(t, d.recent(d.row("w1").WakeAt), "a watcher of the run is woken")
	require.False(t, d.recent(d.row("w2").WakeAt), "a watcher of another run is not")
	require.True(t, d.recent(d.row("w3").NotBefore), "a parked queued watcher is due through its queue")

	d.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, epoch, wake_at)
SELECT 'filler-' || g, 'w', 'pending', 'v', 1, now() + interval '1 hour' FROM generate_series(1, 3000) g`)
	d.exec(`ANALYZE {{schema}}.workflows`)
	for _, mode := range planModes {
		n, plan := pgtest.ExplainRows(d.ctx, t, d.pool, mode, q.wakeWatchers, []any{[]string{"done:watched"}})
		require.Less(t, n, 50, "%s: WakeWatchers reads the runs waiting, not every run:\n%s", mode, plan)
	}
}

// TestWaitSetEventMeetsPark: a SetEvent and a Select that parks on the
// event cannot miss each other. The Select looks for the event after it
// parked, once it held the setter's row (LockRun), which waits for a
// SetEvent in flight; and the SetEvent looks for parked Selects in a
// statement of its own, after its first one holds that row, so it sees a
// park that committed meanwhile.
func TestWaitSetEventMeetsPark(t *testing.T) {
	t.Parallel()
	d := newWaitDB(t)
	keys := WaitKeys(nil, nil, [][2]string{{"pub", "k"}})
	d.run("pub", "")

	// LockRun waits for a SetEvent in flight, then the event is there.
	tx, err := d.pool.Begin(d.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(d.ctx) }()
	ok, err := d.wq.SetEvent(d.ctx, tx, SetEventParams{WorkflowID: "pub", Epoch: 2, Pos: 0, Name: "event", Key: "k",
		Value: json.RawMessage(`1`), StartedAt: time.Now()})
	require.NoError(t, err)
	require.True(t, ok)
	conn, err := d.pool.Acquire(d.ctx)
	require.NoError(t, err)
	defer conn.Release()
	var pid int
	require.NoError(t, conn.QueryRow(d.ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	locked := make(chan error, 1)
	go func() { locked <- d.wq.LockRun(d.ctx, conn, "pub") }()
	require.Eventually(t, func() bool {
		var waiting bool
		d.scan(`SELECT wait_event_type IS NOT DISTINCT FROM 'Lock' FROM pg_stat_activity WHERE pid = $1`, []any{pid}, &waiting)
		return waiting
	}, 10*time.Second, 5*time.Millisecond, "LockRun waits for the SetEvent in flight")
	require.NoError(t, tx.Commit(d.ctx))
	require.NoError(t, <-locked)
	ev, err := d.wq.GetEvent(d.ctx, d.pool, GetEventParams{WorkflowID: "pub", Key: "k2"})
	require.NoError(t, err)
	require.False(t, ev.Found)
	ev, err = d.wq.GetEvent(d.ctx, d.pool, GetEventParams{WorkflowID: "pub", Key: "k"})
	require.NoError(t, err)
	require.True(t, ev.Found, "then the event is there")

	// A park that commits between SetEvent's two statements is woken.
	d.run("selector", "")
	tx, err = d.pool.Begin(d.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(d.ctx) }()
	_, err = tx.Exec(d.ctx, d.wq.setEvent, "pub", int64(2), 1, "event", "k", json.RawMessage(`2`), time.Now())
	require.NoError(t, err)
	parked, err := d.wq.Park(d.ctx, d.pool, ParkParams{ID: "selector", Epoch: 2, WakeAt: time.Now().Add(time.Hour), Any: keys})
	require.NoError(t, err)
	require.True(t, parked)
	_, err = tx.Exec(d.ctx, d.wq.wakeEventWaiters, "pub", "k")
	require.NoError(t, err)
	require.NoError(t, tx.Commit(d.ctx))
	require.True(t, d.recent(d.row("selector").WakeAt), "the SetEvent's wake-up saw the park")
}

// TestWaitSelectMarked: a Select waiting in memory writes its waits on
// its row (MarkWaits); a SetEvent or WakeWatchers then nudges it, without
// waking it (it executes) or telling the sweepers, and a park of it is due
// at once. ClearWaits removes the mark; a stale epoch marks nothing.
func TestWaitSelectMarked(t *testing.T) {
	t.Parallel()
	d := newWaitDB(t)
	q := New(d.schema, true)
	keys := WaitKeys(nil, []string{"other"}, [][2]string{{"pub", "k"}})
	waits := func(id string) []string {
		var w []string
		d.scan(`SELECT wait_any FROM {{schema}}.workflows WHERE id = $1`, []any{id}, &w)
		return w
	}
	d.run("pub", "")
	d.run("sel", "")
	ok, err := d.wq.MarkWaits(d.ctx, d.pool, "sel", 1, keys)
	require.NoError(t, err)
	require.False(t, ok, "a stale epoch marks nothing")
	ok, err = d.wq.MarkWaits(d.ctx, d.pool, "sel", 2, keys)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, keys, waits("sel"))
	written, err := d.wq.SetEvent(d.ctx, d.pool, SetEventParams{WorkflowID: "pub", Epoch: 2, Pos: 0, Name: "event", Key: "k",
		Value: json.RawMessage(`1`), StartedAt: time.Now()})
	require.NoError(t, err)
	require.True(t, written)
	require.True(t, d.nudged("sel"), "the event nudges the executing Select")
	r := d.row("sel")
	require.Nil(t, r.WakeAt, "an executing run gets no wake-up time")
	require.Equal(t, "x", *r.Executor)
	ok, err = d.wq.Park(d.ctx, d.pool, ParkParams{ID: "sel", Epoch: 2, WakeAt: time.Now().Add(time.Hour), Any: keys})
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, d.recent(d.row("sel").WakeAt), "its park is due at once")

	d.run("sel2", "")
	_, err = d.wq.MarkWaits(d.ctx, d.pool, "sel2", 2, keys)
	require.NoError(t, err)
	require.NoError(t, q.WakeWatchers(d.ctx, d.pool, []string{"other"}))
	require.True(t, d.nudged("sel2"), "a watched finish nudges the executing Select")
	require.Nil(t, d.row("sel2").WakeAt)
	require.NoError(t, d.wq.ClearWaits(d.ctx, d.pool, "sel2", 2))
	require.Nil(t, waits("sel2"))
}
