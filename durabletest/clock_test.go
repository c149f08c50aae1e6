package durabletest_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/durabletest"
)

var day0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// TestDeadlineOnTestClock: a run's deadline (StartOpts.Timeout) passes when
// the test's clock passes it, cutting short the sleep it is in.
func TestDeadlineOnTestClock(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, &durabletest.Options{Start: day0})
	wf := durable.Register(env.Engine, "slow", func(wctx durable.Context, _ int) (int, error) {
		return 1, durable.Sleep(wctx, 2*time.Hour)
	}, nil)
	env.Launch()
	ctx := ctxT(t)
	h, err := wf.Start(ctx, 0, &durable.StartOpts{Timeout: time.Hour})
	require.NoError(t, err)
	require.NoError(t, env.Clock.BlockUntil(ctx, 1))
	next, ok := env.Clock.Next()
	require.True(t, ok)
	require.Equal(t, day0.Add(time.Hour), next.UTC(), "the sleep's wait is not capped at the deadline")
	env.Clock.Advance(59 * time.Minute)
	require.Equal(t, 1, env.Clock.Waiting(), "the deadline passed early")
	env.Clock.Advance(time.Minute)
	_, err = h.Result(ctx)
	require.NoError(t, ctx.Err(), "the run did not end at its deadline")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "passed its deadline")
}

// TestRetryBackoffOnTestClock: a failed step's retry waits its backoff on
// the test's clock.
func TestRetryBackoffOnTestClock(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, nil)
	var calls atomic.Int32
	wf := durable.Register(env.Engine, "flaky", func(wctx durable.Context, _ int) (int32, error) {
		return durable.Step(wctx, "call", func(context.Context) (int32, error) {
			if calls.Add(1) == 1 {
				return 0, errors.New("unavailable")
			}
			return calls.Load(), nil
		}, &durable.StepOpts{Retry: &durable.RetryPolicy{MaxAttempts: 2, BaseDelay: time.Hour, MaxDelay: time.Hour, Jitter: -1}})
	}, nil)
	env.Launch()
	ctx := ctxT(t)
	h, err := wf.Start(ctx, 0, nil)
	require.NoError(t, err)
	require.NoError(t, env.Clock.BlockUntil(ctx, 1))
	env.Clock.Advance(59 * time.Minute)
	require.Equal(t, 1, env.Clock.Waiting(), "the backoff ended early")
	require.Equal(t, int32(1), calls.Load())
	env.Clock.Advance(time.Minute)
	got, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, int32(2), got)
}

// TestRecvAndGetEventOnTestClock: Recv's timeout and GetEvent's follow the
// test's clock; a message sent before the timeout is received without a
// move of the clock.
func TestRecvAndGetEventOnTestClock(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, nil)
	wf := durable.Register(env.Engine, "inbox", func(wctx durable.Context, _ int) (string, error) {
		msg, ok, err := durable.Recv[string](wctx, "in", 10*time.Hour)
		if err != nil || !ok {
			return "timed out", err
		}
		return msg, durable.SetEvent(wctx, "got", msg)
	}, nil)
	env.Launch()
	ctx := ctxT(t)

	h1, err := wf.Start(ctx, 0, nil)
	require.NoError(t, err)
	require.NoError(t, env.Clock.BlockUntil(ctx, 1))
	require.NoError(t, durable.Send(ctx, env.Engine, h1.ID(), "in", "hi", nil))
	got, err := h1.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "hi", got)

	h2, err := wf.Start(ctx, 0, nil)
	require.NoError(t, err)
	require.NoError(t, env.Clock.BlockUntil(ctx, 1))
	type event struct {
		v  string
		ok bool
	}
	ev := make(chan event, 1)
	go func() {
		v, ok, _ := durable.GetEvent[string](ctx, env.Engine, h2.ID(), "got", 5*time.Hour)
		ev <- event{v, ok}
	}()
	require.NoError(t, env.Clock.BlockUntil(ctx, 2)) // the run and GetEvent
	env.Clock.Advance(5 * time.Hour)
	require.Equal(t, event{}, <-ev, "GetEvent did not time out after 5h of the test's clock")
	require.Equal(t, 1, env.Clock.Waiting(), "Recv timed out early")
	env.Clock.Advance(5 * time.Hour)
	got, err = h2.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "timed out", got)
}

// TestScheduleOnTestClock: a schedule's tick starts its run when the
// test's clock reaches it.
func TestScheduleOnTestClock(t *testing.T) {
	t.Parallel()
	// A polling period longer than the wait below: the move of the clock
	// itself wakes the schedules.
	env := durabletest.New(t, &durabletest.Options{Start: day0.Add(30 * time.Minute), Config: &durable.Config{PollInterval: 2 * time.Minute}})
	wf := durable.Register(env.Engine, "hourly", func(wctx durable.Context, _ struct{}) (string, error) {
		tick, _ := durable.ScheduledTime(wctx)
		return tick.UTC().Format(time.RFC3339), nil
	}, nil)
	durable.Schedule(wf, "hourly", "0 * * * *", nil)
	env.Launch()
	ctx := ctxT(t)
	last := func() string {
		list, err := env.Engine.ListSchedules(ctx)
		require.NoError(t, err)
		require.Len(t, list, 1)
		return list[0].LastRunID
	}
	require.Empty(t, last())
	env.Clock.Advance(30 * time.Minute)
	require.Eventually(t, func() bool { return last() != "" }, 30*time.Second, 10*time.Millisecond)
	h, err := wf.Handle(ctx, last())
	require.NoError(t, err)
	got, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "2030-01-01T01:00:00Z", got)
}
