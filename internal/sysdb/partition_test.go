package sysdb

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// partitionFix is a queue fixture with the partition statements.
func partitionFix(t *testing.T) (*queueFix, *PartitionQueries) {
	f := newQueueFix(t)
	return f, NewPartitionQueries(f.schema)
}

func TestPartitionKeys(t *testing.T) {
	f, pq := partitionFix(t)
	f.declare("q", QueueSettings{})
	// Keys k01..k09 queued (k05 only delayed: still a key with work), k10
	// only running, a keyless run, another queue's key.
	f.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, queue_name, partition_key, not_before)
		SELECT 'r' || g || '-' || i, 'w', 'enqueued', 'v', 'q', 'k0' || g,
			CASE WHEN g = 5 THEN now() + interval '1 hour' END
		FROM generate_series(1, 9) g, generate_series(1, 3) i`)
	f.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, queue_name, partition_key) VALUES
		('run', 'w', 'pending', 'v', 'q', 'k10'), ('nokey', 'w', 'enqueued', 'v', 'q', NULL),
		('other', 'w', 'enqueued', 'v', 'other', 'k00')`)
	keys := func(p PartitionKeysParams) []string {
		t.Helper()
		p.Queue = "q"
		got, err := pq.Keys(f.ctx, f.pool, p)
		require.NoError(t, err)
		return got
	}
	require.Equal(t, []string{"", "k01", "k02", "k03"}, keys(PartitionKeysParams{Limit: 3, WithKeyless: true}))
	require.Equal(t, []string{"k01", "k02", "k03"}, keys(PartitionKeysParams{Limit: 3}))
	require.Equal(t, []string{"k04", "k05", "k06", "k07", "k08", "k09"}, keys(PartitionKeysParams{After: "k03", Limit: 100}))
	upTo := "k02"
	require.Equal(t, []string{"k01", "k02"}, keys(PartitionKeysParams{UpTo: &upTo, Limit: 100}), "the wrap stops at the cursor")
	f.exec(`DELETE FROM {{schema}}.workflows WHERE id = 'nokey'`)
	require.Equal(t, []string{"k09"}, keys(PartitionKeysParams{After: "k08", Limit: 5, WithKeyless: true}))
}

func TestPartitionState(t *testing.T) {
	f, pq := partitionFix(t)
	f.declare("q", QueueSettings{})
	f.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, queue_name, partition_key, rate_start) VALUES
		('1', 'w', 'pending', 'v', 'x', 'q', 'k1', now() - interval '10 seconds'),
		('2', 'w', 'pending', 'v', 'x', 'q', 'k1', now() - interval '2 minutes'),
		('3', 'w', 'cancelled', 'v', 'x', 'q', 'k1', NULL),
		('4', 'w', 'cancelled', 'v', NULL, 'q', 'k2', now() - interval '20 seconds'),
		('5', 'w', 'pending', 'v', 'x', 'q', NULL, now() - interval '5 seconds'),
		('6', 'w', 'pending', 'v', 'x', 'q', 'k3', NULL),
		('7', 'w', 'enqueued', 'v', NULL, 'q', 'k2', NULL),
		('8', 'w', 'pending', 'v', 'x', 'other', 'k2', now())`)
	_, err := pq.SetLimits(f.ctx, f.pool, PartitionLimitsParams{Queue: "q", Key: "k2", Concurrency: 5, Weight: 3})
	require.NoError(t, err)
	rows, err := pq.State(f.ctx, f.pool, PartitionStateParams{Queue: "q", Keys: []string{"k1", "k2", "", "k9"}, RatePeriod: time.Minute})
	require.NoError(t, err)
	require.Len(t, rows, 4)
	free := func(r PartitionStateRow) time.Duration { require.NotNil(t, r.RateFree); return *r.RateFree }
	require.Equal(t, "k1", rows[0].Key)
	require.Equal(t, []int{3, 1, 0, 1}, []int{rows[0].Running, rows[0].Recent, rows[0].Concurrency, rows[0].Weight})
	require.InDelta(t, 50*time.Second, free(rows[0]), float64(5*time.Second))
	require.Equal(t, PartitionStateRow{Key: "k2", Running: 0, Recent: 1, RateFree: rows[1].RateFree, Concurrency: 5, Weight: 3}, rows[1])
	require.Equal(t, []int{1, 1}, []int{rows[2].Running, rows[2].Recent}, "the runs without a key are the key \"\"")
	require.Equal(t, PartitionStateRow{Key: "k9", Weight: 1}, rows[3])

	rows, err = pq.State(f.ctx, f.pool, PartitionStateParams{Queue: "q", Keys: []string{"k1"}})
	require.NoError(t, err)
	require.Equal(t, []PartitionStateRow{{Key: "k1", Running: 3, Weight: 1}}, rows, "no rate period: no starts counted")
}

func TestPartitionCandidates(t *testing.T) {
	f, pq := partitionFix(t)
	// a, b: k1 (a first); c: k2; d, h, i: no key (i of v0, never started:
	// any version runs it); e: workflow x; f: delayed; g: re-queued, v0.
	claimFixture(f)
	f.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, queue_name, partition_key, created_at) VALUES
		('k1late', 'w', 'enqueued', 'v1', 'q', 'k1', now())`)
	cands := func(keys []string, quotas []int) []string {
		t.Helper()
		// Bounded: a candidate that waits for a locked run fails.
		ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
		defer cancel()
		tx, err := f.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(f.ctx) }()
		rows, err := pq.Candidates(ctx, tx, PartitionCandidatesParams{Queue: "q", Keys: keys, Quotas: quotas,
			AppVersion: "v1", Workflows: []string{"w"}})
		require.NoError(t, err)
		var ids []string
		for _, r := range rows {
			ids = append(ids, r.Key+":"+r.ID)
		}
		return ids
	}
	require.Equal(t, []string{"k1:a", "k1:b", "k2:c", ":d", ":h", ":i"}, cands([]string{"k1", "k2", ""}, []int{2, 5, 9}))
	require.Equal(t, []string{"k1:a"}, cands([]string{"k1", "k2"}, []int{1, 0}))
	require.Equal(t, []string{":d"}, cands([]string{""}, []int{1}))
	require.Empty(t, cands([]string{"nope"}, []int{3}))

	// Runs locked by another dispatch are skipped, with a key or without.
	tx, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(f.ctx) }()
	_, err = tx.Exec(f.ctx, Render(`SELECT 1 FROM {{schema}}.workflows WHERE id IN ('a', 'd') FOR UPDATE`, f.schema))
	require.NoError(t, err)
	require.Equal(t, []string{"k1:b", "k1:k1late"}, cands([]string{"k1"}, []int{2}))
	require.Equal(t, []string{":h", ":i"}, cands([]string{""}, []int{2}))
}

func TestPartitionCursorAndLimits(t *testing.T) {
	f, pq := partitionFix(t)
	f.declare("q", QueueSettings{})
	require.NoError(t, pq.SetCursor(f.ctx, f.pool, "q", "k7"))
	require.Equal(t, "k7", value[string](f, `SELECT fair_cursor FROM {{schema}}.queues WHERE name = 'q'`))
	require.NoError(t, pq.SetCursor(f.ctx, f.pool, "q", ""))
	require.True(t, value[bool](f, `SELECT fair_cursor IS NULL FROM {{schema}}.queues WHERE name = 'q'`))

	found, err := pq.SetLimits(f.ctx, f.pool, PartitionLimitsParams{Queue: "nope", Key: "k", Weight: 1})
	require.NoError(t, err)
	require.False(t, found, "no such queue")
	for _, p := range []PartitionLimitsParams{{Queue: "q", Key: "b", Concurrency: 2, Weight: 1},
		{Queue: "q", Key: "a", Weight: 4}, {Queue: "q", Key: "b", Concurrency: 7, Weight: 2}} {
		found, err := pq.SetLimits(f.ctx, f.pool, p)
		require.NoError(t, err)
		require.True(t, found)
	}
	got, err := pq.Limits(f.ctx, f.pool, "q")
	require.NoError(t, err)
	require.Equal(t, []PartitionLimitsRow{{"a", 0, 4}, {"b", 7, 2}}, got)
	require.NoError(t, pq.DeleteLimits(f.ctx, f.pool, "q", "a"))
	got, err = pq.Limits(f.ctx, f.pool, "q")
	require.NoError(t, err)
	require.Equal(t, []PartitionLimitsRow{{"b", 7, 2}}, got)

	_, err = pq.SetLimits(f.ctx, f.pool, PartitionLimitsParams{Queue: "q", Key: "c", Weight: 0})
	require.Error(t, err, "a weight below 1 is refused by the table")
}

func TestPartitionStats(t *testing.T) {
	f, pq := partitionFix(t)
	f.declare("q", QueueSettings{})
	f.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, queue_name, partition_key, not_before) VALUES
		('1', 'w', 'enqueued', 'v', NULL, 'q', 'a', NULL),
		('2', 'w', 'enqueued', 'v', NULL, 'q', 'a', now() + interval '1 hour'),
		('3', 'w', 'pending', 'v', 'x', 'q', 'a', NULL),
		('4', 'w', 'cancelled', 'v', 'x', 'q', 'b', NULL),
		('5', 'w', 'enqueued', 'v', NULL, 'q', NULL, NULL),
		('6', 'w', 'success', 'v', 'x', 'q', 'c', NULL),
		('7', 'w', 'enqueued', 'v', NULL, 'other', 'a', NULL)`)
	_, err := pq.SetLimits(f.ctx, f.pool, PartitionLimitsParams{Queue: "q", Key: "vip", Concurrency: 3, Weight: 2})
	require.NoError(t, err)
	rows, err := pq.Stats(f.ctx, f.pool, "q", 10)
	require.NoError(t, err)
	require.Equal(t, []PartitionStatsRow{
		{Key: "a", Ready: 1, Delayed: 1, Running: 1, Weight: 1},
		{Key: "", Ready: 1, Weight: 1},
		{Key: "b", Running: 1, Weight: 1},
		{Key: "vip", Concurrency: 3, Weight: 2, Limited: true},
	}, rows)
	rows, err = pq.Stats(f.ctx, f.pool, "q", 1)
	require.NoError(t, err)
	require.Len(t, rows, 1)
}
