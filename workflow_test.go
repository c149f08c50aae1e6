package durable_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

type signup struct {
	Email string `json:"email"`
	Seats int    `json:"seats"`
}

type receipt struct {
	Workspace string `json:"workspace"`
	Seats     int    `json:"seats"`
}

func TestWorkflowStepsAndResult(t *testing.T) {
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
}

func TestWorkflowIDConflict(t *testing.T) {
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
}

// TestStartIDInputMismatch: a workflow ID is an idempotency key. Starting
// it again with the same input returns the existing run; with another
// input it fails with a *ConflictError matching ErrInputMismatch and writes
// nothing, unless AcceptDifferentInput says the first start wins. Start,
// StartTx, Enqueue, EnqueueTx and StartChild alike.
func TestStartIDInputMismatch(t *testing.T) {
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
}

// TestChildStartReplayKeepsChild: a parent that crashed after its child's
// insert but before the start's checkpoint starts the child again on
// replay. If the code now computes another input (a new deploy, a changed
// default), the parent still gets its own child back, as the recorded
// start would have given it, not an ErrInputMismatch.
func TestChildStartReplayKeepsChild(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan string, 1)
	var keeper *durable.Workflow[int, int]
	register := func(gen int) func(e *durable.Engine) {
		return func(e *durable.Engine) {
			child := durable.Register(e, "kept", func(wctx durable.Context, in int) (int, error) { return in * 10, nil }, nil)
			keeper = durable.Register(e, "keeper", func(wctx durable.Context, _ int) (int, error) {
				h, err := child.StartChild(wctx, gen, &durable.StartOpts{ID: "kept-child"})
				if err != nil {
					return 0, err
				}
				if gen == 1 {
					return 0, blockUntilStopped(wctx, started)
				}
				return h.Await(wctx)
			}, nil)
		}
	}
	e1 := b.engine(t, func(c *durable.Config) { c.ExecutorID = "gen-1" }, register(1))
	ctx := ctxT(t)
	_, err := keeper.Start(ctx, 0, &durable.StartOpts{ID: "keeper-1"})
	require.NoError(t, err)
	<-started
	hardStop(t, e1)
	// The crash came before the start's checkpoint.
	tag, err := b.pool.Exec(ctx, "DELETE FROM "+pgx.Identifier{b.schema, "steps"}.Sanitize()+
		" WHERE workflow_id = 'keeper-1' AND name = 'child:kept'")
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())

	b.engine(t, func(c *durable.Config) { c.ExecutorID = "gen-2" }, register(2))
	h, err := keeper.Handle(ctx, "keeper-1")
	require.NoError(t, err)
	out, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 10, out, "the child started by the first execution, with its input")
}

func TestStepRetriesAndPermanentErrors(t *testing.T) {
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
}

func TestPanicsAreRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var stepPanic, wfPanic *durable.Workflow[int, int]
	b.engine(t, nil, func(e *durable.Engine) {
		stepPanic = durable.Register(e, "step-panic", func(wctx durable.Context, in int) (int, error) {
			return durable.Step(wctx, "boom", func(ctx context.Context) (int, error) {
				var m map[string]int
				m["x"] = 1 // nil map write
				return 0, nil
			}, nil)
		}, nil)
		wfPanic = durable.Register(e, "wf-panic", func(wctx durable.Context, in int) (int, error) {
			panic("workflow exploded")
		}, nil)
	})
	ctx := ctxT(t)
	for _, wf := range []*durable.Workflow[int, int]{stepPanic, wfPanic} {
		h, err := wf.Start(ctx, 1, nil)
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.ErrorIs(t, err, durable.ErrPanic, wf.Name())
		var rec *durable.RecordedError
		require.ErrorAs(t, err, &rec)
		require.True(t, strings.Contains(rec.Stack, "goroutine"), "stack recorded: %q", rec.Stack)
	}
}

// TestLiveStepValueIsTheReplayedOne checks that a step returns, live, the
// value its replay returns: the decoded record. Outputs of predeclared
// scalar types skip the decoding when live (their JSON round trip is
// exact), so the edge cases of that claim are here: HTML characters that
// JSON escapes, non-ASCII text, invalid UTF-8 (replaced when encoded, so
// decoded live too), extreme integers, floats that print short or long,
// negative zero, an int returned as any (by a plain, a transaction and an
// intent step). The run records them, parks in Recv, and is replayed from
// its records when the message comes.
func TestLiveStepValueIsTheReplayedOne(t *testing.T) {
	t.Parallel()
	b := setup(t)
	type seen struct {
		S             []string
		I64           int64
		U64           uint64
		F64, F64b, NZ float64
		F32           float32
		B             bool
		Named         level
		Struct        pair
		Any           any
		TxAny         any    // the same through a transaction step
		IntentBad     string // and through an intent step
	}
	var mu sync.Mutex
	var execs []seen
	strs := []string{"<a href=\"x\">&amp;</a>", "naïve — ☃ \u2028", "bad \xff\xfe utf8", ""}
	var wf *durable.Workflow[int, int]
	e := b.engine(t, func(c *durable.Config) { c.ParkThreshold = time.Millisecond }, func(e *durable.Engine) {
		wf = durable.Register(e, "values", func(wctx durable.Context, _ int) (int, error) {
			var s seen
			for i, v := range strs {
				got, err := durable.Step(wctx, fmt.Sprint("s", i), func(context.Context) (string, error) { return v, nil }, nil)
				if err != nil {
					return 0, err
				}
				s.S = append(s.S, got)
			}
			var err error
			step := func(f func() error) {
				if err == nil {
					err = f()
				}
			}
			step(func() (e error) {
				s.I64, e = durable.Step(wctx, "i64", func(context.Context) (int64, error) { return math.MinInt64, nil }, nil)
				return e
			})
			step(func() (e error) {
				s.U64, e = durable.Step(wctx, "u64", func(context.Context) (uint64, error) { return math.MaxUint64, nil }, nil)
				return e
			})
			step(func() (e error) {
				s.F64, e = durable.Step(wctx, "f64", func(context.Context) (float64, error) { return 0.1 + 0.2, nil }, nil)
				return e
			})
			step(func() (e error) {
				s.F64b, e = durable.Step(wctx, "f64b", func(context.Context) (float64, error) { return 1e300 * 3.3, nil }, nil)
				return e
			})
			step(func() (e error) {
				s.NZ, e = durable.Step(wctx, "nz", func(context.Context) (float64, error) { return math.Copysign(0, -1), nil }, nil)
				return e
			})
			step(func() (e error) {
				s.F32, e = durable.Step(wctx, "f32", func(context.Context) (float32, error) { return 16777217.5, nil }, nil)
				return e
			})
			step(func() (e error) {
				s.B, e = durable.Step(wctx, "b", func(context.Context) (bool, error) { return true, nil }, nil)
				return e
			})
			step(func() (e error) { // a named type with its own encoding: decoded
				s.Named, e = durable.Step(wctx, "named", func(context.Context) (level, error) { return 7, nil }, nil)
				return e
			})
			step(func() (e error) { // an int in an interface comes back a float64, live too
				s.Any, e = durable.Step(wctx, "any", func(context.Context) (any, error) { return 42, nil }, nil)
				return e
			})
			step(func() (e error) {
				s.TxAny, e = durable.TxStep(wctx, "tx-any", func(context.Context, pgx.Tx) (any, error) { return 42, nil }, nil)
				return e
			})
			step(func() (e error) {
				s.IntentBad, e = durable.IntentStep(wctx, "intent-bad", func(context.Context) (string, error) { return "bad \xff", nil }, nil, nil)
				return e
			})
			step(func() (e error) { // an unexported field is lost by the record, live too
				s.Struct, e = durable.Step(wctx, "struct", func(context.Context) (pair, error) { return pair{A: 1, b: 2}, nil }, nil)
				return e
			})
			if err != nil {
				return 0, err
			}
			mu.Lock()
			execs = append(execs, s)
			mu.Unlock()
			if _, ok, err := durable.Recv[int](wctx, "go", time.Hour); err != nil || !ok {
				return 0, fmt.Errorf("recv: %v %v", ok, err)
			}
			return 1, nil
		}, nil)
	})
	h, err := wf.Start(ctxT(t), 0, nil)
	require.NoError(t, err)
	// Send once the run is parked (a message there before would be
	// received without parking, and nothing would be replayed).
	parked := fmt.Sprintf(`SELECT count(*) FROM %q.workflows WHERE id = $1 AND status = 'pending' AND executor_id IS NULL AND wait_topic = 'go'`, b.schema)
	require.Eventually(t, func() bool {
		var n int
		_ = b.pool.QueryRow(ctxT(t), parked, h.ID()).Scan(&n)
		return n == 1
	}, 20*time.Second, 5*time.Millisecond)
	require.NoError(t, durable.Send(ctxT(t), e, h.ID(), "go", 1, nil))
	_, err = h.Result(ctxT(t))
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, execs, 2, "the run parked and was replayed")
	live, replayed := execs[0], execs[1]
	require.Equal(t, replayed, live)
	require.Equal(t, math.Signbit(replayed.NZ), math.Signbit(live.NZ), "negative zero")
	require.Equal(t, "bad \ufffd\ufffd utf8", live.S[2], "invalid UTF-8 comes back replaced, live as on replay")
	require.Equal(t, level(7+100), live.Named, "a named type's own encoding applies live")
	require.Equal(t, pair{A: 1}, live.Struct)
	require.Equal(t, any(float64(42)), live.Any)
	require.Equal(t, any(float64(42)), live.TxAny)
	require.Equal(t, "bad \ufffd", live.IntentBad)
}

// level encodes itself (plus 100 on the way in), unlike its underlying int.
type level int

func (l level) MarshalJSON() ([]byte, error) { return []byte(strconv.Itoa(int(l))), nil }
func (l *level) UnmarshalJSON(b []byte) error {
	n, err := strconv.Atoi(string(b))
	*l = level(n + 100)
	return err
}

type pair struct {
	A int
	b int
}
