package durable_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/proctest"
	"github.com/durable-go/durable/internal/sysdbtest"
)

func appTables(t *testing.T) (pool *pgxpool.Pool, schema string, q func(string) string) {
	t.Helper()
	pool = pgtest.Pool(t)
	schema = pgtest.Reused(t, "migrated+app", func(ctx context.Context, conn *pgx.Conn, schema string) error {
		if err := sysdbtest.Migrate(ctx, conn, schema); err != nil {
			return err
		}
		_, err := conn.Exec(ctx, appQuery(schema)(`
			CREATE TABLE @executions (workflow_id text, pos int, pid int, at timestamptz DEFAULT clock_timestamp());
			CREATE TABLE @effects (idem_key text PRIMARY KEY, seen int NOT NULL DEFAULT 1);
			CREATE TABLE @orders (workflow_id text, pos int)`))
		return err
	})
	return pool, schema, appQuery(schema)
}

// appQuery returns a function that qualifies the tables written @name in
// a query with schema.
func appQuery(schema string) func(string) string {
	return func(s string) string { return strings.ReplaceAll(s, "@", pgx.Identifier{schema}.Sanitize()+".") }
}

// TestCrashMatrix kills a real child process (SIGKILL) at every boundary of
// a five-step workflow, restarts it, and checks guarantees 1-3: the run
// finishes with the right result, no step runs again after its checkpoint,
// transaction steps' rows exist exactly once, and the provider sees each
// idempotency key once.
//
// With Config.DeferStepCheckpoints ("deferred" cases) a plain step may
// return before its checkpoint is written: killed right after it returned,
// the step may run again (at most once more), but the transaction of the
// next step never happens before that checkpoint: killed inside it, the
// previous step ran once. The kill after the last step
// leaves its checkpoint to the resumed run's finish statement.
func TestCrashMatrix(t *testing.T) {
	t.Parallel()
	var cases []crashCase
	for i, kind := range crashSteps {
		cases = append(cases, crashCase{"before", i, false}, crashCase{"after-checkpoint", i, false})
		if kind == "plain" {
			cases = append(cases, crashCase{"after-effect", i, false}, crashCase{"after-checkpoint", i, true})
		} else {
			cases = append(cases, crashCase{"in-tx", i, false})
		}
		if kind == "tx" { // the previous (plain) step's checkpoint was deferred when this one began
			cases = append(cases, crashCase{"in-tx", i, true})
		}
	}
	for _, tc := range cases {
		name := fmt.Sprintf("%s-%d", tc.point, tc.pos)
		if tc.deferred {
			name = "deferred-" + name
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			crashMatrixCase(t, tc)
		})
	}
}

type crashCase struct {
	point    string
	pos      int
	deferred bool // Config.DeferStepCheckpoints
}

// again reports how many times the step at pos may run in case tc: once,
// or twice when it was interrupted before its checkpoint.
func (tc crashCase) again(pos int) (least, most int) {
	switch {
	case pos != tc.pos:
		return 1, 1
	case tc.point == "after-effect" || tc.point == "in-tx":
		return 2, 2
	case tc.deferred && tc.point == "after-checkpoint":
		return 1, 2 // killed before the deferred write, unless its timer beat the kill
	}
	return 1, 1
}

func crashMatrixCase(t *testing.T, tc crashCase) {
	pool, schema, q := appTables(t)
	ctx := ctxT(t)
	env := []string{"DURABLE_LEASE=30s"}
	if tc.deferred {
		env = append(env, "DURABLE_DEFER=1")
	}

	first := startChild(t, "matrix", schema, "matrix-exec", append(env, fmt.Sprintf("DURABLE_CRASH=%s:%d", tc.point, tc.pos))...)
	err := first.Wait(t)
	require.True(t, proctest.KilledBySIGKILL(err), "first child must die by SIGKILL, got %v; stderr:\n%s", err, first.Stderr.String())

	second := startChild(t, "matrix", schema, "matrix-exec", env...)
	require.Equal(t, "result 461", second.WaitLine(t, "result"))
	require.NoError(t, second.Wait(t))

	// Every step body ran once, except the one interrupted before its
	// checkpoint (after its effect, or inside its transaction).
	counts := queryMap[int, int](t, pool, q("SELECT pos, count(*) FROM @executions GROUP BY pos"))
	for i := range crashSteps {
		least, most := tc.again(i)
		require.True(t, counts[i] >= least && counts[i] <= most, "executions of step %d: %d, want %d-%d", i, counts[i], least, most)
	}

	// The provider saw each idempotency key; a key seen twice was
	// deduplicated, so each effect happened once.
	seen := queryMap[string, int](t, pool, q("SELECT idem_key, seen FROM @effects"))
	require.Len(t, seen, 3)
	for _, pos := range []int{0, 2, 4} { // the plain steps
		key := fmt.Sprintf("matrix-run/%d", pos)
		require.Contains(t, seen, key)
		require.Equal(t, counts[pos], seen[key], "the provider saw key %s once per execution of its step", key)
	}

	// Transaction steps' app rows exist exactly once.
	rows, err := pool.Query(ctx, q("SELECT workflow_id || '/' || pos FROM @orders ORDER BY pos"))
	require.NoError(t, err)
	orders, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"matrix-run/1", "matrix-run/3"}, orders)

	var status string
	var recovered, steps int
	require.NoError(t, pool.QueryRow(ctx, q(`SELECT status, recovery_attempts,
		(SELECT count(*) FROM @steps WHERE workflow_id = 'matrix-run' AND status = 'done')
		FROM @workflows WHERE id = 'matrix-run'`)).Scan(&status, &recovered, &steps))
	require.Equal(t, "success", status)
	require.Equal(t, 1, recovered)
	require.Equal(t, len(crashSteps), steps)
}

// TestTakeoverAfterExecutorDies runs three executor processes; one is
// SIGKILLed in the middle of its runs, which the other two take over once
// its lease expires, finishing each run exactly once.
func TestTakeoverAfterExecutorDies(t *testing.T) {
	t.Parallel()
	pool, schema, q := appTables(t)
	ctx := ctxT(t)
	const runs = 6
	// A's lease is short, so the survivors take its runs over soon after
	// the kill; theirs are long, so a survivor stalled by a loaded machine
	// never looks dead to the other (its sweep still runs every 200 ms).
	lease, survivorLease := "DURABLE_LEASE=1s", "DURABLE_LEASE=10s"
	startReady(t, "worker", schema, "B", survivorLease)
	startReady(t, "worker", schema, "C", survivorLease)
	a := startReady(t, "worker", schema, "A", lease, fmt.Sprintf("DURABLE_START=%d", runs), "DURABLE_STEPS=10")
	require.Eventually(t, func() bool {
		var n int
		_ = pool.QueryRow(ctx, q("SELECT count(DISTINCT workflow_id) FROM @executions WHERE pos >= 2")).Scan(&n)
		return n == runs
	}, 30*time.Second, 5*time.Millisecond)
	require.NoError(t, a.Cmd.Process.Signal(syscall.SIGKILL))
	killedAt := time.Now()
	require.True(t, proctest.KilledBySIGKILL(a.Wait(t)))

	require.Eventually(t, func() bool {
		var n int
		_ = pool.QueryRow(ctx, q("SELECT count(*) FROM @workflows WHERE status = 'success'")).Scan(&n)
		return n == runs
	}, 15*time.Second, 5*time.Millisecond, "the killed executor's runs taken over once its lease expired")
	took := time.Since(killedAt)
	t.Logf("all %d runs of the killed executor finished %v after the kill (lease 1s)", runs, took.Round(time.Millisecond))
	// Generous: the lease (1 s), a survivor's wait before judging leases
	// (LeaseTTL/2 of its own 10 s lease after its launch, long over by
	// now) and a loaded machine. A takeover that waits for anything else
	// (a poll interval of minutes, a lease that never expires) misses it.
	require.Less(t, took, 15*time.Second, "taken over soon after the lease expired")

	rows, err := pool.Query(ctx, q("SELECT executor_id, (SELECT count(*) FROM @steps s WHERE s.workflow_id = w.id) FROM @workflows w"))
	require.NoError(t, err)
	for rows.Next() {
		var owner string
		var steps int
		require.NoError(t, rows.Scan(&owner, &steps))
		require.Contains(t, []string{"B", "C"}, owner)
		require.Equal(t, 10, steps)
	}
	require.NoError(t, rows.Err())
	// At most the step in flight at the kill ran twice in each run.
	var maxPerStep, rerunsPerRun int
	require.NoError(t, pool.QueryRow(ctx, q(`SELECT coalesce(max(n), 0) FROM (SELECT count(*) n FROM @executions GROUP BY workflow_id, pos) x`)).Scan(&maxPerStep))
	require.NoError(t, pool.QueryRow(ctx, q(`SELECT coalesce(max(r), 0) FROM (SELECT workflow_id, count(*) - count(DISTINCT pos) r FROM @executions GROUP BY workflow_id) x`)).Scan(&rerunsPerRun))
	require.LessOrEqual(t, maxPerStep, 2)
	require.LessOrEqual(t, rerunsPerRun, 1)
}

// TestFencingRejectsPausedOwner: executor A runs four runs and is paused
// (SIGSTOP) inside them; its lease expires, executor B takes the runs over
// and is inside the same part of each when A is woken (SIGCONT). A's
// writes then reach runs that are pending, with nothing recorded where
// they write: only the epoch can refuse them. A must be fenced, B's
// writes must stand, and the runs finish by B. A's four writes arrive at
// once, so they are written singly and as one statement (group commit).
// The cases: inside a plain step (its checkpoint), inside a transaction
// step (checkpoint and order row must be B's alone), and in workflow code
// after the last step (the finish).
func TestFencingRejectsPausedOwner(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"step", "tx", "finish"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			fencingCase(t, kind)
		})
	}
}

func fencingCase(t *testing.T, kind string) {
	const runs = 4
	pool, schema, q := appTables(t)
	ctx := ctxT(t)
	// A's lease is short, so it expires while A is stopped; B's is long, so
	// a stall of B on a loaded machine never lets A take the runs back.
	// B waits where A was paused until the test releases it, once A has
	// woken and been refused on every run.
	release := filepath.Join(t.TempDir(), "release")
	aEnv := []string{"DURABLE_LEASE=1s", "DURABLE_START=4", "DURABLE_STEPS=3", "DURABLE_BLOCK=2s"}
	bEnv := []string{"DURABLE_LEASE=10s", "DURABLE_BLOCK=2m", "DURABLE_RELEASE=" + release}
	waitFor, refused := "blocking", "no longer owns the workflow"
	switch kind {
	case "tx":
		aEnv, bEnv = append(aEnv, "DURABLE_TX=1"), append(bEnv, "DURABLE_TX=1")
	case "finish":
		aEnv = []string{"DURABLE_LEASE=1s", "DURABLE_START=4", "DURABLE_STEPS=1", "DURABLE_HOLD=2s"}
		bEnv = []string{"DURABLE_LEASE=10s", "DURABLE_HOLD=2m", "DURABLE_RELEASE=" + release}
		waitFor, refused = "holding", "run finished elsewhere or lost ownership"
	}
	b := startReady(t, "worker", schema, "B", bEnv...)
	a := startChild(t, "worker", schema, "A", aEnv...)
	for range runs { // (before or after its "ready")
		a.WaitLine(t, waitFor)
	}
	require.NoError(t, a.Cmd.Process.Signal(syscall.SIGSTOP))
	for range runs {
		b.WaitLine(t, waitFor) // B took the run over and is where A was
	}
	require.NoError(t, a.Cmd.Process.Signal(syscall.SIGCONT))
	// Until B is released, nothing may be written where A was: a write
	// there can only be A's.
	writtenByA := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, q(`SELECT (SELECT count(*) FROM @steps WHERE pos = 0 AND $1)
			+ (SELECT count(*) FROM @workflows WHERE status <> 'pending')`), kind != "finish").Scan(&n))
		return n
	}
	for deadline := time.Now().Add(30 * time.Second); strings.Count(a.Stderr.String(), refused) < runs; time.Sleep(10 * time.Millisecond) {
		require.Zero(t, writtenByA(), "the woken old owner's writes must be refused; A's stderr:\n%s", a.Stderr.String())
		if kind != "finish" && strings.Contains(a.Stderr.String(), "result discarded") {
			t.Fatalf("the woken old owner got past the step where it was fenced; A's stderr:\n%s", a.Stderr.String())
		}
		require.False(t, time.Now().After(deadline), "the woken old owner must be fenced on every run")
	}
	require.Zero(t, writtenByA(), "A was fenced while B was still where A had been")
	require.NoError(t, os.WriteFile(release, nil, 0o644))

	bOut := fmt.Sprintf("returned by %d", b.Cmd.Process.Pid)
	require.Eventually(t, func() bool {
		var done int
		_ = pool.QueryRow(ctx, q("SELECT count(*) FROM @workflows WHERE status = 'success' AND output::text LIKE '%' || $1 || '%'"), bOut).Scan(&done)
		return done == runs
	}, 15*time.Second, 10*time.Millisecond, "the runs finish by B") // about a second when fencing holds
	if kind == "finish" {
		return // step 0 was A's, before A lost the runs
	}
	owners := queryMap[string, string](t, pool, q("SELECT workflow_id, output::text FROM @steps WHERE pos = 0"))
	require.Len(t, owners, runs)
	for id, out := range owners {
		require.Contains(t, out, fmt.Sprintf("by %d", b.Cmd.Process.Pid), "run %s: the new owner's checkpoint stands", id)
	}
	for i := range runs {
		id := fmt.Sprintf("A-%d", i)
		rows, err := pool.Query(ctx, q("SELECT pid FROM @executions WHERE workflow_id = $1 AND pos = 0 ORDER BY at"), id)
		require.NoError(t, err)
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
		require.NoError(t, err)
		require.Equal(t, []int{a.Cmd.Process.Pid, b.Cmd.Process.Pid}, pids, "run %s: step 0 ran in A, then in B", id)
	}
	if kind == "tx" {
		var orders, byB int
		require.NoError(t, pool.QueryRow(ctx, q("SELECT count(*), count(*) FILTER (WHERE pos = $1) FROM @orders"), b.Cmd.Process.Pid).Scan(&orders, &byB))
		require.Equal(t, runs, orders, "one order row per run")
		require.Equal(t, runs, byB, "only B's transactions committed")
	}
}

// TestDeadLetterAfterRepeatedCrashes: a run that kills its executor every
// time it is resumed moves to the dead-letter status once it has used its
// recovery attempts, with an error saying so.
func TestDeadLetterAfterRepeatedCrashes(t *testing.T) {
	t.Parallel()
	pool, schema, q := appTables(t)
	env := []string{"DURABLE_LEASE=30s", "DURABLE_MAXREC=2", "DURABLE_CRASH=before:1"}
	for i := 0; i < 3; i++ { // first run, then recovery attempts 1 and 2: all crash
		c := startChild(t, "matrix", schema, "dl-exec", env...)
		require.True(t, proctest.KilledBySIGKILL(c.Wait(t)), "run %d must crash; stderr:\n%s", i, c.Stderr.String())
	}
	c := startChild(t, "matrix", schema, "dl-exec", env...)
	line := c.WaitLine(t, "dead-lettered")
	require.Contains(t, line, "dead-lettered after 2 recovery attempts")
	require.NoError(t, c.Wait(t))
	var status string
	var attempts int
	require.NoError(t, pool.QueryRow(ctxT(t), q("SELECT status, recovery_attempts FROM @workflows WHERE id = 'matrix-run'")).Scan(&status, &attempts))
	require.Equal(t, "dead", status)
	require.Equal(t, 3, attempts)
}

// TestBootRecoveryClaimsEachRunOnce: a restart with more pending runs than
// one recovery batch resumes each of them exactly once.
func TestBootRecoveryClaimsEachRunOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = durable.RecoveryBatchDefault + 250
	started := make(chan string, n)
	var resumed atomic.Int32
	register := func(e *durable.Engine, block bool) *durable.Workflow[int, int] {
		return durable.Register(e, "many", func(wctx durable.Context, in int) (int, error) {
			if _, err := durable.Step(wctx, "first", func(ctx context.Context) (int, error) { return in, nil }, nil); err != nil {
				return 0, err
			}
			if block {
				return 0, blockUntilStopped(wctx, started)
			}
			resumed.Add(1)
			return in, nil
		}, nil)
	}
	var wf *durable.Workflow[int, int]
	e1 := b.engine(t, func(c *durable.Config) { c.ExecutorID = "restarting" }, func(e *durable.Engine) { wf = register(e, true) })
	ctx := ctxT(t)
	for i := 0; i < n; i++ {
		_, err := wf.Start(ctx, i, &durable.StartOpts{ID: fmt.Sprintf("many-%d", i)})
		require.NoError(t, err)
	}
	for i := 0; i < n; i++ {
		<-started
	}
	hardStop(t, e1)
	b.engine(t, func(c *durable.Config) { c.ExecutorID = "restarting" }, func(e *durable.Engine) { register(e, false) })
	q := fmt.Sprintf(`SELECT count(*) FILTER (WHERE status = 'success'), max(recovery_attempts), count(*) FILTER (WHERE status = 'dead') FROM %q.workflows`, b.schema)
	var done, maxAttempts, dead int
	require.Eventually(t, func() bool {
		_ = b.pool.QueryRow(ctx, q).Scan(&done, &maxAttempts, &dead)
		return done == n
	}, 60*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, maxAttempts, "each run was recovered once")
	require.Zero(t, dead)
	require.EqualValues(t, n, resumed.Load())
}
