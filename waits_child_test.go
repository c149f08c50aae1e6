package durable_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/proctest"
	"github.com/durable-go/durable/internal/sysdbtest"
)

// napLength is the sleep of the "nap" workflow.
const napLength = 8 * time.Second

// registerWaiters registers the workflows of the wait tests.
func registerWaiters(e *durable.Engine) (recv, nap, watched *durable.Workflow[string, string]) {
	recv = durable.Register(e, "recv", func(wctx durable.Context, in string) (string, error) {
		msg, ok, err := durable.Recv[string](wctx, "go", time.Hour)
		if err != nil || !ok {
			return "", fmt.Errorf("recv: ok=%v err=%v", ok, err)
		}
		return "got " + msg, nil
	}, nil)
	nap = durable.Register(e, "nap", func(wctx durable.Context, in string) (string, error) {
		if err := durable.Sleep(wctx, napLength); err != nil {
			return "", err
		}
		return "awake", nil
	}, nil)
	watched = durable.Register(e, "watched", func(wctx durable.Context, in string) (string, error) {
		if _, _, err := durable.Recv[string](wctx, "go", time.Hour); err != nil {
			return "", err
		}
		if err := durable.SetEvent(wctx, "progress", "half"); err != nil {
			return "", err
		}
		if _, _, err := durable.Recv[string](wctx, "go2", time.Hour); err != nil {
			return "", err
		}
		return "done", nil
	}, nil)
	return recv, nap, watched
}

// deadlineLength is the Timeout the "deadlined" workflow is started with.
const deadlineLength = 5 * time.Second

// registerDeadlined registers "deadlined": a step, then one that waits
// for its context to end (the run's deadline), then one that must never
// run.
func registerDeadlined(e *durable.Engine) *durable.Workflow[string, string] {
	return durable.Register(e, "deadlined", func(wctx durable.Context, in string) (string, error) {
		if _, err := durable.Step(wctx, "first", func(context.Context) (string, error) { return "ok", nil }, nil); err != nil {
			return "", err
		}
		_, err := durable.Step(wctx, "wait", func(ctx context.Context) (string, error) {
			<-ctx.Done()
			return "", ctx.Err()
		}, &durable.StepOpts{Retry: &durable.RetryPolicy{MaxAttempts: 1}})
		if err != nil {
			return "", err
		}
		_, err = durable.Step(wctx, "after", func(context.Context) (string, error) { return "late", nil }, nil)
		return "late", err
	}, nil)
}

// runWaitChild: mode "waits" starts DURABLE_START (a workflow name) with
// ID DURABLE_RUN, or, for "watch", follows run DURABLE_RUN from outside.
func runWaitChild(ctx context.Context, e *durable.Engine, _ *pgxpool.Pool) error {
	recv, nap, watched := registerWaiters(e)
	deadlined := registerDeadlined(e)
	if err := e.Launch(ctx); err != nil {
		return err
	}
	id := os.Getenv("DURABLE_RUN")
	switch os.Getenv("DURABLE_START") {
	case "recv":
		_, err := recv.Start(ctx, "", &durable.StartOpts{ID: id})
		if err != nil {
			return err
		}
	case "nap":
		if _, err := nap.Start(ctx, "", &durable.StartOpts{ID: id}); err != nil {
			return err
		}
	case "deadline":
		if _, err := deadlined.Start(ctx, "", &durable.StartOpts{ID: id, Timeout: deadlineLength}); err != nil {
			return err
		}
	case "watch":
		fmt.Println("waiting")
		v, ok, err := durable.GetEvent[string](ctx, e, id, "progress", time.Minute)
		fmt.Println("event", v, ok, err)
		h, err := watched.Handle(ctx, id)
		if err != nil {
			return err
		}
		out, err := h.Result(ctx)
		fmt.Println("result", out, err)
		return e.Shutdown(ctx)
	}
	fmt.Println("ready")
	select {} // until killed
}

func waitsQ(schema string) func(string) string {
	return func(s string) string { return strings.ReplaceAll(s, "@", pgx.Identifier{schema}.Sanitize()+".") }
}

// TestRecvSurvivesKillAndSendWhileDown: a run waiting on Recv with a 1h
// timeout; its process is SIGKILLed; the message is sent while no process
// runs; a new process receives it exactly once and completes. Both with
// the wait in memory and parked.
func TestRecvSurvivesKillAndSendWhileDown(t *testing.T) {
	t.Parallel()
	for _, park := range []string{"2h", "1ms"} {
		t.Run("park-threshold-"+park, func(t *testing.T) {
			t.Parallel()
			pool, schema := sysdbtest.Migrated(t)
			q := waitsQ(schema)
			ctx := ctxT(t)
			env := []string{"DURABLE_LEASE=30s", "DURABLE_PARK=" + park, "DURABLE_START=recv", "DURABLE_RUN=r1"}
			c := startReady(t, "waits", schema, "receiver", env...)
			require.Eventually(t, func() bool { // the recv deadline is recorded: the run is waiting
				var n int
				_ = pool.QueryRow(ctx, q("SELECT count(*) FROM @steps WHERE workflow_id = 'r1'")).Scan(&n)
				return n == 1
			}, 30*time.Second, 5*time.Millisecond)
			require.NoError(t, c.Cmd.Process.Signal(syscall.SIGKILL))
			require.True(t, proctest.KilledBySIGKILL(c.Wait(t)))

			// Never launched, the client hears no notification: it polls.
			client, err := durable.New(pool, &durable.Config{Schema: schema, AppVersion: "crash", PollInterval: 100 * time.Millisecond})
			require.NoError(t, err)
			require.NoError(t, durable.Send(ctx, client, "r1", "go", "the answer", nil))

			startReady(t, "waits", schema, "receiver", "DURABLE_LEASE=30s", "DURABLE_PARK="+park)
			recv, _, _ := registerWaiters(client)
			h, err := recv.Handle(ctx, "r1")
			require.NoError(t, err)
			out, err := h.Result(ctx)
			require.NoError(t, err)
			require.Equal(t, "got the answer", out)
			var consumed, total int
			require.NoError(t, pool.QueryRow(ctx, q("SELECT count(*) FILTER (WHERE consumed_at IS NOT NULL), count(*) FROM @messages")).Scan(&consumed, &total))
			require.Equal(t, 1, consumed)
			require.Equal(t, 1, total)
		})
	}
}

// TestSleepSurvivesKill: an 8-second durable sleep interrupted at second 6
// by SIGKILL finishes about 2 seconds after the restart: the recorded wake
// time holds, the sleep does not start over. The bound is generous (less
// than 60% of the sleep after the restart, which includes the new
// process's launch); a sleep that starts over takes all of it.
func TestSleepSurvivesKill(t *testing.T) {
	t.Parallel()
	pool, schema := sysdbtest.Migrated(t)
	q := waitsQ(schema)
	ctx := ctxT(t)
	c := startReady(t, "waits", schema, "sleeper", "DURABLE_LEASE=30s", "DURABLE_START=nap", "DURABLE_RUN=n1")
	var wake time.Time
	require.Eventually(t, func() bool {
		var out string
		if pool.QueryRow(ctx, q("SELECT output #>> '{}' FROM @steps WHERE workflow_id = 'n1' AND pos = 0")).Scan(&out) != nil {
			return false
		}
		var err error
		wake, err = time.Parse(time.RFC3339Nano, out)
		return err == nil
	}, 30*time.Second, 5*time.Millisecond)
	remainder := 2 * time.Second
	time.Sleep(time.Until(wake.Add(-remainder))) // second 6 of the 8-second sleep
	c.Kill(t)

	restart := time.Now()
	startReady(t, "waits", schema, "sleeper", "DURABLE_LEASE=30s")
	var status string
	require.Eventually(t, func() bool {
		_ = pool.QueryRow(ctx, q("SELECT status FROM @workflows WHERE id = 'n1'")).Scan(&status)
		return status == "success"
	}, 30*time.Second, 5*time.Millisecond)
	done := time.Now()
	slept := done.Sub(restart)
	t.Logf("killed %.2fs before the wake time; finished %.2fs after the restart (%.0f%% of the sleep), %.0f ms after the wake time",
		wake.Sub(restart).Seconds(), slept.Seconds(), 100*slept.Seconds()/napLength.Seconds(), done.Sub(wake).Seconds()*1000)
	require.False(t, done.Before(wake), "the sleep lasted its whole duration")
	require.Less(t, slept, napLength*6/10, "only the remainder (%v) is slept after the restart, not the whole %v", remainder, napLength)
	var sleeps int
	var recorded string
	require.NoError(t, pool.QueryRow(ctx, q("SELECT count(*), min(output #>> '{}') FROM @steps WHERE workflow_id = 'n1' AND name = 'durable.sleep'")).Scan(&sleeps, &recorded))
	require.Equal(t, 1, sleeps)
	got, err := time.Parse(time.RFC3339Nano, recorded)
	require.NoError(t, err)
	require.True(t, got.Equal(wake), "the wake time recorded before the kill is the one slept to")
}

// wakeBound bounds the wake-up of a waiter in another process whose
// polling is set to minutes: a notification takes milliseconds; only a
// lost one makes the waiter miss it.
const wakeBound = 15 * time.Second

// TestWaitersInOtherProcessesAreNotified: two processes wait on the same
// run's event and result; with their polling set to two minutes, only
// notifications can wake them within the test's bounds.
func TestWaitersInOtherProcessesAreNotified(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var watched *durable.Workflow[string, string]
	e := b.engine(t, func(c *durable.Config) { c.PollInterval = 2 * time.Minute; c.AppVersion = "crash" }, func(e *durable.Engine) {
		_, _, watched = registerWaiters(e)
	})
	ctx := ctxT(t)
	h, err := watched.Start(ctx, "", &durable.StartOpts{ID: "w1"})
	require.NoError(t, err)
	var watchers []*proctest.Child
	for _, id := range []string{"watcher-1", "watcher-2"} {
		c := startChild(t, "waits", b.schema, id, "DURABLE_LEASE=30s", "DURABLE_POLL=2m", "DURABLE_START=watch", "DURABLE_RUN=w1")
		c.WaitLine(t, "waiting")
		watchers = append(watchers, c)
	}
	// Let both make their first read: an event set before it would be
	// found by the read, and the test would not need the notification.
	time.Sleep(time.Second)
	sent := time.Now()
	require.NoError(t, durable.Send(ctx, e, "w1", "go", "", nil))
	for _, c := range watchers {
		require.Equal(t, "event half true <nil>", c.WaitLineWithin(t, "event", wakeBound), "woken by the event's notification, not by the two-minute poll")
	}
	t.Logf("both watchers saw the event %v after the send", time.Since(sent).Round(time.Millisecond))
	sent = time.Now()
	require.NoError(t, durable.Send(ctx, e, "w1", "go2", "", nil))
	for _, c := range watchers {
		require.Equal(t, "result done <nil>", c.WaitLineWithin(t, "result", wakeBound), "woken by the finish's notification, not by the two-minute poll")
	}
	t.Logf("both watchers saw the result %v after the send", time.Since(sent).Round(time.Millisecond))
	_, err = h.Result(ctx)
	require.NoError(t, err)
}

// TestRunDeadlineSurvivesKill: a run's Timeout is stored as a deadline
// with it. Its executor is SIGKILLed while a step waits on its context,
// 1.5 s before the deadline; a new process resumes the run, and the step
// ends at the same deadline, not a fresh Timeout after the restart; the
// run fails with a deadline error and the step after it never runs.
func TestRunDeadlineSurvivesKill(t *testing.T) {
	t.Parallel()
	pool, schema := sysdbtest.Migrated(t)
	q := waitsQ(schema)
	ctx := ctxT(t)
	c := startReady(t, "waits", schema, "deadline", "DURABLE_LEASE=30s", "DURABLE_START=deadline", "DURABLE_RUN=d1")
	var deadline time.Time
	require.Eventually(t, func() bool {
		var n int
		if pool.QueryRow(ctx, q("SELECT w.deadline, count(s.pos) FROM @workflows w LEFT JOIN @steps s ON s.workflow_id = w.id WHERE w.id = 'd1' GROUP BY w.deadline")).Scan(&deadline, &n) != nil {
			return false
		}
		return n >= 1 // "first" recorded: "wait" is waiting
	}, 30*time.Second, 5*time.Millisecond)
	time.Sleep(time.Until(deadline.Add(-1500 * time.Millisecond)))
	c.Kill(t)

	restart := time.Now()
	startReady(t, "waits", schema, "deadline", "DURABLE_LEASE=30s") // the same executor ID: resumed at Launch
	var status, errText string
	require.Eventually(t, func() bool {
		_ = pool.QueryRow(ctx, q("SELECT status, coalesce(error::text, '') FROM @workflows WHERE id = 'd1'")).Scan(&status, &errText)
		return status != "pending"
	}, 30*time.Second, 5*time.Millisecond)
	done := time.Now()
	t.Logf("restarted %.2fs before the deadline; the run ended %.2fs after the restart, %.0f ms after the deadline",
		deadline.Sub(restart).Seconds(), done.Sub(restart).Seconds(), done.Sub(deadline).Seconds()*1000)
	require.Equal(t, "error", status)
	require.Contains(t, errText, "deadline")
	require.False(t, done.Before(deadline.Add(-100*time.Millisecond)), "the run ended before its deadline")
	require.Less(t, done.Sub(restart), deadlineLength*6/10, "the deadline stored with the run holds, not a fresh Timeout from the restart")
	var after int
	require.NoError(t, pool.QueryRow(ctx, q("SELECT count(*) FROM @steps WHERE workflow_id = 'd1' AND name = 'after'")).Scan(&after))
	require.Zero(t, after, "no step runs past the deadline")
}
