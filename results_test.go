package durable_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/proctest"
)

// TestSeenOutcomeSurvivesPostgresCrash: runs finish, their callers get the
// outcome from Result, and Postgres is crashed (SIGQUIT to the postmaster,
// within a millisecond) right after. The WAL writer is slowed to its
// maximum period, so a finish reaches the disk only if its own commit
// waited for the flush. After the crash every outcome must still read as
// the caller saw it, in each of the situations where the engine would act
// on a run it believed pending before replaying it:
//   - deadline: the run's deadline has passed by the time it is looked at
//     again (execute halts a run past its deadline before replay);
//   - attempts: the run is at its recovery limit and its executor is
//     launched again (the claim counts an attempt and dead-letters it);
//   - version: an executor of another AppVersion takes over (a run of the
//     old version would be left pending for good).
//
// It uses a cluster of its own, so it skips when the tests run against a
// server they did not start.
func TestSeenOutcomeSurvivesPostgresCrash(t *testing.T) {
	t.Parallel()
	c, err := pgtest.Private(t)
	if err != nil {
		t.Skipf("no database crash test: %v", err)
	}
	// The WAL writer writes asynchronous commits out every wal_writer_delay:
	// at its longest, only a commit's own flush can save it from the crash.
	c.Exec(t, "ALTER SYSTEM SET wal_writer_delay = '10s'", "SELECT pg_reload_conf()")

	// A round crashes right after the last finish of its runs: one run (a
	// single-row finish, FinishOne), or eight at once (one finishes alone,
	// then the others together in one statement, group commit). Any later
	// synchronous commit, such as the next round's first start, would
	// flush the finishes before it: each shape gets its own crash.
	for _, variant := range []string{"deadline", "attempts", "version"} {
		for _, runs := range []int{1, 8} {
			t.Run(fmt.Sprintf("%s/%d", variant, runs), func(t *testing.T) { seenOutcomeRound(t, c, variant, runs) })
		}
	}
}

func seenOutcomeRound(t *testing.T, c *pgtest.Cluster, variant string, runs int) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	schema := fmt.Sprintf("seen_%s_%d", variant, runs)
	logs := &proctest.Buffer{}
	cfg := durable.Config{
		Schema:     schema,
		AppVersion: "v1",
		ExecutorID: schema,
		// Few heartbeats: each is a synchronous commit that would flush the
		// WAL of the finishes before it.
		LeaseTTL:     30 * time.Second,
		PollInterval: time.Second,
		Logger:       slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	// Every run waits in its step at the gate.
	gate := make(chan struct{})
	var inStep sync.WaitGroup
	register := func(e *durable.Engine) *durable.Workflow[int, int] {
		return durable.Register(e, "quick", func(wctx durable.Context, n int) (int, error) {
			return durable.Step(wctx, "work", func(ctx context.Context) (int, error) {
				inStep.Done()
				<-gate
				return 2 * n, nil
			}, nil)
		}, &durable.WorkflowOpts{MaxRecoveryAttempts: 1})
	}
	// atLimit puts the runs in their step at their recovery limit (1): the
	// next claim of them would be over it.
	atLimit := func(pool *pgxpool.Pool) {
		if variant == "attempts" {
			_, err := pool.Exec(ctx, "UPDATE "+schema+".workflows SET recovery_attempts = 1 WHERE status = 'pending'")
			require.NoError(t, err)
		}
	}

	pool := c.Pool(t)
	e1, err := durable.New(pool, &cfg)
	require.NoError(t, err)
	wf := register(e1)
	require.NoError(t, e1.Launch(ctx))

	var timeout time.Duration
	if variant == "deadline" {
		timeout = 3 * time.Second
	}
	deadline := time.Now().Add(timeout)
	inStep.Add(runs)
	var handles []*durable.Handle[int]
	for i := range runs {
		h, err := wf.Start(ctx, i, &durable.StartOpts{Timeout: timeout})
		require.NoError(t, err)
		handles = append(handles, h)
	}
	inStep.Wait()
	atLimit(pool)
	close(gate)
	seen := map[string]int{}
	for _, h := range handles {
		got, err := h.Result(ctx)
		require.NoError(t, err)
		seen[h.ID()] = got
	}

	c.Crash(t) // right after the last Result returned
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	_ = e1.Shutdown(sctx) // the database is down: nothing to release
	scancel()
	c.Start(t)
	if variant == "deadline" {
		time.Sleep(time.Until(deadline) + 100*time.Millisecond)
	}

	cfg2 := cfg
	if variant == "version" {
		cfg2.AppVersion, cfg2.ExecutorID = "v2", schema+"-next"
	}
	e2, err := durable.New(c.Pool(t), &cfg2) // the old pool's connections died

	require.NoError(t, err)
	wf2 := register(e2)
	require.NoError(t, e2.Launch(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e2.Shutdown(ctx)
	})

	for id, want := range seen {
		h, err := wf2.Handle(ctx, id)
		require.NoError(t, err)
		st, err := h.Status(ctx)
		require.NoError(t, err)
		require.Equal(t, durable.StatusSuccess, st, "run %s: the caller saw success; logs:\n%s", id, logs.String())
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		got, err := h.Result(rctx)
		rcancel()
		require.NoError(t, err, "run %s", id)
		require.Equal(t, want, got, "run %s", id)
	}
}

// TestGracefulStopsDoNotCount: a long run lives through many deploys, each
// a Shutdown that stops it at a step boundary and a Launch of a new
// executor. Its recovery limit (1) counts runs whose process died under
// them, so it must never be dead-lettered for these stops, and its count
// stays at zero. A queued run goes back to its queue at each stop and is
// claimed again through the queue's limits. A SIGKILL still counts
// (TestDeadLetterAfterRepeatedCrashes).
func TestGracefulStopsDoNotCount(t *testing.T) {
	t.Parallel()
	for _, queued := range []bool{false, true} {
		t.Run(fmt.Sprintf("queued=%v", queued), func(t *testing.T) {
			t.Parallel()
			gracefulStops(t, queued)
		})
	}
}

func gracefulStops(t *testing.T, queued bool) {
	b := setup(t)
	ctx := ctxT(t)
	const deploys, steps = 4, 6
	var mu sync.Mutex
	executions := map[int]int{}
	reached := make(chan int, steps)
	release := make(chan struct{}, steps)
	register := func(e *durable.Engine) (*durable.Workflow[int, int], *durable.Queue) {
		wf := durable.Register(e, "long", func(wctx durable.Context, _ int) (int, error) {
			sum := 0
			for i := range steps {
				v, err := durable.Step(wctx, fmt.Sprintf("s%d", i), func(ctx context.Context) (int, error) {
					mu.Lock()
					executions[i]++
					mu.Unlock()
					reached <- i
					<-release
					return i, nil
				}, nil)
				if err != nil {
					return 0, err
				}
				sum += v
			}
			return sum, nil
		}, &durable.WorkflowOpts{MaxRecoveryAttempts: 1})
		return wf, durable.RegisterQueue(e, "deploys", &durable.QueueOpts{WorkerConcurrency: 1})
	}
	// state also says who owns the run and at which epoch, for the
	// messages: a failure then tells whose claim kept the run owned.
	state := func() (status string, owned, parked bool, who string) {
		var owner string
		var epoch int64
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT status, coalesce(executor_id, ''), epoch, wake_at IS NOT NULL FROM "+
			b.schema+".workflows WHERE id = 'long-run'").Scan(&status, &owner, &epoch, &parked))
		return status, owner != "", parked, fmt.Sprintf("status %s, epoch %d, owner %q", status, epoch, owner)
	}

	type result struct {
		v   int
		err error
	}
	ended := make(chan result, 1)
	for d := range deploys + 1 {
		var wf *durable.Workflow[int, int]
		var q *durable.Queue
		e := b.engine(t, func(c *durable.Config) { c.ExecutorID = fmt.Sprintf("deploy-%d", d) },
			func(e *durable.Engine) { wf, q = register(e) })
		if d == 0 {
			var h *durable.Handle[int]
			var err error
			if queued {
				h, err = wf.Enqueue(ctx, q, 0, &durable.EnqueueOpts{ID: "long-run"})
			} else {
				h, err = wf.Start(ctx, 0, &durable.StartOpts{ID: "long-run"})
			}
			require.NoError(t, err)
			go func() {
				v, err := h.Result(ctx)
				ended <- result{v, err}
			}()
		}
		select {
		case i := <-reached: // the run executes step i here
			if d == deploys {
				for range steps - i {
					release <- struct{}{}
				}
				break
			}
			stopped := make(chan error, 1)
			go func() { stopped <- e.Shutdown(ctx) }()
			// Step i ends once Shutdown has begun, so the run stops before
			// step i+1 (ended any sooner, the run would go on into it).
			require.Eventually(t, e.IsStopping, time.Minute, time.Millisecond)
			release <- struct{}{}
			require.NoError(t, <-stopped)
			status, owned, parked, who := state()
			require.False(t, owned, "deploy %d: the stopped run is handed back (%s); logs:\n%s", d, who, b.logs.String())
			require.True(t, parked, "deploy %d: the stopped run is due at once (%s); logs:\n%s", d, who, b.logs.String())
			if queued {
				require.Equal(t, "enqueued", status, "deploy %d: the stopped run is back in its queue", d)
			} else {
				require.Equal(t, "pending", status, "deploy %d", d)
			}
		case r := <-ended:
			t.Fatalf("deploy %d: the run ended early: %v; logs:\n%s", d, r.err, b.logs.String())
		case <-ctx.Done():
			t.Fatalf("deploy %d: the run did not resume; logs:\n%s", d, b.logs.String())
		}
	}
	r := <-ended
	require.NoError(t, r.err, "logs:\n%s", b.logs.String())
	require.Equal(t, 0+1+2+3+4+5, r.v)
	var attempts int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT recovery_attempts FROM "+b.schema+".workflows WHERE id = 'long-run'").Scan(&attempts))
	require.Zero(t, attempts, "graceful stops are not recoveries")
	mu.Lock()
	defer mu.Unlock()
	for i := range steps {
		require.Equal(t, 1, executions[i], "step %d ran once", i)
	}
}
