package schedule

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/errs"
	"github.com/durable-go/durable/internal/sysdb"
)

// TestServiceFiresTicksOnItsClock: Start stores the declared schedule and
// counts its ticks from the clock; each tick due on the clock starts one
// run, with the input of its tick read in the schedule's zone, and moves
// the cursor past it; the loop sleeps until the next tick.
func TestServiceFiresTicksOnItsClock(t *testing.T) {
	t.Parallel()
	h := newHarness(t, at(1, 7, 0, 30))
	d := &Def{Name: "paris", Workflow: "job", Spec: "*/20 * * * *", Location: "Europe/Paris",
		Input: func(tick time.Time) ([]byte, error) { return []byte(tick.Format(time.RFC3339)), nil }}
	s := h.started(t, d)
	require.True(t, s.Running())
	r := h.row(t, "paris")
	require.Equal(t, at(1, 7, 0, 30), r.Cursor, "ticks count from the clock")
	require.Equal(t, at(1, 7, 20, 0), r.NextTick)
	require.Empty(t, h.runs(t))

	h.clock.Set(at(1, 7, 20, 0))
	id := tickID("paris", at(1, 7, 20, 0))
	waitTick(t, s, id)
	require.Equal(t, []string{id}, h.runs(t))
	require.Equal(t, "2030-01-01T08:20:00+01:00", h.input(t, id), "the input gets the tick in the zone")
	r = h.row(t, "paris")
	require.Equal(t, at(1, 7, 20, 0), r.Cursor)
	require.Equal(t, at(1, 7, 20, 0), r.LastTick)
	require.Equal(t, id, r.LastRunID)
	require.Equal(t, at(1, 7, 40, 0), r.NextTick)
	// The pass that fired sleeps until the next tick by the clock.
	for s.signals.PassDone.Wait(t, signalWait) != 20*time.Minute {
	}

	h.clock.Set(at(1, 7, 39, 59))
	waitPass(t, s)
	require.Len(t, h.runs(t), 1, "nothing is due before the next tick")
}

// TestServiceCatchUp: after a downtime the CatchUp latest missed ticks
// run besides the most recent one, oldest first; older ones are skipped
// and that is logged once.
func TestServiceCatchUp(t *testing.T) {
	t.Parallel()
	h := newHarness(t, at(1, 0, 0, 30))
	first := h.started(t, minutely("skip", 0), minutely("catch-up", 2))
	require.NoError(t, first.Stop(context.Background()))

	h.clock.Set(at(1, 0, 10, 30))
	h.started(t, minutely("skip", 0), minutely("catch-up", 2)) // Start fires what is due
	require.Equal(t, append(ids("catch-up", at(1, 0, 8, 0), at(1, 0, 9, 0), at(1, 0, 10, 0)),
		ids("skip", at(1, 0, 10, 0))...), h.runs(t))
	require.Equal(t, at(1, 0, 10, 0), h.row(t, "skip").Cursor)
	require.Equal(t, at(1, 0, 11, 0), h.row(t, "catch-up").NextTick)
	for _, name := range []string{"skip", "catch-up"} {
		require.Equal(t, 1, h.logs.count("skipped missed ticks", "schedule="+name), h.logs.String())
	}
}

// TestServiceReplicasStartEachTickOnce: replicas declaring the same
// schedule fire it with no leader; every tick has one run, under the same
// workflow ID whichever replica starts it, even when a replica started a
// tick's run and died before moving the cursor.
func TestServiceReplicasStartEachTickOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, at(1, 0, 0, 30))
	var replicas []*Service
	for range 3 {
		replicas = append(replicas, h.started(t, minutely("shared", 0)))
	}

	// Replica 0 starts the run of 00:01 but never hears back: the cursor
	// stays, and replica 1 starts the tick again.
	h.mu.Lock()
	h.lostReply = true
	h.mu.Unlock()
	h.clock.Set(at(1, 0, 1, 0))
	waitPass(t, replicas[0])
	require.Len(t, h.runs(t), 1)
	require.Equal(t, at(1, 0, 0, 30), h.row(t, "shared").Cursor)
	h.mu.Lock()
	h.lostReply = false
	h.mu.Unlock()
	waitTick(t, replicas[1], tickID("shared", at(1, 0, 1, 0)))
	require.Equal(t, ids("shared", at(1, 0, 1, 0)), h.runs(t), "the second start found the run of the first")

	// All at once.
	want := ids("shared", at(1, 0, 1, 0))
	for minute := 2; minute <= 5; minute++ {
		tick := at(1, 0, minute, 0)
		h.clock.Set(tick)
		want = append(want, tickID("shared", tick))
		for _, s := range replicas {
			s.Wake()
		}
		for _, s := range replicas {
			waitPass(t, s)
		}
		require.Equal(t, tick, h.row(t, "shared").LastTick)
	}
	require.Equal(t, want, h.runs(t))
}

// TestServiceStaleRowStartsNothing: a row read before a change committed
// is read again before its ticks start, so no run starts under a spec
// already replaced.
func TestServiceStaleRowStartsNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, at(1, 0, 0, 30))
	ctx := context.Background()
	d := minutely("s", 0)
	s := h.service(t, d)
	require.NoError(t, s.upsertDeclared(ctx))
	stale := h.row(t, "s")
	require.NoError(t, s.SetSpec(ctx, "s", "0 0 1 1 *", nil))
	h.clock.Set(at(1, 0, 5, 0))
	ts, err := ParseSpec(stale.Spec, nil)
	require.NoError(t, err)
	_, err = s.fire(ctx, d, &stale, ts)
	require.ErrorIs(t, err, errChanged)
	require.Empty(t, h.runs(t))

	// Read again, the row fires by the new spec: nothing due.
	fresh := h.row(t, "s")
	next, err := s.fire(ctx, d, &fresh, mustSpec(t, fresh.Spec, nil))
	require.NoError(t, err)
	require.Equal(t, time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC), next)
	require.Empty(t, h.runs(t))
}

// TestServiceGivesUpOnlyHopelessTicks: a tick whose input cannot be made,
// or whose ID belongs to a run of another workflow, is given up (the
// cursor moves on, the last run stays); a failed start is retried.
func TestServiceGivesUpOnlyHopelessTicks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, at(1, 0, 0, 30))
	ctx := context.Background()
	broken := minutely("broken", 0)
	broken.Input = func(tick time.Time) ([]byte, error) {
		if tick.Minute() == 1 {
			return nil, fmt.Errorf("no input for %v", tick)
		}
		return []byte("ok"), nil
	}
	s := h.started(t, broken, minutely("taken", 0), minutely("retried", 0))
	_, err := h.insert(ctx, "other", "", tickID("taken", at(1, 0, 1, 0)), nil, nil)
	require.NoError(t, err)
	h.mu.Lock()
	h.failing = "sched:retried:"
	h.mu.Unlock()

	h.clock.Set(at(1, 0, 1, 0))
	waitTick(t, s, tickID("broken", at(1, 0, 1, 0)))
	waitPass(t, s)
	for _, name := range []string{"broken", "taken"} {
		r := h.row(t, name)
		require.Equal(t, at(1, 0, 1, 0), r.Cursor, name)
		require.True(t, r.LastTick.IsZero(), name)
		require.Empty(t, r.LastRunID, name)
	}
	require.Equal(t, at(1, 0, 0, 30), h.row(t, "retried").Cursor, "a failed start keeps the tick due")
	require.Equal(t, 1, h.logs.count("its input cannot be made", "schedule=broken"), h.logs.String())
	require.Equal(t, 1, h.logs.count("taken by a run of another workflow", "schedule=taken"), h.logs.String())
	require.Positive(t, h.logs.count("tick not started; retrying", "schedule=retried"), h.logs.String())

	h.mu.Lock()
	h.failing = ""
	h.mu.Unlock()
	waitTick(t, s, tickID("retried", at(1, 0, 1, 0)))
	require.Equal(t, tickID("retried", at(1, 0, 1, 0)), h.row(t, "retried").LastRunID)
}

// TestServiceTriggers: a trigger asked for where the schedule is not
// declared (or runs cannot start) is stored; a declaring executor starts
// it, paused or not, once, and clears it. Where it is declared and runs
// may start, the run starts at once.
func TestServiceTriggers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, at(1, 0, 0, 30))
	ctx := context.Background()
	d := minutely("s", 0)
	d.Queue = "q"
	worker := h.started(t, d)
	require.NoError(t, worker.Pause(ctx, "s"))
	// The pause wakes the worker; its pass must be over before the
	// trigger is stored, or it may start the trigger before the row is
	// read below.
	waitPass(t, worker)
	ops := h.service(t) // declares nothing, never started

	tick := time.Date(2031, 2, 3, 4, 5, 6, 7_000_891, time.UTC)
	id, err := ops.Trigger(ctx, "s", tick)
	require.NoError(t, err)
	require.Equal(t, "sched:s:manual:2031-02-03T04:05:06.007Z", id, "the tick as stored, to the microsecond")
	again, err := ops.Trigger(ctx, "s", tick)
	require.NoError(t, err)
	require.Equal(t, id, again)
	require.Len(t, h.row(t, "s").Triggers, 1)
	_, err = ops.Trigger(ctx, "missing", tick)
	require.ErrorIs(t, err, errs.ScheduleNotFound)

	waitPass(t, worker)
	require.Equal(t, []string{id}, h.runs(t))
	require.Equal(t, "2031-02-03T04:05:06Z", h.input(t, id))
	require.Empty(t, h.row(t, "s").Triggers)
	var queue string
	require.NoError(t, h.pool.QueryRow(ctx, sysdb.Render(`SELECT queue FROM {{schema}}.test_runs WHERE id = $1`, h.schema), id).Scan(&queue))
	require.Equal(t, "q", queue, "a trigger goes through the schedule's queue")

	// Declared here: started before Trigger returns, at the clock's time
	// when no tick is given.
	id, err = worker.Trigger(ctx, "s", time.Time{})
	require.NoError(t, err)
	require.Equal(t, manualID("s", at(1, 0, 0, 30)), id)
	require.Contains(t, h.runs(t), id)
	require.Empty(t, h.row(t, "s").Triggers)

	// Runs cannot start here (a shutdown): stored instead.
	h.mu.Lock()
	h.stopped = true
	h.mu.Unlock()
	id, err = worker.Trigger(ctx, "s", at(1, 0, 1, 0))
	require.NoError(t, err)
	require.Equal(t, []time.Time{at(1, 0, 1, 0)}, h.row(t, "s").Triggers)
	require.NotContains(t, h.runs(t), id)
}

// TestServiceControl: pause, resume, a new spec and delete, seen by the
// loop at once.
func TestServiceControl(t *testing.T) {
	t.Parallel()
	h := newHarness(t, at(1, 0, 0, 30))
	ctx := context.Background()
	s := h.started(t, minutely("s", 0))

	require.NoError(t, s.Pause(ctx, "s"))
	require.NoError(t, s.Pause(ctx, "s"), "pausing twice is fine")
	r := h.row(t, "s")
	require.True(t, r.Paused)
	require.True(t, r.NextTick.IsZero())
	h.clock.Set(at(1, 0, 5, 30))
	waitPass(t, s)
	require.Empty(t, h.runs(t), "paused")

	require.NoError(t, s.Resume(ctx, "s"))
	r = h.row(t, "s")
	require.False(t, r.Paused)
	require.Equal(t, at(1, 0, 5, 30), r.Cursor, "the ticks of the pause are not run")
	require.Equal(t, at(1, 0, 6, 0), r.NextTick)
	waitPass(t, s)
	require.Empty(t, h.runs(t))

	require.NoError(t, s.SetSpec(ctx, "s", "CRON_TZ=Asia/Tokyo 0 9 * * *", nil))
	r = h.row(t, "s")
	require.Equal(t, "Asia/Tokyo", r.Location)
	require.Equal(t, at(2, 0, 0, 0), r.NextTick)
	require.NoError(t, s.SetSpec(ctx, "s", "0 10 * * *", nil))
	require.Equal(t, at(1, 1, 0, 0), h.row(t, "s").NextTick, "nil keeps the zone")
	err := s.SetSpec(ctx, "s", "61 * * * *", nil)
	require.ErrorIs(t, err, errs.InvalidArgument)
	require.Equal(t, "0 10 * * *", h.row(t, "s").Spec)
	h.clock.Set(at(1, 1, 0, 0))
	waitTick(t, s, tickID("s", at(1, 1, 0, 0)))

	require.NoError(t, s.Delete(ctx, "s"))
	require.ErrorIs(t, s.Delete(ctx, "s"), errs.ScheduleNotFound)
	for _, err := range []error{s.Pause(ctx, "s"), s.Resume(ctx, "s"), s.SetSpec(ctx, "s", "@hourly", nil)} {
		require.ErrorIs(t, err, errs.ScheduleNotFound)
	}
	h.clock.Set(at(2, 2, 0, 0))
	waitPass(t, s)
	waitPass(t, s)
	require.Equal(t, ids("s", at(1, 1, 0, 0)), h.runs(t))
	require.Equal(t, 1, h.logs.count("was deleted from the database", "schedule=s"), "reported once")
}

// TestServiceBackfill: the ticks of a range start under their own IDs;
// those that ran are found, not doubled; the range is bounded; the
// schedule must be declared here.
func TestServiceBackfill(t *testing.T) {
	t.Parallel()
	h := newHarness(t, at(1, 0, 0, 30))
	ctx := context.Background()
	d := minutely("s", 0)
	d.Spec = "*/10 * * * *"
	s := h.started(t, d)
	h.clock.Set(at(1, 0, 10, 0))
	waitTick(t, s, tickID("s", at(1, 0, 10, 0)))

	runs, err := s.Backfill(ctx, "s", at(1, 0, 0, 0), at(1, 0, 30, 0), 10)
	require.NoError(t, err)
	require.Equal(t, []Run{
		{Tick: at(1, 0, 0, 0), WorkflowID: tickID("s", at(1, 0, 0, 0)), Started: true},
		{Tick: at(1, 0, 10, 0), WorkflowID: tickID("s", at(1, 0, 10, 0)), Started: false},
		{Tick: at(1, 0, 20, 0), WorkflowID: tickID("s", at(1, 0, 20, 0)), Started: true},
	}, runs)
	require.Equal(t, "2030-01-01T00:20:00Z", h.input(t, tickID("s", at(1, 0, 20, 0))))

	_, err = s.Backfill(ctx, "s", at(1, 0, 0, 0), at(1, 1, 0, 0), 3)
	require.ErrorIs(t, err, errs.InvalidArgument)
	require.ErrorContains(t, err, "split it")
	other := h.service(t)
	_, err = other.Backfill(ctx, "s", at(1, 0, 0, 0), at(1, 0, 30, 0), 10)
	require.ErrorIs(t, err, errs.NotRegistered)
	_, err = s.Backfill(ctx, "missing", at(1, 0, 0, 0), at(1, 0, 30, 0), 10)
	require.ErrorIs(t, err, errs.ScheduleNotFound)
}

// TestServiceStartAndStop: a binary declaring no schedule stores nothing
// and runs no loop; Stop ends the loop; a schedule stored by another
// binary is reported once and not fired.
func TestServiceStartAndStop(t *testing.T) {
	t.Parallel()
	h := newHarness(t, at(1, 0, 0, 30))
	empty := h.started(t)
	require.False(t, empty.Running())
	list, err := empty.List(context.Background())
	require.NoError(t, err)
	require.Empty(t, list)

	s := h.started(t, minutely("a", 0), &Def{Name: "b", Workflow: "unknown", Spec: "* * * * *", Location: "UTC",
		Input: minutely("b", 0).Input})
	require.True(t, s.Running())
	require.NoError(t, s.Stop(context.Background()))
	require.False(t, s.Running())
	require.NoError(t, s.Stop(context.Background()), "stopping twice is fine")
	require.False(t, s.Declare(minutely("a", 0)), "a name is declared once")

	// Another binary: declares a but not b.
	h.mu.Lock()
	h.workflows["unknown"] = false
	h.mu.Unlock()
	other := h.started(t, minutely("a", 0))
	h.clock.Set(at(1, 0, 1, 0))
	waitPass(t, other)
	require.Equal(t, ids("a", at(1, 0, 1, 0)), h.runs(t))
	require.Equal(t, 1, h.logs.count("level=ERROR", "runs a workflow not registered here", "schedule=b"), h.logs.String())
	require.True(t, other.Declared("a"))
	require.False(t, other.Declared("b"))
}
