package dispatch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/sysdb"
)

// keysOf returns the partition key of each claimed run, read from the
// database, in the order of rows.
func (f *fix) keysOf(rows []sysdb.ClaimedRow) []string {
	f.t.Helper()
	out := make([]string, len(rows))
	for i, r := range rows {
		require.NoError(f.t, f.pool.QueryRow(f.ctx, sysdb.Render(`SELECT coalesce(partition_key, '') FROM {{schema}}.workflows WHERE id = $1`, f.schema), r.ID).Scan(&out[i]))
	}
	return out
}

// count returns how many times each value occurs in vs.
func count(vs []string) map[string]int {
	m := map[string]int{}
	for _, v := range vs {
		m[v]++
	}
	return m
}

// backlog queues n runs of key key (created before the runs f.enqueue
// adds after it), in one statement.
func (f *fix) backlog(key string, n int) {
	f.t.Helper()
	_, err := f.pool.Exec(f.ctx, sysdb.Render(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, input, queue_name, partition_key, created_at)
		SELECT $1 || '-' || lpad(g::text, 6, '0'), 'w', 'enqueued', 'v', '1', 'q', $1, now() - interval '1 hour' + g * interval '1 millisecond'
		FROM generate_series(1, $2) g`, f.schema), key, n)
	require.NoError(f.t, err)
}

// TestKeyed covers the keyed passes: a queue with fair sharing or limits
// per partition key.
func TestKeyed(t *testing.T) {
	// A key's backlog, however long, does not hide another key's runs,
	// queued after it, from a pass in priority order: each key's first runs
	// are read.
	t.Run("no-head-of-line", func(t *testing.T) {
		f := newFix(t, sysdb.QueueSettings{PartitionConcurrency: 1})
		f.backlog("big", 5000)
		f.enqueue(1, "small")
		f.start()
		require.Equal(t, 2, f.pass().Claimed)
		require.ElementsMatch(t, []string{"big", "small"}, f.keysOf(f.launch()))
	})
	// Fair sharing: the free slot goes to the key with nothing running,
	// though the other key's runs are older and the peer runs them.
	t.Run("fair", func(t *testing.T) {
		f := newFix(t, sysdb.QueueSettings{FairShare: true, GlobalConcurrency: 4})
		f.backlog("a", 10)
		f.enqueue(10, "b")
		f.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, queue_name, partition_key) VALUES
			('p1', 'w', 'pending', 'v', 'peer', 'q', 'a'), ('p2', 'w', 'pending', 'v', 'peer', 'q', 'a')`)
		f.start()
		require.Equal(t, 2, f.pass().Claimed)
		require.Equal(t, []string{"b", "b"}, f.keysOf(f.launch()), "b had none running: both slots")
	})
	// Weights: 3 to 1.
	t.Run("weights", func(t *testing.T) {
		f := newFix(t, sysdb.QueueSettings{FairShare: true, GlobalConcurrency: 8})
		f.backlog("light", 20)
		f.enqueue(20, "heavy")
		f.exec(`INSERT INTO {{schema}}.queue_partitions (queue_name, partition_key, weight) VALUES ('q', 'heavy', 3)`)
		f.start()
		require.Equal(t, 8, f.pass().Claimed)
		require.Equal(t, map[string]int{"heavy": 6, "light": 2}, count(f.keysOf(f.launch())))
	})
	// A key's own concurrency limit replaces the queue's, for that key.
	t.Run("key-limit", func(t *testing.T) {
		f := newFix(t, sysdb.QueueSettings{PartitionConcurrency: 1})
		f.enqueue(12, "vip", "free")
		f.exec(`INSERT INTO {{schema}}.queue_partitions (queue_name, partition_key, concurrency) VALUES ('q', 'vip', 4)`)
		f.start()
		require.Equal(t, 5, f.pass().Claimed)
		require.Equal(t, map[string]int{"vip": 4, "free": 1}, count(f.keysOf(f.launch())))
	})
	// The rate per key: starts within the period count, and the loop
	// looks again when the key's oldest start leaves it.
	t.Run("key-rate", func(t *testing.T) {
		f := newFix(t, sysdb.QueueSettings{PartitionRateLimit: 2, PartitionRatePeriod: time.Hour})
		f.enqueue(8, "a", "b")
		f.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, queue_name, partition_key, rate_start) VALUES
			('done', 'w', 'success', 'v', 'q', 'a', now() - interval '59 minutes')`)
		f.start()
		require.Equal(t, 3, f.pass().Claimed)
		require.Equal(t, map[string]int{"a": 1, "b": 2}, count(f.keysOf(f.launch())))
		f.q.Wake()
		p := f.pass()
		require.Zero(t, p.Claimed, "both keys at their rate")
		require.Less(t, p.Wait, 2*time.Minute, "the loop looks again when a's oldest start leaves the period")
		require.Positive(t, p.Wait)
	})
	// More keys with work than a pass reads: the next pass goes on after
	// the last key read, round the key space, instead of starting over.
	t.Run("cursor", func(t *testing.T) {
		f := newFix(t, sysdb.QueueSettings{FairShare: true, WorkerConcurrency: 1})
		for i := range 40 {
			f.backlog(string(rune('A'+i/26))+string(rune('a'+i%26)), 1)
		}
		f.start()
		require.Equal(t, 1, f.pass().Claimed)
		require.Equal(t, []string{"Aa"}, f.keysOf(f.launch()))
		var cursor string
		require.NoError(t, f.pool.QueryRow(f.ctx, sysdb.Render(`SELECT fair_cursor FROM {{schema}}.queues`, f.schema)).Scan(&cursor))
		require.Equal(t, "Bf", cursor, "the 32nd key")
		require.Zero(t, f.pass().Claimed, "the worker limit")
		f.q.Release(1)
		require.Equal(t, 1, f.pass().Claimed)
		require.Equal(t, []string{"Bg"}, f.keysOf(f.launch()), "after the cursor")
	})
}

// TestFairQuotas: the water fill gives each slot to the least loaded key
// per unit of weight, within each key's room, ties to the first key.
func TestFairQuotas(t *testing.T) {
	keys := []*keyLoad{
		{key: "a", index: 0, running: 3, weight: 1, room: 100},
		{key: "b", index: 1, running: 0, weight: 1, room: 2},
		{key: "c", index: 2, running: 0, weight: 2, room: 100},
		{key: "d", index: 3, running: 0, weight: 1, room: 100, dry: true},
	}
	fairQuotas(keys, 9)
	require.Equal(t, []int{1, 2, 6, 0}, []int{keys[0].quota, keys[1].quota, keys[2].quota, keys[3].quota})
	priorityQuotas(keys, 9)
	require.Equal(t, []int{7, 2, 7, 0}, []int{keys[0].quota, keys[1].quota, keys[2].quota, keys[3].quota})
}
