package durable_test

// Wake-ups across processes: the waiting executor polls every two minutes,
// so only a notification from the other process wakes it within
// wakeBound.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/sysdbtest"
)

// TestQueueWakeUpAcrossProcesses: runs enqueued by a process that does not
// work their queues, with Enqueue and with EnqueueTx, start within seconds
// on an executor whose dispatchers poll every two minutes.
func TestQueueWakeUpAcrossProcesses(t *testing.T) {
	t.Parallel()
	pool, schema, q := queueSchema(t)
	ctx := ctxT(t)
	startReady(t, "queue", schema, "A", "DURABLE_LEASE=6m", "DURABLE_POLL=2m")
	client, job := queueClient(t, pool, schema)
	// Let the dispatchers' start-up passes go by: a pass that began after
	// an enqueue would claim its run without a notification, and the test
	// would prove nothing.
	time.Sleep(2 * time.Second)

	sent := time.Now()
	_, err := job.Enqueue(ctx, client.QueueRef("single"), jobIn{Queue: "single"}, &durable.EnqueueOpts{ID: "plain"})
	require.NoError(t, err)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = job.EnqueueTx(ctx, tx, client.QueueRef("global"), jobIn{Queue: "global"}, &durable.EnqueueOpts{ID: "in-tx"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	for _, id := range []string{"plain", "in-tx"} {
		require.Eventually(t, func() bool {
			var n int
			_ = pool.QueryRow(ctx, q("SELECT count(*) FROM @intervals WHERE workflow_id = $1"), id).Scan(&n)
			return n == 1
		}, wakeBound, 5*time.Millisecond, "run %s started by the enqueue's notification, not by the two-minute poll", id)
	}
	t.Logf("both runs started %v after the enqueues", time.Since(sent).Round(time.Millisecond))
}

// TestMessageWakeUpAcrossProcesses: a run waiting in Recv (in memory, or
// parked) in an executor that polls every two minutes receives a message
// sent from another process within seconds.
func TestMessageWakeUpAcrossProcesses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, park, waiting string
	}{
		// In memory, the wait topic is recorded once a receive found
		// nothing, just before the wait.
		{"in-memory", "2h", "executor_id IS NOT NULL AND wait_topic = 'go'"},
		{"parked", "1ms", "executor_id IS NULL AND wake_at IS NOT NULL AND wait_topic = 'go'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, schema := sysdbtest.Migrated(t)
			q := waitsQ(schema)
			ctx := ctxT(t)
			// The lease is long so that the sweeper, which claims parked
			// runs that are due, also waits two minutes between passes.
			startReady(t, "waits", schema, "receiver", "DURABLE_LEASE=6m", "DURABLE_POLL=2m",
				"DURABLE_PARK="+tc.park, "DURABLE_START=recv", "DURABLE_RUN=r1")
			require.Eventually(t, func() bool {
				var n int
				_ = pool.QueryRow(ctx, q("SELECT count(*) FROM @workflows WHERE id = 'r1' AND status = 'pending' AND "+tc.waiting)).Scan(&n)
				return n == 1
			}, 30*time.Second, 5*time.Millisecond)
			if tc.park != "2h" {
				// A park wakes its executor's sweeper (to read the next
				// wake-up time): let that pass go by, or it might claim
				// the run woken by the send without the notification.
				time.Sleep(time.Second)
			}

			client, err := durable.New(pool, &durable.Config{Schema: schema, AppVersion: "crash"})
			require.NoError(t, err)
			sent := time.Now()
			require.NoError(t, durable.Send(ctx, client, "r1", "go", "the answer", nil))
			var out string
			require.Eventually(t, func() bool {
				_ = pool.QueryRow(ctx, q("SELECT coalesce(output #>> '{}', '') FROM @workflows WHERE id = 'r1' AND status = 'success'")).Scan(&out)
				return out != ""
			}, wakeBound, 5*time.Millisecond, "the receiver woken by the send's notification, not by the two-minute poll")
			require.Equal(t, "got the answer", out)
			t.Logf("received %v after the send", time.Since(sent).Round(time.Millisecond))
		})
	}
}
