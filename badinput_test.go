package durable_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// TestBadInput: bad arguments, configs, payloads and stored inputs get
// clear typed errors, nothing is half-written, and other runs go on.
func TestBadInput(t *testing.T) {
	t.Parallel()

	t.Run("OversizedPayloads", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var echo *durable.Workflow[string, string]
		var bigStep *durable.Workflow[int, int]
		b.engine(t, func(c *durable.Config) { c.MaxPayloadBytes = 1024 }, func(e *durable.Engine) {
			echo = durable.Register(e, "echo", func(wctx durable.Context, in string) (string, error) { return in, nil }, nil)
			bigStep = durable.Register(e, "big-step", func(wctx durable.Context, in int) (int, error) {
				_, err := durable.Step(wctx, "big", func(ctx context.Context) (string, error) { return strings.Repeat("x", 2000), nil }, nil)
				return 0, err
			}, nil)
		})
		ctx := ctxT(t)
		_, err := echo.Start(ctx, strings.Repeat("y", 2000), &durable.StartOpts{ID: "too-big"})
		var tl *durable.PayloadTooLargeError
		require.ErrorAs(t, err, &tl)
		require.ErrorIs(t, err, durable.ErrPayloadTooLarge)
		require.Equal(t, 1024, tl.Limit)
		_, err = echo.Handle(ctx, "too-big")
		require.ErrorIs(t, err, durable.ErrWorkflowNotFound, "nothing is written for a rejected start")

		h, err := bigStep.Start(ctx, 1, nil)
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.ErrorIs(t, err, durable.ErrPayloadTooLarge)

		h2, err := echo.Start(ctx, "small", nil)
		require.NoError(t, err)
		out, err := h2.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "small", out)
	})

	t.Run("InvalidArguments", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := durable.New(b.pool, &durable.Config{Schema: "bad schema; drop table x"})
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		require.Contains(t, err.Error(), "Config.Schema")
		_, err = durable.New(b.pool, &durable.Config{LeaseTTL: time.Millisecond})
		require.ErrorContains(t, err, "Config.LeaseTTL")
		_, err = durable.New(b.pool, &durable.Config{RecoveryConcurrency: -1})
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		require.ErrorContains(t, err, "Config.RecoveryConcurrency")
		_, err = durable.New(b.pool, &durable.Config{StepRetry: durable.RetryPolicy{Factor: 0.5}})
		require.ErrorContains(t, err, "Config.StepRetry.Factor")
		_, err = durable.New(nil, nil)
		require.ErrorIs(t, err, durable.ErrInvalidArgument)

		var wf *durable.Workflow[string, string]
		e := b.engine(t, nil, func(e *durable.Engine) {
			fn := func(wctx durable.Context, in string) (string, error) {
				return durable.Step(wctx, in, func(ctx context.Context) (string, error) { return "ran " + in, nil }, nil)
			}
			wf = durable.Register(e, "named", fn, nil)
			_, err := durable.TryRegister(e, "named", fn, nil)
			require.ErrorContains(t, err, "already registered")
			_, err = durable.TryRegister(e, "", fn, nil)
			require.ErrorIs(t, err, durable.ErrInvalidArgument)
			require.Panics(t, func() { durable.Register(e, strings.Repeat("n", 300), fn, nil) })
		})
		_, err = durable.TryRegister(e, "late", func(wctx durable.Context, in string) (string, error) { return in, nil }, nil)
		require.ErrorContains(t, err, "before Launch")

		ctx := ctxT(t)
		for _, id := range []string{strings.Repeat("i", 256), "nul\x00id", "bad-utf8-\xff"} {
			_, err := wf.Start(ctx, "x", &durable.StartOpts{ID: id})
			require.ErrorIs(t, err, durable.ErrInvalidArgument, "id %q", id)
		}
		// Hostile but valid IDs and step names are stored as data, never as SQL.
		for _, id := range []string{`'; DROP TABLE workflows; --`, `"quoted" \ back`, "ünïcødé-✓-😀"} {
			h, err := wf.Start(ctx, `x'); DELETE FROM steps; --`, &durable.StartOpts{ID: id})
			require.NoError(t, err)
			out, err := h.Result(ctx)
			require.NoError(t, err)
			require.Equal(t, `ran x'); DELETE FROM steps; --`, out)
			h2, err := wf.Handle(ctx, id)
			require.NoError(t, err)
			require.Equal(t, id, h2.ID())
		}
	})

	t.Run("StepNameRequired", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var wf *durable.Workflow[int, int]
		b.engine(t, nil, func(e *durable.Engine) {
			wf = durable.Register(e, "empty-step", func(wctx durable.Context, in int) (int, error) {
				return durable.Step(wctx, "", func(ctx context.Context) (int, error) { return 1, nil }, nil)
			}, nil)
		})
		ctx := ctxT(t)
		h, err := wf.Start(ctx, 1, nil)
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.ErrorContains(t, err, "step name is empty")
	})

	t.Run("UndecodableStoredInput", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A client (never launched) starts runs with a string input...
		client, err := durable.New(b.pool, b.cfg)
		require.NoError(t, err)
		oldShape := durable.Register(client, "shape", func(wctx durable.Context, in string) (int, error) { return 0, nil }, nil)

		// ...which the executor's code now expects as a struct.
		type shape struct{ N int }
		var newShape *durable.Workflow[shape, int]
		var ok *durable.Workflow[int, int]
		b.engine(t, func(c *durable.Config) { c.ExecutorID = "executor" }, func(e *durable.Engine) {
			newShape = durable.Register(e, "shape", func(wctx durable.Context, in shape) (int, error) { return in.N, nil }, nil)
			ok = durable.Register(e, "ok", func(wctx durable.Context, in int) (int, error) { return in * 2, nil }, nil)
		})
		ctx := ctxT(t)
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = oldShape.StartTx(ctx, tx, "not a struct", &durable.StartOpts{ID: "old-shape"})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))

		h, err := newShape.Handle(ctx, "old-shape")
		require.NoError(t, err)
		_, err = h.Result(ctx)
		var de *durable.RecordedError
		require.ErrorAs(t, err, &de)
		require.ErrorIs(t, err, durable.ErrDecode)
		require.Contains(t, err.Error(), "cannot decode stored input")

		h2, err := ok.Start(ctx, 21, nil)
		require.NoError(t, err)
		n, err := h2.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 42, n, "other workflows keep running")
	})

	// UnencodableArguments: a value JSON cannot encode (a channel, a func)
	// given as a workflow input, a message, an event value or a stream entry
	// is a bad argument: ErrInvalidArgument (and ErrPermanent, as no retry can
	// fix it), and nothing is written.
	t.Run("UnencodableArguments", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var wf *durable.Workflow[any, string]
		var emit *durable.Workflow[int, []bool]
		var q *durable.Queue
		eng := b.engine(t, nil, func(e *durable.Engine) {
			q = durable.RegisterQueue(e, "unencodable", nil)
			wf = durable.Register(e, "any-input", func(wctx durable.Context, in any) (string, error) { return "ran", nil }, nil)
			emit = durable.Register(e, "emit", func(wctx durable.Context, in int) ([]bool, error) {
				ev := durable.SetEvent(wctx, "k", make(chan int))
				st := durable.StreamWrite(wctx, "k", func() {})
				return []bool{errors.Is(ev, durable.ErrInvalidArgument), errors.Is(st, durable.ErrInvalidArgument)}, nil
			}, nil)
		})
		ctx := ctxT(t)
		requireBad := func(err error, what string) {
			t.Helper()
			require.ErrorIs(t, err, durable.ErrInvalidArgument, what)
			require.ErrorIs(t, err, durable.ErrPermanent, what)
			require.ErrorContains(t, err, "json: unsupported", what)
		}
		for i, in := range []any{make(chan int), func() {}, struct{ F func() }{}} {
			id := fmt.Sprintf("bad-input-%d", i)
			_, err := wf.Start(ctx, in, &durable.StartOpts{ID: id})
			requireBad(err, "Start")
			tx, err := b.pool.Begin(ctx)
			require.NoError(t, err)
			_, err = wf.StartTx(ctx, tx, in, &durable.StartOpts{ID: id})
			requireBad(err, "StartTx")
			require.NoError(t, tx.Commit(ctx))
			_, err = wf.Enqueue(ctx, q, in, &durable.EnqueueOpts{ID: id})
			requireBad(err, "Enqueue")
			_, err = wf.Handle(ctx, id)
			require.ErrorIs(t, err, durable.ErrWorkflowNotFound, "nothing is written")
		}

		h, err := emit.Start(ctx, 1, &durable.StartOpts{ID: "emit"})
		require.NoError(t, err)
		got, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, []bool{true, true}, got, "SetEvent and StreamWrite")
		// The encoding fails before the run's status is read: a bad message
		// for a finished run is still a bad argument.
		requireBad(durable.Send(ctx, eng, "emit", "t", make(chan int), nil), "Send")
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		requireBad(durable.SendTx(ctx, eng, tx, "emit", "t", func() {}, nil), "SendTx")
		require.NoError(t, tx.Rollback(ctx))
	})
}
