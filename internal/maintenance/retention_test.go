package maintenance

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/clock"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/sysdb"
	"github.com/durable-go/durable/internal/sysdbtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// wait bounds the waits for a signal: only a broken mechanism misses it.
const wait = 30 * time.Second

// newRetention returns the retention pass of a fresh schema holding the
// finished runs done-1..done-n (finished now) and a pending run, keeping
// runs for an hour and passing every interval on the clock c, with its
// signal on.
func newRetention(t *testing.T, n int, interval time.Duration, c clock.Clock) (*Retention, *pgxpool.Pool, string) {
	t.Helper()
	pool, schema := sysdbtest.Migrated(t)
	sysdbtest.Exec(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version)
SELECT 'done-' || i, 'w', 'success', 'v' FROM generate_series(1, $1::int) i`, n)
	sysdbtest.Exec(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version) VALUES ('pending', 'w', 'pending', 'v')`)
	r := NewRetention(RetentionConfig{Pool: pool, Queries: sysdb.NewRetentionQueries(schema), Retention: time.Hour,
		Interval: interval, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: c})
	r.signals.PassDone.Init()
	t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })
	return r, pool, schema
}

func runs(t *testing.T, pool *pgxpool.Pool, schema string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sysdb.Render(`SELECT count(*) FROM {{schema}}.workflows`, schema)).Scan(&n))
	return n
}

// TestRetentionPass: each pass prunes the runs that finished longer than
// Retention ago, as the clock tells, and passes come every Interval.
func TestRetentionPass(t *testing.T) {
	t.Parallel()
	now := time.Now()
	fake := clock.NewFake(now.Add(30 * time.Minute))
	r, pool, schema := newRetention(t, 3, 20*time.Millisecond, fake)
	require.NoError(t, r.Start(context.Background()))
	pass := r.signals.PassDone.Wait(t, wait)
	require.NoError(t, pass.Err)
	require.Zero(t, pass.Result.Runs, "finished half an hour ago: kept")
	require.Equal(t, 4, runs(t, pool, schema))

	fake.Set(now.Add(2 * time.Hour))
	for pass.Result.Runs == 0 {
		pass = r.signals.PassDone.Wait(t, wait)
		require.NoError(t, pass.Err)
	}
	require.Equal(t, PruneResult{Runs: 3, Batches: 1}, pass.Result)
	require.Equal(t, 1, runs(t, pool, schema), "the pending run stays")
}

// TestRetentionOneExecutorAtATime: a pass skips its prune while another
// executor holds the schema's retention lock, and prunes once it is free.
func TestRetentionOneExecutorAtATime(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Now().Add(2 * time.Hour))
	r, pool, schema := newRetention(t, 2, 20*time.Millisecond, fake)
	ctx := context.Background()
	other, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = other.Rollback(ctx) }()
	got, err := sysdb.NewRetentionQueries(schema).TryLock(ctx, other)
	require.NoError(t, err)
	require.True(t, got)

	require.NoError(t, r.Start(ctx))
	pass := r.signals.PassDone.Wait(t, wait)
	require.True(t, pass.Skipped)
	require.Equal(t, 3, runs(t, pool, schema))
	require.NoError(t, other.Rollback(ctx))
	for pass.Skipped {
		pass = r.signals.PassDone.Wait(t, wait)
	}
	require.Equal(t, int64(2), pass.Result.Runs)
}

// TestPrune: a prune goes batch after batch, each its own transaction, up
// to MaxRuns, and stops with its context.
func TestPrune(t *testing.T) {
	t.Parallel()
	r, pool, schema := newRetention(t, 5, time.Hour, nil)
	ctx := context.Background()
	before := time.Now().Add(time.Hour)
	res, err := r.Prune(ctx, before, PruneOpts{BatchSize: 2, MaxRuns: 3})
	require.NoError(t, err)
	require.Equal(t, PruneResult{Runs: 3, Batches: 2}, res)
	res, err = r.Prune(ctx, before, PruneOpts{BatchSize: 2})
	require.NoError(t, err)
	require.Equal(t, PruneResult{Runs: 2, Batches: 1}, res)
	require.Equal(t, 1, runs(t, pool, schema))

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = r.Prune(cctx, before, PruneOpts{})
	require.ErrorIs(t, err, context.Canceled)
}
