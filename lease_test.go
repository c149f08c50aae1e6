package durable_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// TestBusyPool: an executor whose pool is full of blocked transaction
// steps keeps its lease, and finds out when it lost its runs.
func TestBusyPool(t *testing.T) {
	t.Parallel()

	// KeepsLease: an executor whose pool is full of transaction
	// steps blocked for several lease periods keeps its lease, its heartbeat
	// having connections of its own. A live peer on the same schema takes none
	// of its runs over: they finish where they started, at the epoch they
	// started with, each step executed once.
	t.Run("KeepsLease", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := ctxT(t)
		const runs = 5
		small := smallPool(t, b, runs) // one connection per blocked step: none left for the engine
		var mu sync.Mutex
		ranOn := map[string][]string{} // run -> executors that executed its step
		inStep := make(chan string, runs)
		release := make(chan struct{})
		var wf *durable.Workflow[int, string]
		register := func(executor string) func(*durable.Engine) {
			return func(e *durable.Engine) {
				w := durable.Register(e, "busy", func(wctx durable.Context, n int) (string, error) {
					return durable.TxStep(wctx, "hold", func(ctx context.Context, tx pgx.Tx) (string, error) {
						mu.Lock()
						ranOn[wctx.WorkflowID()] = append(ranOn[wctx.WorkflowID()], executor)
						mu.Unlock()
						if executor == "busy" {
							inStep <- wctx.WorkflowID()
							select { // holding the transaction's connection
							case <-release:
							case <-ctx.Done():
								return "", ctx.Err()
							}
						}
						_, err := tx.Exec(ctx, "SELECT 1")
						return executor, err
					}, nil)
				}, nil)
				if executor == "busy" {
					wf = w
				}
			}
		}

		busyEngine(t, b, small, "busy", register("busy"))
		b.engine(t, func(c *durable.Config) { c.ExecutorID = "peer" }, register("peer"))

		var handles []*durable.Handle[string]
		for i := 0; i < runs; i++ {
			h, err := wf.Start(ctx, i, &durable.StartOpts{ID: fmt.Sprintf("busy-%d", i)})
			require.NoError(t, err)
			handles = append(handles, h)
		}
		for i := 0; i < runs; i++ {
			<-inStep
		}
		epochs := queryMap[string, int64](t, b.pool, fmt.Sprintf("SELECT id, epoch FROM %q.workflows", b.schema))
		require.Len(t, epochs, runs)

		// Every connection of the pool is held: a heartbeat waiting for one
		// would time out each period, and the peer would take the runs over
		// once the lease expired (LeaseTTL), plus LeaseTTL/2 after its launch.
		time.Sleep(4 * b.cfg.LeaseTTL)
		close(release)

		for _, h := range handles {
			out, err := h.Result(ctx)
			require.NoError(t, err)
			require.Equal(t, "busy", out, "%s finished on its original executor", h.ID())
		}
		require.Equal(t, epochs, queryMap[string, int64](t, b.pool, fmt.Sprintf("SELECT id, epoch FROM %q.workflows", b.schema)),
			"no run changed owner")
		mu.Lock()
		defer mu.Unlock()
		for id, on := range ranOn {
			require.Equal(t, []string{"busy"}, on, "%s's step executed once, where it started", id)
		}
	})

	// FencedTxSteps: transaction steps that hold every
	// connection of the executor's pool, and whose checkpoints are all refused
	// at once (their runs changed owner while they ran), find out why without
	// a connection of that pool: each holds its own until then, so a check
	// waiting for one would wait for ever. They stop as fenced and give their
	// connections back.
	t.Run("FencedTxSteps", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := ctxT(t)
		const runs = 5
		small := smallPool(t, b, runs)
		inStep := make(chan string, runs)
		release := make(chan struct{})
		var wf *durable.Workflow[int, int]
		busyEngine(t, b, small, "fenced", func(e *durable.Engine) {
			wf = durable.Register(e, "fenced", func(wctx durable.Context, n int) (int, error) {
				return durable.TxStep(wctx, "hold", func(ctx context.Context, tx pgx.Tx) (int, error) {
					inStep <- wctx.WorkflowID()
					<-release
					return n, nil
				}, nil)
			}, nil)
		})
		for i := 0; i < runs; i++ {
			_, err := wf.Start(ctx, i, &durable.StartOpts{ID: fmt.Sprintf("fenced-%d", i)})
			require.NoError(t, err)
		}
		for i := 0; i < runs; i++ {
			<-inStep
		}
		// As a takeover by a peer would, while the steps still run.
		_, err := b.pool.Exec(ctx, fmt.Sprintf("UPDATE %q.workflows SET epoch = epoch + 1", b.schema))
		require.NoError(t, err)
		close(release)
		require.Eventually(t, func() bool {
			return strings.Count(b.logs.String(), "durable: run stopped") == runs && small.Stat().AcquiredConns() == 0
		}, 30*time.Second, 10*time.Millisecond, "the fenced steps stop and give their connections back; logs:\n%s", b.logs.String())
		require.Contains(t, b.logs.String(), "fenced")
	})
}

// smallPool returns a pool of b's database with at most conns connections,
// closed after the engines of the test are shut down.
func smallPool(t *testing.T, b *bundle, conns int32) *pgxpool.Pool {
	t.Helper()
	cfg := b.pool.Config()
	cfg.MaxConns = conns
	p, err := pgxpool.NewWithConfig(ctxT(t), cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close) // cleanups run last first: after the engines' shutdown
	return p
}

// busyEngine launches an engine of executor id on pool with b's config.
func busyEngine(t *testing.T, b *bundle, pool *pgxpool.Pool, id string, register func(*durable.Engine)) *durable.Engine {
	t.Helper()
	cfg := *b.cfg
	cfg.ExecutorID = id
	e, err := durable.New(pool, &cfg)
	require.NoError(t, err)
	register(e)
	require.NoError(t, e.Launch(ctxT(t)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
	})
	return e
}
