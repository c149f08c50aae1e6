package durable_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// TestControl covers Cancel, Resume and Fork of runs.
func TestControl(t *testing.T) {
	t.Parallel()

	// CancelResumeFork checks which steps run again after each control.
	t.Run("CancelResumeFork", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var mu sync.Mutex
		runs := map[string]int{} // "runID/step" -> executions
		gate := make(chan struct{})
		var wf *durable.Workflow[int, string]
		var child *durable.Workflow[int, int]
		e := b.engine(t, nil, func(e *durable.Engine) {
			child = durable.Register(e, "child", func(wctx durable.Context, in int) (int, error) {
				return in, durable.Sleep(wctx, time.Hour) // parks
			}, nil)
			wf = durable.Register(e, "three", func(wctx durable.Context, in int) (string, error) {
				out := ""
				for i := 0; i < 3; i++ {
					s, err := durable.Step(wctx, fmt.Sprintf("s%d", i), func(ctx context.Context) (string, error) {
						mu.Lock()
						runs[fmt.Sprintf("%s/%d", wctx.WorkflowID(), i)]++
						mu.Unlock()
						if i == 1 && in == 1 {
							select { // the first execution of step 1 waits to be cancelled
							case <-gate:
							case <-ctx.Done():
								return "", ctx.Err()
							}
						}
						return fmt.Sprint(i), nil
					}, nil)
					if err != nil {
						return "", err
					}
					out += s
				}
				if in == 2 {
					if _, err := child.StartChild(wctx, 7, nil); err != nil {
						return "", err
					}
					return out, durable.Sleep(wctx, time.Hour)
				}
				return out, nil
			}, nil)
		})
		ctx := ctxT(t)
		count := func(id string, step int) int {
			mu.Lock()
			defer mu.Unlock()
			return runs[fmt.Sprintf("%s/%d", id, step)]
		}

		// Cancel while step 1 runs: the step's context is cancelled.
		h, err := wf.Start(ctx, 1, &durable.StartOpts{ID: "c1"})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return count("c1", 1) == 1 }, 10*time.Second, time.Millisecond)
		require.NoError(t, e.Cancel(ctx, "c1", nil))
		_, err = h.Result(ctx)
		require.ErrorIs(t, err, durable.ErrCancelled)
		require.ErrorIs(t, err, context.Canceled)
		st, err := h.Status(ctx)
		require.NoError(t, err)
		require.Equal(t, durable.StatusCancelled, st)
		require.Equal(t, 0, count("c1", 2))

		// Resume: step 0 is replayed, step 1 (never recorded) runs again.
		close(gate)
		require.NoError(t, e.Resume(ctx, "c1", nil))
		out, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "012", out)
		require.Equal(t, 1, count("c1", 0), "step 0 was recorded before the cancel")
		require.Equal(t, 2, count("c1", 1))
		require.Equal(t, 1, count("c1", 2))
		require.ErrorIs(t, e.Resume(ctx, "c1", nil), durable.ErrInvalidArgument, "a successful run cannot be resumed")

		// Fork from step 2: steps 0 and 1 are reused, step 2 runs again.
		fh, err := wf.Fork(ctx, "c1", 2, &durable.ForkOpts{ID: "c1-fork"})
		require.NoError(t, err)
		out, err = fh.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "012", out)
		require.Equal(t, 0, count("c1-fork", 0))
		require.Equal(t, 0, count("c1-fork", 1))
		require.Equal(t, 1, count("c1-fork", 2))
		_, err = wf.Fork(ctx, "c1", 4, nil)
		require.ErrorIs(t, err, durable.ErrInvalidArgument, "fork past the last step")
		_, err = wf.Fork(ctx, "missing", 0, nil)
		require.ErrorIs(t, err, durable.ErrWorkflowNotFound)

		// Cancel a sleeping (parked) run with its children.
		h2, err := wf.Start(ctx, 2, &durable.StartOpts{ID: "c2"})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			s, err := e.ListSteps(ctx, "c2")
			return err == nil && len(s) >= 5
		}, 10*time.Second, 2*time.Millisecond)
		require.NoError(t, e.Cancel(ctx, "c2", &durable.CancelOpts{Children: true}))
		_, err = h2.Result(ctx)
		require.ErrorIs(t, err, durable.ErrCancelled)
		ch, err := child.Handle(ctx, "c2/3")
		require.NoError(t, err)
		_, err = ch.Result(ctx)
		require.ErrorIs(t, err, durable.ErrCancelled)
		require.ErrorIs(t, e.Cancel(ctx, "nope", nil), durable.ErrWorkflowNotFound)
	})

	// CancelBetweenCalls: a run cancelled while its code waits outside a
	// durable call returns on its context; the cancel already recorded its
	// outcome, so the engine writes no finish and logs no lost result, with
	// and without deferred step checkpoints.
	t.Run("CancelBetweenCalls", func(t *testing.T) {
		t.Parallel()
		for _, deferSteps := range []bool{false, true} {
			t.Run(fmt.Sprintf("defer=%v", deferSteps), func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				waiting := make(chan struct{})
				var wf *durable.Workflow[int, int]
				e := b.engine(t, func(c *durable.Config) { c.DeferStepCheckpoints = deferSteps }, func(e *durable.Engine) {
					wf = durable.Register(e, "waits", func(wctx durable.Context, in int) (int, error) {
						if _, err := durable.Step(wctx, "s", func(context.Context) (int, error) { return in, nil }, nil); err != nil {
							return 0, err
						}
						close(waiting)
						<-wctx.Done()
						return 0, wctx.Err()
					}, nil)
				})
				ctx := ctxT(t)
				h, err := wf.Start(ctx, 1, nil)
				require.NoError(t, err)
				<-waiting
				require.NoError(t, e.Cancel(ctx, h.ID(), nil))
				_, err = h.Result(ctx)
				require.ErrorIs(t, err, durable.ErrCancelled)
				require.NoError(t, e.Shutdown(ctx)) // the run's goroutine has ended
				require.NotContains(t, b.logs.String(), "level=WARN", "nothing went wrong")
			})
		}
	})
}
