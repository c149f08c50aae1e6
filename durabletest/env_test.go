package durabletest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/durabletest"
)

func TestMain(m *testing.M) { durabletest.Main(m) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// sleeper sleeps two days between two steps and returns the times the
// steps saw.
func registerSleeper(e *durable.Engine) *durable.Workflow[string, []time.Time] {
	return durable.Register(e, "sleeper", func(wctx durable.Context, in string) ([]time.Time, error) {
		a, err := durable.Now(wctx)
		if err != nil {
			return nil, err
		}
		if err := durable.Sleep(wctx, 48*time.Hour); err != nil {
			return nil, err
		}
		b, err := durable.Now(wctx)
		return []time.Time{a, b}, err
	}, nil)
}

// TestAdvanceEndsSleep: a two-day sleep ends when the test moves the
// clock by two days, not before, and the workflow sees the clock's time.
func TestAdvanceEndsSleep(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	env := durabletest.New(t, &durabletest.Options{Start: start})
	wf := registerSleeper(env.Engine)
	env.Launch()
	ctx := ctxT(t)
	h, err := wf.Start(ctx, "x", nil)
	require.NoError(t, err)
	require.NoError(t, env.Clock.BlockUntil(ctx, 1))

	env.Clock.Advance(47 * time.Hour)
	require.Equal(t, 1, env.Clock.Waiting(), "the sleep ended a day early")
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = h.Result(short)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "the sleep ended a day early")

	env.Clock.Advance(time.Hour)
	got, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, []time.Time{start, start.Add(48 * time.Hour)}, []time.Time{got[0].UTC(), got[1].UTC()})
}

// TestAutoSkip: with AutoSkip, the two-day sleep ends on its own.
func TestAutoSkip(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, nil)
	wf := registerSleeper(env.Engine)
	env.Launch()
	env.Clock.SetAutoSkip(true) // as Options.AutoSkip
	ctx := ctxT(t)
	begin := time.Now()
	h, err := wf.Start(ctx, "x", nil)
	require.NoError(t, err)
	got, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 48*time.Hour, got[1].Sub(got[0]))
	require.Less(t, time.Since(begin), 30*time.Second)
}

var _ = errors.New

// TestAutoSkipWaitsForWork: the clock does not skip while a run works
// (here, in a step), even when another run sleeps.
func TestAutoSkipWaitsForWork(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, &durabletest.Options{AutoSkip: true})
	release := make(chan struct{})
	busy := durable.Register(env.Engine, "busy", func(wctx durable.Context, _ int) (int, error) {
		return durable.Step(wctx, "work", func(context.Context) (int, error) { <-release; return 1, nil }, nil)
	}, nil)
	sleepy := registerSleeper(env.Engine)
	env.Launch()
	ctx := ctxT(t)
	start := env.Clock.Now()
	hb, err := busy.Start(ctx, 0, nil)
	require.NoError(t, err)
	hs, err := sleepy.Start(ctx, "x", nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return env.Clock.Waiting() == 1 || !env.Clock.Now().Equal(start) }, 30*time.Second, 5*time.Millisecond)
	require.Equal(t, start, env.Clock.Now(), "the clock moved while a run was working")
	close(release)
	_, err = hb.Result(ctx)
	require.NoError(t, err)
	got, err := hs.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 48*time.Hour, got[1].Sub(got[0]))
}
