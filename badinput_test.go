package durable_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/hooks"
)

// hardStop shuts e down at once, as a crash would leave its runs: pending
// and owned by e until its lease expires.
func hardStop(t *testing.T, e *durable.Engine) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.Error(t, e.Shutdown(ctx))
}

// blockUntilStopped waits in workflow code until the engine hard-stops.
func blockUntilStopped(wctx durable.Context, started chan<- string) error {
	started <- wctx.WorkflowID()
	<-wctx.Done()
	return wctx.Err()
}

func TestOversizedPayloads(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var echo *durable.Workflow[string, string]
	var bigStep *durable.Workflow[int, int]
	b.engine(t, func(c *durable.Config) { c.MaxPayloadBytes = 1024 }, func(e *durable.Engine) {
		echo = durable.Register(e, "echo", func(wctx durable.Context, in string) (string, error) { return in, nil }, nil)
		bigStep = durable.Register(e, "big-step", func(wctx durable.Context, in int) (int, error) {
			_, err := durable.Step(wctx, "big", func(ctx context.Context) (string, error) { return strings.Repeat("x", 2000), nil }, nil)
			return 0, err
		}, nil)
	})
	ctx := ctxT(t)
	_, err := echo.Start(ctx, strings.Repeat("y", 2000), &durable.StartOpts{ID: "too-big"})
	var tl *durable.PayloadTooLargeError
	require.ErrorAs(t, err, &tl)
	require.ErrorIs(t, err, durable.ErrPayloadTooLarge)
	require.Equal(t, 1024, tl.Limit)
	_, err = echo.Handle(ctx, "too-big")
	require.ErrorIs(t, err, durable.ErrWorkflowNotFound, "nothing is written for a rejected start")

	h, err := bigStep.Start(ctx, 1, nil)
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.ErrorIs(t, err, durable.ErrPayloadTooLarge)

	h2, err := echo.Start(ctx, "small", nil)
	require.NoError(t, err)
	out, err := h2.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "small", out)
}

func TestInvalidArguments(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := durable.New(b.pool, &durable.Config{Schema: "bad schema; drop table x"})
	require.ErrorIs(t, err, durable.ErrInvalidArgument)
	require.Contains(t, err.Error(), "Config.Schema")
	_, err = durable.New(b.pool, &durable.Config{LeaseTTL: time.Millisecond})
	require.ErrorContains(t, err, "Config.LeaseTTL")
	_, err = durable.New(b.pool, &durable.Config{RecoveryConcurrency: -1})
	require.ErrorIs(t, err, durable.ErrInvalidArgument)
	require.ErrorContains(t, err, "Config.RecoveryConcurrency")
	_, err = durable.New(b.pool, &durable.Config{StepRetry: durable.RetryPolicy{Factor: 0.5}})
	require.ErrorContains(t, err, "Config.StepRetry.Factor")
	_, err = durable.New(nil, nil)
	require.ErrorIs(t, err, durable.ErrInvalidArgument)

	var wf *durable.Workflow[string, string]
	e := b.engine(t, nil, func(e *durable.Engine) {
		fn := func(wctx durable.Context, in string) (string, error) {
			return durable.Step(wctx, in, func(ctx context.Context) (string, error) { return "ran " + in, nil }, nil)
		}
		wf = durable.Register(e, "named", fn, nil)
		_, err := durable.TryRegister(e, "named", fn, nil)
		require.ErrorContains(t, err, "already registered")
		_, err = durable.TryRegister(e, "", fn, nil)
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		require.Panics(t, func() { durable.Register(e, strings.Repeat("n", 300), fn, nil) })
	})
	_, err = durable.TryRegister(e, "late", func(wctx durable.Context, in string) (string, error) { return in, nil }, nil)
	require.ErrorContains(t, err, "before Launch")

	ctx := ctxT(t)
	for _, id := range []string{strings.Repeat("i", 256), "nul\x00id", "bad-utf8-\xff"} {
		_, err := wf.Start(ctx, "x", &durable.StartOpts{ID: id})
		require.ErrorIs(t, err, durable.ErrInvalidArgument, "id %q", id)
	}
	// Hostile but valid IDs and step names are stored as data, never as SQL.
	for _, id := range []string{`'; DROP TABLE workflows; --`, `"quoted" \ back`, "ünïcødé-✓-😀"} {
		h, err := wf.Start(ctx, `x'); DELETE FROM steps; --`, &durable.StartOpts{ID: id})
		require.NoError(t, err)
		out, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, `ran x'); DELETE FROM steps; --`, out)
		h2, err := wf.Handle(ctx, id)
		require.NoError(t, err)
		require.Equal(t, id, h2.ID())
	}
}

func TestStepNameRequired(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var wf *durable.Workflow[int, int]
	b.engine(t, nil, func(e *durable.Engine) {
		wf = durable.Register(e, "empty-step", func(wctx durable.Context, in int) (int, error) {
			return durable.Step(wctx, "", func(ctx context.Context) (int, error) { return 1, nil }, nil)
		}, nil)
	})
	ctx := ctxT(t)
	h, err := wf.Start(ctx, 1, nil)
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.ErrorContains(t, err, "step name is empty")
}

func TestUndecodableStoredInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A client (never launched) starts runs with a string input...
	client, err := durable.New(b.pool, b.cfg)
	require.NoError(t, err)
	oldShape := durable.Register(client, "shape", func(wctx durable.Context, in string) (int, error) { return 0, nil }, nil)

	// ...which the executor's code now expects as a struct.
	type shape struct{ N int }
	var newShape *durable.Workflow[shape, int]
	var ok *durable.Workflow[int, int]
	b.engine(t, func(c *durable.Config) { c.ExecutorID = "executor" }, func(e *durable.Engine) {
		newShape = durable.Register(e, "shape", func(wctx durable.Context, in shape) (int, error) { return in.N, nil }, nil)
		ok = durable.Register(e, "ok", func(wctx durable.Context, in int) (int, error) { return in * 2, nil }, nil)
	})
	ctx := ctxT(t)
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = oldShape.StartTx(ctx, tx, "not a struct", &durable.StartOpts{ID: "old-shape"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	h, err := newShape.Handle(ctx, "old-shape")
	require.NoError(t, err)
	_, err = h.Result(ctx)
	var de *durable.RecordedError
	require.ErrorAs(t, err, &de)
	require.ErrorIs(t, err, durable.ErrDecode)
	require.Contains(t, err.Error(), "cannot decode stored input")

	h2, err := ok.Start(ctx, 21, nil)
	require.NoError(t, err)
	n, err := h2.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 42, n, "other workflows keep running")
}

func TestNonDeterministicReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan string, 1)
	var v1 *durable.Workflow[int, int]
	e1 := b.engine(t, func(c *durable.Config) { c.ExecutorID = "v1" }, func(e *durable.Engine) {
		v1 = durable.Register(e, "evolving", func(wctx durable.Context, in int) (int, error) {
			if _, err := durable.Step(wctx, "alpha", func(ctx context.Context) (int, error) { return 1, nil }, nil); err != nil {
				return 0, err
			}
			return 0, blockUntilStopped(wctx, started)
		}, nil)
	})
	ctx := ctxT(t)
	_, err := v1.Start(ctx, 1, &durable.StartOpts{ID: "evolving-1"})
	require.NoError(t, err)
	<-started
	hardStop(t, e1)

	// The new code renamed the first step: replay must stop, not re-run.
	var betaRuns atomic.Int32
	var v2, other *durable.Workflow[int, int]
	b.engine(t, func(c *durable.Config) { c.ExecutorID = "v2" }, func(e *durable.Engine) {
		v2 = durable.Register(e, "evolving", func(wctx durable.Context, in int) (int, error) {
			return durable.Step(wctx, "beta", func(ctx context.Context) (int, error) { betaRuns.Add(1); return 2, nil }, nil)
		}, nil)
		other = durable.Register(e, "other", func(wctx durable.Context, in int) (int, error) { return in, nil }, nil)
	})
	h, err := v2.Handle(ctx, "evolving-1")
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.ErrorIs(t, err, durable.ErrNonDeterministic)
	require.Contains(t, err.Error(), `step 0 is recorded as "alpha" but the code called "beta"`)
	require.Zero(t, betaRuns.Load())
	st, err := h.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, durable.StatusError, st)

	h2, err := other.Start(ctx, 7, nil)
	require.NoError(t, err)
	n, err := h2.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 7, n)
}

func TestUnregisteredWorkflowOnRecovery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan string, 2)
	var ghost, real1 *durable.Workflow[int, string]
	body := func(name string) func(wctx durable.Context, in int) (string, error) {
		return func(wctx durable.Context, in int) (string, error) {
			if in == 0 {
				return "", blockUntilStopped(wctx, started)
			}
			return name + " done", nil
		}
	}
	e1 := b.engine(t, func(c *durable.Config) { c.ExecutorID = "x" }, func(e *durable.Engine) {
		ghost = durable.Register(e, "ghost", body("ghost"), nil)
		real1 = durable.Register(e, "real", body("real"), nil)
	})
	ctx := ctxT(t)
	_, err := ghost.Start(ctx, 0, &durable.StartOpts{ID: "ghost-1"})
	require.NoError(t, err)
	_, err = real1.Start(ctx, 0, &durable.StartOpts{ID: "real-1"})
	require.NoError(t, err)
	<-started
	<-started
	hardStop(t, e1)

	// The same executor restarts with a binary that lacks "ghost", and
	// its input now makes "real" finish.
	var real2 *durable.Workflow[int, string]
	b.engine(t, func(c *durable.Config) { c.ExecutorID = "x" }, func(e *durable.Engine) {
		real2 = durable.Register(e, "real", func(wctx durable.Context, in int) (string, error) { return "real done", nil }, nil)
	})
	h, err := real2.Handle(ctx, "real-1")
	require.NoError(t, err)
	out, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "real done", out)
	require.Contains(t, b.logs.String(), "not registered in this binary")
	require.Contains(t, b.logs.String(), "ghost-1")

	// An executor that has "ghost" registered picks it up.
	var ghost3 *durable.Workflow[int, string]
	b.engine(t, func(c *durable.Config) { c.ExecutorID = "y" }, func(e *durable.Engine) {
		ghost3 = durable.Register(e, "ghost", func(wctx durable.Context, in int) (string, error) { return "ghost done", nil }, nil)
	})
	h3, err := ghost3.Handle(ctx, "ghost-1")
	require.NoError(t, err)
	out, err = h3.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "ghost done", out)
}

func TestStartTxCommitAndRollback(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ran atomic.Int32
	var wf *durable.Workflow[string, string]
	b.engine(t, nil, func(e *durable.Engine) {
		wf = durable.Register(e, "tx-started", func(wctx durable.Context, in string) (string, error) {
			ran.Add(1)
			return "hello " + in, nil
		}, nil)
	})
	ctx := ctxT(t)
	_, err := b.pool.Exec(ctx, fmt.Sprintf("CREATE TABLE %s.users (name text)", b.schema))
	require.NoError(t, err)

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, fmt.Sprintf("INSERT INTO %s.users VALUES ('rolled')", b.schema))
	require.NoError(t, err)
	_, err = wf.StartTx(ctx, tx, "rolled", &durable.StartOpts{ID: "rolled-back"})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	_, err = wf.Handle(ctx, "rolled-back")
	require.ErrorIs(t, err, durable.ErrWorkflowNotFound)

	tx, err = b.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, fmt.Sprintf("INSERT INTO %s.users VALUES ('kept')", b.schema))
	require.NoError(t, err)
	h, err := wf.StartTx(ctx, tx, "kept", &durable.StartOpts{ID: "committed"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	out, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "hello kept", out)
	require.EqualValues(t, 1, ran.Load())
}

func TestChildWorkflows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var parent *durable.Workflow[int, int]
	var child *durable.Workflow[int, int]
	b.engine(t, nil, func(e *durable.Engine) {
		child = durable.Register(e, "square", func(wctx durable.Context, in int) (int, error) { return in * in, nil }, nil)
		parent = durable.Register(e, "sum-squares", func(wctx durable.Context, n int) (int, error) {
			var hs []*durable.Handle[int]
			for i := 1; i <= n; i++ {
				h, err := child.StartChild(wctx, i, nil)
				if err != nil {
					return 0, err
				}
				hs = append(hs, h)
			}
			sum := 0
			for _, h := range hs {
				v, err := h.Result(wctx)
				if err != nil {
					return 0, err
				}
				sum += v
			}
			return sum, nil
		}, nil)
	})
	ctx := ctxT(t)
	h, err := parent.Start(ctx, 4, &durable.StartOpts{ID: "p"})
	require.NoError(t, err)
	sum, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 1+4+9+16, sum)
	ch, err := child.Handle(ctx, "p/2") // deterministic ID: parent + position
	require.NoError(t, err)
	v, err := ch.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 9, v)
}

func TestRecordedErrorsKeepTheirCause(t *testing.T) {
	t.Parallel()
	b := setup(t)
	causes := map[string]error{
		"deadline":  fmt.Errorf("model call: %w", context.DeadlineExceeded),
		"cancelled": fmt.Errorf("user gave up: %w", context.Canceled),
		"permanent": durable.Permanent(errors.New("invalid card")),
		"plain":     errors.New("plain failure"),
	}
	var wf *durable.Workflow[string, int]
	b.engine(t, nil, func(e *durable.Engine) {
		wf = durable.Register(e, "fails", func(wctx durable.Context, in string) (int, error) { return 0, causes[in] }, nil)
	})
	ctx := ctxT(t)
	for name := range causes {
		h, err := wf.Start(ctx, name, &durable.StartOpts{ID: "fail-" + name})
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.Error(t, err)
	}
	// A second engine (another process, as far as the database knows)
	// reads the errors back.
	var reader *durable.Workflow[string, int]
	b.engine(t, func(c *durable.Config) { c.ExecutorID = "reader" }, func(e *durable.Engine) {
		reader = durable.Register(e, "fails", func(wctx durable.Context, in string) (int, error) { return 0, nil }, nil)
	})
	get := func(name string) error {
		h, err := reader.Handle(ctx, "fail-"+name)
		require.NoError(t, err)
		_, err = h.Result(ctx)
		return err
	}
	require.ErrorIs(t, get("deadline"), context.DeadlineExceeded)
	require.ErrorIs(t, get("cancelled"), context.Canceled)
	require.ErrorIs(t, get("cancelled"), durable.ErrCancelled)
	require.ErrorIs(t, get("permanent"), durable.ErrPermanent)
	require.Equal(t, "invalid card", get("permanent").Error())
	plain := get("plain")
	require.NotErrorIs(t, plain, durable.ErrPermanent)
	require.Equal(t, "plain failure", plain.Error())
}

func TestReplayReturnsRecordedValues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan string, 1)
	type seen struct {
		Now time.Time
		ID  string
	}
	var mu sync.Mutex
	var firstSeen seen
	var effectRuns atomic.Int32
	var resolved atomic.Int32
	body := func(block bool) func(wctx durable.Context, in int) (seen, error) {
		return func(wctx durable.Context, in int) (seen, error) {
			now, err := durable.Now(wctx)
			if err != nil {
				return seen{}, err
			}
			id, err := durable.NewID(wctx)
			if err != nil {
				return seen{}, err
			}
			mu.Lock()
			if firstSeen.ID == "" {
				firstSeen = seen{now, id}
			}
			mu.Unlock()
			// An effect whose provider cannot dedupe: the first run dies
			// in the middle of it.
			_, err = durable.IntentStep(wctx, "wire-money", func(ctx context.Context) (string, error) {
				effectRuns.Add(1)
				if block {
					started <- "x"
					<-ctx.Done()
					return "", ctx.Err()
				}
				return "sent", nil
			}, func(ctx context.Context) (string, error) {
				resolved.Add(1)
				return "confirmed by provider", nil
			}, nil)
			if err != nil {
				return seen{}, err
			}
			return seen{now, id}, nil
		}
	}
	var wf1 *durable.Workflow[int, seen]
	e1 := b.engine(t, func(c *durable.Config) { c.ExecutorID = "first" }, func(e *durable.Engine) {
		wf1 = durable.Register(e, "recorded", body(true), nil)
	})
	ctx := ctxT(t)
	_, err := wf1.Start(ctx, 1, &durable.StartOpts{ID: "rec-1"})
	require.NoError(t, err)
	<-started
	hardStop(t, e1)

	var wf2 *durable.Workflow[int, seen]
	b.engine(t, func(c *durable.Config) { c.ExecutorID = "second" }, func(e *durable.Engine) {
		wf2 = durable.Register(e, "recorded", body(false), nil)
	})
	h, err := wf2.Handle(ctx, "rec-1")
	require.NoError(t, err)
	got, err := h.Result(ctx)
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.True(t, firstSeen.Now.Equal(got.Now), "Now replays the recorded time")
	require.Equal(t, firstSeen.ID, got.ID, "NewID replays the recorded ID")
	require.EqualValues(t, 1, effectRuns.Load(), "the interrupted effect is resolved, not blindly repeated")
	require.EqualValues(t, 1, resolved.Load())
}

// TestDatabaseErrorFailsRunVisibly: a checkpoint the database refuses for
// good (here its table is gone for a moment) fails the run with that error
// instead of leaving it pending forever on a live executor.
func TestDatabaseErrorFailsRunVisibly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var wf *durable.Workflow[int, int]
	b.engine(t, func(c *durable.Config) { hooks.Set(c, hooks.Knobs{NoGroupCommit: true}) }, func(e *durable.Engine) {
		wf = durable.Register(e, "doomed-write", func(wctx durable.Context, in int) (int, error) {
			return durable.Step(wctx, "s", func(ctx context.Context) (int, error) {
				close(entered)
				<-release
				return 1, nil
			}, nil)
		}, nil)
	})
	ctx := ctxT(t)
	h, err := wf.Start(ctx, 1, nil)
	require.NoError(t, err)
	<-entered
	_, err = b.pool.Exec(ctx, fmt.Sprintf("ALTER TABLE %q.steps RENAME TO steps_gone", b.schema))
	require.NoError(t, err)
	close(release)
	require.Eventually(t, func() bool {
		st, err := h.Status(ctx)
		return err == nil && st == durable.StatusError
	}, 30*time.Second, 5*time.Millisecond)
	_, err = b.pool.Exec(ctx, fmt.Sprintf("ALTER TABLE %q.steps_gone RENAME TO steps", b.schema))
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.ErrorContains(t, err, "record step 0")
}

// TestUnencodableArguments: a value JSON cannot encode (a channel, a func)
// given as a workflow input, a message, an event value or a stream entry
// is a bad argument: ErrInvalidArgument (and ErrPermanent, as no retry can
// fix it), and nothing is written.
func TestUnencodableArguments(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var wf *durable.Workflow[any, string]
	var emit *durable.Workflow[int, []bool]
	var q *durable.Queue
	eng := b.engine(t, nil, func(e *durable.Engine) {
		q = durable.RegisterQueue(e, "unencodable", nil)
		wf = durable.Register(e, "any-input", func(wctx durable.Context, in any) (string, error) { return "ran", nil }, nil)
		emit = durable.Register(e, "emit", func(wctx durable.Context, in int) ([]bool, error) {
			ev := durable.SetEvent(wctx, "k", make(chan int))
			st := durable.StreamWrite(wctx, "k", func() {})
			return []bool{errors.Is(ev, durable.ErrInvalidArgument), errors.Is(st, durable.ErrInvalidArgument)}, nil
		}, nil)
	})
	ctx := ctxT(t)
	requireBad := func(err error, what string) {
		t.Helper()
		require.ErrorIs(t, err, durable.ErrInvalidArgument, what)
		require.ErrorIs(t, err, durable.ErrPermanent, what)
		require.ErrorContains(t, err, "json: unsupported", what)
	}
	for i, in := range []any{make(chan int), func() {}, struct{ F func() }{}} {
		id := fmt.Sprintf("bad-input-%d", i)
		_, err := wf.Start(ctx, in, &durable.StartOpts{ID: id})
		requireBad(err, "Start")
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = wf.StartTx(ctx, tx, in, &durable.StartOpts{ID: id})
		requireBad(err, "StartTx")
		require.NoError(t, tx.Commit(ctx))
		_, err = wf.Enqueue(ctx, q, in, &durable.EnqueueOpts{ID: id})
		requireBad(err, "Enqueue")
		_, err = wf.Handle(ctx, id)
		require.ErrorIs(t, err, durable.ErrWorkflowNotFound, "nothing is written")
	}

	h, err := emit.Start(ctx, 1, &durable.StartOpts{ID: "emit"})
	require.NoError(t, err)
	got, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, []bool{true, true}, got, "SetEvent and StreamWrite")
	// The encoding fails before the run's status is read: a bad message
	// for a finished run is still a bad argument.
	requireBad(durable.Send(ctx, eng, "emit", "t", make(chan int), nil), "Send")
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	requireBad(durable.SendTx(ctx, eng, tx, "emit", "t", func() {}, nil), "SendTx")
	require.NoError(t, tx.Rollback(ctx))
}
