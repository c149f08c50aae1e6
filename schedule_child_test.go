package durable_test

// The schedule crash test: three executor processes fire the same
// every-second schedule; one is SIGKILLed and restarted in the middle.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/proctest"
)

// registerTickWriter registers "record-tick": it writes its tick, as
// received in its input and as read by ScheduledTime, into the app table
// sched_ticks in a transaction step, so each run's row exists once.
func registerTickWriter(e *durable.Engine, schema string) *durable.Workflow[time.Time, string] {
	q := func(s string) string { return strings.ReplaceAll(s, "@", pgx.Identifier{schema}.Sanitize()+".") }
	return durable.Register(e, "record-tick", func(wctx durable.Context, tick time.Time) (string, error) {
		at, ok := durable.ScheduledTime(wctx)
		if !ok {
			return "", durable.Permanent(errors.New("not a scheduled run"))
		}
		return durable.TxStep(wctx, "record", func(ctx context.Context, tx pgx.Tx) (string, error) {
			_, err := tx.Exec(ctx, q("INSERT INTO @sched_ticks (workflow_id, input_tick, scheduled, pid) VALUES ($1, $2, $3, $4)"),
				wctx.WorkflowID(), tick, at, os.Getpid())
			return wctx.WorkflowID(), err
		}, nil)
	}, nil)
}

// runScheduleChild is the "schedule" child mode: it declares the
// every-second schedule, prints "ready" once launched, and serves until
// its standard input closes or it is killed.
func runScheduleChild(ctx context.Context, e *durable.Engine, _ *pgxpool.Pool) error {
	w := registerTickWriter(e, os.Getenv("DURABLE_SCHEMA"))
	durable.Schedule(w, "every-second", "* * * * * *", &durable.ScheduleOpts[time.Time]{
		InputFunc: func(t time.Time) time.Time { return t },
		// Late ticks (a slow machine) are caught up, not skipped: the test
		// checks that no tick is missing.
		CatchUp: 30,
	})
	if err := e.Launch(ctx); err != nil {
		return err
	}
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return e.Shutdown(sctx)
}

// TestScheduleExactlyOnceAcrossReplicas: three processes fire the same
// every-second schedule with no leader; one is SIGKILLed mid-way and
// restarted. Every tick of the whole window has exactly one run, executed
// once (one app row each), none missing, none doubled.
func TestScheduleExactlyOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := ctxT(t)
	q := func(s string) string { return strings.ReplaceAll(s, "@", pgx.Identifier{b.schema}.Sanitize()+".") }
	_, err := b.pool.Exec(ctx, q(`CREATE TABLE @sched_ticks (workflow_id text, input_tick timestamptz, scheduled timestamptz, pid int)`))
	require.NoError(t, err)
	count := func() int {
		var n int
		_ = b.pool.QueryRow(ctx, q("SELECT count(*) FROM @sched_ticks")).Scan(&n)
		return n
	}
	waitMore := func(n int) {
		t.Helper()
		target := count() + n
		require.Eventually(t, func() bool { return count() >= target }, 30*time.Second, 10*time.Millisecond)
	}
	lease := "DURABLE_LEASE=1s"
	start := time.Now()
	a := startChild(t, "schedule", b.schema, "A", lease)
	bb := startChild(t, "schedule", b.schema, "B", lease)
	c := startChild(t, "schedule", b.schema, "C", lease)
	for _, ch := range []*proctest.Child{a, bb, c} {
		ch.WaitLine(t, "ready")
	}
	waitMore(3)

	require.NoError(t, bb.Cmd.Process.Signal(syscall.SIGKILL))
	killedAt := time.Now().UTC()
	require.True(t, proctest.KilledBySIGKILL(bb.Wait(t)))
	waitMore(2)
	bb = startReady(t, "schedule", b.schema, "B", lease)
	waitMore(3)
	for _, ch := range []*proctest.Child{a, bb, c} {
		require.NoError(t, ch.Stdin.Close())
	}
	for _, ch := range []*proctest.Child{a, bb, c} {
		require.NoError(t, ch.Wait(t), ch.Stderr.String())
	}
	elapsed := time.Since(start)

	// A run inserted as its executor began to stop stays pending: an
	// executor without the schedule finishes whatever is left.
	b.engine(t, func(c *durable.Config) { c.AppVersion = "crash" }, func(e *durable.Engine) { registerTickWriter(e, b.schema) })
	require.Eventually(t, func() bool {
		var n int
		_ = b.pool.QueryRow(ctx, q("SELECT count(*) FROM @workflows WHERE status <> 'success'")).Scan(&n)
		return n == 0
	}, 30*time.Second, 10*time.Millisecond)

	// Each tick ran once, whatever the IDs of its runs: one app row per
	// scheduled time.
	doubled := queryMap[time.Time, int](t, b.pool, q("SELECT scheduled, count(*) FROM @sched_ticks GROUP BY scheduled HAVING count(*) > 1"))
	require.Empty(t, doubled, "ticks that ran more than once, and how often")

	runs := b.runIDs(t, "every-second")
	require.NotEmpty(t, runs)
	var ticks []time.Time
	for _, id := range runs {
		tick, err := time.Parse(time.RFC3339, strings.TrimPrefix(id, "sched:every-second:"))
		require.NoError(t, err, id)
		ticks = append(ticks, tick)
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i].Before(ticks[j]) })
	first, last := ticks[0], ticks[len(ticks)-1]
	for i := 1; i < len(ticks); i++ {
		require.Equal(t, time.Second, ticks[i].Sub(ticks[i-1]), "ticks %v and %v: a tick is missing", ticks[i-1], ticks[i])
	}
	require.True(t, !killedAt.Before(first) && killedAt.Before(last.Add(time.Second)),
		"the kill at %v falls inside the window [%v, %v]", killedAt, first, last)

	// One app row per run, written by its TxStep once, with the tick of
	// its ID as input and as ScheduledTime.
	rows, err := b.pool.Query(ctx, q(`SELECT workflow_id, count(*), min(input_tick), min(scheduled), min(pid)
		FROM @sched_ticks GROUP BY workflow_id ORDER BY workflow_id`))
	require.NoError(t, err)
	byPid := map[int]int{}
	var recorded []string
	for rows.Next() {
		var id string
		var n, pid int
		var input, scheduled time.Time
		require.NoError(t, rows.Scan(&id, &n, &input, &scheduled, &pid))
		require.Equal(t, 1, n, "app rows of %s", id)
		want := "sched:every-second:" + input.UTC().Format(time.RFC3339)
		require.Equal(t, want, id)
		require.True(t, input.Equal(scheduled), id)
		recorded = append(recorded, id)
		byPid[pid]++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, runs, recorded)
	t.Logf("%d ticks from %v to %v in %v, one run each; runs per process: %v",
		len(ticks), first.Format(time.TimeOnly), last.Format(time.TimeOnly), elapsed.Round(time.Millisecond), byPid)
}
