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

// workflowRetry is the policy of the retry tests' workflows: three
// attempts, 100 ms then 200 ms apart, no jitter.
var workflowRetry = &durable.RetryPolicy{MaxAttempts: 3, BaseDelay: 100 * time.Millisecond, Jitter: -1}

// TestWorkflowRetry: a run whose code fails is run again from its last
// checkpoint after the policy's backoff: the step recorded before the
// failure is replayed, not run again; the failed step runs again; the
// retries are stored with the run and shown by Inspect.
func TestWorkflowRetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var before, flaky atomic.Int32
	var wf *durable.Workflow[int, string]
	e := b.engine(t, nil, func(e *durable.Engine) {
		wf = durable.Register(e, "retried", func(wctx durable.Context, _ int) (string, error) {
			if _, err := durable.Step(wctx, "before", func(context.Context) (int, error) { return int(before.Add(1)), nil }, nil); err != nil {
				return "", err
			}
			return durable.Step(wctx, "flaky", func(context.Context) (string, error) {
				if n := flaky.Add(1); n < 3 {
					return "", fmt.Errorf("provider down (call %d)", n)
				}
				return "ok", nil
			}, &durable.StepOpts{Retry: &durable.RetryPolicy{MaxAttempts: 1}})
		}, &durable.WorkflowOpts{Retry: workflowRetry})
	})
	ctx := ctxT(t)
	start := time.Now()
	h, err := wf.Start(ctx, 0, &durable.StartOpts{ID: "r1"})
	require.NoError(t, err)
	out, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "ok", out)
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "the backoff was waited: 100 ms, then 200 ms")
	require.EqualValues(t, 1, before.Load(), "the step recorded before the failure is replayed")
	require.EqualValues(t, 3, flaky.Load())
	info, err := e.Inspect(ctx, "r1")
	require.NoError(t, err)
	require.Equal(t, 2, info.Retries)
	require.Equal(t, durable.StatusSuccess, info.Status)
	steps, err := e.ListSteps(ctx, "r1")
	require.NoError(t, err)
	require.Len(t, steps, 2)
	require.Equal(t, "done", steps[1].Status, "the failed step's record was replaced by the retry's")
}

// TestWorkflowRetrySpent: once the policy's attempts are spent the run
// fails with the last error, saying how many attempts were made, and only
// then runs its compensations (once); a Permanent failure is not retried.
func TestWorkflowRetrySpent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls, undos atomic.Int32
	var wf, plain *durable.Workflow[bool, string]
	e := b.engine(t, nil, func(e *durable.Engine) {
		plain = durable.Register(e, "plain", func(wctx durable.Context, _ bool) (string, error) {
			return durable.Step(wctx, "call", func(context.Context) (string, error) {
				calls.Add(1)
				return "", errors.New("provider down")
			}, &durable.StepOpts{Retry: &durable.RetryPolicy{MaxAttempts: 1}})
		}, &durable.WorkflowOpts{Retry: workflowRetry})
		wf = durable.Register(e, "doomed", func(wctx durable.Context, permanent bool) (string, error) {
			if _, err := durable.Step(wctx, "reserve", func(context.Context) (int, error) { return 1, nil }, nil); err != nil {
				return "", err
			}
			if err := durable.Compensate(wctx, "release", func(context.Context) error { undos.Add(1); return nil }, nil); err != nil {
				return "", err
			}
			return durable.Step(wctx, "call", func(context.Context) (string, error) {
				calls.Add(1)
				if permanent {
					return "", durable.Permanent(errors.New("card stolen"))
				}
				return "", errors.New("provider down")
			}, &durable.StepOpts{Retry: &durable.RetryPolicy{MaxAttempts: 1}})
		}, &durable.WorkflowOpts{Retry: workflowRetry})
	})
	ctx := ctxT(t)
	h, err := wf.Start(ctx, false, &durable.StartOpts{ID: "spent"})
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.ErrorContains(t, err, `workflow "spent" failed after 3 attempts`)
	require.ErrorContains(t, err, "provider down")
	require.ErrorContains(t, err, "1 undone")
	require.EqualValues(t, 3, calls.Load())
	require.EqualValues(t, 1, undos.Load(), "compensations run once, after the last attempt")
	info, err := e.Inspect(ctx, "spent")
	require.NoError(t, err)
	require.Equal(t, durable.StatusError, info.Status)
	require.Equal(t, 2, info.Retries)

	calls.Store(0)
	hp, err := plain.Start(ctx, false, &durable.StartOpts{ID: "plain"})
	require.NoError(t, err)
	_, err = hp.Result(ctx)
	require.ErrorContains(t, err, "failed after 3 attempts")

	calls.Store(0)
	h, err = wf.Start(ctx, true, &durable.StartOpts{ID: "permanent"})
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.ErrorIs(t, err, durable.ErrPermanent)
	require.NotContains(t, err.Error(), "attempts")
	require.EqualValues(t, 1, calls.Load(), "a Permanent failure is final")
	info, err = e.Inspect(ctx, "permanent")
	require.NoError(t, err)
	require.Zero(t, info.Retries)

	// A manual Resume gives the run a new budget of retries.
	calls.Store(0)
	require.NoError(t, e.Resume(ctx, "plain", &durable.ResumeOpts{RetryFailedStep: true}))
	hp, err = plain.Handle(ctx, "plain")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := e.Inspect(ctx, "plain")
		return err == nil && info.Status == durable.StatusError
	}, 30*time.Second, 10*time.Millisecond)
	_, err = hp.Result(ctx)
	require.ErrorContains(t, err, "failed after 3 attempts")
	require.EqualValues(t, 3, calls.Load())
}

// TestWorkflowRetryBadPolicy: an invalid policy fails the registration
// with ErrInvalidArgument naming the field.
func TestWorkflowRetryBadPolicy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, nil, func(e *durable.Engine) {
		_, err := durable.TryRegister(e, "bad", func(durable.Context, int) (int, error) { return 0, nil },
			&durable.WorkflowOpts{Retry: &durable.RetryPolicy{Factor: 0.5}})
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		require.ErrorContains(t, err, "WorkflowOpts.Retry.Factor")
	})
}
