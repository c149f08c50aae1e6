package durable_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// TestStepTimeout: StepOpts.Timeout bounds each attempt through the
// step's context: an attempt that waits on it ends at the timeout and is
// retried by the policy, the last attempt's error matches
// context.DeadlineExceeded and is recorded with the attempts made, and the
// workflow goes on (a step's timeout is the step's, not the run's).
func TestStepTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int32
	var wf *durable.Workflow[int, string]
	e := b.engine(t, nil, func(e *durable.Engine) {
		wf = durable.Register(e, "timed", func(wctx durable.Context, _ int) (string, error) {
			_, err := durable.Step(wctx, "slow", func(ctx context.Context) (int, error) {
				calls.Add(1)
				select {
				case <-ctx.Done():
					return 0, ctx.Err()
				case <-time.After(10 * time.Second): // only without the timeout
					return 1, nil
				}
			}, &durable.StepOpts{Timeout: 100 * time.Millisecond, Retry: &durable.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Millisecond}})
			if !errors.Is(err, context.DeadlineExceeded) {
				return "", fmt.Errorf("slow step: want its timeout, got %v", err)
			}
			return durable.Step(wctx, "quick", func(ctx context.Context) (string, error) {
				if _, ok := ctx.Deadline(); !ok {
					return "", errors.New("a step with a timeout has no deadline on its context")
				}
				return "ok", nil
			}, &durable.StepOpts{Timeout: time.Minute})
		}, nil)
	})
	ctx := ctxT(t)
	h, err := wf.Start(ctx, 0, &durable.StartOpts{ID: "timed"})
	require.NoError(t, err)
	out, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "ok", out)
	require.EqualValues(t, 3, calls.Load(), "each attempt ended by its timeout, then retried")
	steps, err := e.ListSteps(ctx, "timed")
	require.NoError(t, err)
	require.Len(t, steps, 2)
	require.Equal(t, "slow", steps[0].Name)
	require.Equal(t, "error", steps[0].Status)
	require.Equal(t, 3, steps[0].Attempts)
	require.Equal(t, "done", steps[1].Status)
}
