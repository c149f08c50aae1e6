package durable_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// TestScheduleThroughQueue: a burst of catch-up ticks goes through a queue
// and respects its concurrency limit; each tick is still run once.
func TestScheduleThroughQueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	clock := newClock(at(1, 0, 0, 30))
	var mu sync.Mutex
	running, maxRunning := 0, 0
	declare := func(e *durable.Engine) {
		q := durable.RegisterQueue(e, "one-at-a-time", &durable.QueueOpts{GlobalConcurrency: 1})
		wf := durable.Register(e, "slow-tick", func(wctx durable.Context, tick time.Time) (string, error) {
			mu.Lock()
			running++
			maxRunning = max(maxRunning, running)
			mu.Unlock()
			_, err := durable.Step(wctx, "work", func(ctx context.Context) (int, error) {
				time.Sleep(20 * time.Millisecond)
				return 1, nil
			}, nil)
			mu.Lock()
			running--
			mu.Unlock()
			return tick.Format(time.RFC3339), err
		}, nil)
		durable.Schedule(wf, "queued", "0 * * * * *", &durable.ScheduleOpts[time.Time]{
			InputFunc: func(t time.Time) time.Time { return t }, CatchUp: 4, Queue: q,
		})
	}
	first := b.engine(t, withClock(clock), declare)
	require.NoError(t, first.Shutdown(ctxT(t)))
	clock.Set(at(1, 0, 10, 30))
	b.engine(t, withClock(clock), declare)
	want := ids("queued", at(1, 0, 6, 0), at(1, 0, 7, 0), at(1, 0, 8, 0), at(1, 0, 9, 0), at(1, 0, 10, 0))
	require.Equal(t, want, b.runIDs(t, "queued"))
	q := "SELECT count(*) FROM " + b.schema + ".workflows WHERE id LIKE 'sched:queued:%' AND status = 'success' AND queue_name = 'one-at-a-time'"
	require.Eventually(t, func() bool {
		var n int
		_ = b.pool.QueryRow(ctxT(t), q).Scan(&n)
		return n == len(want)
	}, 30*time.Second, 5*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, maxRunning, "the queue's limit held for the burst")
}
