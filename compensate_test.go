package durable_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// undoLog records the compensations a test's workflows ran, with the
// idempotency key of each call.
type undoLog struct {
	mu    sync.Mutex
	calls []string // name@key
}

func (l *undoLog) add(ctx context.Context, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, name+"@"+durable.IdempotencyKey(ctx))
}

func (l *undoLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.calls...)
}

// sagaOpts shape the test saga: how its last step ends, and how the
// compensation of its first step ends.
type sagaOpts struct {
	confirm     func(ctx context.Context) error
	refundErr   error  // what the refund returns
	undoName    string // of the refund; "" is "refund"
	compensated *undoLog
}

// registerTestSaga registers "saga": reserve, charge, confirm, with an
// undo registered after each of the first two.
func registerTestSaga(e *durable.Engine, name string, o sagaOpts) *durable.Workflow[int, string] {
	return durable.Register(e, name, func(wctx durable.Context, amount int) (string, error) {
		noRetry := &durable.StepOpts{Retry: &durable.RetryPolicy{MaxAttempts: 1}}
		if _, err := durable.Step(wctx, "reserve", func(context.Context) (string, error) { return "seat-1", nil }, nil); err != nil {
			return "", err
		}
		if err := durable.Compensate(wctx, "release", func(ctx context.Context) error {
			o.compensated.add(ctx, "release")
			return ctx.Err() // as a call with ctx would
		}, noRetry); err != nil {
			return "", err
		}
		if _, err := durable.Step(wctx, "charge", func(context.Context) (int, error) { return amount, nil }, nil); err != nil {
			return "", err
		}
		if err := durable.Compensate(wctx, cmp.Or(o.undoName, "refund"), func(ctx context.Context) error {
			o.compensated.add(ctx, "refund")
			return cmp.Or(o.refundErr, ctx.Err())
		}, noRetry); err != nil {
			return "", err
		}
		_, err := durable.Step(wctx, "confirm", func(ctx context.Context) (string, error) { return "", o.confirm(ctx) }, noRetry)
		if err != nil {
			return "", err
		}
		return "booked", nil
	}, nil)
}

var errNoSeats = errors.New("the airline said no")

// TestCompensationsRunInReverse: a run that fails after two steps that
// registered compensations runs them as steps, the latest first, each
// once with its own idempotency key, and records the failure as a
// CompensationError that still matches the failure's kind; a run that
// succeeds runs none.
func TestCompensationsRunInReverse(t *testing.T) {
	t.Parallel()
	b := setup(t)
	failing, fine := &undoLog{}, &undoLog{}
	var bad, good *durable.Workflow[int, string]
	e := b.engine(t, nil, func(e *durable.Engine) {
		bad = registerTestSaga(e, "saga-bad", sagaOpts{compensated: failing,
			confirm: func(context.Context) error { return durable.Permanent(errNoSeats) }})
		good = registerTestSaga(e, "saga-good", sagaOpts{compensated: fine,
			confirm: func(context.Context) error { return nil }})
	})
	ctx := ctxT(t)

	h, err := good.Start(ctx, 10, &durable.StartOpts{ID: "good"})
	require.NoError(t, err)
	out, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "booked", out)
	require.Empty(t, fine.get(), "a run that succeeds compensates nothing")

	h, err = bad.Start(ctx, 10, &durable.StartOpts{ID: "bad"})
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.Error(t, err)
	require.ErrorIs(t, err, durable.ErrPermanent, "the failure's kind is kept")
	require.NotErrorIs(t, err, durable.ErrCompensationFailed)
	require.Contains(t, err.Error(), "ran its compensations (2 undone)")
	require.Contains(t, err.Error(), errNoSeats.Error())
	require.Equal(t, []string{"refund@bad/3", "release@bad/4"}, failing.get(), "latest first, one call each, keyed by their own positions")

	steps, err := e.ListSteps(ctx, "bad")
	require.NoError(t, err)
	var names, statuses []string
	for _, s := range steps {
		names, statuses = append(names, s.Name), append(statuses, s.Status)
	}
	require.Equal(t, []string{"reserve", "charge", "confirm", "undo:refund", "undo:release"}, names)
	require.Equal(t, []string{"done", "done", "error", "done", "done"}, statuses)
}

// TestCompensationFailureSurfaced: a compensation that fails for good is
// recorded as a failed step, the compensations after it still run, and the
// run's error matches ErrCompensationFailed, live and read back.
func TestCompensationFailureSurfaced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	log := &undoLog{}
	var wf *durable.Workflow[int, string]
	e := b.engine(t, nil, func(e *durable.Engine) {
		wf = registerTestSaga(e, "saga", sagaOpts{compensated: log, refundErr: durable.Permanent(errors.New("card already closed")),
			confirm: func(context.Context) error { return errNoSeats }})
	})
	ctx := ctxT(t)
	h, err := wf.Start(ctx, 10, &durable.StartOpts{ID: "s1"})
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.ErrorIs(t, err, durable.ErrCompensationFailed)
	require.Contains(t, err.Error(), "card already closed")
	require.Contains(t, err.Error(), "1 undone, 1 failed")
	require.Equal(t, []string{"refund@s1/3", "release@s1/4"}, log.get())

	// Read back by another handle: the recorded error keeps the kind.
	h2, err := wf.Handle(ctx, "s1")
	require.NoError(t, err)
	_, err = h2.Result(ctx)
	require.ErrorIs(t, err, durable.ErrCompensationFailed)

	steps, err := e.ListSteps(ctx, "s1")
	require.NoError(t, err)
	require.Len(t, steps, 5)
	require.Equal(t, "undo:refund", steps[3].Name)
	require.Equal(t, "error", steps[3].Status, "the failed undo is recorded")
	require.Equal(t, "done", steps[4].Status, "the undo after a failed one still runs")
}

// TestCompensationsPastDeadline: a run that passes its Timeout while a
// step waits on its context compensates what it did, although no step may
// start past the deadline: the compensations run without it, and the run
// fails with a deadline error.
func TestCompensationsPastDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	log := &undoLog{}
	var wf *durable.Workflow[int, string]
	e := b.engine(t, nil, func(e *durable.Engine) {
		wf = registerTestSaga(e, "saga", sagaOpts{compensated: log, confirm: func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}})
	})
	ctx := ctxT(t)
	h, err := wf.Start(ctx, 10, &durable.StartOpts{ID: "late", Timeout: 300 * time.Millisecond})
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "2 undone")
	require.Equal(t, []string{"refund@late/3", "release@late/4"}, log.get(), "the cut step's position is not recorded: the undos follow it")
	steps, err := e.ListSteps(ctx, "late")
	require.NoError(t, err)
	require.Len(t, steps, 4)
}

// TestCompensateBadInput: a compensation without a function or with a bad
// name fails the call with ErrInvalidArgument and registers nothing.
func TestCompensateBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var wf *durable.Workflow[int, string]
	b.engine(t, nil, func(e *durable.Engine) {
		wf = durable.Register(e, "bad-undo", func(wctx durable.Context, _ int) (string, error) {
			if err := durable.Compensate(wctx, "x", nil, nil); !errors.Is(err, durable.ErrInvalidArgument) {
				return "", errors.New("a nil undo was accepted")
			}
			if err := durable.Compensate(wctx, "", func(context.Context) error { return nil }, nil); !errors.Is(err, durable.ErrInvalidArgument) {
				return "", errors.New("an empty name was accepted")
			}
			return "", errors.New("fail with nothing registered")
		}, nil)
	})
	ctx := ctxT(t)
	h, err := wf.Start(ctx, 0, nil)
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.EqualError(t, err, "fail with nothing registered")
}

// TestCompensationsReplay: the history of a compensated run replays with
// its code (the undo steps are replayed too, not run), and code whose
// compensation was renamed diverges from it at the undo step.
func TestCompensationsReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	log := &undoLog{}
	var wf *durable.Workflow[int, string]
	e := b.engine(t, nil, func(e *durable.Engine) {
		wf = registerTestSaga(e, "saga", sagaOpts{compensated: log, confirm: func(context.Context) error { return errNoSeats }})
	})
	ctx := ctxT(t)
	h, err := wf.Start(ctx, 10, &durable.StartOpts{ID: "r1"})
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.Error(t, err)
	hist, err := durable.LoadHistory(ctx, e, "r1")
	require.NoError(t, err)

	replay := func(o sagaOpts) error {
		e := offlineEngine(t)
		registerTestSaga(e, "saga", o)
		return durable.ReplayHistory(ctx, e, hist)
	}
	again := &undoLog{}
	require.NoError(t, replay(sagaOpts{compensated: again, confirm: func(context.Context) error { panic("not replayed") }}))
	require.Empty(t, again.get(), "a replay runs no compensation")
	err = replay(sagaOpts{compensated: again, undoName: "refund-v2", confirm: func(context.Context) error { panic("not replayed") }})
	require.ErrorIs(t, err, durable.ErrNonDeterministic)
	require.ErrorContains(t, err, "undo:refund-v2")
	require.Empty(t, again.get())
}

// TestCompensationsOnCancel: a Cancel with Compensate ends a run waiting
// in memory, and a parked one (woken for it), only after its
// compensations ran, latest first, once each; the run is cancelled and
// its error matches ErrCancelled. A plain Cancel runs none, and a queued
// run that never executed is cancelled at once.
func TestCompensationsOnCancel(t *testing.T) {
	t.Parallel()
	for _, park := range []time.Duration{time.Hour, time.Millisecond} {
		t.Run("park-threshold-"+park.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var log undoLog
			var wf *durable.Workflow[string, string]
			e := b.engine(t, func(c *durable.Config) { c.ParkThreshold = park }, func(e *durable.Engine) {
				wf = durable.Register(e, "booking", func(wctx durable.Context, _ string) (string, error) {
					for _, name := range []string{"hold", "charge"} {
						if _, err := durable.Step(wctx, name, func(context.Context) (int, error) { return 1, nil }, nil); err != nil {
							return "", err
						}
						if err := durable.Compensate(wctx, "undo-"+name, func(ctx context.Context) error {
							log.add(ctx, "undo-"+name)
							return nil
						}, nil); err != nil {
							return "", err
						}
					}
					d, _, err := durable.Recv[string](wctx, "confirm", 10*time.Minute)
					return d, err
				}, nil)
			})
			ctx := ctxT(t)
			waiting := func(id string) {
				require.Eventually(t, func() bool {
					var n int
					_ = b.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q.steps WHERE workflow_id = $1 AND name LIKE 'durable.recv-deadline:%%'`, b.schema), id).Scan(&n)
					return n == 1
				}, 10*time.Second, 2*time.Millisecond)
			}
			status := func(id string) durable.Status {
				info, err := e.Inspect(ctx, id)
				require.NoError(t, err)
				return info.Status
			}

			h, err := wf.Start(ctx, "", &durable.StartOpts{ID: "b1"})
			require.NoError(t, err)
			waiting("b1")
			require.NoError(t, e.Cancel(ctx, "b1", &durable.CancelOpts{Compensate: true}))
			_, err = h.Result(ctx)
			require.ErrorIs(t, err, durable.ErrCancelled)
			require.ErrorContains(t, err, "2 undone")
			require.Equal(t, durable.StatusCancelled, status("b1"))
			require.Equal(t, []string{"undo-charge@b1/" + undoPos(t, b, "b1", "undo:undo-charge"), "undo-hold@b1/" + undoPos(t, b, "b1", "undo:undo-hold")}, log.get())

			// A plain cancel: none.
			h, err = wf.Start(ctx, "", &durable.StartOpts{ID: "b2"})
			require.NoError(t, err)
			waiting("b2")
			require.NoError(t, e.Cancel(ctx, "b2", nil))
			_, err = h.Result(ctx)
			require.ErrorIs(t, err, durable.ErrCancelled)
			require.Len(t, log.get(), 2, "a plain cancel compensates nothing")

			// Cancelled again once ended: a no-op.
			require.NoError(t, e.Cancel(ctx, "b1", &durable.CancelOpts{Compensate: true}))
			require.Len(t, log.get(), 2)
		})
	}

	t.Run("NeverExecuted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		e := b.engine(t, nil, func(e *durable.Engine) {
			durable.Register(e, "queued", func(wctx durable.Context, _ int) (int, error) { return 1, nil }, nil)
		})
		ctx := ctxT(t)
		client, err := durable.NewClient(b.pool, &durable.ClientConfig{Schema: b.schema})
		require.NoError(t, err)
		defer client.Close()
		require.NoError(t, client.DeclareQueue(ctx, "nobody-works-this", nil))
		_, err = client.Enqueue(ctx, "queued", "nobody-works-this", 1, &durable.EnqueueOpts{ID: "q1"})
		require.NoError(t, err)
		require.NoError(t, e.Cancel(ctx, "q1", &durable.CancelOpts{Compensate: true}))
		info, err := e.Inspect(ctx, "q1")
		require.NoError(t, err)
		require.Equal(t, durable.StatusCancelled, info.Status, "nothing to undo: cancelled at once")
	})
}

// undoPos is the position of run id's step name, as its idempotency key
// ends.
func undoPos(t *testing.T, b *bundle, id, name string) string {
	t.Helper()
	var pos int
	require.NoError(t, b.pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT pos FROM %q.steps WHERE workflow_id = $1 AND name = $2`, b.schema), id, name).Scan(&pos))
	return fmt.Sprint(pos)
}
