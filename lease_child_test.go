package durable_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLiveOwnerKeepsItsRuns: executor A works its runs for longer than its
// lease while a peer sweeps for orphans all along. The runs stay A's: the
// peer never takes them over (their epoch never changes), every step runs
// once, and A's heartbeats keep its lease live to the end.
func TestLiveOwnerKeepsItsRuns(t *testing.T) {
	t.Parallel()
	pool, schema, q := appTables(t)
	ctx := ctxT(t)
	// A's runs take at least 140 steps of 50 ms, 7 s, past its 5 s lease,
	// which only its heartbeats keep live. The peer's lease is short, so
	// it judges leases (and would take runs over) a second after its
	// launch, and its sweep runs every 200 ms.
	const runs, steps = 3, 140
	const lease = 5 * time.Second
	peer := startReady(t, "worker", schema, "B", "DURABLE_LEASE=2s")
	a := startReady(t, "worker", schema, "A", "DURABLE_LEASE="+lease.String(),
		fmt.Sprintf("DURABLE_START=%d", runs), fmt.Sprintf("DURABLE_STEPS=%d", steps))
	started := time.Now()
	require.Eventually(t, func() bool {
		var n int
		_ = pool.QueryRow(ctx, q("SELECT count(*) FROM @workflows WHERE status <> 'pending'")).Scan(&n)
		return n == runs
	}, 60*time.Second, 10*time.Millisecond)
	took := time.Since(started)
	var live bool
	require.NoError(t, pool.QueryRow(ctx, q("SELECT lease_expires_at > now() FROM @executors WHERE id = 'A'")).Scan(&live))
	require.True(t, live, "A's heartbeats renewed its lease (runs took %v, lease %v)", took.Round(time.Millisecond), lease)

	owners := queryMap[string, string](t, pool, q("SELECT id, status || ' by ' || executor_id || ' at epoch ' || epoch FROM @workflows"))
	require.Len(t, owners, runs)
	for id, owner := range owners {
		require.Equal(t, "success by A at epoch 1", owner, "run %s stayed with its live owner", id)
	}
	var executions, distinct, others int
	require.NoError(t, pool.QueryRow(ctx, q(`SELECT count(*), count(DISTINCT (workflow_id, pos)), count(*) FILTER (WHERE pid <> $1)
		FROM @executions`), a.Cmd.Process.Pid).Scan(&executions, &distinct, &others))
	require.Equal(t, runs*steps, distinct)
	require.Equal(t, runs*steps, executions, "every step ran once")
	require.Zero(t, others, "no step ran in the peer")
	t.Logf("%d runs of %d steps took %v with a %v lease, a peer sweeping", runs, steps, took.Round(time.Millisecond), lease)
	require.NoError(t, a.Stdin.Close())
	require.NoError(t, peer.Stdin.Close())
}
