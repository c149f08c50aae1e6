package lease

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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

// newLease returns a registered lease of executor "ex" on pool (and the
// lease's pool opened), with the heartbeat signals on; it is stopped and
// closed when t ends.
func newLease(t *testing.T, pool *pgxpool.Pool, schema string, ttl time.Duration, c clock.Clock) *Service {
	t.Helper()
	s := New(Config{Pool: pool, Queries: sysdb.NewLeaseQueries(schema), ExecutorID: "ex", Incarnation: "a", AppVersion: "v",
		LeaseTTL: ttl, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: c})
	s.signals.Renewed.Init()
	s.signals.Failed.Init()
	require.NoError(t, s.Open())
	t.Cleanup(func() {
		require.NoError(t, s.Stop(context.Background()))
		s.Close()
	})
	return s
}

// leaseLeft returns how long the lease of "ex" has left (negative:
// expired) and its incarnation.
func leaseLeft(t *testing.T, pool *pgxpool.Pool, schema string) time.Duration {
	t.Helper()
	var left time.Duration
	require.NoError(t, pool.QueryRow(context.Background(), sysdb.Render(
		`SELECT lease_expires_at - now() FROM {{schema}}.executors WHERE id = 'ex'`, schema)).Scan(&left))
	return left
}

// TestHeartbeatOnItsOwnConnections: the heartbeat renews the lease every
// LeaseTTL/3, and a fence check gets its answer, while every connection
// of the application's pool is held.
func TestHeartbeatOnItsOwnConnections(t *testing.T) {
	t.Parallel()
	pool, schema := sysdbtest.Migrated(t)
	ctx := context.Background()
	cfg := pool.Config()
	cfg.MaxConns = 1
	app, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(app.Close)
	s := newLease(t, app, schema, time.Second, nil)
	_, err = s.Register(ctx, "host", 1)
	require.NoError(t, err)
	sysdbtest.Exec(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch) VALUES ('r', 'w', 'pending', 'v', 'ex', 3)`)

	held, err := app.Acquire(ctx)
	require.NoError(t, err)
	defer held.Release()
	// Shorten the lease, so that only a heartbeat can lengthen it.
	sysdbtest.Exec(t, pool, schema, `UPDATE {{schema}}.executors SET lease_expires_at = now() + interval '100 milliseconds'`)
	require.NoError(t, s.Start(ctx))
	for range 3 {
		require.True(t, s.signals.Renewed.Wait(t, wait))
	}
	require.Greater(t, leaseLeft(t, pool, schema), 500*time.Millisecond, "renewed for LeaseTTL")

	fctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	row, err := s.FenceCheck(fctx, sysdb.OwnershipCheckParams{WorkflowID: "r", Pos: 0})
	require.NoError(t, err)
	require.Equal(t, int64(3), row.Epoch)
}

// TestFenceChecksLeaveTheHeartbeatAConnection: fence checks take turns on
// one of the lease's connections; while one is in flight, another waits
// for it, and the heartbeat still renews the lease on the other.
func TestFenceChecksLeaveTheHeartbeatAConnection(t *testing.T) {
	t.Parallel()
	pool, schema := sysdbtest.Migrated(t)
	ctx := context.Background()
	s := newLease(t, pool, schema, 600*time.Millisecond, nil)
	_, err := s.Register(ctx, "host", 1)
	require.NoError(t, err)
	// A fence check in flight: its turn and its connection.
	s.fence <- struct{}{}
	inFlight, err := s.pool.Acquire(ctx)
	require.NoError(t, err)
	release := sync.OnceFunc(inFlight.Release)
	defer release() // before the pool closes
	require.NoError(t, s.Start(ctx))

	checked := make(chan error, 1)
	go func() {
		_, err := s.FenceCheck(ctx, sysdb.OwnershipCheckParams{WorkflowID: "r", Pos: 0})
		checked <- err
	}()
	for range 5 {
		require.True(t, s.signals.Renewed.Wait(t, wait))
	}
	select {
	case err := <-checked:
		t.Fatalf("a second fence check did not wait for its turn: %v", err)
	default:
	}
	release()
	<-s.fence
	select {
	case err := <-checked:
		require.ErrorIs(t, err, pgx.ErrNoRows, "its turn came: no such run")
	case <-time.After(wait):
		t.Fatal("the fence check did not run once its turn came")
	}
}

// TestLeaseLost: a heartbeat finds the lease taken by another
// incarnation of the executor ID and renews nothing.
func TestLeaseLost(t *testing.T) {
	t.Parallel()
	pool, schema := sysdbtest.Migrated(t)
	ctx := context.Background()
	s := newLease(t, pool, schema, 300*time.Millisecond, nil)
	_, err := s.Register(ctx, "host", 1)
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	require.True(t, s.signals.Renewed.Wait(t, wait))
	_, err = sysdb.NewLeaseQueries(schema).RegisterExecutor(ctx, pool, sysdb.RegisterExecutorParams{ExecutorID: "ex", Incarnation: "b",
		AppVersion: "v", LeaseTTL: time.Hour})
	require.NoError(t, err)
	for s.signals.Renewed.Wait(t, wait) {
	}
	renewed, err := s.Renew(ctx)
	require.NoError(t, err)
	require.False(t, renewed)
}

// TestCutOffJudgement: a heartbeat that fails (the database is
// unreachable) marks this executor cut off at that time, and asks the
// sweeper to look for strays; it judges its peers' leases again only
// LeaseTTL/2 after the failure.
func TestCutOffJudgement(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig("postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	require.NoError(t, err)
	unreachable, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(unreachable.Close)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	fake := clock.NewFake(start)
	const ttl = 300 * time.Millisecond
	s := newLease(t, unreachable, "unused", ttl, fake)
	require.True(t, s.JudgesLeases(), "in touch with the database for long")
	require.False(t, s.TakeStrayCheck())

	require.NoError(t, s.Start(context.Background()))
	s.signals.Failed.Wait(t, wait)
	require.True(t, s.TakeStrayCheck(), "a failed heartbeat asks for a stray check")
	require.False(t, s.TakeStrayCheck(), "taken once")
	require.NoError(t, s.Stop(context.Background()))

	require.False(t, s.JudgesLeases())
	fake.Set(start.Add(ttl / 2))
	require.False(t, s.JudgesLeases(), "peers may still be renewing their leases")
	fake.Set(start.Add(ttl/2 + time.Millisecond))
	require.True(t, s.JudgesLeases())

	// Launch marks the executor cut off too: it cannot tell.
	s.CutOff(fake.Now())
	require.False(t, s.JudgesLeases())
}

func TestRelease(t *testing.T) {
	t.Parallel()
	pool, schema := sysdbtest.Migrated(t)
	ctx := context.Background()
	s := newLease(t, pool, schema, time.Hour, nil)
	row, err := s.Register(ctx, "host", 1)
	require.NoError(t, err)
	require.Equal(t, "C", row.IDCollation)
	require.Greater(t, leaseLeft(t, pool, schema), 59*time.Minute)
	require.NoError(t, s.Release(ctx))
	require.Negative(t, leaseLeft(t, pool, schema))
}
