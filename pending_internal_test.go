package durable

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/sysdbtest"
)

// deferringEngine launches an engine with Config.DeferStepCheckpoints whose
// deferred checkpoints wait at most delay on their own.
func deferringEngine(t *testing.T, delay time.Duration, register func(e *Engine)) (context.Context, *pgxpool.Pool, string) {
	t.Helper()
	ctx, pool, schema, e := newEngine(t, &Config{ExecutorID: "defer-exec", DeferStepCheckpoints: true})
	e.stepDelay = delay
	register(e)
	launchUntilCleanup(ctx, t, e)
	return ctx, pool, schema
}

// newEngine makes an engine with cfg (its schema and app version set
// here) on a freshly migrated schema.
func newEngine(t *testing.T, cfg *Config) (context.Context, *pgxpool.Pool, string, *Engine) {
	t.Helper()
	ctx, pool, schema := migratedSchema(t)
	cfg.Schema, cfg.AppVersion = schema, "test"
	if pgtest.Pooled() { // through a pooler in transaction mode: no LISTEN
		cfg.PollOnly = true
		cfg.PollInterval = cmp.Or(cfg.PollInterval, 50*time.Millisecond)
	}
	e, err := New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, pool, schema, e
}

// launchUntilCleanup launches e and shuts it down when the test ends.
func launchUntilCleanup(ctx context.Context, t *testing.T, e *Engine) {
	t.Helper()
	if err := e.Launch(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
	})
}

// TestDeferredCheckpointsBeforeNextCall: with deferred checkpoints (and a
// timer too long to matter), a step's checkpoint is committed before the
// run's next durable call runs anything, parallel steps' ones before the
// call after their Wait, and the last step's in the statement that
// finishes the run.
func TestDeferredCheckpointsBeforeNextCall(t *testing.T) {
	t.Parallel()
	var wf *Workflow[int, string]
	var pool *pgxpool.Pool
	var schema string
	seen := func(ctx context.Context) (string, error) {
		return strings.Join(sysdbtest.RecordedSteps(ctx, t, pool, schema, "deferred"), ","), nil
	}
	ctx, pool2, schema2 := deferringEngine(t, time.Hour, func(e *Engine) {
		wf = Register(e, "w", func(wctx Context, n int) (string, error) {
			if _, err := Step(wctx, "a", func(context.Context) (int, error) { return n, nil }, nil); err != nil {
				return "", err
			}
			atB, err := Step(wctx, "b", seen, nil)
			if err != nil {
				return "", err
			}
			f1 := Go(wctx, "g1", func(context.Context) (int, error) { return 1, nil }, nil)
			f2 := Go(wctx, "g2", func(context.Context) (int, error) { return 2, nil }, nil)
			if _, err := f1.Wait(); err != nil {
				return "", err
			}
			if _, err := f2.Wait(); err != nil {
				return "", err
			}
			atC, err := Step(wctx, "c", seen, nil)
			return atB + " | " + atC, err
		}, nil)
	})
	pool, schema = pool2, schema2
	h, err := wf.Start(ctx, 7, &StartOpts{ID: "deferred"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := h.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := "a | a,b,g1,g2"; got != want {
		t.Errorf("recorded when the steps ran: %q, want %q", got, want)
	}
	if got, want := fmt.Sprint(sysdbtest.RecordedSteps(ctx, t, pool, schema, "deferred")), "[a b g1 g2 c+]"; got != want {
		t.Errorf("recorded steps %s, want %s (+: written by the finish)", got, want)
	}
}

// TestDeferStepCheckpointsPerWorkflow: WorkflowOpts.DeferStepCheckpoints
// defers the checkpoints of that workflow's runs only: its one-step run's
// checkpoint is written by the finish, another workflow's is not.
func TestDeferStepCheckpointsPerWorkflow(t *testing.T) {
	t.Parallel()
	ctx, pool, schema, e := newEngine(t, &Config{ExecutorID: "per-wf-exec"})
	e.stepDelay = time.Hour
	body := func(wctx Context, n int) (int, error) {
		return Step(wctx, "s", func(context.Context) (int, error) { return n + 1, nil }, nil)
	}
	eager := Register(e, "eager", body, nil)
	deferred := Register(e, "deferred", body, &WorkflowOpts{DeferStepCheckpoints: true})
	launchUntilCleanup(ctx, t, e)
	for _, c := range []struct {
		wf   *Workflow[int, int]
		want string
	}{{eager, "[s]"}, {deferred, "[s+]"}} {
		h, err := c.wf.Start(ctx, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := h.Result(ctx); err != nil || got != 2 {
			t.Fatalf("%s: result %d, %v", c.wf.Name(), got, err)
		}
		if got := fmt.Sprint(sysdbtest.RecordedSteps(ctx, t, pool, schema, h.ID())); got != c.want {
			t.Errorf("%s: recorded steps %s, want %s (+: written by the finish)", c.wf.Name(), got, c.want)
		}
	}
}

// TestDeferredCheckpointTimer: a deferred checkpoint whose run blocks
// outside any durable call is written on its own after the delay, while
// the run is still going.
func TestDeferredCheckpointTimer(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var wf *Workflow[int, int]
	ctx, pool, schema := deferringEngine(t, stepFlushDelay, func(e *Engine) {
		wf = Register(e, "w", func(wctx Context, n int) (int, error) {
			v, err := Step(wctx, "a", func(context.Context) (int, error) { return n + 1, nil }, nil)
			<-release
			return v, err
		}, nil)
	})
	h, err := wf.Start(ctx, 1, &StartOpts{ID: "blocked"})
	if err != nil {
		t.Fatal(err)
	}
	// Far longer than the delay and a write: a checkpoint left for the
	// run's next write would wait for the release.
	deadline := time.Now().Add(10 * time.Second)
	for fmt.Sprint(sysdbtest.RecordedSteps(ctx, t, pool, schema, "blocked")) != "[a]" {
		if time.Now().After(deadline) {
			t.Fatal("the deferred checkpoint was not written while the run was blocked")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st, err := h.Status(ctx); err != nil || st != StatusPending {
		t.Fatalf("status %s, %v; want the run still pending", st, err)
	}
	close(release)
	if got, err := h.Result(ctx); err != nil || got != 2 {
		t.Fatalf("result %d, %v", got, err)
	}
}

// TestDeferredCheckpointsKeptAcrossRetry: the deferred checkpoints of an
// attempt whose code fails and is retried (WorkflowOpts.Retry) are written
// before the retry is scheduled (the timer is too long to matter): the
// next attempt replays the step, it does not run it again.
func TestDeferredCheckpointsKeptAcrossRetry(t *testing.T) {
	t.Parallel()
	var ran, attempts atomic.Int32
	// A short poll: the retry's parked run is due 10 ms later.
	ctx, _, _, e := newEngine(t, &Config{ExecutorID: "defer-retry-exec", DeferStepCheckpoints: true, PollInterval: 50 * time.Millisecond})
	e.stepDelay = time.Hour
	wf := Register(e, "w", func(wctx Context, n int) (int, error) {
		v, err := Step(wctx, "a", func(context.Context) (int, error) { return int(ran.Add(1)), nil }, nil)
		if err != nil {
			return 0, err
		}
		if attempts.Add(1) == 1 {
			return 0, errors.New("the first attempt fails after its step")
		}
		return v, nil
	}, &WorkflowOpts{Retry: &RetryPolicy{MaxAttempts: 2, BaseDelay: 10 * time.Millisecond, Jitter: -1}})
	launchUntilCleanup(ctx, t, e)
	h, err := wf.Start(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := h.Result(ctx); err != nil || got != 1 {
		t.Fatalf("result %d, %v; want 1", got, err)
	}
	if n := ran.Load(); n != 1 {
		t.Errorf("the step ran %d times, want once: the retry replays it", n)
	}
}

// TestDeferredCheckpointRefused: a deferred checkpoint that the database
// refuses for good (its table is gone for a moment) fails the run with
// that error, as an eager one does, whether the finish statement or the
// timer meets the refusal first; with no delay the timer's write is
// usually in flight when the workflow returns, and the finish must wait
// for it and see the refusal (not finish the run without its step).
func TestDeferredCheckpointRefused(t *testing.T) {
	t.Parallel()
	for _, delay := range []time.Duration{stepFlushDelay, 0} {
		t.Run(fmt.Sprint("delay=", delay), func(t *testing.T) {
			t.Parallel()
			deferredCheckpointRefused(t, delay)
		})
	}
	t.Run("InFlight", func(t *testing.T) {
		t.Parallel()
		deferredCheckpointRefusedInFlight(t)
	})
}

// deferredCheckpointRefusedInFlight: the timer's write of a deferred
// checkpoint is held in flight (the steps table is locked) when the
// workflow returns; the finish must wait for that write, which then fails
// (the table is renamed under the lock), and fail the run with its error.
// A finish that went ahead would commit the run without its step.
func deferredCheckpointRefusedInFlight(t *testing.T) {
	proceed := make(chan struct{})
	var wf *Workflow[int, int]
	ctx, pool, schema := deferringEngine(t, 0, func(e *Engine) {
		wf = Register(e, "w", func(wctx Context, n int) (int, error) {
			v, err := Step(wctx, "s", func(context.Context) (int, error) { return 1, nil }, nil)
			<-proceed
			return v, err
		}, nil)
	})
	steps := pgx.Identifier{schema, "steps"}.Sanitize()
	lock, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(ctx) }()
	if _, err := lock.Exec(ctx, "LOCK TABLE "+steps+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	h, err := wf.Start(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The timer's write waits for the lock.
	for {
		var waiting bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE relation = $1::regclass AND NOT granted)`,
			steps).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the deferred checkpoint's write never started")
		}
		time.Sleep(2 * time.Millisecond)
	}
	close(proceed)
	// A finish that does not wait commits within this wait; one that waits
	// cannot before the lock is released.
	time.Sleep(500 * time.Millisecond)
	if st, err := h.Status(ctx); err != nil || st != StatusPending {
		t.Fatalf("status %s, %v: the run ended while its checkpoint's write was in flight", st, err)
	}
	if _, err := lock.Exec(ctx, "ALTER TABLE "+steps+" RENAME TO steps_gone"); err != nil {
		t.Fatal(err)
	}
	if err := lock.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	awaitRefused(ctx, t, pool, schema, h)
}

func deferredCheckpointRefused(t *testing.T, delay time.Duration) {
	entered, release := make(chan struct{}), make(chan struct{})
	var wf *Workflow[int, int]
	ctx, pool, schema := deferringEngine(t, delay, func(e *Engine) {
		wf = Register(e, "w", func(wctx Context, n int) (int, error) {
			return Step(wctx, "s", func(context.Context) (int, error) {
				close(entered)
				<-release
				return 1, nil
			}, nil)
		}, nil)
	})
	h, err := wf.Start(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	steps := pgx.Identifier{schema, "steps"}.Sanitize()
	if _, err := pool.Exec(ctx, "ALTER TABLE "+steps+" RENAME TO steps_gone"); err != nil {
		t.Fatal(err)
	}
	close(release)
	awaitRefused(ctx, t, pool, schema, h)
}

// awaitRefused waits for run h to fail, its steps table renamed to
// steps_gone (not to finish otherwise), puts the table back, and checks
// that the run failed with its refused checkpoint's error.
func awaitRefused(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, h *Handle[int]) {
	t.Helper()
	for {
		st, err := h.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st == StatusError {
			break
		}
		if st.Finished() {
			t.Fatalf("status %s: the run finished without its refused checkpoint", st)
		}
		if ctx.Err() != nil {
			t.Fatalf("status %s: the run never failed", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := pool.Exec(ctx, "ALTER TABLE "+pgx.Identifier{schema, "steps_gone"}.Sanitize()+" RENAME TO steps"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Result(ctx); err == nil || !strings.Contains(err.Error(), "record step 0") {
		t.Fatalf("result error %v, want the refused checkpoint's", err)
	}
}
