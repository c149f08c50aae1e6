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

// TestSelect covers Select over messages, results, events and timers,
// waited for in memory and parked.
func TestSelect(t *testing.T) {
	t.Parallel()

	// InMemory: the first ready case wins and only it consumes: a message
	// on the other topic stays for a later Recv; a case not chosen has no
	// value; a timer ends a Select where nothing comes.
	t.Run("InMemory", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var wf *durable.Workflow[string, string]
		e := b.engine(t, nil, func(e *durable.Engine) {
			wf = durable.Register(e, "picker", func(wctx durable.Context, _ string) (string, error) {
				approve, reject := durable.OnMessage[approval]("approve"), durable.OnMessage[string]("reject")
				if err := durable.SetEvent(wctx, "status", "waiting"); err != nil {
					return "", err
				}
				i, err := durable.Select(wctx, approve, reject, durable.After(time.Hour))
				if err != nil {
					return "", err
				}
				if _, err := approve.Value(); !errors.Is(err, durable.ErrInvalidArgument) {
					return "", fmt.Errorf("the case not chosen has a value: %v", err)
				}
				why, err := reject.Value()
				if err != nil {
					return "", err
				}
				// Nothing comes now: the timer wins.
				j, err := durable.Select(wctx, durable.OnMessage[string]("never"), durable.After(20*time.Millisecond))
				if err != nil {
					return "", err
				}
				a, ok, err := durable.Recv[approval](wctx, "approve", time.Minute)
				if err != nil || !ok {
					return "", fmt.Errorf("the other topic's message is gone: %v %v", ok, err)
				}
				return fmt.Sprintf("case %d (%s), then case %d, then %v by %s", i, why, j, a.Approved, a.By), nil
			}, nil)
		})
		ctx := ctxT(t)
		h, err := wf.Start(ctx, "", nil)
		require.NoError(t, err)
		_, ok, err := durable.GetEvent[string](ctx, e, h.ID(), "status", 10*time.Second)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, durable.Send(ctx, e, h.ID(), "reject", "too dear", nil))
		require.Eventually(t, func() bool {
			var n int
			_ = b.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q.steps WHERE workflow_id = $1 AND name = 'durable.select'`, b.schema), h.ID()).Scan(&n)
			return n == 1
		}, 10*time.Second, 2*time.Millisecond)
		require.NoError(t, durable.Send(ctx, e, h.ID(), "approve", approval{true, "ann"}, nil))
		out, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "case 1 (too dear), then case 1, then true by ann", out)
		var rec string
		require.NoError(t, b.pool.QueryRow(ctx, fmt.Sprintf(`SELECT output::text FROM %q.steps WHERE workflow_id = $1 AND name = 'durable.select' ORDER BY pos LIMIT 1`, b.schema), h.ID()).Scan(&rec))
		require.JSONEq(t, `{"case": 1, "value": "too dear"}`, rec, "the choice and the message are recorded together")
	})

	// EventNeverSet: an event case whose run finishes without setting it
	// is chosen once that run finished, in memory; its Value is
	// ErrEventNotSet, recorded, so a replay returns the same.
	t.Run("EventNeverSet", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var waiter, quiet *durable.Workflow[string, string]
		// It waits in memory and polls once a minute: only the finish's
		// wake-up ends it within the test's time.
		e := b.engine(t, func(c *durable.Config) { c.ParkThreshold, c.PollInterval = time.Hour, time.Minute }, func(e *durable.Engine) {
			quiet = durable.Register(e, "quiet", func(wctx durable.Context, _ string) (string, error) {
				_, _, err := durable.Recv[string](wctx, "go", time.Hour)
				return "", err
			}, nil)
			waiter = durable.Register(e, "waiter", func(wctx durable.Context, id string) (string, error) {
				ev := durable.OnEvent[string](id, "quote")
				i, err := durable.Select(wctx, durable.OnMessage[string]("never"), ev, durable.After(time.Hour))
				if err != nil {
					return "", err
				}
				_, err = ev.Value()
				return fmt.Sprintf("case %d: %v", i, errors.Is(err, durable.ErrEventNotSet)), nil
			}, nil)
		})
		ctx := ctxT(t)
		q, err := quiet.Start(ctx, "", &durable.StartOpts{ID: "quiet"})
		require.NoError(t, err)
		h, err := waiter.Start(ctx, "quiet", nil)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			var watched bool
			_ = b.pool.QueryRow(ctx, fmt.Sprintf(`SELECT notify FROM %q.workflows WHERE id = 'quiet'`, b.schema)).Scan(&watched)
			return watched
		}, 10*time.Second, 2*time.Millisecond, "the Select watches the run")
		marked := func() (n int) {
			_ = b.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q.workflows WHERE id = $1 AND executor_id IS NOT NULL AND wait_any IS NOT NULL`, b.schema), h.ID()).Scan(&n)
			return n
		}
		require.Eventually(t, func() bool { return marked() == 1 }, 10*time.Second, 2*time.Millisecond,
			"waiting in memory, the Select writes its waits on its row")
		require.NoError(t, durable.Send(ctx, e, q.ID(), "go", "", nil))
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		out, err := h.Result(rctx)
		require.NoError(t, err)
		require.Equal(t, "case 1: true", out)
		var rec string
		require.NoError(t, b.pool.QueryRow(ctx, fmt.Sprintf(`SELECT output::text FROM %q.steps WHERE workflow_id = $1 AND name = 'durable.select'`, b.schema), h.ID()).Scan(&rec))
		require.JSONEq(t, `{"case": 1, "unset": true}`, rec)
		var left int
		require.NoError(t, b.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q.workflows WHERE id = $1 AND wait_any IS NOT NULL`, b.schema), h.ID()).Scan(&left))
		require.Zero(t, left, "and removes them once it chose")
	})

	// EventInFlight: a SetEvent whose transaction is open when the Select
	// first looks is waited for before its next look (once it marked its
	// waits, it holds the setter's row a moment), so the Select sees the
	// event at once. Nothing else could end it in time: the engine polls
	// every 10 minutes (PollOnly), and the SetEvent's wake-up ran before
	// the mark.
	t.Run("EventInFlight", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		release := make(chan struct{})
		var waiter, pub *durable.Workflow[string, string]
		e := b.engine(t, func(c *durable.Config) {
			c.PollOnly, c.PollInterval, c.ParkThreshold = true, 10*time.Minute, time.Hour
		}, func(e *durable.Engine) {
			pub = durable.Register(e, "pub", func(wctx durable.Context, _ string) (string, error) {
				<-release
				return "", nil
			}, nil)
			waiter = durable.Register(e, "waiter", func(wctx durable.Context, id string) (string, error) {
				ev := durable.OnEvent[string](id, "quote")
				if _, err := durable.Select(wctx, ev); err != nil {
					return "", err
				}
				return ev.Value()
			}, nil)
		})
		ctx := ctxT(t)
		p, err := pub.Start(ctx, "", &durable.StartOpts{ID: "pub"})
		require.NoError(t, err)
		var epoch int64
		require.Eventually(t, func() bool {
			return b.pool.QueryRow(ctx, fmt.Sprintf(`SELECT epoch FROM %q.workflows WHERE id = 'pub' AND executor_id IS NOT NULL`, b.schema)).Scan(&epoch) == nil
		}, 10*time.Second, 2*time.Millisecond)
		// Watched already (as by an earlier waiter), so the Select's first
		// look does not write on the setter's row: that write too would
		// wait for the SetEvent in flight.
		_, err = b.pool.Exec(ctx, fmt.Sprintf(`UPDATE %q.workflows SET notify = true WHERE id = 'pub'`, b.schema))
		require.NoError(t, err)
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		written, err := durable.SetEventTx(ctx, e, tx, "pub", epoch, 100, "quote", []byte(`"42"`))
		require.NoError(t, err)
		require.True(t, written)

		h, err := waiter.Start(ctx, "pub", nil)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			var n int
			_ = b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND query LIKE '%FOR NO KEY UPDATE%' AND query LIKE '%' || $1 || '%'`, b.schema).Scan(&n)
			return n == 1
		}, 10*time.Second, 2*time.Millisecond, "the Select waits for the SetEvent in flight before it looks again")
		require.NoError(t, tx.Commit(ctx))
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		out, err := h.Result(rctx)
		require.NoError(t, err)
		require.Equal(t, "42", out)
		close(release)
		_, err = p.Result(rctx)
		require.NoError(t, err)
	})

	// ResultOfAnyRun: a parked Select on the result of a run that is not
	// its child is woken by that run's finish, far before its timer.
	t.Run("ResultOfAnyRun", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var waiter, other *durable.Workflow[string, string]
		e := b.engine(t, func(c *durable.Config) { c.ParkThreshold = 20 * time.Millisecond }, func(e *durable.Engine) {
			other = durable.Register(e, "other", func(wctx durable.Context, _ string) (string, error) {
				d, _, err := durable.Recv[string](wctx, "go", time.Hour)
				return "other " + d, err
			}, nil)
			waiter = durable.Register(e, "any-waiter", func(wctx durable.Context, id string) (string, error) {
				h, err := other.Handle(wctx, id)
				if err != nil {
					return "", err
				}
				res := durable.OnResult(h)
				i, err := durable.Select(wctx, res, durable.After(time.Hour))
				if err != nil || i != 0 {
					return "", fmt.Errorf("case %d: %v", i, err)
				}
				return res.Result()
			}, nil)
		})
		ctx := ctxT(t)
		o, err := other.Start(ctx, "", &durable.StartOpts{ID: "other"})
		require.NoError(t, err)
		h, err := waiter.Start(ctx, "other", nil)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			var n int
			_ = b.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q.workflows WHERE id = $1 AND executor_id IS NULL AND wait_any IS NOT NULL`, b.schema), h.ID()).Scan(&n)
			return n == 1
		}, 10*time.Second, 2*time.Millisecond, "the Select parks")
		require.NoError(t, durable.Send(ctx, e, o.ID(), "go", "done", nil))
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		out, err := h.Result(rctx)
		require.NoError(t, err)
		require.Equal(t, "other done", out)
	})

	// Parked: each kind of case wakes a parked Select on its own, far
	// before the hour-long timer, and the run records what came: a
	// message, a child's result, another run's event, or that run's finish
	// without the event (ErrEventNotSet); the timer wakes the last one.
	t.Run("Parked", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var picker *durable.Workflow[string, string]
		var child, publisher *durable.Workflow[string, string]
		var entries atomic.Int32
		e := b.engine(t, func(c *durable.Config) { c.ParkThreshold = 20 * time.Millisecond }, func(e *durable.Engine) {
			child = durable.Register(e, "worker", func(wctx durable.Context, in string) (string, error) {
				d, ok, err := durable.Recv[string](wctx, "go", time.Hour)
				if err != nil || !ok {
					return "", fmt.Errorf("recv: %v %v", ok, err)
				}
				return "worked " + d, nil
			}, nil)
			publisher = durable.Register(e, "publisher", func(wctx durable.Context, in string) (string, error) {
				d, ok, err := durable.Recv[string](wctx, "go", time.Hour)
				if err != nil || !ok {
					return "", fmt.Errorf("recv: %v %v", ok, err)
				}
				if d == "skip" {
					return "", nil // finishes without setting the event
				}
				return "", durable.SetEvent(wctx, "ready", "published "+d)
			}, nil)
			picker = durable.Register(e, "picker", func(wctx durable.Context, wait string) (string, error) {
				entries.Add(1)
				h, err := child.StartChild(wctx, "c", nil)
				if err != nil {
					return "", err
				}
				msg := durable.OnMessage[string]("msg")
				res := durable.OnResult(h)
				ev := durable.OnEvent[string](wctx.WorkflowID()+"-pub", "ready")
				timeout := time.Hour
				if wait == "timer" {
					timeout = 300 * time.Millisecond
				}
				i, err := durable.Select(wctx, msg, res, ev, durable.After(timeout))
				if err != nil {
					return "", err
				}
				var v string
				switch i {
				case 0:
					v, err = msg.Value()
				case 1:
					v, err = res.Result()
				case 2:
					v, err = ev.Value()
					if errors.Is(err, durable.ErrEventNotSet) {
						v, err = "unset", nil
					}
				case 3:
					v = "timer"
				}
				return fmt.Sprintf("%d %s", i, v), err
			}, nil)
		})
		ctx := ctxT(t)
		for _, tc := range []struct{ wait, want string }{
			{"event", "2 published now"}, {"unset", "2 unset"}, {"msg", "0 hello"}, {"result", "1 worked now"}, {"timer", "3 timer"},
		} {
			entries.Store(0)
			id := "pick-" + tc.wait
			pub, err := publisher.Start(ctx, "", &durable.StartOpts{ID: id + "-pub"})
			require.NoError(t, err)
			h, err := picker.Start(ctx, tc.wait, &durable.StartOpts{ID: id})
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				var n int
				_ = b.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q.workflows WHERE id = $1 AND executor_id IS NULL AND cardinality(wait_any) = 5 AND wait_topic = 'msg'`, b.schema), id).Scan(&n)
				return n == 1
			}, 10*time.Second, 2*time.Millisecond, "the Select parks on its three waits (and the finishes of the two runs)")
			start := time.Now()
			switch tc.wait {
			case "msg":
				require.NoError(t, durable.Send(ctx, e, id, "msg", "hello", nil))
			case "result":
				require.NoError(t, durable.Send(ctx, e, id+"/0", "go", "now", nil))
			case "event":
				require.NoError(t, durable.Send(ctx, e, pub.ID(), "go", "now", nil))
			case "unset":
				require.NoError(t, durable.Send(ctx, e, pub.ID(), "go", "skip", nil))
			}
			rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			out, err := h.Result(rctx)
			cancel()
			if err != nil {
				var st, any string
				_ = b.pool.QueryRow(ctx, fmt.Sprintf(`SELECT status || ' ' || coalesce(executor_id, '-') || ' ' || coalesce(wake_at::text, '-'), coalesce(wait_any::text, '-') FROM %q.workflows WHERE id = $1`, b.schema), id).Scan(&st, &any)
				var steps string
				_ = b.pool.QueryRow(ctx, fmt.Sprintf(`SELECT string_agg(pos || ' ' || name || ' ' || status || ' ' || coalesce(output::text, ''), '; ' ORDER BY pos) FROM %q.steps WHERE workflow_id = $1`, b.schema), id).Scan(&steps)
				t.Fatalf("%s: %v (%s %s) steps: %s\n%s", tc.wait, err, st, any, steps, b.logs.String())
			}
			require.Equal(t, tc.want, out)
			require.Less(t, time.Since(start), 10*time.Minute, "woken by what came, not the hour-long timer")
			require.EqualValues(t, 2, entries.Load(), "ran before parking and once woken")
			var left int
			require.NoError(t, b.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q.workflows WHERE id = $1 AND wait_any IS NOT NULL`, b.schema), id).Scan(&left))
			require.Zero(t, left, "the waits are cleared once woken")
			_ = e.Cancel(ctx, id+"/0", nil)
			_ = e.Cancel(ctx, pub.ID(), nil)
		}
	})

	// BadInput: typed errors, nothing recorded.
	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var wf *durable.Workflow[int, string]
		e := b.engine(t, nil, func(e *durable.Engine) {
			wf = durable.Register(e, "bad", func(wctx durable.Context, n int) (string, error) {
				a := durable.OnMessage[int]("a")
				cases := [][]durable.SelectCase{
					nil,
					{nil},
					{a, durable.OnMessage[int]("a")},
					{durable.OnMessage[int]("")},
					{durable.After(-time.Second)},
					{durable.OnEvent[int]("", "k")},
					{durable.OnEvent[int]("x", "")},
				}
				var errs []string
				for _, c := range cases {
					_, err := durable.Select(wctx, c...)
					if !errors.Is(err, durable.ErrInvalidArgument) {
						return "", fmt.Errorf("Select(%v): %v", c, err)
					}
					errs = append(errs, err.Error())
				}
				return fmt.Sprint(len(errs)), nil
			}, nil)
		})
		_ = e
		ctx := ctxT(t)
		h, err := wf.Start(ctx, 0, nil)
		require.NoError(t, err)
		out, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "7", out)
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q.steps WHERE workflow_id = $1`, b.schema), h.ID()).Scan(&n))
		require.Zero(t, n, "a refused Select records nothing")
	})
}
