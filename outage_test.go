package durable_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/proctest"
)

// TestDatabaseOutageMidRun stops Postgres hard (immediate shutdown: a
// crash) while runs are inside steps, queued, sleeping and waiting for
// messages and children, then starts it again. The executor is never
// restarted: every run completes, none is marked failed, and every step's
// effect happened once. Starting a run while the database is down fails
// with an error, as it should. It uses a cluster of its own, so it skips
// when the tests run against a server they did not start.
func TestDatabaseOutageMidRun(t *testing.T) {
	t.Parallel()
	pgtest.SkipIfPooled(t, "its cluster of its own has no pooler in front; the direct run covers it")
	c, err := pgtest.Private(t)
	if err != nil {
		t.Skipf("no database outage test: %v", err)
	}
	pool := c.Pool(t)
	// Generous: a crash-recovering Postgres on a loaded machine takes a while.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	const schema = "outage"
	_, err = pool.Exec(ctx, "CREATE SCHEMA "+schema+"; CREATE TABLE outage.app (workflow_id text PRIMARY KEY, n int NOT NULL)")
	require.NoError(t, err)

	logs := &proctest.Buffer{}
	var (
		mu      sync.Mutex
		effects = map[string]int{} // idempotency key -> executions
	)
	effect := func(ctx context.Context) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		effects[durable.IdempotencyKey(ctx)]++
		return len(effects), nil
	}
	inStep := make(chan string, 64)
	outage := make(chan struct{}) // closed once the database is down

	e, err := durable.New(pool, &durable.Config{
		Schema:       schema,
		AppVersion:   "test",
		LeaseTTL:     time.Second,
		PollInterval: time.Second,
		StepRetry:    durable.RetryPolicy{BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond},
		Logger:       slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	require.NoError(t, err)
	q := durable.RegisterQueue(e, "jobs", &durable.QueueOpts{WorkerConcurrency: 2})
	child := durable.Register(e, "child", func(wctx durable.Context, n int) (int, error) {
		return durable.Step(wctx, "child-effect", effect, nil)
	}, nil)
	wf := durable.Register(e, "outage", func(wctx durable.Context, n int) (int, error) {
		// A step that is running when the database goes away: its
		// checkpoint is written after it comes back.
		if _, err := durable.Step(wctx, "across-outage", func(ctx context.Context) (int, error) {
			inStep <- wctx.WorkflowID()
			<-outage
			return effect(ctx)
		}, nil); err != nil {
			return 0, err
		}
		if _, err := durable.TxStep(wctx, "app-row", func(ctx context.Context, tx pgx.Tx) (int, error) {
			_, err := tx.Exec(ctx, "INSERT INTO outage.app VALUES ($1, $2)", wctx.WorkflowID(), n)
			return n, err
		}, nil); err != nil {
			return 0, err
		}
		if err := durable.Sleep(wctx, 50*time.Millisecond); err != nil {
			return 0, err
		}
		h, err := child.StartChild(wctx, n, nil)
		if err != nil {
			return 0, err
		}
		if _, err := h.Await(wctx); err != nil {
			return 0, err
		}
		msg, ok, err := durable.Recv[int](wctx, "go", time.Minute)
		if err != nil || !ok {
			return 0, fmt.Errorf("recv: ok=%v err=%v", ok, err)
		}
		return durable.Step(wctx, "last", func(ctx context.Context) (int, error) {
			if _, err := effect(ctx); err != nil {
				return 0, err
			}
			return msg, nil
		}, nil)
	}, nil)
	// Finished before the outage, then made strays by hand (below).
	var doneEffects atomic.Int32
	done := durable.Register(e, "done", func(wctx durable.Context, n int) (int, error) {
		return durable.Step(wctx, "once", func(ctx context.Context) (int, error) {
			doneEffects.Add(1)
			return n * 10, nil
		}, nil)
	}, nil)
	require.NoError(t, e.Launch(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
	})

	// A run left pending and owned by this live executor while nothing
	// executes it here (a claim or start whose answer an outage lost) is
	// a stray. Losing exactly such an answer cannot be timed, so two
	// finished runs (one started, one queued) are put back by hand into
	// that state: pending, owned by this executor, no output. After the
	// outage they must end the same way again, by replay, without running
	// their step a second time.
	lost := []*durable.Handle[int]{}
	h, err := done.Start(ctx, 1, nil)
	require.NoError(t, err)
	lost = append(lost, h)
	h, err = done.Enqueue(ctx, q, 2, nil)
	require.NoError(t, err)
	lost = append(lost, h)
	for i, h := range lost {
		got, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, (i+1)*10, got)
	}
	tag, err := pool.Exec(ctx, "UPDATE outage.workflows SET status = 'pending', output = NULL WHERE name = 'done' AND executor_id = $1", e.ExecutorID())
	require.NoError(t, err)
	require.EqualValues(t, len(lost), tag.RowsAffected())

	const started, queued = 4, 4
	var handles []*durable.Handle[int]
	for i := range started {
		h, err := wf.Start(ctx, i, nil)
		require.NoError(t, err)
		handles = append(handles, h)
	}
	for i := range queued {
		h, err := wf.Enqueue(ctx, q, started+i, nil)
		require.NoError(t, err)
		handles = append(handles, h)
	}
	// Every started run and the first two queued ones (the worker limit)
	// are inside their first step.
	for range started + 2 {
		select {
		case <-inStep:
		case <-ctx.Done():
			t.Fatalf("runs did not reach their first step; logs:\n%s", logs.String())
		}
	}

	c.Stop(t, true)
	_, err = wf.Start(ctx, 99, nil)
	require.Error(t, err, "a start while the database is down fails")
	close(outage) // the steps finish and try to record their outcome
	time.Sleep(300 * time.Millisecond)
	c.Start(t)

	for _, h := range handles {
		require.NoError(t, durable.Send(ctx, e, h.ID(), "go", 7, nil))
	}
	for _, h := range handles {
		got, err := h.Result(ctx)
		require.NoError(t, err, "run %s; logs:\n%s", h.ID(), logs.String())
		require.Equal(t, 7, got)
	}

	for i, lh := range lost {
		h, err := done.Handle(ctx, lh.ID()) // a fresh handle: it reads the run's row
		require.NoError(t, err)
		got, err := h.Result(ctx)
		require.NoError(t, err, "stray %s; logs:\n%s", h.ID(), logs.String())
		require.Equal(t, (i+1)*10, got)
	}
	require.Contains(t, logs.String(), "stray run of this executor", "the strays were found")
	require.EqualValues(t, len(lost), doneEffects.Load(), "a stray is replayed, its step not run again")

	var notOK int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM outage.workflows WHERE status <> 'success'").Scan(&notOK))
	require.Zero(t, notOK, "no run was marked failed")
	var rows, distinct int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT workflow_id) FROM outage.app").Scan(&rows, &distinct))
	require.Equal(t, started+queued, rows, "one app row per run")
	require.Equal(t, rows, distinct)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, effects, 3*(started+queued), "three effects per run: across-outage, child-effect, last")
	for key, n := range effects {
		require.Equal(t, 1, n, "effect %s ran %d times", key, n)
	}
}
