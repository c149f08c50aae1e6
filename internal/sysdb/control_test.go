package sysdb

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// opsListen returns a connection listening on the notification channel
// of schema.
func opsListen(tb testing.TB, pool *pgxpool.Pool, schema string) *pgx.Conn {
	tb.Helper()
	// A connection of its own: one of the pool the tests share may hold
	// notifications of an earlier test, and a listening one must not go
	// back to it.
	conn, err := pgx.ConnectConfig(context.Background(), pool.Config().ConnConfig)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(context.Background(), "LISTEN "+pgx.Identifier{ChannelName(schema)}.Sanitize())
	require.NoError(tb, err)
	return conn
}

// opsNotes returns the payloads of the n next notifications on conn.
func opsNotes(tb testing.TB, conn *pgx.Conn, n int) []string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []string
	for range n {
		note, err := conn.WaitForNotification(ctx)
		require.NoError(tb, err)
		out = append(out, note.Payload)
	}
	return out
}

// opsRun is the state of a run the control tests look at.
type opsRun struct {
	Status     string
	ExecutorID *string
	Epoch      int64
	Attempts   int
	Error      *string
	WakeAt     *time.Time
	WaitTopic  *string
}

func opsReadRun(tb testing.TB, pool *pgxpool.Pool, schema, id string) opsRun {
	tb.Helper()
	var r opsRun
	require.NoError(tb, pool.QueryRow(context.Background(), Render(`SELECT status, executor_id, epoch, recovery_attempts,
		error::text, wake_at, wait_topic FROM {{schema}}.workflows WHERE id = $1`, schema), id).
		Scan(&r.Status, &r.ExecutorID, &r.Epoch, &r.Attempts, &r.Error, &r.WakeAt, &r.WaitTopic))
	return r
}

// TestCancel: Cancel cancels a pending or queued run, with Children its
// unfinished descendants too, records the error, clears its wait and tells
// its executor and waiters; it leaves a finished run as it is.
func TestCancel(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	q := NewControlQueries(schema, ChannelName(schema))
	opsExec(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, parent_id, queue_name, wake_at, wait_topic) VALUES
		('root', 'w', 'pending', 'v', 'x', 3, NULL, NULL, NULL, 'ask'),
		('kid', 'w', 'pending', 'v', NULL, 1, 'root', NULL, 'infinity', 'child:grandkid'),
		('done-kid', 'w', 'success', 'v', NULL, 1, 'root', NULL, NULL, NULL),
		('grandkid', 'w', 'enqueued', 'v', NULL, 0, 'kid', 'q', NULL, NULL),
		('alone', 'w', 'pending', 'v', 'x', 1, NULL, NULL, NULL, NULL),
		('alone-kid', 'w', 'pending', 'v', 'x', 1, 'alone', NULL, NULL, NULL),
		('finished', 'w', 'error', 'v', NULL, 2, NULL, NULL, NULL, NULL)`)
	errb := []byte(`{"msg":"cancelled"}`)
	conn := opsListen(t, pool, schema)

	ids, err := q.Cancel(ctx, pool, CancelParams{ID: "finished", Children: true, Error: errb})
	require.NoError(t, err)
	require.Empty(t, ids)
	require.Equal(t, "error", opsReadRun(t, pool, schema, "finished").Status)
	require.Nil(t, opsReadRun(t, pool, schema, "finished").Error)

	ids, err = q.Cancel(ctx, pool, CancelParams{ID: "alone", Error: errb})
	require.NoError(t, err)
	require.Equal(t, []string{"alone"}, ids)
	require.Equal(t, "pending", opsReadRun(t, pool, schema, "alone-kid").Status, "a child without Children")
	require.ElementsMatch(t, []string{"c:1:alone", "d:alone"}, opsNotes(t, conn, 2))

	ids, err = q.Cancel(ctx, pool, CancelParams{ID: "root", Children: true, Error: errb})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"root", "kid", "grandkid"}, ids)
	for _, id := range ids {
		r := opsReadRun(t, pool, schema, id)
		require.Equal(t, "cancelled", r.Status, id)
		require.JSONEq(t, string(errb), *r.Error, id)
		require.Nil(t, r.WakeAt, id)
		require.Nil(t, r.WaitTopic, id)
	}
	require.Equal(t, "success", opsReadRun(t, pool, schema, "done-kid").Status)
	require.Nil(t, opsReadRun(t, pool, schema, "done-kid").Error)
	require.ElementsMatch(t, []string{"c:3:root", "d:root", "c:1:kid", "d:kid", "c:0:grandkid", "d:grandkid"}, opsNotes(t, conn, 6))

	ids, err = q.Cancel(ctx, pool, CancelParams{ID: "root", Children: true, Error: errb})
	require.NoError(t, err)
	require.Empty(t, ids, "a second cancel")
}

// TestResume: Resume makes a cancelled, dead or failed run pending again
// (a queued one queued again), unowned at a new epoch with its recovery
// attempts, error and wait cleared, and says so to the executors; not a
// run in any other status, nor a cancelled queued run whose code is still
// stopping.
func TestResume(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	q := NewControlQueries(schema, ChannelName(schema))
	opsExec(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, recovery_attempts, queue_name, error, output, wake_at, wait_topic) VALUES
		('cancelled', 'w', 'cancelled', 'v', NULL, 2, 3, NULL, '"c"', NULL, 'infinity', 'ask'),
		('dead', 'w', 'dead', 'v', NULL, 5, 9, NULL, '"d"', NULL, NULL, NULL),
		('failed', 'w', 'error', 'v', NULL, 1, 0, NULL, '"e"', NULL, NULL, NULL),
		('queued', 'w', 'cancelled', 'v', NULL, 1, 0, 'q', '"c"', NULL, NULL, NULL),
		('stopping', 'w', 'cancelled', 'v', 'x', 1, 0, 'q', '"c"', NULL, NULL, NULL),
		('ok', 'w', 'success', 'v', NULL, 1, 0, NULL, NULL, '1', NULL, NULL),
		('running', 'w', 'pending', 'v', 'x', 1, 0, NULL, NULL, NULL, NULL, NULL),
		('waiting', 'w', 'enqueued', 'v', NULL, 0, 0, 'q', NULL, NULL, NULL, NULL)`)
	conn := opsListen(t, pool, schema)
	for _, c := range []struct {
		id, status, note string
		epoch            int64
	}{
		{"cancelled", "pending", "n:cancelled", 3},
		{"dead", "pending", "n:dead", 6},
		{"failed", "pending", "n:failed", 2},
		{"queued", "enqueued", "q:q", 2},
	} {
		ok, err := q.Resume(ctx, pool, c.id)
		require.NoError(t, err)
		require.True(t, ok, c.id)
		r := opsReadRun(t, pool, schema, c.id)
		require.Equal(t, opsRun{Status: c.status, Epoch: c.epoch}, r, c.id)
		require.Equal(t, []string{c.note}, opsNotes(t, conn, 1), c.id)
	}
	for _, id := range []string{"stopping", "ok", "running", "waiting", "nope"} {
		before := opsRun{}
		if id != "nope" {
			before = opsReadRun(t, pool, schema, id)
		}
		ok, err := q.Resume(ctx, pool, id)
		require.NoError(t, err)
		require.False(t, ok, id)
		if id != "nope" {
			require.Equal(t, before, opsReadRun(t, pool, schema, id), id)
		}
	}
}

// TestDropFailedStep: only a run's last step, and only when it recorded a
// failure, is deleted.
func TestDropFailedStep(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	q := NewControlQueries(schema, "")
	opsExec(t, pool, schema, `INSERT INTO {{schema}}.steps (workflow_id, pos, name, status) VALUES
		('failed-last', 0, 's', 'done'), ('failed-last', 1, 's', 'error'),
		('failed-before', 0, 's', 'error'), ('failed-before', 1, 's', 'done'),
		('intent-last', 0, 's', 'intent'),
		('other', 0, 's', 'done'), ('other', 1, 's', 'error'), ('other', 2, 's', 'error')`)
	for _, c := range []struct {
		id      string
		dropped bool
		left    int
	}{
		{"failed-last", true, 1},
		{"failed-before", false, 2},
		{"intent-last", false, 1},
		{"none", false, 0},
	} {
		dropped, err := q.DropFailedStep(ctx, pool, c.id)
		require.NoError(t, err)
		require.Equal(t, c.dropped, dropped, c.id)
		n, err := q.CountSteps(ctx, pool, c.id)
		require.NoError(t, err)
		require.Equal(t, c.left, n, c.id)
	}
	n, err := q.CountSteps(ctx, pool, "other")
	require.NoError(t, err)
	require.Equal(t, 3, n)
}

// TestFork: ForkRun copies a run's name and input into a new pending,
// unowned run without parent, of the given version and trace context;
// ForkSteps copies the recorded steps before a position, intents left
// out; CountSteps counts a run's steps.
func TestFork(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	q := NewControlQueries(schema, ChannelName(schema))
	opsExec(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, parent_id, input, output, error, trace_context) VALUES
		('src', 'w', 'error', 'v1', NULL, 4, 'mom', '{"in":1}', NULL, '"boom"', 'old-tc')`)
	opsExec(t, pool, schema, `INSERT INTO {{schema}}.steps (workflow_id, pos, name, status, output, error, attempts) VALUES
		('src', 0, 's0', 'done', '0', NULL, 1), ('src', 1, 's1', 'intent', NULL, NULL, 1),
		('src', 2, 's2', 'done', '2', NULL, 2), ('src', 3, 's3', 'error', NULL, '"e"', 3)`)
	n, err := q.CountSteps(ctx, pool, "src")
	require.NoError(t, err)
	require.Equal(t, 4, n)
	conn := opsListen(t, pool, schema)

	for _, c := range []struct {
		id     string
		before int
		tc     string
		steps  []string
	}{
		{"fork-0", 0, "", []string{}},
		{"fork-3", 3, "00-tc", []string{"0:s0", "2:s2"}},
		{"fork-9", 9, "", []string{"0:s0", "2:s2", "3:s3"}},
	} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := q.ForkRun(ctx, tx, ForkRunParams{SourceID: "src", ID: c.id, AppVersion: "v2", TraceContext: c.tc}); err != nil {
				return err
			}
			copied, err := q.ForkSteps(ctx, tx, ForkStepsParams{SourceID: "src", ID: c.id, Before: c.before})
			require.Equal(t, int64(len(c.steps)), copied, c.id)
			return err
		})
		require.NoError(t, err)
		require.Equal(t, []string{"n:" + c.id}, opsNotes(t, conn, 1))
		var name, status, version string
		var executor, parent, input, output, errb, tc *string
		var epoch int64
		require.NoError(t, pool.QueryRow(ctx, Render(`SELECT name, status, app_version, executor_id, epoch, parent_id,
			input::text, output::text, error::text, trace_context FROM {{schema}}.workflows WHERE id = $1`, schema), c.id).
			Scan(&name, &status, &version, &executor, &epoch, &parent, &input, &output, &errb, &tc))
		require.Equal(t, []any{"w", "pending", "v2", (*string)(nil), int64(0), (*string)(nil), `{"in":1}`, (*string)(nil), (*string)(nil)},
			[]any{name, status, version, executor, epoch, parent, *input, output, errb}, c.id)
		if c.tc == "" {
			require.Nil(t, tc, c.id)
		} else {
			require.Equal(t, c.tc, *tc, c.id)
		}
		// The steps copied as they were recorded.
		rows, err := pool.Query(ctx, Render(`SELECT f.pos || ':' || f.name FROM {{schema}}.steps f
			JOIN {{schema}}.steps s ON s.workflow_id = 'src' AND s.pos = f.pos AND s.name = f.name AND s.status = f.status
				AND s.output::text IS NOT DISTINCT FROM f.output::text AND s.error::text IS NOT DISTINCT FROM f.error::text
				AND s.attempts = f.attempts AND s.started_at IS NOT DISTINCT FROM f.started_at AND s.finished_at = f.finished_at
			WHERE f.workflow_id = $1 ORDER BY f.pos`, schema), c.id)
		require.NoError(t, err)
		steps, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Equal(t, c.steps, steps, c.id)
		n, err := q.CountSteps(ctx, pool, c.id)
		require.NoError(t, err)
		require.Equal(t, len(c.steps), n, c.id)
	}

	err = q.ForkRun(ctx, pool, ForkRunParams{SourceID: "src", ID: "fork-0", AppVersion: "v2"})
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr) && pgErr.Code == "23505", "a fork onto an existing run: %v", err)
	require.NoError(t, q.ForkRun(ctx, pool, ForkRunParams{SourceID: "nope", ID: "fork-nope", AppVersion: "v2"}))
	var exists bool
	require.NoError(t, pool.QueryRow(ctx, Render(`SELECT EXISTS (SELECT FROM {{schema}}.workflows WHERE id = 'fork-nope')`, schema)).Scan(&exists))
	require.False(t, exists, "a fork of no run")
}

// TestRetryLater: RetryLater parks a failed run until the given time (back
// to its queue when the queue releases parked slots), counts the retry,
// removes its last step when that recorded a failure and the failed
// attempts of its steps; it changes nothing for another epoch or another
// count of retries.
func TestRetryLater(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	q := NewControlQueries(schema, ChannelName(schema))
	opsExec(t, pool, schema, `INSERT INTO {{schema}}.queues (name, release_parked) VALUES ('rq', true);
		INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, queue_name, retries) VALUES
		('r', 'w', 'pending', 'v', 'x', 3, NULL, NULL),
		('queued', 'w', 'pending', 'v', 'x', 1, 'rq', 1),
		('done-last', 'w', 'pending', 'v', 'x', 1, NULL, NULL);
		INSERT INTO {{schema}}.steps (workflow_id, pos, name, status, output, error) VALUES
		('r', 0, 'a', 'done', '1', NULL), ('r', 1, 'b', 'error', NULL, '"e"'),
		('queued', 0, 'b', 'error', NULL, '"e"'),
		('done-last', 0, 'b', 'error', NULL, '"e"'), ('done-last', 1, 'c', 'done', '1', NULL);
		INSERT INTO {{schema}}.step_attempts (workflow_id, pos, name, attempts, error) VALUES ('r', 1, 'b', 1, '"e"')`)
	steps := func(id string) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, Render(`SELECT count(*) FROM {{schema}}.steps WHERE workflow_id = $1`, schema), id).Scan(&n))
		return n
	}
	wake := time.Now().Add(time.Hour).Truncate(time.Microsecond)

	for _, p := range []RetryLaterParams{
		{ID: "r", Epoch: 2, Retries: 0, WakeAt: wake}, // an older owner
		{ID: "r", Epoch: 3, Retries: 1, WakeAt: wake}, // a decision on an older count
	} {
		ok, err := q.RetryLater(ctx, pool, p)
		require.NoError(t, err)
		require.False(t, ok, "%+v", p)
		require.Equal(t, 2, steps("r"))
		n, err := q.Retries(ctx, pool, "r")
		require.NoError(t, err)
		require.Zero(t, n)
	}

	ok, err := q.RetryLater(ctx, pool, RetryLaterParams{ID: "r", Epoch: 3, Retries: 0, WakeAt: wake})
	require.NoError(t, err)
	require.True(t, ok)
	r := opsReadRun(t, pool, schema, "r")
	require.Equal(t, "pending", r.Status)
	require.Nil(t, r.ExecutorID)
	require.True(t, wake.Equal(*r.WakeAt))
	require.Equal(t, 1, steps("r"), "the failed last step is removed")
	n, err := q.Retries(ctx, pool, "r")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	var attempts int
	require.NoError(t, pool.QueryRow(ctx, Render(`SELECT count(*) FROM {{schema}}.step_attempts`, schema)).Scan(&attempts))
	require.Zero(t, attempts)

	ok, err = q.RetryLater(ctx, pool, RetryLaterParams{ID: "queued", Epoch: 1, Retries: 1, WakeAt: wake})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "enqueued", opsReadRun(t, pool, schema, "queued").Status)
	var notBefore time.Time
	require.NoError(t, pool.QueryRow(ctx, Render(`SELECT not_before FROM {{schema}}.workflows WHERE id = 'queued'`, schema)).Scan(&notBefore))
	require.True(t, wake.Equal(notBefore))
	require.Zero(t, steps("queued"))

	ok, err = q.RetryLater(ctx, pool, RetryLaterParams{ID: "done-last", Epoch: 1, Retries: 0, WakeAt: wake})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 2, steps("done-last"), "a failure not last is kept: the code got past it")
}

// TestContinueAs: ContinueAs links a pending run owned at the epoch to
// its successor and returns the run's parent and tags; not for another
// epoch nor a finished run.
func TestContinueAs(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	q := NewControlQueries(schema, ChannelName(schema))
	opsExec(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, parent_id, tags) VALUES
		('top', 'w', 'pending', 'v', 'x', 2, NULL, NULL),
		('kid', 'w', 'pending', 'v', 'x', 1, 'top', '{"k": "v"}'),
		('done', 'w', 'success', 'v', NULL, 1, NULL, NULL)`)
	next := func(id string) *string {
		var s *string
		require.NoError(t, pool.QueryRow(ctx, Render(`SELECT continued_as FROM {{schema}}.workflows WHERE id = $1`, schema), id).Scan(&s))
		return s
	}
	_, ok, err := q.ContinueAs(ctx, pool, "top", 1, "top#2")
	require.NoError(t, err)
	require.False(t, ok, "an older owner")
	require.Nil(t, next("top"))
	_, ok, err = q.ContinueAs(ctx, pool, "done", 1, "done#2")
	require.NoError(t, err)
	require.False(t, ok, "a finished run")

	link, ok, err := q.ContinueAs(ctx, pool, "top", 2, "top#2")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, ContinuedRow{}, link)
	require.Equal(t, "top#2", *next("top"))
	link, ok, err = q.ContinueAs(ctx, pool, "kid", 1, "kid#2")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "top", link.Parent)
	require.JSONEq(t, `{"k": "v"}`, string(link.Tags))
}
