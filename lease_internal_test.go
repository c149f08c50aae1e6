package durable

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/sysdb"
)

// acquireSignal is a pool tracer that closes the channel an Acquire's
// context carries (acquireStarted) when the Acquire starts.
type acquireSignal struct{}

type acquireStarted struct {
	ch   chan struct{}
	once sync.Once
}

func (acquireSignal) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	if s, ok := ctx.Value(acquireStarted{}).(*acquireStarted); ok {
		s.once.Do(func() { close(s.ch) })
	}
	return ctx
}

func (acquireSignal) TraceAcquireEnd(context.Context, *pgxpool.Pool, pgxpool.TraceAcquireEndData) {}

func (acquireSignal) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (acquireSignal) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestLeaseJudgedWithConnectionInHand: the sweeper decides whether it may
// take over the runs of executors whose lease expired (judgesLeases) once
// it holds a connection, not before waiting for one. Here it waits, the
// pool busy, and meanwhile its own heartbeat fails (the database was away,
// so peers may not have renewed their leases yet): the claim and the
// requeue that then run take no run of an executor whose lease expired.
func TestLeaseJudgedWithConnectionInHand(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cfg := pgtest.Pool(t).Config()
	cfg.MaxConns = 2
	cfg.ConnConfig.Tracer = acquireSignal{}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	schema := pgtest.Schema(t)
	// A long lease: once cut off, the executor does not judge leases for 5 s.
	e, err := New(pool, &Config{Schema: schema, AppVersion: "test", ExecutorID: "judge", LeaseTTL: 10 * time.Second})
	require.NoError(t, err)
	wf := Register(e, "w", func(wctx Context, n int) (int, error) { return n, nil }, nil)
	q := RegisterQueue(e, "q", nil)
	launchUntilCleanup(ctx, t, e)
	require.NoError(t, e.recov.Stop(ctx)) // the test sweeps by hand

	// A run and a queued run of an executor that is gone (no lease).
	_, err = e.q.InsertOwned(ctx, pool, sysdb.InsertOwnedParams{AppVersion: "test", ExecutorID: "gone", Run: &sysdb.OwnedRun{ID: "orphan", Name: "w", Input: json.RawMessage("1")}})
	require.NoError(t, err)
	require.NoError(t, q.Pause(ctx))
	_, err = wf.Enqueue(ctx, q, 2, &EnqueueOpts{ID: "queued-orphan"})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "workflows"}.Sanitize()+
		" SET status = 'pending', executor_id = 'gone', epoch = epoch + 1 WHERE id = 'queued-orphan'")
	require.NoError(t, err)

	// sweep runs f while every connection of the pool is held; once f
	// waits for one, the executor's heartbeat fails, then the connections
	// come back.
	sweep := func(f func(ctx context.Context) error) {
		t.Helper()
		e.lease.CutOff(time.Unix(0, 0)) // in touch with the database for long: it judges leases
		require.True(t, e.lease.JudgesLeases())
		var held []*pgxpool.Conn
		for range cfg.MaxConns {
			c, err := pool.Acquire(ctx)
			require.NoError(t, err)
			held = append(held, c)
		}
		started := &acquireStarted{ch: make(chan struct{})}
		done := make(chan error, 1)
		go func() { done <- f(context.WithValue(ctx, acquireStarted{}, started)) }()
		<-started.ch
		e.lease.CutOff(time.Now())
		for _, c := range held {
			c.Release()
		}
		require.NoError(t, <-done)
	}
	sweep(func(ctx context.Context) error {
		n, err := e.recov.ClaimOrphans(ctx, e.recov.TakeSlots(RecoveryBatchDefault))
		if err == nil && n != 0 {
			t.Errorf("the claim took %d runs of the gone executor", n)
		}
		return err
	})
	sweep(func(ctx context.Context) error { return e.queues.requeue(ctx, false) })
	stays := func(what string) {
		t.Helper()
		got := map[string]string{}
		rows, err := pool.Query(ctx, "SELECT id, status || ' ' || coalesce(executor_id, '-') FROM "+
			pgx.Identifier{schema, "workflows"}.Sanitize())
		require.NoError(t, err)
		for rows.Next() {
			var id, s string
			require.NoError(t, rows.Scan(&id, &s))
			got[id] = s
		}
		require.NoError(t, rows.Err())
		require.Equal(t, map[string]string{"orphan": "pending gone", "queued-orphan": "pending gone"}, got, what)
	}
	stays("after the sweep")

	// A new executor cannot tell whether the database was just away
	// either: its launch takes no run of an executor whose lease expired.
	e2, err := New(pgtest.Pool(t), &Config{Schema: schema, AppVersion: "test", ExecutorID: "new", LeaseTTL: 10 * time.Second})
	require.NoError(t, err)
	Register(e2, "w", func(wctx Context, n int) (int, error) { return n, nil }, nil)
	RegisterQueue(e2, "q", nil)
	launchUntilCleanup(ctx, t, e2)
	stays("after a launch")
}

// TestShutdownKeepsLeaseUntilRunsStop: while Shutdown waits for the runs
// in flight to stop, the heartbeat goes on renewing the lease, so that no
// peer takes over a run still executing here; once every run stopped, the
// lease is released at once, so that peers take over the runs handed back
// without waiting for it to expire.
func TestShutdownKeepsLeaseUntilRunsStop(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	// A TTL of seconds: a heartbeat late on a loaded machine must not let
	// the lease lapse while the run drains (600 ms once did under -race).
	e, err := New(pool, &Config{Schema: schema, AppVersion: "test", ExecutorID: "drain", LeaseTTL: 3 * time.Second})
	require.NoError(t, err)
	reached, release := make(chan struct{}), make(chan struct{})
	wf := Register(e, "w", func(wctx Context, n int) (int, error) {
		return Step(wctx, "slow", func(context.Context) (int, error) {
			close(reached)
			<-release
			return n, nil
		}, nil)
	}, nil)
	launchUntilCleanup(ctx, t, e)
	_, err = wf.Start(ctx, 1, &StartOpts{ID: "r"})
	require.NoError(t, err)
	<-reached

	stopped := make(chan error, 1)
	go func() { stopped <- e.Shutdown(ctx) }()
	require.Eventually(t, e.isStopping, time.Minute, time.Millisecond)
	lease := func() (expires time.Time, live bool) {
		require.NoError(t, pool.QueryRow(ctx, "SELECT lease_expires_at, lease_expires_at > now() FROM "+
			pgx.Identifier{schema, "executors"}.Sanitize()+" WHERE id = 'drain'").Scan(&expires, &live))
		return expires, live
	}
	// Two renewals while the run drains: the lease outlives its TTL.
	for range 2 {
		before, live := lease()
		require.True(t, live, "the lease is live while a run executes here")
		require.Eventually(t, func() bool {
			after, _ := lease()
			return after.After(before)
		}, 5*time.Second, 10*time.Millisecond, "the heartbeat renews the lease while runs drain (every second)")
	}
	close(release)
	require.NoError(t, <-stopped)
	_, live := lease()
	require.False(t, live, "released once every run stopped")
}

// TestShutdownStopsSweeperFirst: a run that Shutdown stops at a step
// boundary is handed back unowned for a peer to take over, and the
// stopping engine's own sweeper must not claim it while other runs still
// drain: it would count a recovery and run it again here, only to stop it
// once more.
func TestShutdownStopsSweeperFirst(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	e, err := New(pool, &Config{Schema: schema, AppVersion: "test", ExecutorID: "drain", LeaseTTL: 3 * time.Second})
	require.NoError(t, err)
	reached := map[string]chan struct{}{"a": make(chan struct{}, 1), "b": make(chan struct{}, 1)}
	release := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
	wf := Register(e, "w", func(wctx Context, id string) (string, error) {
		if _, err := Step(wctx, "first", func(context.Context) (int, error) {
			reached[id] <- struct{}{}
			<-release[id]
			return 0, nil
		}, nil); err != nil {
			return "", err
		}
		return Step(wctx, "second", func(context.Context) (string, error) { return id, nil }, nil)
	}, nil)
	launchUntilCleanup(ctx, t, e)
	for _, id := range []string{"a", "b"} {
		_, err = wf.Start(ctx, id, &StartOpts{ID: id})
		require.NoError(t, err)
		<-reached[id]
	}

	stopped := make(chan error, 1)
	go func() { stopped <- e.Shutdown(ctx) }()
	require.Eventually(t, e.isStopping, time.Minute, time.Millisecond)
	state := func() (owner string, attempts int) {
		require.NoError(t, pool.QueryRow(ctx, "SELECT coalesce(executor_id, ''), recovery_attempts FROM "+
			pgx.Identifier{schema, "workflows"}.Sanitize()+" WHERE id = 'a'").Scan(&owner, &attempts))
		return owner, attempts
	}
	close(release["a"]) // a stops before its second step and is handed back
	require.Eventually(t, func() bool { owner, _ := state(); return owner == "" }, time.Minute, 5*time.Millisecond)
	// While b still runs, nothing here may take a back. A sweeper still
	// running is woken by the hand-back's notification and claims it in
	// milliseconds; a second is far beyond that.
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		owner, attempts := state()
		require.Empty(t, owner, "a run handed back during the drain stays unowned")
		require.Zero(t, attempts, "a run handed back during the drain is not recovered here")
	}
	close(release["b"])
	require.NoError(t, <-stopped)
	owner, attempts := state()
	require.Empty(t, owner)
	require.Zero(t, attempts)
}
