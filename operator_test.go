package durable_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// TestWaitTopic: a run blocked in Recv shows the topic it waits on, in
// memory and parked alike, the listing filters by it, and the topic is
// gone once the message is received.
func TestWaitTopic(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var wf *durable.Workflow[time.Duration, string]
	e := b.engine(t, func(c *durable.Config) { c.ParkThreshold = 10 * time.Second }, func(e *durable.Engine) {
		wf = durable.Register(e, "waiter", func(wctx durable.Context, timeout time.Duration) (string, error) {
			msg, _, err := durable.Recv[string](wctx, "approval:1", timeout)
			return msg, err
		}, nil)
	})
	ctx := ctxT(t)

	_, err := e.Inspect(ctx, "nope")
	require.ErrorIs(t, err, durable.ErrWorkflowNotFound)
	_, err = e.Inspect(ctx, "")
	require.ErrorIs(t, err, durable.ErrInvalidArgument)

	inMemory, err := wf.Start(ctx, time.Minute, &durable.StartOpts{ID: "mem"})
	require.NoError(t, err)
	parked, err := wf.Start(ctx, time.Hour, &durable.StartOpts{ID: "parked"})
	require.NoError(t, err)
	done, err := wf.Start(ctx, 0, &durable.StartOpts{ID: "done"})
	require.NoError(t, err)
	_, err = done.Result(ctx)
	require.NoError(t, err)

	waiting := func(prefix string) []string {
		runs, _, err := e.ListWorkflows(ctx, &durable.ListParams{WaitTopicPrefix: prefix, OmitPayloads: true})
		require.NoError(t, err)
		var ids []string
		for _, r := range runs {
			require.Equal(t, "approval:1", r.WaitTopic)
			ids = append(ids, r.ID)
		}
		return ids
	}
	require.Eventually(t, func() bool { return len(waiting("approval:")) == 2 }, 30*time.Second, 10*time.Millisecond)
	require.ElementsMatch(t, []string{"mem", "parked"}, waiting("approval:"))
	require.Empty(t, waiting("approval_")) // LIKE characters are literal
	info, err := e.Inspect(ctx, "mem")
	require.NoError(t, err)
	require.Equal(t, "approval:1", info.WaitTopic)
	require.Equal(t, durable.StatusPending, info.Status)
	require.JSONEq(t, `60000000000`, string(info.Input))
	info, err = e.Inspect(ctx, "done")
	require.NoError(t, err)
	require.Empty(t, info.WaitTopic)
	require.Equal(t, durable.StatusSuccess, info.Status)

	for _, h := range []*durable.Handle[string]{inMemory, parked} {
		require.NoError(t, durable.Send(ctx, e, h.ID(), "approval:1", "yes", nil))
		got, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "yes", got)
		info, err := e.Inspect(ctx, h.ID())
		require.NoError(t, err)
		require.Empty(t, info.WaitTopic)
	}
	require.Empty(t, waiting("approval:"))

	_, _, err = e.ListWorkflows(ctx, &durable.ListParams{WaitTopicPrefix: "a\x00"})
	require.ErrorIs(t, err, durable.ErrInvalidArgument)
}

func TestListQueues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := b.engine(t, nil, func(e *durable.Engine) {
		durable.RegisterQueue(e, "b-queue", &durable.QueueOpts{GlobalConcurrency: 3})
		durable.RegisterQueue(e, "a-queue", nil)
	})
	ctx := ctxT(t)
	require.NoError(t, e.QueueRef("b-queue").Pause(ctx))
	qs, err := e.ListQueues(ctx)
	require.NoError(t, err)
	require.Len(t, qs, 2)
	require.Equal(t, "a-queue", qs[0].Name)
	require.False(t, qs[0].Paused)
	require.Equal(t, "b-queue", qs[1].Name)
	require.True(t, qs[1].Paused)
	require.Equal(t, 3, qs[1].Settings.GlobalConcurrency)
}
