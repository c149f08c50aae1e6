package durable_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/hooks"
)

type signup struct {
	Email string `json:"email"`
	Seats int    `json:"seats"`
}

type receipt struct {
	Workspace string `json:"workspace"`
	Seats     int    `json:"seats"`
}

// TestWorkflow covers a run from its start to its outcome: steps and
// results, IDs and their inputs, starts in a transaction, children,
// deadlines, step retries, panics and a checkpoint the database refuses.
func TestWorkflow(t *testing.T) {
	t.Parallel()

	t.Run("StepsAndResult", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var provisions atomic.Int32
		var onboard *durable.Workflow[signup, receipt]
		e := b.engine(t, nil, func(e *durable.Engine) {
			_, err := b.pool.Exec(ctxT(t), fmt.Sprintf("CREATE TABLE %s.seats (workspace text, n int)", b.schema))
			require.NoError(t, err)
			onboard = durable.Register(e, "onboard", func(wctx durable.Context, in signup) (receipt, error) {
				ws, err := durable.Step(wctx, "provision", func(ctx context.Context) (string, error) {
					provisions.Add(1)
					require.Equal(t, wctx.WorkflowID()+"/0", durable.IdempotencyKey(ctx))
					return "ws-" + in.Email, nil
				}, nil)
				if err != nil {
					return receipt{}, err
				}
				n, err := durable.TxStep(wctx, "record-seats", func(ctx context.Context, tx pgx.Tx) (int, error) {
					_, err := tx.Exec(ctx, fmt.Sprintf("INSERT INTO %s.seats VALUES ($1, $2)", b.schema), ws, in.Seats)
					return in.Seats, err
				}, nil)
				if err != nil {
					return receipt{}, err
				}
				return receipt{Workspace: ws, Seats: n}, nil
			}, nil)
		})
		ctx := ctxT(t)
		h, err := onboard.Start(ctx, signup{Email: "a@example.com", Seats: 3}, &durable.StartOpts{ID: "signup-42"})
		require.NoError(t, err)
		got, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, receipt{Workspace: "ws-a@example.com", Seats: 3}, got)
		st, err := h.Status(ctx)
		require.NoError(t, err)
		require.Equal(t, durable.StatusSuccess, st)

		// Same ID again: the existing run, not a second execution.
		h2, err := onboard.Start(ctx, signup{Email: "a@example.com", Seats: 3}, &durable.StartOpts{ID: "signup-42"})
		require.NoError(t, err)
		got2, err := h2.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, got, got2)
		require.EqualValues(t, 1, provisions.Load())

		var seats int
		require.NoError(t, b.pool.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s.seats", b.schema)).Scan(&seats))
		require.Equal(t, 1, seats)

		// A handle by ID from the typed workflow.
		h3, err := onboard.Handle(ctx, "signup-42")
		require.NoError(t, err)
		got3, err := h3.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, got, got3)
		_, err = onboard.Handle(ctx, "nope")
		require.ErrorIs(t, err, durable.ErrWorkflowNotFound)

		steps, err := e.ListSteps(ctx, "signup-42")
		require.NoError(t, err)
		require.Len(t, steps, 2)
		require.Equal(t, "provision", steps[0].Name)
		require.Equal(t, "done", steps[0].Status)
		require.JSONEq(t, `"ws-a@example.com"`, string(steps[0].Output))
		require.Equal(t, "record-seats", steps[1].Name)
		require.Equal(t, 1, steps[1].Attempts)
		require.False(t, steps[1].FinishedAt.Before(steps[1].StartedAt))
		_, err = e.ListSteps(ctx, "nope")
		require.ErrorIs(t, err, durable.ErrWorkflowNotFound)
	})

	t.Run("IDConflict", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var a, c *durable.Workflow[int, int]
		b.engine(t, nil, func(e *durable.Engine) {
			a = durable.Register(e, "a", func(wctx durable.Context, in int) (int, error) { return in + 1, nil }, nil)
			c = durable.Register(e, "c", func(wctx durable.Context, in int) (int, error) { return in + 2, nil }, nil)
		})
		ctx := ctxT(t)
		h, err := a.Start(ctx, 1, &durable.StartOpts{ID: "x"})
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.NoError(t, err)
		_, err = c.Start(ctx, 1, &durable.StartOpts{ID: "x"})
		var ce *durable.ConflictError
		require.ErrorAs(t, err, &ce)
		require.ErrorIs(t, err, durable.ErrWorkflowConflict)
		require.Equal(t, "a", ce.Existing)
		require.Equal(t, "c", ce.Requested)
	})

	// StartIDInputMismatch: a workflow ID is an idempotency key. Starting
	// it again with the same input returns the existing run; with another
	// input it fails with a *ConflictError matching ErrInputMismatch and writes
	// nothing, unless AcceptDifferentInput says the first start wins. Start,
	// StartTx, Enqueue, EnqueueTx and StartChild alike.
	t.Run("StartIDInputMismatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var wf *durable.Workflow[signup, int]
		var parent *durable.Workflow[int, string]
		var q *durable.Queue
		var runs atomic.Int32
		eng := b.engine(t, nil, func(e *durable.Engine) {
			q = durable.RegisterQueue(e, "idem", nil)
			wf = durable.Register(e, "idem", func(wctx durable.Context, in signup) (int, error) {
				runs.Add(1)
				return in.Seats, nil
			}, nil)
			parent = durable.Register(e, "idem-parent", func(wctx durable.Context, seats int) (string, error) {
				h, err := wf.StartChild(wctx, signup{Email: "child", Seats: seats}, &durable.StartOpts{ID: "idem-child"})
				if errors.Is(err, durable.ErrInputMismatch) {
					return "mismatch", nil
				}
				if err != nil {
					return "", err
				}
				n, err := h.Await(wctx)
				return strconv.Itoa(n), err
			}, nil)
		})
		ctx := ctxT(t)
		one, two := signup{Email: "a@example.com", Seats: 1}, signup{Email: "a@example.com", Seats: 2}
		rows := func() int {
			var n int
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{b.schema, "workflows"}.Sanitize()).Scan(&n))
			return n
		}
		requireMismatch := func(err error, id string) {
			t.Helper()
			var ce *durable.ConflictError
			require.ErrorAs(t, err, &ce)
			require.ErrorIs(t, err, durable.ErrInputMismatch)
			require.ErrorIs(t, err, durable.ErrWorkflowConflict)
			require.True(t, ce.InputDiffers)
			require.Equal(t, id, ce.WorkflowID)
			require.Contains(t, err.Error(), "different input")
		}
		requireInput := func(id string, want signup) {
			t.Helper()
			info, err := eng.Inspect(ctx, id)
			require.NoError(t, err)
			require.JSONEq(t, fmt.Sprintf(`{"email":%q,"seats":%d}`, want.Email, want.Seats), string(info.Input))
		}

		// Start.
		h, err := wf.Start(ctx, one, &durable.StartOpts{ID: "idem-1"})
		require.NoError(t, err)
		n, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		again, err := wf.Start(ctx, one, &durable.StartOpts{ID: "idem-1"})
		require.NoError(t, err, "the same input returns the existing run")
		require.Equal(t, "idem-1", again.ID())
		before := rows()
		_, err = wf.Start(ctx, two, &durable.StartOpts{ID: "idem-1"})
		requireMismatch(err, "idem-1")
		require.Equal(t, before, rows())
		requireInput("idem-1", one)
		first, err := wf.Start(ctx, two, &durable.StartOpts{ID: "idem-1", AcceptDifferentInput: true})
		require.NoError(t, err)
		n, err = first.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n, "the first start won")

		// StartTx: refused inside the transaction, which stays usable.
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.Background()) }() // a failed check must not leave it open
		_, err = wf.StartTx(ctx, tx, two, &durable.StartOpts{ID: "idem-1"})
		requireMismatch(err, "idem-1")
		_, err = wf.StartTx(ctx, tx, one, &durable.StartOpts{ID: "idem-1"})
		require.NoError(t, err)
		_, err = wf.StartTx(ctx, tx, two, &durable.StartOpts{ID: "idem-1", AcceptDifferentInput: true})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, before, rows())

		// Enqueue and EnqueueTx.
		qh, err := wf.Enqueue(ctx, q, one, &durable.EnqueueOpts{ID: "idem-q"})
		require.NoError(t, err)
		_, err = qh.Result(ctx)
		require.NoError(t, err)
		_, err = wf.Enqueue(ctx, q, one, &durable.EnqueueOpts{ID: "idem-q"})
		require.NoError(t, err)
		before = rows()
		_, err = wf.Enqueue(ctx, q, two, &durable.EnqueueOpts{ID: "idem-q"})
		requireMismatch(err, "idem-q")
		_, err = wf.Enqueue(ctx, q, two, &durable.EnqueueOpts{ID: "idem-1"}) // a started run's ID
		requireMismatch(err, "idem-1")
		tx2, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx2.Rollback(context.Background()) }()
		_, err = wf.EnqueueTx(ctx, tx2, q, two, &durable.EnqueueOpts{ID: "idem-q"})
		requireMismatch(err, "idem-q")
		require.NoError(t, tx2.Rollback(ctx))
		_, err = wf.Enqueue(ctx, q, two, &durable.EnqueueOpts{ID: "idem-q", AcceptDifferentInput: true})
		require.NoError(t, err)
		require.Equal(t, before, rows())
		requireInput("idem-q", one)

		// StartChild: the second parent's child start with another input
		// under the same ID is refused where the parent can see it.
		p1, err := parent.Start(ctx, 5, nil)
		require.NoError(t, err)
		out, err := p1.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "5", out)
		p2, err := parent.Start(ctx, 6, nil)
		require.NoError(t, err)
		out, err = p2.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "mismatch", out)
		requireInput("idem-child", signup{Email: "child", Seats: 5})

		require.Equal(t, int32(3), runs.Load(), "idem-1, idem-q and idem-child ran once each")
	})

	t.Run("StartTxCommitAndRollback", func(t *testing.T) {
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
	})

	t.Run("ChildWorkflows", func(t *testing.T) {
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
	})

	t.Run("RunDeadline", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var after atomic.Int32
		var wf *durable.Workflow[int, int]
		b.engine(t, nil, func(e *durable.Engine) {
			wf = durable.Register(e, "slow", func(wctx durable.Context, in int) (int, error) {
				_, err := durable.Step(wctx, "wait", func(ctx context.Context) (int, error) {
					<-ctx.Done() // the step's context ends at the run's deadline
					return 0, ctx.Err()
				}, nil)
				if err != nil {
					return 0, err
				}
				_, err = durable.Step(wctx, "after", func(ctx context.Context) (int, error) { after.Add(1); return 1, nil }, nil)
				return 0, err
			}, nil)
		})
		ctx := ctxT(t)
		h, err := wf.Start(ctx, 1, &durable.StartOpts{Timeout: 200 * time.Millisecond})
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Zero(t, after.Load())
		st, err := h.Status(ctx)
		require.NoError(t, err)
		require.Equal(t, durable.StatusError, st)
		_, err = wf.Start(ctx, 1, &durable.StartOpts{Timeout: -1})
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		_ = fmt.Sprint
	})

	t.Run("StepRetriesAndPermanentErrors", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var calls, permCalls atomic.Int32
		var keysMu sync.Mutex
		var keys []string // the idempotency key each attempt of "flaky" saw
		var wf *durable.Workflow[string, string]
		b.engine(t, nil, func(e *durable.Engine) {
			wf = durable.Register(e, "retry", func(wctx durable.Context, in string) (string, error) {
				out, err := durable.Step(wctx, "flaky", func(ctx context.Context) (string, error) {
					info, _ := durable.StepInfoFrom(ctx)
					keysMu.Lock()
					keys = append(keys, durable.IdempotencyKey(ctx))
					keysMu.Unlock()
					if calls.Add(1) < 3 {
						return "", fmt.Errorf("attempt %d failed", info.Attempt)
					}
					return fmt.Sprintf("ok on attempt %d", info.Attempt), nil
				}, &durable.StepOpts{Retry: &durable.RetryPolicy{MaxAttempts: 5, BaseDelay: 1}})
				if err != nil {
					return "", err
				}
				_, err = durable.Step(wctx, "doomed", func(ctx context.Context) (int, error) {
					permCalls.Add(1)
					return 0, durable.Permanent(errors.New("card declined"))
				}, nil)
				return out, err
			}, nil)
		})
		ctx := ctxT(t)
		h, err := wf.Start(ctx, "x", nil)
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.ErrorIs(t, err, durable.ErrPermanent)
		require.Contains(t, err.Error(), "card declined")
		require.EqualValues(t, 3, calls.Load())
		require.EqualValues(t, 1, permCalls.Load())
		keysMu.Lock()
		require.Equal(t, []string{h.ID() + "/0", h.ID() + "/0", h.ID() + "/0"}, keys, "the idempotency key is the same on every retry")
		keysMu.Unlock()
		st, err := h.Status(ctx)
		require.NoError(t, err)
		require.Equal(t, durable.StatusError, st)
	})

	// RetryAfterAndResumeFailedStep: a step honours RetryAfter; a run that
	// failed on a step can be resumed so that the step runs again.
	t.Run("RetryAfterAndResumeFailedStep", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var calls atomic.Int32
		var providerUp atomic.Bool
		var gaps []time.Duration
		var last time.Time
		var wf *durable.Workflow[int, string]
		e := b.engine(t, nil, func(e *durable.Engine) {
			wf = durable.Register(e, "flaky-provider", func(wctx durable.Context, in int) (string, error) {
				return durable.Step(wctx, "call", func(ctx context.Context) (string, error) {
					now := time.Now()
					if !last.IsZero() {
						gaps = append(gaps, now.Sub(last))
					}
					last = now
					calls.Add(1)
					if !providerUp.Load() {
						return "", durable.RetryAfter(errors.New("429 slow down"), 120*time.Millisecond)
					}
					return "ok", nil
				}, &durable.StepOpts{Retry: &durable.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Second}})
			}, nil)
		})
		ctx := ctxT(t)
		h, err := wf.Start(ctx, 1, &durable.StartOpts{ID: "flaky"})
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.ErrorContains(t, err, "429 slow down")
		require.EqualValues(t, 3, calls.Load())
		for _, g := range gaps {
			require.GreaterOrEqual(t, g, 120*time.Millisecond, "the step waited as told")
		}

		// Resuming replays the recorded failure...
		require.NoError(t, e.Resume(ctx, "flaky", nil))
		_, err = h.Result(ctx)
		require.ErrorContains(t, err, "429 slow down")
		require.EqualValues(t, 3, calls.Load())
		// ...unless asked to retry the failed step.
		providerUp.Store(true)
		require.NoError(t, e.Resume(ctx, "flaky", &durable.ResumeOpts{RetryFailedStep: true}))
		out, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "ok", out)
		require.EqualValues(t, 4, calls.Load())
	})

	t.Run("PanicsAreRecorded", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var stepPanic, txPanic, wfPanic *durable.Workflow[int, int]
		e := b.engine(t, nil, func(e *durable.Engine) {
			stepPanic = durable.Register(e, "step-panic", func(wctx durable.Context, in int) (int, error) {
				return durable.Step(wctx, "boom", func(ctx context.Context) (int, error) {
					var m map[string]int
					m["x"] = 1 // nil map write
					return 0, nil
				}, nil)
			}, nil)
			txPanic = durable.Register(e, "tx-panic", func(wctx durable.Context, in int) (int, error) {
				return durable.TxStep(wctx, "tx-boom", func(ctx context.Context, tx pgx.Tx) (int, error) {
					panic("transaction step exploded")
				}, nil)
			}, nil)
			wfPanic = durable.Register(e, "wf-panic", func(wctx durable.Context, in int) (int, error) {
				panic("workflow exploded")
			}, nil)
		})
		ctx := ctxT(t)
		for _, wf := range []*durable.Workflow[int, int]{stepPanic, txPanic, wfPanic} {
			h, err := wf.Start(ctx, 1, nil)
			require.NoError(t, err)
			_, err = h.Result(ctx)
			require.ErrorIs(t, err, durable.ErrPanic, wf.Name())
			var rec *durable.RecordedError
			require.ErrorAs(t, err, &rec)
			require.True(t, strings.Contains(rec.Stack, "goroutine"), "stack recorded: %q", rec.Stack)
			if wf != wfPanic {
				// The step's own outcome: its panic is the step's error,
				// recorded, and returned to the workflow code.
				steps, err := e.ListSteps(ctx, h.ID())
				require.NoError(t, err)
				require.Len(t, steps, 1)
				require.Equal(t, "error", steps[0].Status)
			}
		}
	})

	// DatabaseErrorFailsRunVisibly: a checkpoint the database refuses for
	// good (here its table is gone for a moment) fails the run with that error
	// instead of leaving it pending forever on a live executor.
	t.Run("DatabaseErrorFailsRunVisibly", func(t *testing.T) {
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
	})
}
