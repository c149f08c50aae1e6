package durable_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// TestBatcher: items added one at a time gather into runs of a workflow
// that takes a slice: a run starts once it holds MaxItems, or MaxWait
// after its first item; each item is in exactly one run, at the index
// Add returned, also when many goroutines add at once. (Across processes:
// TestQueueFlowControlAcrossProcesses.)
func TestBatcher(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var wf *durable.Workflow[[]string, string]
	var q *durable.Queue
	e := b.engine(t, nil, func(e *durable.Engine) {
		q = durable.RegisterQueue(e, "batches", nil)
		wf = durable.Register(e, "join", func(wctx durable.Context, items []string) (string, error) {
			return strings.Join(items, ","), nil
		}, nil)
	})
	ctx := ctxT(t)
	batcher := func(maxItems int, maxWait time.Duration) *durable.Batcher[string, string] {
		bt, err := durable.NewBatcher(wf, durable.BatchOpts{MaxItems: maxItems, MaxWait: maxWait})
		require.NoError(t, err)
		return bt
	}

	// Full at MaxItems: the run starts at once, though MaxWait is an hour;
	// the next item opens another batch.
	t.Run("MaxItems", func(t *testing.T) {
		bt := batcher(3, time.Hour)
		var got []durable.BatchItem[string]
		for _, it := range []string{"a", "b", "c", "d"} {
			item, err := bt.Add(ctx, q, it, &durable.BatchAddOpts{Key: "full"})
			require.NoError(t, err)
			got = append(got, item)
		}
		require.Equal(t, got[0].Run.ID(), got[2].Run.ID())
		require.NotEqual(t, got[0].Run.ID(), got[3].Run.ID())
		require.Equal(t, []int{0, 1, 2, 0}, []int{got[0].Index, got[1].Index, got[2].Index, got[3].Index})
		v, err := got[0].Run.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "a,b,c", v)
	})

	// MaxWait: two items, far below MaxItems, start together.
	t.Run("MaxWait", func(t *testing.T) {
		ctx, cancel := context20s(t)
		defer cancel()
		bt := batcher(100, 300*time.Millisecond)
		x, err := bt.Add(ctx, q, "x", &durable.BatchAddOpts{Key: "wait"})
		require.NoError(t, err)
		y, err := bt.Add(ctx, q, "y", &durable.BatchAddOpts{Key: "wait"})
		require.NoError(t, err)
		require.Equal(t, x.Run.ID(), y.Run.ID())
		v, err := y.Run.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "x,y", v)
	})

	// Keys never share a batch; a batch of one starts at once.
	t.Run("KeysAndOne", func(t *testing.T) {
		bt := batcher(10, time.Hour)
		a, err := bt.Add(ctx, q, "k1", &durable.BatchAddOpts{Key: "tenant-1"})
		require.NoError(t, err)
		c, err := bt.Add(ctx, q, "k2", &durable.BatchAddOpts{Key: "tenant-2"})
		require.NoError(t, err)
		require.NotEqual(t, a.Run.ID(), c.Run.ID())
		one, err := batcher(1, time.Hour).Add(ctx, q, "solo", nil)
		require.NoError(t, err)
		v, err := one.Run.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "solo", v)
	})

	// AddTx: rolled back, the item is in no batch.
	t.Run("Tx", func(t *testing.T) {
		bt := batcher(2, time.Hour)
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = bt.AddTx(ctx, tx, q, "gone", &durable.BatchAddOpts{Key: "tx"})
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))
		first, err := bt.Add(ctx, q, "kept-1", &durable.BatchAddOpts{Key: "tx"})
		require.NoError(t, err)
		require.Zero(t, first.Index)
		_, err = bt.Add(ctx, q, "kept-2", &durable.BatchAddOpts{Key: "tx"})
		require.NoError(t, err)
		v, err := first.Run.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "kept-1,kept-2", v)
	})

	// 200 items from 8 goroutines, batches of 10: 20 full runs, each item
	// in exactly one, at the index Add returned.
	t.Run("Concurrent", func(t *testing.T) {
		bt := batcher(10, time.Hour)
		type placed struct {
			item, run string
			index     int
		}
		out := make(chan placed, 200)
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 25 {
					it := fmt.Sprintf("%d-%02d", g, i)
					item, err := bt.Add(ctx, q, it, &durable.BatchAddOpts{Key: "many"})
					if assert.NoError(t, err) {
						out <- placed{it, item.Run.ID(), item.Index}
					}
				}
			})
		}
		wg.Wait()
		close(out)
		runs := map[string][]string{}
		var all []string
		for p := range out {
			h, err := wf.Handle(ctx, p.run)
			require.NoError(t, err)
			v, err := h.Result(ctx)
			require.NoError(t, err)
			items := strings.Split(v, ",")
			require.Less(t, p.index, len(items))
			require.Equal(t, p.item, items[p.index], "the item is at the index Add returned")
			runs[p.run] = items
			all = append(all, p.item)
		}
		require.Len(t, runs, 20)
		var inRuns []string
		for _, items := range runs {
			require.Len(t, items, 10)
			inRuns = append(inRuns, items...)
		}
		sort.Strings(all)
		sort.Strings(inRuns)
		require.Equal(t, all, inRuns, "every item in exactly one run")
	})

	t.Run("BadInput", func(t *testing.T) {
		for _, o := range []durable.BatchOpts{{MaxItems: 0, MaxWait: time.Second}, {MaxItems: 2}, {MaxItems: 2, MaxWait: -time.Second}} {
			_, err := durable.NewBatcher(wf, o)
			require.ErrorIs(t, err, durable.ErrInvalidArgument)
		}
		bt := batcher(2, time.Hour)
		_, err := bt.Add(ctx, nil, "x", nil)
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		_, err = bt.Add(ctx, e.QueueRef("nowhere"), "x", nil)
		require.ErrorIs(t, err, durable.ErrQueueNotFound)
		_, err = bt.Add(ctx, q, "x", &durable.BatchAddOpts{Key: strings.Repeat("k", 10_000)})
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
	})
}

// context20s bounds a wait that a broken mechanism would stretch to an
// hour.
func context20s(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctxT(t), 20*time.Second)
}

// TestClientBatcher: a client's items join the same batches as an
// engine's (one run per batch, each item at its index), the executor runs
// them, and the client waits for the result; bad options and a missing
// queue are typed errors.
func TestClientBatcher(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var wf *durable.Workflow[[]string, string]
	var q *durable.Queue
	b.engine(t, nil, func(e *durable.Engine) {
		q = durable.RegisterQueue(e, "batches", nil)
		wf = durable.Register(e, "join", func(wctx durable.Context, items []string) (string, error) {
			return strings.Join(items, ","), nil
		}, nil)
	})
	c, err := durable.NewClient(b.pool, b.clientConfig())
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx := ctxT(t)
	ref := durable.ClientWorkflow[[]string, string](c, "join")
	_, err = durable.NewClientBatcher(ref, durable.BatchOpts{MaxItems: 0, MaxWait: time.Second})
	require.ErrorIs(t, err, durable.ErrInvalidArgument)

	cb, err := durable.NewClientBatcher(ref, durable.BatchOpts{MaxItems: 3, MaxWait: time.Hour})
	require.NoError(t, err)
	eb, err := durable.NewBatcher(wf, durable.BatchOpts{MaxItems: 3, MaxWait: time.Hour})
	require.NoError(t, err)
	first, err := cb.Add(ctx, "batches", "a", nil)
	require.NoError(t, err)
	second, err := eb.Add(ctx, q, "b", nil)
	require.NoError(t, err)
	var third durable.ClientBatchItem[string]
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		third, err = cb.AddTx(ctx, tx, "batches", "c", nil)
		return err
	}))
	require.Equal(t, first.Run.ID(), second.Run.ID())
	require.Equal(t, first.Run.ID(), third.Run.ID())
	require.Equal(t, []int{0, 1, 2}, []int{first.Index, second.Index, third.Index})
	v, err := first.Run.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "a,b,c", v)

	_, err = cb.Add(ctx, "nope", "x", nil)
	require.ErrorIs(t, err, durable.ErrQueueNotFound)
	_, err = cb.AddTx(ctx, nil, "batches", "x", nil)
	require.ErrorIs(t, err, durable.ErrInvalidArgument)
}
