package durable_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// TestStreamWaitsEnd: stream calls that wait for the database (the stream
// table locked by another transaction) return when the step's timeout
// passes or the run is cancelled, while the lock is still held: the flush
// of a step's entries, and a workflow's first write to a stream, which
// reads where the stream stands.
func TestStreamWaitsEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const (
		flushTimeout = iota // a step with a timeout whose entry cannot be stored
		flushCancel         // the same without a timeout; the run is cancelled
		loadCancel          // a first write to a stream; the run is cancelled
	)
	ready := make(chan struct{})    // the run is about to block, once the test locked the table
	proceed := make(chan struct{})  // the table is locked
	blocked := make(chan struct{})  // the stream call is under way
	returned := make(chan error, 1) // what the stream call (or its step) returned
	var wf *durable.Workflow[int, int]
	e := b.engine(t, nil, func(e *durable.Engine) {
		wf = durable.Register(e, "stream-wait", func(wctx durable.Context, mode int) (int, error) {
			if mode != loadCancel { // the stream's state is loaded, the table not locked yet
				if _, err := durable.Step(wctx, "first", func(ctx context.Context) (int, error) {
					return 0, durable.StreamWriteFromStep(ctx, "s", 0)
				}, nil); err != nil {
					return 0, err
				}
			}
			ready <- struct{}{}
			<-proceed
			var err error
			write := func(ctx context.Context) (int, error) {
				err := durable.StreamWriteFromStep(ctx, "s", 1)
				blocked <- struct{}{}
				return 1, err
			}
			switch mode {
			case flushTimeout:
				_, err = durable.Step(wctx, "blocked", write,
					&durable.StepOpts{Timeout: 300 * time.Millisecond, Retry: &durable.RetryPolicy{MaxAttempts: 1}})
			case flushCancel:
				_, err = durable.Step(wctx, "blocked", write, nil)
			case loadCancel:
				blocked <- struct{}{}
				err = durable.StreamWrite(wctx, "s", 0)
			}
			returned <- err
			return 0, err
		}, nil)
	})
	ctx := ctxT(t)
	for _, c := range []struct {
		name   string
		mode   int
		cancel bool
		want   error
	}{
		{"step timeout ends a flush", flushTimeout, false, context.DeadlineExceeded},
		{"cancel ends a flush", flushCancel, true, durable.ErrCancelled},
		{"cancel ends a stream state read", loadCancel, true, durable.ErrCancelled},
	} {
		id := fmt.Sprintf("stream-wait-%d", c.mode)
		_, err := wf.Start(ctx, c.mode, &durable.StartOpts{ID: id})
		require.NoError(t, err)
		<-ready
		lock, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = lock.Exec(ctx, "LOCK TABLE "+pgx.Identifier{b.schema, "streams"}.Sanitize()+" IN ACCESS EXCLUSIVE MODE")
		require.NoError(t, err)
		proceed <- struct{}{}
		<-blocked
		if c.cancel {
			require.NoError(t, e.Cancel(ctx, id, nil))
		}
		select {
		case err := <-returned:
			require.ErrorIs(t, err, c.want, c.name)
		case <-time.After(30 * time.Second):
			_ = lock.Rollback(ctx)
			t.Fatalf("%s: the stream call still waits for the locked table", c.name)
		}
		require.NoError(t, lock.Rollback(ctx))
		h, err := wf.Handle(ctx, id)
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.True(t, errors.Is(err, c.want), "%s: the run ends with %v", c.name, err)
	}
}
