package durable_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/proctest"
)

// TestQueueFlowControlAcrossProcesses runs three executor processes on one
// database with the flow-control options, each queue at once, and checks
// them from the intervals the runs record:
//   - fair: a key with a large backlog holds every slot of the queue; a
//     small key's runs, enqueued after it, start at once instead of behind
//     the backlog, and the global limit stays held and fully used;
//   - weighted: a key of weight 3 and one of weight 1, both with a
//     backlog, share the slots three to one, though the weight-1 key's
//     runs were enqueued first;
//   - keyrate: at most 2 starts per key in any second, while two keys
//     start in the same second;
//   - plans: one run per key at a time, but 3 for the key given a limit
//     of its own at run time;
//   - debounced: 80 enqueues with one debounce key from 4 goroutines,
//     merged: every enqueue's part is in exactly one run's input, and
//     each run's step ran once, on whichever executor claimed it;
//   - batched: 60 items added from 4 goroutines to batches of at most 8:
//     every item in exactly one run, no run over 8 items, each run's step
//     ran once.
func TestQueueFlowControlAcrossProcesses(t *testing.T) {
	t.Parallel()
	pool, schema, q := queueSchema(t)
	ctx := ctxT(t)
	var children []*proctest.Child
	for _, id := range []string{"A", "B", "C"} {
		children = append(children, startReady(t, "queue", schema, id, "DURABLE_LEASE=15s"))
	}
	client, job := queueClient(t, pool, schema)
	queues := []string{"fair", "weighted", "keyrate", "plans"}
	for _, name := range queues {
		require.NoError(t, client.QueueRef(name).Pause(ctx))
	}
	require.NoError(t, client.QueueRef("plans").SetPartitionLimits(ctx, "vip", &durable.PartitionLimits{Concurrency: 3}))
	require.NoError(t, client.QueueRef("weighted").SetPartitionLimits(ctx, "heavy", &durable.PartitionLimits{Weight: 3}))
	total := 0
	enqueue := func(queue, key string, hold, n int) {
		for i := 0; i < n; i++ {
			_, err := job.Enqueue(ctx, client.QueueRef(queue), jobIn{Queue: queue, Key: key, Hold: hold}, &durable.EnqueueOpts{PartitionKey: key})
			require.NoError(t, err)
			total++
		}
	}
	const backlog = 240
	enqueue("fair", "big", 40, backlog)
	enqueue("weighted", "light", 40, 90) // first: in enqueue order it would run first
	enqueue("weighted", "heavy", 40, 90)
	for _, k := range []string{"a", "b"} {
		enqueue("keyrate", k, 1, 5)
	}
	for _, k := range []string{"vip", "free-1", "free-2"} {
		enqueue("plans", k, 80, 6)
	}
	for _, name := range queues {
		require.NoError(t, client.QueueRef(name).Resume(ctx))
	}
	// Debounced enqueues, merged: each adds 1 ms to the run's hold.
	merge := durable.MergeInputs(func(queued, next jobIn) jobIn { queued.Hold += next.Hold; return queued })
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 20 {
				_, err := job.Enqueue(ctx, client.QueueRef("debounced"), jobIn{Queue: "debounced", Hold: 1},
					&durable.EnqueueOpts{Debounce: &durable.Debounce{Key: "doc", Window: 2 * time.Second, Merge: merge}})
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	total++ // at least one run; the check below counts them
	// Batched items, from 4 goroutines.
	jobs := registerJobs(client, pool, schema)
	batcher, err := durable.NewBatcher(jobs, durable.BatchOpts{MaxItems: 8, MaxWait: 300 * time.Millisecond})
	require.NoError(t, err)
	for g := range 4 {
		wg.Go(func() {
			for i := range 15 {
				_, err := batcher.Add(ctx, client.QueueRef("batched"), jobIn{Queue: "batched", Key: fmt.Sprintf("%d-%d", g, i)}, nil)
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	// Once the backlog holds every slot of the fair queue, a small key
	// comes.
	require.Eventually(t, func() bool {
		var n int
		_ = pool.QueryRow(ctx, q("SELECT count(*) FROM @intervals WHERE queue = 'fair'")).Scan(&n)
		return n >= 8
	}, 30*time.Second, 2*time.Millisecond)
	enqueue("fair", "small", 40, 3)

	var debounced int
	require.Eventually(t, func() bool {
		var n, queued int
		_ = pool.QueryRow(ctx, q(`SELECT count(*) FILTER (WHERE status = 'success' AND queue_name NOT IN ('debounced', 'batched')),
			count(*) FILTER (WHERE queue_name = 'debounced'), count(*) FILTER (WHERE status IN ('enqueued', 'pending'))
			FROM @workflows`)).Scan(&n, &debounced, &queued)
		return n == total-1 && queued == 0
	}, 90*time.Second, 10*time.Millisecond)
	total += debounced - 1

	// fair: the small key's wait, from its enqueue to its step's start, and
	// how much of the backlog started after its first run.
	var smallWait time.Duration
	var bigAfter int
	require.NoError(t, pool.QueryRow(ctx, q(`SELECT max(i.started - w.created_at),
		(SELECT count(*) FROM @intervals b WHERE b.queue = 'fair' AND b.key = 'big'
			AND b.started > (SELECT min(started) FROM @intervals WHERE queue = 'fair' AND key = 'small'))
		FROM @intervals i JOIN @workflows w ON w.id = i.workflow_id WHERE i.queue = 'fair' AND i.key = 'small'`)).Scan(&smallWait, &bigAfter))
	fairMax := maxOverlap(t, pool, q, "j.queue = 'fair' AND i.queue = 'fair'")
	t.Logf("fair: the small key's runs waited at most %v; %d of the backlog's %d runs started after the first of them; at most %d running (limit 4)",
		smallWait.Round(time.Millisecond), bigAfter, backlog, fairMax)
	require.Greater(t, bigAfter, backlog/2, "the small key's runs did not wait behind the backlog")
	require.Equal(t, 4, fairMax, "the global limit held and was fully used")

	// weighted: the starts while both keys had runs queued.
	var heavy, light int
	require.NoError(t, pool.QueryRow(ctx, q(`WITH s AS (SELECT key, started FROM @intervals WHERE queue = 'weighted'),
		overlap AS (SELECT least((SELECT max(started) FROM s WHERE key = 'heavy'), (SELECT max(started) FROM s WHERE key = 'light')) AS t)
		SELECT count(*) FILTER (WHERE key = 'heavy'), count(*) FILTER (WHERE key = 'light') FROM s, overlap WHERE s.started < overlap.t`)).Scan(&heavy, &light))
	share := float64(heavy) / float64(heavy+light)
	t.Logf("weighted: %d heavy and %d light starts while both had work (heavy's share %.2f, weight 3:1 wants 0.75)", heavy, light, share)
	require.Greater(t, heavy+light, 20)
	require.Greater(t, share, 0.6, "the weights were not applied (equal weights share 0.5)")
	require.Less(t, share, 0.88, "the light key was starved")

	// keyrate: starts per key and per queue in any one second.
	perKey, perQueue := 0, 0
	require.NoError(t, pool.QueryRow(ctx, q(`SELECT max(k), max(a) FROM (
		SELECT (SELECT count(*) FROM @workflows j WHERE j.queue_name = 'keyrate' AND j.partition_key = i.partition_key
				AND j.started_at >= i.started_at AND j.started_at < i.started_at + interval '1 second') k,
			(SELECT count(*) FROM @workflows j WHERE j.queue_name = 'keyrate'
				AND j.started_at >= i.started_at AND j.started_at < i.started_at + interval '1 second') a
		FROM @workflows i WHERE i.queue_name = 'keyrate') x`)).Scan(&perKey, &perQueue))
	t.Logf("keyrate: at most %d starts of one key in a second (limit 2), %d of the queue", perKey, perQueue)
	require.LessOrEqual(t, perKey, 2)
	require.Greater(t, perQueue, 2, "the limit is per key, not per queue")

	// plans: one at a time per key, but three of vip.
	vip := maxOverlap(t, pool, q, "j.queue = 'plans' AND i.queue = 'plans' AND j.key = i.key AND i.key = 'vip'")
	free := maxOverlap(t, pool, q, "j.queue = 'plans' AND i.queue = 'plans' AND j.key = i.key AND i.key <> 'vip'")
	t.Logf("plans: at most %d vip runs at once (its limit 3), %d of another key (the queue's limit 1)", vip, free)
	require.Equal(t, 1, free)
	require.LessOrEqual(t, vip, 3)
	require.GreaterOrEqual(t, vip, 2, "the key's own limit was not applied")

	// debounced: every enqueue's millisecond in exactly one run.
	var holds, debouncedSteps int
	require.NoError(t, pool.QueryRow(ctx, q(`SELECT sum((input->>'hold_ms')::int),
		(SELECT count(*) FROM @intervals WHERE queue = 'debounced') FROM @workflows WHERE queue_name = 'debounced'`)).Scan(&holds, &debouncedSteps))
	t.Logf("debounced: 80 enqueues made %d run(s), their inputs hold %d parts", debounced, holds)
	require.Equal(t, 80, holds, "an enqueue's part was lost or counted twice")
	require.Equal(t, debounced, debouncedSteps, "each debounced run's step ran once")
	require.Less(t, debounced, 10, "the enqueues did not collapse")

	// batched: every item in exactly one run, none over 8.
	var batchRuns, batchItems, distinctItems, biggest, batchSteps, batchOK int
	require.NoError(t, pool.QueryRow(ctx, q(`SELECT count(DISTINCT w.id), count(*), count(DISTINCT i->>'key'), max(json_array_length(w.input)),
		(SELECT count(*) FROM @intervals WHERE queue = 'batched'), count(DISTINCT w.id) FILTER (WHERE w.status = 'success')
		FROM @workflows w, json_array_elements(w.input) i WHERE w.queue_name = 'batched'`)).
		Scan(&batchRuns, &batchItems, &distinctItems, &biggest, &batchSteps, &batchOK))
	t.Logf("batched: 60 items in %d runs (at most %d items each, limit 8)", batchRuns, biggest)
	require.Equal(t, []int{60, 60}, []int{batchItems, distinctItems}, "an item was lost or is in two runs")
	require.LessOrEqual(t, biggest, 8)
	require.Equal(t, batchRuns, batchSteps, "each batch run's step ran once")
	require.Equal(t, batchRuns, batchOK)
	total += batchRuns

	var steps int
	require.NoError(t, pool.QueryRow(ctx, q("SELECT count(*) FROM @intervals")).Scan(&steps))
	require.Equal(t, total, steps, "every run's step ran exactly once")
	for _, c := range children {
		require.NoError(t, c.Stdin.Close())
	}
}
