package durable_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// TestOperatorAPIs: what an operator tool (the CLI) uses, from an engine
// that is never launched and registers nothing: Inspect, ListQueues and
// Engine.Fork of a run of a workflow it does not know.
func TestOperatorAPIs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	calls := 0
	var wf *durable.Workflow[string, string]
	var q *durable.Queue
	b.engine(t, nil, func(e *durable.Engine) {
		wf = durable.Register(e, "ops-wf", func(wctx durable.Context, in string) (string, error) {
			a, err := durable.Step(wctx, "a", func(context.Context) (string, error) { return in + "-a", nil }, nil)
			if err != nil {
				return "", err
			}
			return durable.Step(wctx, "b", func(context.Context) (string, error) {
				calls++
				if calls == 1 {
					return "", durable.Permanent(errors.New("b failed"))
				}
				return a + "-b", nil
			}, nil)
		}, nil)
		q = durable.RegisterQueue(e, "ops-q", &durable.QueueOpts{GlobalConcurrency: 3, RateLimit: 5, RatePeriod: time.Second})
		durable.RegisterQueue(e, "ops-idle", nil)
	})
	ctx := ctxT(t)
	ops, err := durable.New(b.pool, b.cfg)
	require.NoError(t, err)

	h, err := wf.Start(ctx, "in", &durable.StartOpts{ID: "ops-1"})
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.Error(t, err)

	info, err := ops.Inspect(ctx, "ops-1")
	require.NoError(t, err)
	require.Equal(t, "ops-wf", info.Name)
	require.Equal(t, durable.StatusError, info.Status)
	require.JSONEq(t, `"in"`, string(info.Input))
	require.ErrorContains(t, info.Error, "b failed")
	_, err = ops.Inspect(ctx, "nope")
	require.ErrorIs(t, err, durable.ErrWorkflowNotFound)
	_, err = ops.Inspect(ctx, "")
	require.ErrorIs(t, err, durable.ErrInvalidArgument)

	// Fork from the failed step: step a is replayed, b runs again.
	newID, err := ops.Fork(ctx, "ops-1", 1, &durable.ForkOpts{ID: "ops-1-fork", AppVersion: "test"})
	require.NoError(t, err)
	require.Equal(t, "ops-1-fork", newID)
	fh, err := wf.Handle(ctx, newID)
	require.NoError(t, err)
	out, err := fh.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "in-a-b", out)
	_, err = ops.Fork(ctx, "ops-1", 1, &durable.ForkOpts{ID: "ops-1-fork"})
	require.ErrorIs(t, err, durable.ErrWorkflowConflict)
	_, err = ops.Fork(ctx, "ops-1", 9, nil)
	require.ErrorIs(t, err, durable.ErrInvalidArgument)
	_, err = ops.Fork(ctx, "nope", 0, nil)
	require.ErrorIs(t, err, durable.ErrWorkflowNotFound)

	// Queues: a paused queue with a backlog.
	require.NoError(t, q.Pause(ctx))
	for range 2 {
		_, err := wf.Enqueue(ctx, q, "queued", nil)
		require.NoError(t, err)
	}
	_, err = wf.Enqueue(ctx, q, "later", &durable.EnqueueOpts{NotBefore: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	list, err := ops.ListQueues(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "ops-idle", list[0].Name)
	require.Equal(t, durable.QueueStats{Name: "ops-q", Ready: 2, Delayed: 1, Paused: true,
		Settings: durable.QueueOpts{GlobalConcurrency: 3, RateLimit: 5, RatePeriod: time.Second}}, list[1])
	one, err := q.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, one, list[1])
}
