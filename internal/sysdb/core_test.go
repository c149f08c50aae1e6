package sysdb

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/pgtest"
)

// The tests of the core statements (core_runs.go, core_steps.go): each
// calls a method and reads back what it wrote, and checks its guards (the
// fence of the run's epoch, a run not pending).

type coreDB struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	schema string
	q      *Queries
}

func newCore(t *testing.T) *coreDB {
	t.Helper()
	t.Parallel()
	pool, schema := migrated(t)
	return coreOn(t, pool, schema)
}

func coreOn(t *testing.T, pool *pgxpool.Pool, schema string) *coreDB {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return &coreDB{t: t, ctx: ctx, pool: pool, schema: schema, q: New(schema, true)}
}

// exec runs sql, its {{schema}} rendered.
func (c *coreDB) exec(sql string, args ...any) {
	c.t.Helper()
	_, err := c.pool.Exec(c.ctx, Render(sql, c.schema), args...)
	require.NoError(c.t, err, sql)
}

// text returns the one value sql reads, as text ("<nil>" for NULL).
func (c *coreDB) text(sql string, args ...any) string {
	c.t.Helper()
	var s *string
	require.NoError(c.t, c.pool.QueryRow(c.ctx, Render(sql, c.schema), args...).Scan(&s), sql)
	if s == nil {
		return "<nil>"
	}
	return *s
}

// run inserts run id, owned by "x" at epoch, with status.
func (c *coreDB) run(id string, epoch int64, status string) {
	c.t.Helper()
	c.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch) VALUES ($1, 'w', $2, 'v', 'x', $3)`,
		id, status, epoch)
}

// runState is status, epoch, output and error of run id.
func (c *coreDB) runState(id string) string {
	c.t.Helper()
	return c.text(`SELECT status || ' ' || epoch || ' ' || coalesce(output::text, '-') || ' ' || coalesce(error::text, '-')
		FROM {{schema}}.workflows WHERE id = $1`, id)
}

// steps lists the steps of run id: "pos name status output error attempts".
func (c *coreDB) steps(id string) []string {
	c.t.Helper()
	rows, err := c.pool.Query(c.ctx, Render(`SELECT pos || ' ' || name || ' ' || status || ' ' || coalesce(output::text, '-') || ' '
		|| coalesce(error::text, '-') || ' ' || attempts FROM {{schema}}.steps WHERE workflow_id = $1 ORDER BY pos`, c.schema), id)
	require.NoError(c.t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(c.t, err)
	return out
}

// listen returns a connection listening on the schema's channel.
func (c *coreDB) listen() *pgx.Conn {
	c.t.Helper()
	conn, err := pgx.Connect(c.ctx, pgtest.DirectURL(c.t))
	require.NoError(c.t, err)
	c.t.Cleanup(func() { conn.Close(context.Background()) })
	_, err = conn.Exec(c.ctx, c.q.ListenSQL())
	require.NoError(c.t, err)
	return conn
}

// next returns the next notification conn receives. A statement that
// should send none is followed by a marker sent by hand: the marker must
// then come first.
func (c *coreDB) next(conn *pgx.Conn) string {
	c.t.Helper()
	n, err := conn.WaitForNotification(c.ctx)
	require.NoError(c.t, err)
	return n.Payload
}

func (c *coreDB) marker(s string) {
	c.t.Helper()
	_, err := c.pool.Exec(c.ctx, "SELECT pg_notify($1, $2)", c.q.Channel, s)
	require.NoError(c.t, err)
}

func step(id string, pos int, name string, epoch int64) *InsertStepParams {
	return &InsertStepParams{WorkflowID: id, Pos: pos, Name: name, Status: "done", Output: json.RawMessage(`1`),
		Attempts: 1, StartedAt: time.Now(), Epoch: epoch}
}

func TestInsertWorkflow(t *testing.T) {
	c := newCore(t)
	pgtest.SkipIfPooled(t, "LISTEN")
	conn := c.listen()
	deadline := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	p := InsertWorkflowParams{ID: "r1", Name: "w", AppVersion: "v", Input: json.RawMessage(`{"a":1}`), ParentID: "p",
		NotifyPayload: "n:r1", Deadline: &deadline, TraceContext: "tc"}
	tx, err := c.pool.Begin(c.ctx)
	require.NoError(t, err)
	inserted, err := c.q.InsertWorkflow(c.ctx, tx, p)
	require.NoError(t, err)
	require.True(t, inserted)
	c.marker("before-commit") // the insert's notification waits for its commit
	require.NoError(t, tx.Commit(c.ctx))
	require.Equal(t, "before-commit", c.next(conn))
	require.Equal(t, "n:r1", c.next(conn))
	require.Equal(t, `w pending v <nil> 0 {"a":1} p 2030-01-02 03:04:05+00 tc`, c.text(`SELECT concat_ws(' ', name, status, app_version,
		coalesce(executor_id, '<nil>'), epoch, input::text, parent_id, deadline AT TIME ZONE 'UTC' || '+00', trace_context)
		FROM {{schema}}.workflows WHERE id = 'r1'`))

	// An ID taken: nothing written, nothing sent.
	p.Input = json.RawMessage(`2`)
	inserted, err = c.q.InsertWorkflow(c.ctx, c.pool, p)
	require.NoError(t, err)
	require.False(t, inserted)
	// Owned, without a payload, parent or trace: NULLs, no notification.
	inserted, err = c.q.InsertWorkflow(c.ctx, c.pool, InsertWorkflowParams{ID: "r2", Name: "w", AppVersion: "v", ExecutorID: "x",
		Epoch: 3, Input: json.RawMessage(`1`)})
	require.NoError(t, err)
	require.True(t, inserted)
	c.marker("m")
	require.Equal(t, "m", c.next(conn))
	require.Equal(t, `{"a":1} x 3 <nil> <nil> <nil>`, c.text(`SELECT concat_ws(' ', (SELECT input::text FROM {{schema}}.workflows WHERE id = 'r1'),
		executor_id, epoch, coalesce(parent_id, '<nil>'), coalesce(deadline::text, '<nil>'), coalesce(trace_context, '<nil>'))
		FROM {{schema}}.workflows WHERE id = 'r2'`))
}

func TestInsertOwned(t *testing.T) {
	c := newCore(t)
	run := &OwnedRun{ID: "r1", Name: "w", Input: json.RawMessage(`[1]`)}
	p := InsertOwnedParams{AppVersion: "v", ExecutorID: "me", Run: run}
	inserted, err := c.q.InsertOwned(c.ctx, c.pool, p)
	require.NoError(t, err)
	require.True(t, inserted)
	require.Equal(t, "pending v me 1 [1] <nil> <nil> <nil>", c.text(`SELECT concat_ws(' ', status, app_version, executor_id, epoch,
		input::text, coalesce(parent_id, '<nil>'), coalesce(deadline::text, '<nil>'), coalesce(trace_context, '<nil>'))
		FROM {{schema}}.workflows WHERE id = 'r1'`))
	inserted, err = c.q.InsertOwned(c.ctx, c.pool, InsertOwnedParams{AppVersion: "v2", ExecutorID: "other", Run: run})
	require.NoError(t, err)
	require.False(t, inserted, "an ID taken")
	require.Equal(t, "v me", c.text(`SELECT app_version || ' ' || executor_id FROM {{schema}}.workflows WHERE id = 'r1'`))

	deadline := time.Now().Add(time.Hour)
	_, err = c.q.InsertOwned(c.ctx, c.pool, InsertOwnedParams{AppVersion: "v", ExecutorID: "me",
		Run: &OwnedRun{ID: "r2", Name: "w", Input: json.RawMessage(`1`), ParentID: "r1", Deadline: &deadline, TraceContext: "tc"}})
	require.NoError(t, err)
	require.Equal(t, "r1 t tc", c.text(`SELECT concat_ws(' ', parent_id, deadline IS NOT NULL, trace_context) FROM {{schema}}.workflows WHERE id = 'r2'`))
}

func TestInsertWorkflows(t *testing.T) {
	c := newCore(t)
	c.run("taken", 1, "pending")
	deadline := time.Now().Add(time.Hour)
	runs := []*OwnedRun{
		{ID: "a", Name: "w", Input: json.RawMessage(`1`)},
		{ID: "taken", Name: "w", Input: json.RawMessage(`2`)},
		{ID: "b", Name: "w2", Input: json.RawMessage(`3`), ParentID: "a", Deadline: &deadline},
		{ID: "a", Name: "w", Input: json.RawMessage(`4`)}, // the first start of an ID in a batch wins
	}
	inserted, err := c.q.InsertWorkflows(c.ctx, c.pool, InsertWorkflowsParams{AppVersion: "v", ExecutorID: "me", Runs: runs})
	require.NoError(t, err)
	require.Equal(t, []bool{true, false, true, false}, inserted)
	require.Equal(t, "a:1:<nil>:f:<nil> b:3:a:t:<nil> taken:<nil>:<nil>:f:<nil>", c.text(`SELECT string_agg(concat_ws(':', id,
		coalesce(input::text, '<nil>'), coalesce(parent_id, '<nil>'), CASE WHEN deadline IS NULL THEN 'f' ELSE 't' END, coalesce(trace_context, '<nil>')),
		' ' ORDER BY id) FROM {{schema}}.workflows`))
	require.Equal(t, "me 1 me 1", c.text(`SELECT string_agg(executor_id || ' ' || epoch, ' ' ORDER BY id) FROM {{schema}}.workflows WHERE id IN ('a', 'b')`))

	// With trace contexts: each run's own, NULL for the one without.
	inserted, err = c.q.InsertWorkflows(c.ctx, c.pool, InsertWorkflowsParams{AppVersion: "v", ExecutorID: "me", Runs: []*OwnedRun{
		{ID: "c", Name: "w", Input: json.RawMessage(`1`), TraceContext: "tc"}, {ID: "d", Name: "w", Input: json.RawMessage(`1`)}}})
	require.NoError(t, err)
	require.Equal(t, []bool{true, true}, inserted)
	require.Equal(t, "c:tc d:<nil>", c.text(`SELECT string_agg(id || ':' || coalesce(trace_context, '<nil>'), ' ' ORDER BY id)
		FROM {{schema}}.workflows WHERE id IN ('c', 'd')`))

	// A failed statement reports nothing written.
	inserted, err = c.q.InsertWorkflows(c.ctx, c.pool, InsertWorkflowsParams{AppVersion: "v", ExecutorID: "me", Runs: []*OwnedRun{
		{ID: "e", Name: "w", Input: json.RawMessage(`1`)}, {ID: "f", Name: "w", Input: json.RawMessage(`not json`)}}})
	require.Error(t, err)
	require.Nil(t, inserted)
}

func TestWorkflowByID(t *testing.T) {
	c := newCore(t)
	c.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, recovery_attempts, notify, parent_id,
		input, output, error, queue_name, deadline) VALUES ('r1', 'w', 'success', 'v', 'x', 4, 2, true, 'p', '1', '"out"', '{"e":1}', 'q',
		'2030-01-01 00:00:00+00')`)
	row, found, err := c.q.WorkflowByID(c.ctx, c.pool, "r1")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "r1 w success v x 4 2 true p 1 \"out\" {\"e\":1} q 2030", fmt.Sprintf("%s %s %s %s %s %d %d %v %s %s %s %s %s %d",
		row.ID, row.Name, row.Status, row.AppVersion, *row.ExecutorID, row.Epoch, row.RecoveryAttempts, row.Notify, *row.ParentID,
		row.Input, row.Output, row.Error, *row.QueueName, row.Deadline.Year()))
	require.False(t, row.CreatedAt.IsZero())
	require.False(t, row.UpdatedAt.IsZero())

	_, found, err = c.q.WorkflowByID(c.ctx, c.pool, "none")
	require.NoError(t, err)
	require.False(t, found)
}

func TestWatchWorkflow(t *testing.T) {
	c := newCore(t)
	c.run("pending", 1, "pending")
	c.run("queued", 0, "enqueued")
	c.run("done", 1, "success")
	for id, want := range map[string]bool{"pending": true, "queued": true, "done": false, "none": false} {
		watched, err := c.q.WatchWorkflow(c.ctx, c.pool, id)
		require.NoError(t, err)
		require.Equal(t, want, watched, id)
	}
	require.Equal(t, "done:false pending:true queued:true", c.text(`SELECT string_agg(id || ':' || notify, ' ' ORDER BY id) FROM {{schema}}.workflows`))

	// A run not claimed yet wakes those that may claim it, in case a claim
	// skipped it while the watch held its lock; a claimed or parked one
	// wakes nobody.
	conn := c.listen()
	c.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, queue_name) VALUES ('in-queue', 'w', 'enqueued', 'v', 'jobs')`)
	c.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version) VALUES ('unowned', 'w', 'pending', 'v')`)
	c.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, wake_at) VALUES ('parked', 'w', 'pending', 'v', now() + interval '1 hour')`)
	for _, id := range []string{"pending", "parked", "in-queue", "unowned"} {
		watched, err := c.q.WatchWorkflow(c.ctx, c.pool, id)
		require.NoError(t, err)
		require.True(t, watched, id)
	}
	c.marker("end")
	require.Equal(t, []string{"q:jobs", "n:unowned", "end"}, []string{c.next(conn), c.next(conn), c.next(conn)})
}

func TestFinishOne(t *testing.T) {
	c := newCore(t)
	c.run("r1", 2, "pending")
	p := FinishOneParams{ID: "r1", Epoch: 1, Status: "success", Output: json.RawMessage(`"ok"`)}
	_, finished, err := c.q.FinishOne(c.ctx, c.pool, p)
	require.NoError(t, err)
	require.False(t, finished, "a stale epoch is fenced")
	require.Equal(t, "pending 2 - -", c.runState("r1"))

	p.Epoch = 2
	row, finished, err := c.q.FinishOne(c.ctx, c.pool, p)
	require.NoError(t, err)
	require.True(t, finished)
	require.Equal(t, FinishOneRow{}, row)
	require.Equal(t, `success 2 "ok" -`, c.runState("r1"))

	p.Status, p.Output, p.Error = "error", nil, json.RawMessage(`{"m":"x"}`)
	_, finished, err = c.q.FinishOne(c.ctx, c.pool, p)
	require.NoError(t, err)
	require.False(t, finished, "a finished run is not finished again")
	require.Equal(t, `success 2 "ok" -`, c.runState("r1"))

	// The row says whether a waiter asked for a notification, and the parent.
	c.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, parent_id) VALUES ('r2', 'w', 'pending', 'v', 'x', 1, 'p')`)
	_, err = c.q.WatchWorkflow(c.ctx, c.pool, "r2")
	require.NoError(t, err)
	row, finished, err = c.q.FinishOne(c.ctx, c.pool, FinishOneParams{ID: "r2", Epoch: 1, Status: "error", Error: json.RawMessage(`{"m":"x"}`)})
	require.NoError(t, err)
	require.True(t, finished)
	require.Equal(t, FinishOneRow{Notify: true, ParentID: "p", Watched: true}, row)
	require.Equal(t, `error 1 - {"m":"x"}`, c.runState("r2"))

	// With notifications off, nobody is to be notified; the run is still
	// watched (a parked Select may wait for it: WakeWatchers).
	c.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, notify) VALUES ('r3', 'w', 'pending', 'v', 'x', 1, true)`)
	row, finished, err = New(c.schema, false).FinishOne(c.ctx, c.pool, FinishOneParams{ID: "r3", Epoch: 1, Status: "success", Output: json.RawMessage(`1`)})
	require.NoError(t, err)
	require.True(t, finished)
	require.False(t, row.Notify)
	require.True(t, row.Watched)
}

func TestFinishOneSteps(t *testing.T) {
	c := newCore(t)
	c.run("r1", 1, "pending")
	p := FinishOneStepsParams{FinishOneParams: FinishOneParams{ID: "r1", Epoch: 2, Status: "success", Output: json.RawMessage(`1`)},
		Steps: []*InsertStepParams{step("ignored", 0, "a", 99), step("ignored", 1, "b", 99)}}
	_, finished, err := c.q.FinishOneSteps(c.ctx, c.pool, p)
	require.NoError(t, err)
	require.False(t, finished, "a stale epoch is fenced")
	require.Equal(t, "pending 1 - -", c.runState("r1"))
	require.Empty(t, c.steps("r1"), "the steps of a fenced finish are not written")

	p.Epoch = 1
	p.Steps[1].Status, p.Steps[1].Output, p.Steps[1].Error, p.Steps[1].Attempts = "error", nil, json.RawMessage(`{"m":1}`), 3
	_, finished, err = c.q.FinishOneSteps(c.ctx, c.pool, p)
	require.NoError(t, err)
	require.True(t, finished)
	require.Equal(t, "success 1 1 -", c.runState("r1"))
	require.Equal(t, []string{"0 a done 1 - 1", `1 b error - {"m":1} 3`}, c.steps("r1"))
	require.Equal(t, "t", c.text(`SELECT CASE WHEN bool_and(s.xmin = w.xmin) THEN 't' ELSE 'f' END FROM {{schema}}.steps s
		JOIN {{schema}}.workflows w ON w.id = s.workflow_id`), "one transaction")
}

func TestFinishWorkflows(t *testing.T) {
	c := newCore(t)
	pgtest.SkipIfPooled(t, "LISTEN")
	conn := c.listen()
	c.run("ok", 1, "pending")
	c.run("fenced", 2, "pending")
	c.run("done", 1, "success")
	c.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, epoch, parent_id, notify) VALUES ('child', 'w', 'pending', 'v', 1, 'parent', true)`)
	c.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, epoch, wake_at, wait_topic)
		VALUES ('parent', 'w', 'pending', 'v', 1, now() + interval '1 hour', 'child:child')`)
	runs := []*FinishOneParams{
		{ID: "ok", Epoch: 1, Status: "success", Output: json.RawMessage(`1`)},
		{ID: "fenced", Epoch: 1, Status: "success", Output: json.RawMessage(`2`)},
		{ID: "done", Epoch: 1, Status: "error", Error: json.RawMessage(`3`)},
		{ID: "child", Epoch: 1, Status: "error", Error: json.RawMessage(`{"m":4}`)},
	}
	finished, _, err := c.q.FinishWorkflows(c.ctx, c.pool, runs)
	require.NoError(t, err)
	require.Equal(t, []bool{true, false, false, true}, finished)
	require.Equal(t, "success 1 1 -", c.runState("ok"))
	require.Equal(t, "pending 2 - -", c.runState("fenced"))
	require.Equal(t, "success 1 - -", c.runState("done"))
	require.Equal(t, `error 1 - {"m":4}`, c.runState("child"))
	require.Equal(t, "true", c.text(`SELECT (wake_at <= now())::text FROM {{schema}}.workflows WHERE id = 'parent'`), "the parked parent is due")
	got := []string{c.next(conn), c.next(conn)}
	require.ElementsMatch(t, []string{"d:child", "n:parent"}, got, "the watched run's finish and the parent's wake-up")
	c.marker("m")
	require.Equal(t, "m", c.next(conn), "no other notification")

	// A failed statement reports nothing finished.
	c.run("r", 1, "pending")
	finished, _, err = c.q.FinishWorkflows(c.ctx, c.pool, []*FinishOneParams{{ID: "r", Epoch: 1, Status: "bogus"}, {ID: "ok", Epoch: 1, Status: "success"}})
	require.Error(t, err)
	require.Nil(t, finished)
}

func TestFinishStepsMany(t *testing.T) {
	c := newCore(t)
	c.run("a", 1, "pending")
	c.run("b", 2, "pending")
	c.run("c", 1, "pending")
	runs := []*FinishOneParams{
		{ID: "a", Epoch: 1, Status: "success", Output: json.RawMessage(`1`)},
		{ID: "b", Epoch: 1, Status: "success", Output: json.RawMessage(`2`)},
		{ID: "c", Epoch: 1, Status: "success", Output: json.RawMessage(`3`)},
	}
	steps := []*InsertStepParams{step("a", 0, "s0", 1), step("a", 1, "s1", 1), step("b", 0, "s0", 1)}
	finished, _, err := c.q.FinishStepsMany(c.ctx, c.pool, FinishStepsManyParams{Runs: runs, Steps: steps})
	require.NoError(t, err)
	require.Equal(t, []bool{true, false, true}, finished)
	require.Equal(t, []string{"0 s0 done 1 - 1", "1 s1 done 1 - 1"}, c.steps("a"))
	require.Empty(t, c.steps("b"), "the steps of a fenced run are not written")
	require.Empty(t, c.steps("c"))
	require.Equal(t, "pending 2 - -", c.runState("b"))
	require.Equal(t, "success 1 3 -", c.runState("c"))
}

func TestNotifyAndNotifyDone(t *testing.T) {
	c := newCore(t)
	pgtest.SkipIfPooled(t, "LISTEN")
	conn := c.listen()
	require.NoError(t, c.q.Notify(c.ctx, c.pool, "q:x"))
	require.Equal(t, "q:x", c.next(conn))
	require.NoError(t, c.q.NotifyDone(c.ctx, c.pool, "r1"))
	require.Equal(t, "d:r1", c.next(conn))

	// With notifications off (Config.PollOnly) neither sends anything.
	off := New(c.schema, false)
	require.NoError(t, off.Notify(c.ctx, c.pool, "q:x"))
	require.NoError(t, off.NotifyDone(c.ctx, c.pool, "r1"))
	c.marker("m")
	require.Equal(t, "m", c.next(conn))
}

func TestWakeParent(t *testing.T) {
	c := newCore(t)
	pgtest.SkipIfPooled(t, "LISTEN")
	conn := c.listen()
	park := func(id, topic, owner string) {
		c.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, wake_at, wait_topic)
			VALUES ($1, 'w', 'pending', 'v', $3, 1, now() + interval '1 hour', $2)`, id, topic, nilIfEmpty(owner))
	}
	park("parked", "child:c", "")
	park("other-child", "child:d", "")
	park("owned", "child:c", "x")
	for _, tc := range []struct {
		parent string
		woken  bool
	}{{"parked", true}, {"other-child", false}, {"owned", false}, {"none", false}} {
		woken, err := c.q.WakeParent(c.ctx, c.pool, WakeParentParams{ChildID: "c", ParentID: tc.parent})
		require.NoError(t, err)
		require.Equal(t, tc.woken, woken, tc.parent)
	}
	require.Equal(t, "other-child:false owned:false parked:true", c.text(`SELECT string_agg(id || ':' || (wake_at <= now()), ' ' ORDER BY id)
		FROM {{schema}}.workflows`))
	require.Equal(t, "n:parked", c.next(conn))
	c.marker("m")
	require.Equal(t, "m", c.next(conn))
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func TestInsertStep(t *testing.T) {
	c := newCore(t)
	c.run("r1", 2, "pending")
	c.run("done", 1, "success")
	for _, tc := range []struct {
		name    string
		p       *InsertStepParams
		written bool
	}{
		{"stale epoch", step("r1", 0, "a", 1), false},
		{"written", step("r1", 0, "a", 2), true},
		{"already recorded", step("r1", 0, "again", 2), false},
		{"run finished", step("done", 0, "a", 1), false},
		{"no run", step("none", 0, "a", 1), false},
	} {
		written, err := c.q.InsertStep(c.ctx, c.pool, *tc.p)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.written, written, tc.name)
	}
	require.Equal(t, []string{"0 a done 1 - 1"}, c.steps("r1"))
	require.Empty(t, c.steps("done"))

	e := step("r1", 1, "b", 2)
	e.Status, e.Output, e.Error, e.Attempts = "error", nil, json.RawMessage(`{"m":1}`), 3
	written, err := c.q.InsertStep(c.ctx, c.pool, *e)
	require.NoError(t, err)
	require.True(t, written)
	require.Equal(t, []string{"0 a done 1 - 1", `1 b error - {"m":1} 3`}, c.steps("r1"))
}

func TestInsertSteps(t *testing.T) {
	c := newCore(t)
	c.run("a", 1, "pending")
	c.run("b", 2, "pending")
	c.run("done", 1, "error")
	steps := []*InsertStepParams{step("b", 0, "s", 2), step("a", 0, "s", 1), step("b", 1, "s", 1), step("done", 0, "s", 1), step("a", 1, "t", 1)}
	written, err := c.q.InsertSteps(c.ctx, c.pool, steps)
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, false, false, true}, written, "stale epochs and finished runs are fenced")
	require.Equal(t, []string{"0 s done 1 - 1", "1 t done 1 - 1"}, c.steps("a"))
	require.Equal(t, []string{"0 s done 1 - 1"}, c.steps("b"))
	require.Empty(t, c.steps("done"))

	// A step already recorded fails the statement as a whole.
	written, err = c.q.InsertSteps(c.ctx, c.pool, []*InsertStepParams{step("a", 2, "u", 1), step("a", 0, "s", 1)})
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr) && pgErr.Code == "23505", "%v", err)
	require.Nil(t, written)
	require.Len(t, c.steps("a"), 2)
}

func TestQueueInsertStepTx(t *testing.T) {
	c := newCore(t)
	c.run("r1", 2, "pending")
	try := func(p *InsertStepParams) error {
		tx, err := c.pool.Begin(c.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(c.ctx) }()
		b := &pgx.Batch{}
		c.q.QueueInsertStepTx(b, *p)
		if err := tx.SendBatch(c.ctx, b).Close(); err != nil {
			return err
		}
		return tx.Commit(c.ctx)
	}
	refused := func(err error) bool {
		var pgErr *pgconn.PgError
		return errors.As(err, &pgErr) && pgErr.Code == CheckpointRefused
	}
	require.True(t, refused(try(step("r1", 0, "a", 1))), "a stale epoch is refused")
	require.NoError(t, try(step("r1", 0, "a", 2)))
	require.True(t, refused(try(step("r1", 0, "b", 2))), "a step already recorded is refused")
	require.Equal(t, []string{"0 a done 1 - 1"}, c.steps("r1"))
	require.Equal(t, "true", c.text(`SELECT (finished_at IS NOT NULL)::text FROM {{schema}}.steps WHERE workflow_id = 'r1'`))
}

func TestCompleteIntent(t *testing.T) {
	c := newCore(t)
	c.run("r1", 2, "pending")
	intent := step("r1", 0, "i", 2)
	intent.Status, intent.Output, intent.Attempts = "intent", nil, 0
	_, err := c.q.InsertStep(c.ctx, c.pool, *intent)
	require.NoError(t, err)
	_, err = c.q.InsertStep(c.ctx, c.pool, *step("r1", 1, "plain", 2))
	require.NoError(t, err)
	p := CompleteIntentParams{WorkflowID: "r1", Pos: 0, Status: "done", Output: json.RawMessage(`"x"`), Attempts: 2, Epoch: 1}
	completed, err := c.q.CompleteIntent(c.ctx, c.pool, p)
	require.NoError(t, err)
	require.False(t, completed, "a stale epoch is fenced")
	p.Epoch = 2
	completed, err = c.q.CompleteIntent(c.ctx, c.pool, p)
	require.NoError(t, err)
	require.True(t, completed)
	completed, err = c.q.CompleteIntent(c.ctx, c.pool, p)
	require.NoError(t, err)
	require.False(t, completed, "completed already")
	p.Pos = 1
	completed, err = c.q.CompleteIntent(c.ctx, c.pool, p)
	require.NoError(t, err)
	require.False(t, completed, "not an intent")
	require.Equal(t, []string{`0 i done "x" - 2`, "1 plain done 1 - 1"}, c.steps("r1"))
}

func TestLoadStepsMany(t *testing.T) {
	c := newCore(t)
	noise := make([]byte, 1500)
	_, _ = rand.Read(noise)
	big := json.RawMessage(fmt.Sprintf(`"%x"`, noise)) // 3000 bytes that do not compress
	for _, id := range []string{"a", "b", "c", "d"} {
		c.run(id, 1, "pending")
	}
	for _, s := range []*InsertStepParams{step("a", 0, "a0", 1), step("a", 1, "a1", 1), step("c", 0, "c0", 1), step("d", 0, "d0", 1)} {
		_, err := c.q.InsertStep(c.ctx, c.pool, *s)
		require.NoError(t, err)
	}
	d := step("d", 1, "d1", 1)
	d.Output = big
	_, err := c.q.InsertStep(c.ctx, c.pool, *d)
	require.NoError(t, err)
	window := func(ids []string, budget, window, from int) []string {
		var got []string
		err := c.q.LoadStepsMany(c.ctx, c.pool, LoadStepsManyParams{WorkflowIDs: ids, Budget: budget, Window: window, From: from}, func(r LoadStepsManyRow) {
			more := ""
			if r.More {
				more = fmt.Sprintf(" more of %d", r.Recorded)
			}
			if !r.HasStep {
				got = append(got, fmt.Sprintf("%s:-%s", ids[r.Run], more))
				return
			}
			got = append(got, fmt.Sprintf("%s:%d %s %s %s %d%s", ids[r.Run], r.Pos, r.Name, r.Status, r.Output, r.Attempts, more))
		})
		require.NoError(t, err)
		return got
	}
	load := func(ids []string, budget int) []string { return window(ids, budget, 100, 0) }
	all := []string{"a:0 a0 done 1 1", "a:1 a1 done 1 1", "b:-", "c:0 c0 done 1 1"}
	require.Equal(t, all, load([]string{"a", "b", "c"}, 100))
	// The runs are taken in order while their steps fit the budget.
	require.Equal(t, all, load([]string{"a", "b", "c", "d"}, 7), "d does not fit (2 bytes a step)")
	require.Equal(t, append(all, "d:0 d0 done 1 1 more of 2"), load([]string{"a", "b", "c", "d"}, 100), "d's window, its first step, fits")
	require.Equal(t, []string{"d:0 d0 done 1 1", "d:1 d1 done " + string(big) + " 1"}, load([]string{"d", "a"}, 10000)[:2],
		"a run's window holds its steps that fit the budget")
	require.Equal(t, []string{"b:-"}, load([]string{"b", "a"}, 1), "a's first step is 2 bytes")
	require.Equal(t, []string{"b:-", "a:0 a0 done 1 1 more of 2"}, load([]string{"b", "a"}, 2), "a's two steps are 4 bytes")
	require.Equal(t, []string{"b:-", "a:0 a0 done 1 1", "a:1 a1 done 1 1"}, load([]string{"b", "a"}, 4))

	// A window: at most so many steps of a run, from a position on.
	require.Equal(t, []string{"a:0 a0 done 1 1 more of 2", "b:-", "c:0 c0 done 1 1"}, window([]string{"a", "b", "c"}, 100, 1, 0))
	require.Equal(t, []string{"a:1 a1 done 1 1", "b:-", "c:-"}, window([]string{"a", "b", "c"}, 100, 1, 1))
	require.Equal(t, []string{"a:-"}, window([]string{"a"}, 100, 1, 2))
	// A window's bytes: d's second step does not fit beside its first.
	require.Equal(t, []string{"d:0 d0 done 1 1 more of 2"}, window([]string{"d"}, 100, 5, 0))
	require.Equal(t, []string{"d:1 d1 done " + string(big) + " 1"}, window([]string{"d"}, 100, 5, 1), "a first step whatever its size")
	require.Equal(t, []string{"d:0 d0 done 1 1 more of 2", "a:0 a0 done 1 1", "a:1 a1 done 1 1"}, load([]string{"d", "a"}, 100),
		"a run's window within the budget lets the next runs in")
	require.Error(t, c.q.LoadStepsMany(c.ctx, c.pool, LoadStepsManyParams{WorkflowIDs: []string{"a"}, Budget: 100}, func(LoadStepsManyRow) {}),
		"a window of no steps")
}

func TestListenSQL(t *testing.T) {
	c := newCore(t)
	pgtest.SkipIfPooled(t, "LISTEN")
	conn := c.listen() // runs ListenSQL
	c.marker("m")
	require.Equal(t, "m", c.next(conn))
}

// TestLoadStepsManyReadsOneWindow: a read of a long run's window reads
// that window of its steps (and, for its first window, counts the run's
// steps once), not the run's steps once per row, under either plan.
func TestLoadStepsManyReadsOneWindow(t *testing.T) {
	c := newCore(t)
	const steps, window = 10000, 512
	c.run("long", 1, "pending")
	c.exec(`INSERT INTO {{schema}}.steps (workflow_id, pos, name, status, output, attempts)
SELECT 'long', i, 's', 'done', '"ok"', 1 FROM generate_series(0, $1::int - 1) i`, steps)
	c.exec(`ANALYZE {{schema}}.steps`)
	for _, mode := range planModes {
		for _, from := range []int{0, steps / 2} {
			read, plan := pgtest.ExplainTableRows(c.ctx, t, c.pool, mode, "steps", c.q.loadStepsMany,
				[]any{[]string{"long"}, 16 << 20, window, from})
			bound := 2 * window
			if from == 0 {
				bound += steps // the count of the run's steps
			}
			require.LessOrEqual(t, read, bound, "%s, from %d: %s", mode, from, plan)
		}
	}
}

// TestCheckpointHoldsRunAgainstTakeover: a step checkpoint locks its run's
// row from its epoch check to its commit, so a takeover (the epoch bump of
// a new owner) waits for it, and the new owner, reading the run's steps
// after its bump, sees the old owner's checkpoint: a checkpoint that
// passed its check can never land in the new execution's history unseen.
// The checkpoint is held open between its check and its commit by a
// trigger that sleeps (InsertStep, InsertSteps, and the other writes that
// hold their run the same way: a stream entry's Append, a failed
// attempt's RecordAttempt, the steps of SetEvent, Receive and SetTag), or
// by the transaction it is part of (QueueInsertStepTx); the takeover runs
// meanwhile.
func TestCheckpointHoldsRunAgainstTakeover(t *testing.T) {
	c := newCore(t)
	c.sleepIn("INSERT", "steps", "NEW.name = 'slow'")
	c.sleepIn("INSERT", "step_attempts", "NEW.name = 'slow'")
	c.sleepIn("INSERT", "streams", "NEW.key = 'slow'")
	sq := NewStreamQueries(c.schema, c.q.Channel)
	wq := NewWaitQueries(c.schema, c.q.Channel)
	aq, tq := NewAttemptQueries(c.schema), NewTagQueries(c.schema)
	release := make(chan struct{}) // ends the transaction step's transaction
	for _, tc := range []struct {
		name  string
		write func(id string) error // held open past its check
		rows  int                   // it writes
	}{
		{"InsertStep", func(id string) error {
			_, err := c.q.InsertStep(c.ctx, c.pool, *step(id, 0, "slow", 1))
			return err
		}, 1},
		{"InsertSteps", func(id string) error {
			_, err := c.q.InsertSteps(c.ctx, c.pool, []*InsertStepParams{step(id, 0, "slow", 1), step(id, 1, "next", 1)})
			return err
		}, 2},
		{"QueueInsertStepTx", func(id string) error {
			return pgx.BeginFunc(c.ctx, c.pool, func(tx pgx.Tx) error {
				b := &pgx.Batch{}
				c.q.QueueInsertStepTx(b, *step(id, 0, "held", 1))
				if err := tx.SendBatch(c.ctx, b).Close(); err != nil {
					return err
				}
				<-release
				return nil
			})
		}, 1},
		{"Append", func(id string) error { // a stream entry
			_, err := sq.Append(c.ctx, c.pool, AppendParams{WorkflowIDs: []string{id}, Keys: []string{"slow"}, Offsets: []int64{0},
				Values: []json.RawMessage{json.RawMessage(`1`)}, Closed: []bool{false}, Wseqs: []*int64{nil}, Epochs: []int64{1}})
			return err
		}, 1},
		{"RecordAttempt", func(id string) error { // a failed attempt of a step
			_, err := aq.RecordAttempt(c.ctx, c.pool, RecordAttemptParams{WorkflowID: id, Pos: 0, Name: "slow", Attempts: 1, Epoch: 1})
			return err
		}, 1},
		{"SetEvent", func(id string) error {
			_, err := wq.SetEvent(c.ctx, c.pool, SetEventParams{WorkflowID: id, Epoch: 1, Pos: 0, Name: "slow", Key: "k",
				Value: json.RawMessage(`1`), StartedAt: time.Now()})
			return err
		}, 1},
		{"Receive", func(id string) error {
			c.exec(`INSERT INTO {{schema}}.messages (workflow_id, topic, payload) VALUES ($1, 't', '1')`, id)
			_, err := wq.Receive(c.ctx, c.pool, ReceiveParams{WorkflowID: id, Epoch: 1, Topic: "t", Pos: 0, Name: "slow", StartedAt: time.Now()})
			return err
		}, 1},
		{"SetTag", func(id string) error {
			_, err := tq.SetTag(c.ctx, c.pool, SetTagParams{WorkflowID: id, Epoch: 1, Pos: 0, Name: "slow", Key: "k", Value: "v",
				StartedAt: time.Now(), MaxTags: 10})
			return err
		}, 1},
	} {
		id := "run-" + tc.name
		c.run(id, 1, "pending")
		done := make(chan error, 1) // once the write committed (or failed)
		go func() { done <- tc.write(id) }()
		c.awaitHeld()
		if tc.name == "QueueInsertStepTx" {
			time.AfterFunc(300*time.Millisecond, func() { close(release) })
		}
		// The takeover, then what its new owner reads.
		var seen int
		require.NoError(t, pgx.BeginFunc(c.ctx, c.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(c.ctx, Render(`UPDATE {{schema}}.workflows SET epoch = epoch + 1, executor_id = 'y' WHERE id = $1`, c.schema), id); err != nil {
				return err
			}
			return tx.QueryRow(c.ctx, Render(`SELECT (SELECT count(*) FROM {{schema}}.steps WHERE workflow_id = $1)
				+ (SELECT count(*) FROM {{schema}}.streams WHERE workflow_id = $1)
				+ (SELECT count(*) FROM {{schema}}.step_attempts WHERE workflow_id = $1)`, c.schema), id).Scan(&seen)
		}))
		require.NoError(t, <-done, tc.name)
		require.Equal(t, tc.rows, seen, "%s: the new owner reads the checkpoint that passed its check before the takeover", tc.name)
	}
}

// sleepIn makes every row written to table by event (INSERT, UPDATE) for
// which cond holds (on NEW) sleep a second in a trigger: the statement has
// passed its checks and holds its locks meanwhile.
func (c *coreDB) sleepIn(event, table, cond string) {
	c.t.Helper()
	c.exec(`CREATE FUNCTION {{schema}}.sleep_in_` + table + `() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF ` + cond + ` THEN PERFORM pg_sleep(1); END IF; RETURN NEW; END $$`)
	c.exec(`CREATE TRIGGER sleep BEFORE ` + event + ` ON {{schema}}.` + table +
		` FOR EACH ROW EXECUTE FUNCTION {{schema}}.sleep_in_` + table + `()`)
}

// awaitHeld waits until a statement on this schema sleeps in a sleepIn
// trigger, or a transaction that wrote to it idles before its commit. A
// transaction idles with the statement's text as its query as soon as
// the statement is prepared (pgx prepares it in a round trip of its own
// the first time a connection sends it), before it ran: only the xid that
// its first write takes tells that it wrote.
func (c *coreDB) awaitHeld() {
	c.t.Helper()
	require.Eventually(c.t, func() bool {
		var n int
		require.NoError(c.t, c.pool.QueryRow(c.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE (wait_event = 'PgSleep' OR (state = 'idle in transaction' AND backend_xid IS NOT NULL))
				AND position($1 in query) > 0`,
			pgx.Identifier{c.schema}.Sanitize()).Scan(&n))
		return n > 0
	}, 10*time.Second, 2*time.Millisecond)
}

// TestFinishBatchHoldsRunsAgainstTakeover: a batch finish locks every run
// it finishes when it checks their epochs, before it updates any, so a
// takeover of a run later in the batch waits for the batch's commit and
// then finds the run finished: the batch never finishes a run that a new
// owner took over after the check. The update of the first run sleeps in
// a trigger while the second is taken over.
func TestFinishBatchHoldsRunsAgainstTakeover(t *testing.T) {
	c := newCore(t)
	c.sleepIn("UPDATE", "workflows", "NEW.id = 'a-slow' AND NEW.status = 'success'")
	c.run("a-slow", 1, "pending")
	c.run("b-taken", 1, "pending")
	done := make(chan error, 1)
	go func() {
		_, _, err := c.q.FinishWorkflows(c.ctx, c.pool, []*FinishOneParams{
			{ID: "a-slow", Epoch: 1, Status: "success", Output: json.RawMessage(`1`)},
			{ID: "b-taken", Epoch: 1, Status: "success", Output: json.RawMessage(`2`)},
		})
		done <- err
	}()
	c.awaitHeld()
	// A new owner takes b-taken over (as recovery does: only a pending run).
	c.exec(`UPDATE {{schema}}.workflows SET epoch = epoch + 1, executor_id = 'y' WHERE id = 'b-taken' AND status = 'pending'`)
	require.NoError(t, <-done)
	require.Equal(t, "success 1", c.text(`SELECT status || ' ' || epoch FROM {{schema}}.workflows WHERE id = 'b-taken'`),
		"finished by the batch, which held it from its check; the takeover then found it finished")
}
