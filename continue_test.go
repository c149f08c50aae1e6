package durable_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/durabletest"
)

// countdown counts in down to 0, one run per number: each run records a
// step, then continues as a new run with in-1; the last returns the sum
// of what the chain's steps saw, carried in the input.
type countdown struct {
	N   int `json:"n"`
	Sum int `json:"sum"`
}

func registerCountdown(e *durable.Engine, stepRuns func(id string)) *durable.Workflow[countdown, int] {
	var wf *durable.Workflow[countdown, int]
	wf = durable.Register(e, "countdown", func(wctx durable.Context, in countdown) (int, error) {
		v, err := durable.Step(wctx, "tick", func(ctx context.Context) (int, error) {
			if stepRuns != nil {
				stepRuns(durable.IdempotencyKey(ctx))
			}
			return in.N, nil
		}, nil)
		if err != nil {
			return 0, err
		}
		if in.N == 0 {
			return in.Sum + v, nil
		}
		return 0, wf.ContinueAsNew(wctx, countdown{N: in.N - 1, Sum: in.Sum + v}, nil)
	}, nil)
	return wf
}

// TestContinueAsNew: a run that continues as new finishes successfully
// and names its successor; the chain's runs are "c", "c#2", "c#3", each
// with a short history of its own; Result of any run of the chain is the
// last run's result, through the engine's handle and a client's; the
// first run's history replays.
func TestContinueAsNew(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var wf *durable.Workflow[countdown, int]
	e := b.engine(t, nil, func(e *durable.Engine) { wf = registerCountdown(e, nil) })
	ctx := ctxT(t)
	h, err := wf.Start(ctx, countdown{N: 2}, &durable.StartOpts{ID: "c"})
	require.NoError(t, err)
	out, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, out, "2 + 1 + 0")

	for _, c := range []struct{ id, next string }{{"c", "c#2"}, {"c#2", "c#3"}, {"c#3", ""}} {
		info, err := e.Inspect(ctx, c.id)
		require.NoError(t, err)
		require.Equal(t, durable.StatusSuccess, info.Status, c.id)
		require.Equal(t, c.next, info.ContinuedAs, c.id)
		steps, err := e.ListSteps(ctx, c.id)
		require.NoError(t, err)
		want := []string{"tick", "continue:countdown"}
		if c.next == "" {
			want = want[:1]
		}
		var names []string
		for _, s := range steps {
			names = append(names, s.Name)
		}
		require.Equal(t, want, names, c.id)
		h, err := wf.Handle(ctx, c.id)
		require.NoError(t, err)
		out, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, out, "Result of %s follows the chain", c.id)
	}
	// The first run's history replays with the same code to its end.
	hist, err := durable.LoadHistory(ctx, e, "c")
	require.NoError(t, err)
	off := offlineEngine(t)
	registerCountdown(off, func(string) { panic("not replayed") })
	require.NoError(t, durable.ReplayHistory(ctx, off, hist))

	client, err := durable.NewClient(b.pool, &durable.ClientConfig{Schema: b.schema})
	require.NoError(t, err)
	ch, err := durable.ClientWorkflow[countdown, int](client, "countdown").Handle(ctx, "c")
	require.NoError(t, err)
	out, err = ch.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, out)
}

// TestContinueAsNewChild: a parent awaiting a child that continues as new
// gets the result of the child's chain, waiting in memory and parked.
func TestContinueAsNewChild(t *testing.T) {
	t.Parallel()
	for _, park := range []time.Duration{time.Hour, time.Millisecond} {
		t.Run(park.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var parent *durable.Workflow[int, int]
			// Parked, the chain's last run waits in its tick until the
			// parent has parked on it, so that only that run's finish can
			// wake the parent (through the parent it inherited).
			lastTick := func(key string) {
				if park != time.Millisecond || !strings.HasPrefix(key, "p/0#4/") {
					return
				}
				parked := fmt.Sprintf(`SELECT count(*) FROM %q.workflows WHERE id = 'p' AND executor_id IS NULL AND wait_topic = 'child:p/0#4'`, b.schema)
				for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
					var n int
					if b.pool.QueryRow(context.Background(), parked).Scan(&n) == nil && n == 1 {
						return
					}
				}
			}
			b.engine(t, func(c *durable.Config) { c.ParkThreshold = park }, func(e *durable.Engine) {
				child := registerCountdown(e, lastTick)
				parent = durable.Register(e, "parent", func(wctx durable.Context, n int) (int, error) {
					h, err := child.StartChild(wctx, countdown{N: n}, nil)
					if err != nil {
						return 0, err
					}
					return h.Await(wctx)
				}, nil)
			})
			ctx := ctxT(t)
			h, err := parent.Start(ctx, 3, &durable.StartOpts{ID: "p"})
			require.NoError(t, err)
			out, err := h.Result(ctx)
			require.NoError(t, err)
			require.Equal(t, 6, out, "3 + 2 + 1 + 0")
		})
	}
}

// TestContinueAsNewQueued: a queued run's continuation is enqueued on
// its queue, with its partition key and priority, so it starts within
// the queue's limits (TestQueue proves those); Result of the first run is
// the chain's.
func TestContinueAsNewQueued(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var wf *durable.Workflow[countdown, int]
	var q *durable.Queue
	b.engine(t, nil, func(e *durable.Engine) {
		wf = registerCountdown(e, nil)
		q = durable.RegisterQueue(e, "chains", &durable.QueueOpts{GlobalConcurrency: 1})
	})
	ctx := ctxT(t)
	h, err := wf.Enqueue(ctx, q, countdown{N: 2}, &durable.EnqueueOpts{ID: "qc", PartitionKey: "tenant-a", Priority: 3})
	require.NoError(t, err)
	out, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, out, "2 + 1 + 0")
	got := queryMap[string, string](t, b.pool, fmt.Sprintf(`SELECT id, queue_name || ' ' || partition_key || ' ' || priority || ' ' || status
FROM %q.workflows ORDER BY id`, b.schema))
	require.Equal(t, map[string]string{"qc": "chains tenant-a 3 success", "qc#2": "chains tenant-a 3 success", "qc#3": "chains tenant-a 3 success"}, got)
}

// TestContinueAsNewCrashes: the chain survives a crash at every boundary
// of its first run, the continuation's start included: the same result,
// and each run of the chain ticks once (no second successor is started).
func TestContinueAsNewCrashes(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, nil)
	var mu sync.Mutex
	ticks := map[string]bool{}
	effects := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return map[string]int{"ticks": len(ticks)}
	}
	rep := durabletest.CrashMatrix(t, env, func(e *durable.Engine) *durable.Workflow[countdown, int] {
		return registerCountdown(e, func(key string) {
			mu.Lock()
			ticks[key] = true
			mu.Unlock()
		})
	}, countdown{N: 1}, &durabletest.CrashOpts{Effects: effects})
	require.NoError(t, rep.Err())
	var points []string
	for _, bd := range rep.Boundaries {
		points = append(points, bd.Step)
	}
	require.Contains(t, points, "continue:countdown")
}

// TestContinueAsNewBadInput: a run cannot continue as another workflow
// nor as itself; the run fails with an invalid-argument error and nothing
// starts.
func TestContinueAsNewBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var wf *durable.Workflow[string, string]
	e := b.engine(t, nil, func(e *durable.Engine) {
		other := durable.Register(e, "other", func(durable.Context, string) (string, error) { return "", nil }, nil)
		wf = durable.Register(e, "bad", func(wctx durable.Context, mode string) (string, error) {
			if mode == "other" {
				return "", other.ContinueAsNew(wctx, "x", nil)
			}
			return "", wf.ContinueAsNew(wctx, "x", &durable.StartOpts{ID: wctx.WorkflowID()})
		}, nil)
	})
	ctx := ctxT(t)
	for mode, msg := range map[string]string{"other": `cannot continue as workflow "other"`, "self": "cannot continue as itself"} {
		h, err := wf.Start(ctx, mode, &durable.StartOpts{ID: "bad-" + mode})
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.ErrorContains(t, err, "invalid argument: ")
		require.ErrorContains(t, err, msg)
		info, err := e.Inspect(ctx, "bad-"+mode)
		require.NoError(t, err)
		require.Empty(t, info.ContinuedAs)
	}
	runs, _, err := e.ListWorkflows(ctx, nil)
	require.NoError(t, err)
	require.Len(t, runs, 2, "no run started")
}
