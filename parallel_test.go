package durable_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// TestGoParallelStepsReplayDeterministically: steps started with Go run
// concurrently, are recorded at the positions of their Go calls whatever
// order they finish in, and replay without running again.
func TestGoParallelStepsReplayDeterministically(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan string, 1)
	var inFlight, maxInFlight atomic.Int32
	var mu sync.Mutex
	runs := map[int]int{}
	body := func(block bool) func(wctx durable.Context, n int) (string, error) {
		return func(wctx durable.Context, n int) (string, error) {
			var fs []*durable.Future[string]
			for i := 0; i < n; i++ {
				fs = append(fs, durable.Go(wctx, fmt.Sprintf("call-%d", i), func(ctx context.Context) (string, error) {
					mu.Lock()
					runs[i]++
					mu.Unlock()
					cur := inFlight.Add(1)
					for {
						m := maxInFlight.Load()
						if cur <= m || maxInFlight.CompareAndSwap(m, cur) {
							break
						}
					}
					time.Sleep(time.Duration(n-i) * 15 * time.Millisecond) // later calls finish first
					inFlight.Add(-1)
					return fmt.Sprintf("r%d@%d", i, durable.StepInfoMust(ctx).Pos), nil
				}, nil))
			}
			out := ""
			for _, f := range fs {
				v, err := f.Wait()
				if err != nil {
					return "", err
				}
				out += v + " "
			}
			if block {
				return out, blockUntilStopped(wctx, started)
			}
			return out, nil
		}
	}
	var wf *durable.Workflow[int, string]
	e1 := b.engine(t, func(c *durable.Config) { c.ExecutorID = "first" }, func(e *durable.Engine) {
		wf = durable.Register(e, "fan-out", body(true), nil)
	})
	ctx := ctxT(t)
	_, err := wf.Start(ctx, 5, &durable.StartOpts{ID: "fan"})
	require.NoError(t, err)
	<-started
	hardStop(t, e1)
	require.Greater(t, maxInFlight.Load(), int32(1), "the steps ran concurrently")

	b.engine(t, func(c *durable.Config) { c.ExecutorID = "second" }, func(e *durable.Engine) {
		wf = durable.Register(e, "fan-out", body(false), nil)
	})
	h, err := wf.Handle(ctx, "fan")
	require.NoError(t, err)
	out, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "r0@0 r1@1 r2@2 r3@3 r4@4 ", out)
	mu.Lock()
	defer mu.Unlock()
	for i := 0; i < 5; i++ {
		require.Equal(t, 1, runs[i], "call %d ran once, replayed after the restart", i)
	}
}

// TestRetryAfterAndResumeFailedStep: a step honours RetryAfter; a run that
// failed on a step can be resumed so that the step runs again.
func TestRetryAfterAndResumeFailedStep(t *testing.T) {
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
}

// TestAwaitChildParks: a parent awaiting a long child parks (no goroutine)
// and is woken by the child's finish; the outcome is recorded and an error
// of the child comes back as recorded.
func TestAwaitChildParks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var parent *durable.Workflow[string, string]
	var child *durable.Workflow[string, string]
	var parentEntries atomic.Int32
	e := b.engine(t, func(c *durable.Config) { c.ParkThreshold = 20 * time.Millisecond }, func(e *durable.Engine) {
		child = durable.Register(e, "approver", func(wctx durable.Context, in string) (string, error) {
			d, ok, err := durable.Recv[string](wctx, "decision", time.Hour)
			if err != nil || !ok {
				return "", fmt.Errorf("recv: %v %v", ok, err)
			}
			if d == "no" {
				return "", durable.Permanent(errors.New("denied by " + in))
			}
			return d + " by " + in, nil
		}, nil)
		parent = durable.Register(e, "requester", func(wctx durable.Context, in string) (string, error) {
			parentEntries.Add(1)
			h, err := child.StartChild(wctx, in, nil)
			if err != nil {
				return "", err
			}
			return h.Await(wctx)
		}, nil)
	})
	ctx := ctxT(t)
	for _, tc := range []struct{ decision, want string }{{"yes", "yes by ann"}, {"no", "denied by ann"}} {
		id := "req-" + tc.decision
		h, err := parent.Start(ctx, "ann", &durable.StartOpts{ID: id})
		require.NoError(t, err)
		parked := fmt.Sprintf(`SELECT count(*) FROM %q.workflows WHERE id = $1 AND executor_id IS NULL AND wait_topic = $2`, b.schema)
		require.Eventually(t, func() bool {
			var n int
			_ = b.pool.QueryRow(ctx, parked, id, "child:"+id+"/0").Scan(&n)
			return n == 1
		}, 10*time.Second, 2*time.Millisecond, "the parent parks on its child")
		require.NoError(t, durable.Send(ctx, e, id+"/0", "decision", tc.decision, nil))
		out, err := h.Result(ctx)
		if tc.decision == "yes" {
			require.NoError(t, err)
			require.Equal(t, tc.want, out)
		} else {
			require.ErrorIs(t, err, durable.ErrPermanent)
			require.ErrorContains(t, err, tc.want)
		}
	}
	require.EqualValues(t, 4, parentEntries.Load(), "each parent ran twice: before parking and on its wake-up")
}
