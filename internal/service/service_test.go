package service

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type key struct{}

func TestLoopRunsUntilStop(t *testing.T) {
	var l Loop
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	started, ended := make(chan any, 1), make(chan struct{})
	require.NoError(t, l.StartLoop(ctx, func(ctx context.Context) {
		started <- ctx.Value(key{})
		<-ctx.Done()
		close(ended)
	}))
	require.Equal(t, "v", <-started, "the loop's context keeps the caller's values")
	require.ErrorIs(t, l.StartLoop(ctx, func(context.Context) {}), ErrStarted)

	cancel() // the caller's context ending does not stop the loop
	select {
	case <-ended:
		t.Fatal("the loop ended with its starter's context")
	case <-time.After(50 * time.Millisecond):
	}
	require.True(t, l.Running())
	require.NoError(t, l.Stop(context.Background()))
	select {
	case <-ended:
	default:
		t.Fatal("Stop returned before the loop ended")
	}
	require.False(t, l.Running())
	require.NoError(t, l.Stop(context.Background()), "a second Stop does nothing")
}

func TestLoopStopGivesUpWithItsContext(t *testing.T) {
	var l Loop
	release := make(chan struct{})
	require.NoError(t, l.StartLoop(context.Background(), func(context.Context) { <-release }))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.True(t, errors.Is(l.Stop(ctx), context.Canceled))
	close(release)
	require.NoError(t, l.StartLoop(context.Background(), func(context.Context) {}), "a stopped loop starts again")
	require.NoError(t, l.Stop(context.Background()))
}
