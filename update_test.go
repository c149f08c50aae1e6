package durable_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// registerCart registers "cart": it handles n "add" updates (quantities
// above 0 pass its validator; a total over 50 fails its handler) and
// returns the total. Each accepted quantity is added by a step.
func registerCart(e *durable.Engine, n int) *durable.Workflow[int, int] {
	return durable.Register(e, "cart", func(wctx durable.Context, _ int) (int, error) {
		total := 0
		for handled := 0; handled < n; {
			ok, err := durable.HandleUpdate(wctx, "add", time.Hour, func(qty int) error {
				if qty <= 0 {
					return fmt.Errorf("quantity %d is not positive", qty)
				}
				return nil
			}, func(wctx durable.Context, qty int) (int, error) {
				t, err := durable.Step(wctx, "add-item", func(context.Context) (int, error) {
					if total+qty > 50 {
						return 0, durable.Permanent(errors.New("over the limit of 50"))
					}
					return total + qty, nil
				}, nil)
				if err == nil {
					total = t
				}
				return t, err
			})
			if err != nil {
				return 0, err
			}
			if ok {
				handled++
			}
		}
		return total, nil
	}, nil)
}

// TestUpdate: an update's reply is its handler's result; a request the
// validator refuses is rejected (ErrUpdateRejected) without running the
// handler; a failing handler's error is the reply; an update retried with
// its ID gets the same reply and is handled once; an update to a finished
// run fails with ErrWorkflowFinished. Through the engine and a client.
func TestUpdate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var cart *durable.Workflow[int, int]
	e := b.engine(t, nil, func(e *durable.Engine) { cart = registerCart(e, 5) })
	ctx := ctxT(t)
	h, err := cart.Start(ctx, 0, &durable.StartOpts{ID: "cart-1"})
	require.NoError(t, err)

	total, err := durable.Update[int, int](ctx, e, "cart-1", "add", 2, &durable.UpdateOpts{ID: "u1"})
	require.NoError(t, err)
	require.Equal(t, 2, total)

	_, err = durable.Update[int, int](ctx, e, "cart-1", "add", 0, nil)
	require.ErrorIs(t, err, durable.ErrUpdateRejected)
	require.ErrorContains(t, err, "quantity 0 is not positive")

	client, err := durable.NewClient(b.pool, &durable.ClientConfig{Schema: b.schema})
	require.NoError(t, err)
	total, err = durable.ClientUpdate[int, int](ctx, client, "cart-1", "add", 3, nil)
	require.NoError(t, err)
	require.Equal(t, 5, total)

	total, err = durable.Update[int, int](ctx, e, "cart-1", "add", 2, &durable.UpdateOpts{ID: "u1"})
	require.NoError(t, err)
	require.Equal(t, 2, total, "the same update: its recorded reply, not handled again")

	total, err = durable.Update[int, int](ctx, e, "cart-1", "add", 1, nil)
	require.NoError(t, err)
	require.Equal(t, 6, total, "u1 was added once")

	_, err = durable.Update[int, int](ctx, e, "cart-1", "add", 100, nil)
	var ue *durable.UpdateError
	require.ErrorAs(t, err, &ue)
	require.False(t, ue.Rejected)
	require.ErrorIs(t, err, durable.ErrPermanent, "the handler's error, as recorded")
	require.ErrorContains(t, err, "over the limit of 50")

	out, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 6, out)
	_, err = durable.Update[int, int](ctx, e, "cart-1", "add", 1, nil)
	require.ErrorIs(t, err, durable.ErrWorkflowFinished)
}

// TestUpdateWithStart: the update starts the run when it does not exist
// and reaches the existing one when it does; a reply that does not come
// within the timeout fails with context.DeadlineExceeded and stays
// delivered.
func TestUpdateWithStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var cart *durable.Workflow[int, int]
	var slow *durable.Workflow[int, int]
	e := b.engine(t, nil, func(e *durable.Engine) {
		cart = registerCart(e, 2)
		slow = durable.Register(e, "slow", func(wctx durable.Context, _ int) (int, error) {
			if err := durable.Sleep(wctx, 500*time.Millisecond); err != nil {
				return 0, err
			}
			_, err := durable.HandleUpdate(wctx, "ping", time.Hour, nil, func(durable.Context, string) (string, error) { return "pong", nil })
			return 0, err
		}, nil)
	})
	ctx := ctxT(t)
	h, total, err := durable.UpdateWithStart[int, int, int, int](ctx, cart, 0, &durable.StartOpts{ID: "cart-2"}, "add", 4, nil)
	require.NoError(t, err)
	require.Equal(t, 4, total)
	_, total, err = durable.UpdateWithStart[int, int, int, int](ctx, cart, 0, &durable.StartOpts{ID: "cart-2"}, "add", 5, nil)
	require.NoError(t, err)
	require.Equal(t, 9, total)
	out, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 9, out)

	_, err = slow.Start(ctx, 0, &durable.StartOpts{ID: "slow"})
	require.NoError(t, err)
	_, err = durable.Update[string, string](ctx, e, "slow", "ping", "hi", &durable.UpdateOpts{ID: "p1", Timeout: 50 * time.Millisecond})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	pong, err := durable.Update[string, string](ctx, e, "slow", "ping", "hi", &durable.UpdateOpts{ID: "p1"})
	require.NoError(t, err)
	require.Equal(t, "pong", pong)
}

// TestUpdateBadInput: bad names, a negative timeout and a missing handler
// are ErrInvalidArgument, and nothing is sent.
func TestUpdateBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var wf *durable.Workflow[int, int]
	e := b.engine(t, nil, func(e *durable.Engine) {
		wf = durable.Register(e, "nohandler", func(wctx durable.Context, _ int) (int, error) {
			_, err := durable.HandleUpdate[int, int](wctx, "x", time.Second, nil, nil)
			if !errors.Is(err, durable.ErrInvalidArgument) {
				return 0, fmt.Errorf("want ErrInvalidArgument, got %v", err)
			}
			return 1, nil
		}, nil)
	})
	ctx := ctxT(t)
	_, err := durable.Update[int, int](ctx, e, "any", "", 1, nil)
	require.ErrorIs(t, err, durable.ErrInvalidArgument)
	_, err = durable.Update[int, int](ctx, e, "any", "x", 1, &durable.UpdateOpts{Timeout: -time.Second})
	require.ErrorIs(t, err, durable.ErrInvalidArgument)
	_, err = durable.Update[int, int](ctx, e, "missing", "x", 1, nil)
	require.ErrorIs(t, err, durable.ErrWorkflowNotFound)
	h, err := wf.Start(ctx, 0, nil)
	require.NoError(t, err)
	out, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, out)
}

// TestUpdateHandlerParks: a handler whose wait parks the run replies when
// the run resumes, not with the park.
func TestUpdateHandlerParks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var wf *durable.Workflow[int, string]
	e := b.engine(t, func(c *durable.Config) { c.ParkThreshold = time.Millisecond }, func(e *durable.Engine) {
		wf = durable.Register(e, "napper", func(wctx durable.Context, _ int) (string, error) {
			_, err := durable.HandleUpdate(wctx, "nap", time.Hour, nil, func(wctx durable.Context, d time.Duration) (string, error) {
				if err := durable.Sleep(wctx, d); err != nil {
					return "", err
				}
				return "rested", nil
			})
			return "done", err
		}, nil)
	})
	ctx := ctxT(t)
	h, err := wf.Start(ctx, 0, &durable.StartOpts{ID: "napper"})
	require.NoError(t, err)
	out, err := durable.Update[time.Duration, string](ctx, e, "napper", "nap", 300*time.Millisecond, nil)
	require.NoError(t, err)
	require.Equal(t, "rested", out)
	res, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "done", res)
}
