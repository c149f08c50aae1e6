package durable_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	_ "time/tzdata" // the zones of the time zone tests, on any machine

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/clock"
	"github.com/durable-go/durable/internal/hooks"
)

// newClock is the engine clock of the schedule tests (hooks.Knobs.Now):
// tests move time instead of waiting for it.
func newClock(t time.Time) *clock.Fake { return clock.NewFake(t) }

// withClock makes an engine run on clk and re-read schedules often, so a
// move of the clock is seen within milliseconds.
func withClock(clk *clock.Fake, more ...func(*durable.Config)) func(*durable.Config) {
	return func(c *durable.Config) {
		hooks.Set(c, hooks.Knobs{Now: clk.Now})
		c.PollInterval = 20 * time.Millisecond
		for _, m := range more {
			m(c)
		}
	}
}

// at is a time on 2030-01-01 (UTC) or a later day.
func at(day, hour, min, sec int) time.Time {
	return time.Date(2030, 1, day, hour, min, sec, 0, time.UTC)
}

// tickRecorder is a workflow that returns its tick as received in its
// input and as read by ScheduledTime, counting executions per run.
type tickRecorder struct {
	mu   sync.Mutex
	runs map[string]int
	wf   *durable.Workflow[time.Time, string]
}

func registerTickRecorder(e *durable.Engine, name string) *tickRecorder {
	r := &tickRecorder{runs: map[string]int{}}
	r.wf = durable.Register(e, name, func(wctx durable.Context, tick time.Time) (string, error) {
		r.mu.Lock()
		r.runs[wctx.WorkflowID()]++
		r.mu.Unlock()
		st, ok := durable.ScheduledTime(wctx)
		if !ok {
			return "", durable.Permanent(errors.New("not a scheduled run"))
		}
		return tick.Format(time.RFC3339) + " " + st.Format(time.RFC3339), nil
	}, nil)
	return r
}

func (r *tickRecorder) executions(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[id]
}

// tickInput passes the tick as the run's input.
func tickInput(catchUp int) *durable.ScheduleOpts[time.Time] {
	return &durable.ScheduleOpts[time.Time]{InputFunc: func(t time.Time) time.Time { return t }, CatchUp: catchUp}
}

// runIDs returns the workflow IDs of the runs of schedule name, sorted.
func (b *bundle) runIDs(t *testing.T, name string) []string {
	t.Helper()
	rows, err := b.pool.Query(ctxT(t), "SELECT id FROM "+pgx.Identifier{b.schema, "workflows"}.Sanitize()+
		" WHERE id LIKE $1 ORDER BY id", "sched:"+name+":%")
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

// ids returns the workflow IDs of ticks of schedule name.
func ids(name string, ticks ...time.Time) []string {
	out := make([]string, len(ticks))
	for i, t := range ticks {
		out[i] = "sched:" + name + ":" + t.UTC().Format(time.RFC3339)
	}
	return out
}

func schedule(t *testing.T, e *durable.Engine, name string) durable.ScheduleInfo {
	t.Helper()
	list, err := e.ListSchedules(ctxT(t))
	require.NoError(t, err)
	for _, s := range list {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("schedule %q not listed", name)
	return durable.ScheduleInfo{}
}

// waitLastTick waits until schedule name has started its run of tick.
func waitLastTick(t *testing.T, e *durable.Engine, name string, tick time.Time) {
	t.Helper()
	require.Eventually(t, func() bool {
		list, err := e.ListSchedules(context.Background())
		if err != nil {
			return false
		}
		for _, s := range list {
			if s.Name == name {
				return s.LastTick.Equal(tick)
			}
		}
		return false
	}, 30*time.Second, 5*time.Millisecond, "schedule %q never reached tick %v", name, tick)
}

// TestSchedule covers cron schedules, on an injected clock: declarations,
// missed ticks and catch-up across downtimes, run-time control from any
// replica or process, zones and queues.
func TestSchedule(t *testing.T) {
	t.Parallel()

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		paris, err := time.LoadLocation("Europe/Paris")
		require.NoError(t, err)
		var w *durable.Workflow[string, string]
		other, err := durable.New(b.pool, b.cfg)
		require.NoError(t, err)
		e := b.engine(t, nil, func(e *durable.Engine) {
			w = durable.Register(e, "job", func(wctx durable.Context, in string) (string, error) { return in, nil }, nil)
			opts := func(f func(o *durable.ScheduleOpts[string])) *durable.ScheduleOpts[string] {
				o := &durable.ScheduleOpts[string]{}
				f(o)
				return o
			}
			for _, tc := range []struct {
				name, spec string
				opts       *durable.ScheduleOpts[string]
				want       string
			}{
				{"s1", "not a spec", nil, `spec "not a spec"`},
				{"s2", "61 * * * * *", nil, "61"},
				{"s3", "* * *", nil, `spec "* * *"`},
				{"s4", "", nil, "spec is empty"},
				{"s5", "* * * * * * * *", nil, "spec"},
				{"s6", "CRON_TZ=Mars/Olympus_Mons * * * * *", nil, "Mars/Olympus_Mons"},
				{"s7", "TZ=UTC", nil, "must be followed by a space"},
				{"s8", "CRON_TZ=Local * * * * *", nil, "time.Local differs between machines"},
				{"s9", "@every", nil, "spec"},
				{"s10", "* * * * *", opts(func(o *durable.ScheduleOpts[string]) { o.Location = time.Local }), "time.Local differs between machines"},
				{"s11", "* * * * *", opts(func(o *durable.ScheduleOpts[string]) { o.Location = time.FixedZone("UTC+1", 3600) }), `"UTC+1" cannot be loaded by name`},
				{"s12", "CRON_TZ=America/New_York 0 9 * * *", opts(func(o *durable.ScheduleOpts[string]) { o.Location = paris }), "set the zone once"},
				{"s13", "* * * * *", opts(func(o *durable.ScheduleOpts[string]) { o.CatchUp = -1 }), "ScheduleOpts.CatchUp -1"},
				{"s14", "* * * * *", opts(func(o *durable.ScheduleOpts[string]) { o.CatchUp = durable.ScheduleCatchUpMax + 1 }), "ScheduleOpts.CatchUp"},
				{"s15", "* * * * *", opts(func(o *durable.ScheduleOpts[string]) { o.Queue = other.QueueRef("emails") }), "belongs to another engine"},
				{"s16", "* * * * *", opts(func(o *durable.ScheduleOpts[string]) {
					o.Input, o.InputFunc = "x", func(time.Time) string { return "y" }
				}), "not both"},
				{"s17", "* * * * *", opts(func(o *durable.ScheduleOpts[string]) { o.Tags = map[string]string{"k": ""} }), "ScheduleOpts.Tags"},
				{"", "* * * * *", nil, "schedule name is empty"},
				{strings.Repeat("n", durable.ScheduleNameMax+1), "* * * * *", nil, "over the limit"},
				{"bad\xffutf8", "* * * * *", nil, "not valid UTF-8"},
				{"nightly:manual", "* * * * *", nil, `must not end in ":manual"`},
			} {
				err := durable.TrySchedule(w, tc.name, tc.spec, tc.opts)
				require.ErrorIs(t, err, durable.ErrInvalidArgument, "spec %q", tc.spec)
				require.ErrorContains(t, err, tc.want, "spec %q", tc.spec)
				if strings.HasPrefix(tc.name, "s1") || len(tc.name) == 2 {
					require.ErrorContains(t, err, fmt.Sprintf("%q", tc.name))
				}
			}

			// Good specs, including seconds, descriptors and zones.
			for i, spec := range []string{"*/5 * * * * *", "0 9 * * 1-5", "@hourly", "@every 90s", "CRON_TZ=Europe/Paris 0 9 * * *", "TZ=Asia/Tokyo 30 8 * * *"} {
				require.NoError(t, durable.TrySchedule(w, fmt.Sprintf("good-%d", i), spec, nil), spec)
			}
			require.NoError(t, durable.TrySchedule(w, "paris", "0 9 * * *", &durable.ScheduleOpts[string]{Location: paris}))
			require.NoError(t, durable.TrySchedule(w, "paris-twice", "CRON_TZ=Europe/Paris 0 9 * * *", &durable.ScheduleOpts[string]{Location: paris}))

			err := durable.TrySchedule(w, "good-0", "* * * * *", nil)
			require.ErrorIs(t, err, durable.ErrInvalidArgument)
			require.ErrorContains(t, err, "already declared")
			require.Panics(t, func() { durable.Schedule(w, "panics", "bogus", nil) })
			require.Panics(t, func() { durable.Schedule[string, string](nil, "nil-workflow", "* * * * *", nil) })

			// A fixed input that cannot be encoded is refused at declaration.
			anyWF := durable.Register(e, "any", func(wctx durable.Context, in any) (int, error) { return 0, nil }, nil)
			err = durable.TrySchedule(anyWF, "chan-input", "* * * * *", &durable.ScheduleOpts[any]{Input: make(chan int)})
			require.ErrorIs(t, err, durable.ErrInvalidArgument)
			require.ErrorContains(t, err, "encode input of schedule")
		})
		ctx := ctxT(t)
		list, err := e.ListSchedules(ctx)
		require.NoError(t, err)
		names := make([]string, len(list))
		for i, s := range list {
			names[i] = s.Name
		}
		require.Equal(t, []string{"good-0", "good-1", "good-2", "good-3", "good-4", "good-5", "paris", "paris-twice"}, names,
			"only the valid declarations are stored")
		require.Equal(t, "Europe/Paris", schedule(t, e, "good-4").Location)
		require.Equal(t, "Asia/Tokyo", schedule(t, e, "good-5").Location)
		require.Equal(t, "UTC", schedule(t, e, "good-0").Location)

		// After Launch: no more declarations.
		err = durable.TrySchedule(w, "late", "* * * * *", nil)
		require.ErrorContains(t, err, "before Launch")

		// Run-time changes check their input the same way and change nothing
		// on error.
		err = e.SetScheduleSpec(ctx, "good-0", "61 * * * * *", nil)
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		err = e.SetScheduleSpec(ctx, "good-0", "* * * * *", time.Local)
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		require.Equal(t, "*/5 * * * * *", schedule(t, e, "good-0").Spec)
		for _, err := range []error{
			e.SetScheduleSpec(ctx, "missing", "* * * * *", nil),
			e.PauseSchedule(ctx, "missing"),
			e.ResumeSchedule(ctx, "missing"),
			e.DeleteSchedule(ctx, "missing"),
		} {
			require.ErrorIs(t, err, durable.ErrScheduleNotFound)
		}
		_, err = e.TriggerSchedule(ctx, "missing", time.Time{})
		require.ErrorIs(t, err, durable.ErrScheduleNotFound)
		_, err = e.BackfillSchedule(ctx, "good-0", at(1, 1, 0, 0), at(1, 0, 0, 0))
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		_, err = e.BackfillSchedule(ctx, "good-0", at(1, 0, 0, 0), at(2, 0, 0, 0))
		require.ErrorIs(t, err, durable.ErrInvalidArgument, "17280 ticks is over BackfillMaxTicks")
		require.ErrorContains(t, err, "split it")
	})

	// MissedTicksSkipped: with CatchUp 0, the ticks missed during a
	// downtime are skipped and only the most recent due tick runs.
	t.Run("MissedTicksSkipped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		clock := newClock(at(1, 0, 0, 30))
		declare := func(e *durable.Engine) {
			r := registerTickRecorder(e, "minutely")
			durable.Schedule(r.wf, "skip", "* * * * *", tickInput(0))
		}
		first := b.engine(t, withClock(clock), declare)
		require.Equal(t, at(1, 0, 1, 0), schedule(t, first, "skip").NextTick)
		require.NoError(t, first.Shutdown(ctxT(t)))

		// Ten minutes of downtime: ticks 00:01 to 00:10 are due.
		clock.Set(at(1, 0, 10, 30))
		second := b.engine(t, withClock(clock), declare)
		// Launch starts the ticks due at boot before it returns.
		require.Equal(t, ids("skip", at(1, 0, 10, 0)), b.runIDs(t, "skip"))
		s := schedule(t, second, "skip")
		require.Equal(t, at(1, 0, 10, 0), s.LastTick)
		require.Equal(t, ids("skip", at(1, 0, 10, 0))[0], s.LastRunID)
		require.Equal(t, at(1, 0, 11, 0), s.NextTick)
		require.Contains(t, b.logs.String(), "skipped missed ticks")

		// Back to normal: the next tick runs on time.
		clock.Set(at(1, 0, 11, 0))
		waitLastTick(t, second, "skip", at(1, 0, 11, 0))
		require.Equal(t, ids("skip", at(1, 0, 10, 0), at(1, 0, 11, 0)), b.runIDs(t, "skip"))
	})

	// CatchUp: with CatchUp N, the N latest missed ticks run after
	// a downtime, oldest first, besides the most recent due tick; for
	// calendar specs and for "@every" specs, whose ticks count from the last
	// one stored.
	t.Run("CatchUp", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		clock := newClock(at(1, 0, 0, 30))
		declare := func(e *durable.Engine) {
			r := registerTickRecorder(e, "minutely")
			durable.Schedule(r.wf, "catch-up", "0 * * * * *", tickInput(3))
			durable.Schedule(r.wf, "every", "@every 1m", tickInput(2))
		}
		first := b.engine(t, withClock(clock), declare)
		require.Equal(t, at(1, 0, 1, 30), schedule(t, first, "every").NextTick, "an @every spec counts from the declaration")
		require.NoError(t, first.Shutdown(ctxT(t)))

		clock.Set(at(1, 0, 10, 30))
		second := b.engine(t, withClock(clock), declare)
		require.Equal(t, ids("catch-up", at(1, 0, 7, 0), at(1, 0, 8, 0), at(1, 0, 9, 0), at(1, 0, 10, 0)), b.runIDs(t, "catch-up"))
		require.Equal(t, ids("every", at(1, 0, 8, 30), at(1, 0, 9, 30), at(1, 0, 10, 30)), b.runIDs(t, "every"))
		require.Equal(t, at(1, 0, 10, 0), schedule(t, second, "catch-up").LastTick)

		// A backfill of an @every schedule follows the same chain of ticks:
		// the two that ran are found, nothing is doubled.
		runs, err := second.BackfillSchedule(ctxT(t), "every", at(1, 0, 6, 0), at(1, 0, 10, 0))
		require.NoError(t, err)
		require.Equal(t, []durable.ScheduledRun{
			{Tick: at(1, 0, 6, 30), WorkflowID: ids("every", at(1, 0, 6, 30))[0], Started: true},
			{Tick: at(1, 0, 7, 30), WorkflowID: ids("every", at(1, 0, 7, 30))[0], Started: true},
			{Tick: at(1, 0, 8, 30), WorkflowID: ids("every", at(1, 0, 8, 30))[0], Started: false},
			{Tick: at(1, 0, 9, 30), WorkflowID: ids("every", at(1, 0, 9, 30))[0], Started: false},
		}, runs)

		// Fewer missed ticks than CatchUp: all of them run.
		clock.Set(at(1, 0, 12, 45))
		waitLastTick(t, second, "catch-up", at(1, 0, 12, 0))
		waitLastTick(t, second, "every", at(1, 0, 12, 30))
		require.Equal(t, ids("catch-up", at(1, 0, 7, 0), at(1, 0, 8, 0), at(1, 0, 9, 0), at(1, 0, 10, 0), at(1, 0, 11, 0), at(1, 0, 12, 0)),
			b.runIDs(t, "catch-up"))
		require.Equal(t, ids("every", at(1, 0, 6, 30), at(1, 0, 7, 30), at(1, 0, 8, 30), at(1, 0, 9, 30), at(1, 0, 10, 30), at(1, 0, 11, 30), at(1, 0, 12, 30)),
			b.runIDs(t, "every"))
	})

	// LongIntervalAcrossRestarts: schedules whose interval is
	// longer than any process lives still fire, once per tick, because ticks
	// count from the stored state and not from process start.
	t.Run("LongIntervalAcrossRestarts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		clock := newClock(at(1, 8, 0, 0))
		var rec *tickRecorder
		declare := func(e *durable.Engine) {
			rec = registerTickRecorder(e, "daily-job")
			durable.Schedule(rec.wf, "daily", "0 9 * * *", tickInput(0))
			durable.Schedule(rec.wf, "every-24h", "@every 24h", tickInput(0))
		}
		// A process lives 5 hours, then the next one starts: the 09:00 tick of
		// day 1 falls while no process runs.
		for _, now := range []time.Time{at(1, 8, 0, 0), at(1, 13, 0, 0), at(1, 18, 0, 0), at(1, 23, 0, 0), at(2, 4, 0, 0), at(2, 9, 30, 0)} {
			clock.Set(now)
			e := b.engine(t, withClock(clock), declare)
			require.NoError(t, e.Shutdown(ctxT(t)))
		}
		require.Equal(t, ids("daily", at(1, 9, 0, 0), at(2, 9, 0, 0)), b.runIDs(t, "daily"))
		require.Equal(t, ids("every-24h", at(2, 8, 0, 0)), b.runIDs(t, "every-24h"))

		// Each ran once, to completion, with its tick.
		ctx := ctxT(t)
		for _, name := range []string{"daily", "every-24h"} {
			for _, id := range b.runIDs(t, name) {
				var status, output string
				require.NoError(t, b.pool.QueryRow(ctx, "SELECT status, output #>> '{}' FROM "+pgx.Identifier{b.schema, "workflows"}.Sanitize()+
					" WHERE id = $1", id).Scan(&status, &output))
				require.Equal(t, "success", status, id)
				tick := strings.TrimPrefix(id, "sched:"+name+":")
				require.Equal(t, tick+" "+tick, output, "input and ScheduledTime of %s", id)
			}
		}
	})

	// RuntimeControl: list, pause, resume, change the spec,
	// trigger by hand, backfill and delete, on a running engine.
	t.Run("RuntimeControl", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		clock := newClock(at(1, 0, 0, 30))
		var rec *tickRecorder
		e := b.engine(t, withClock(clock), func(e *durable.Engine) {
			rec = registerTickRecorder(e, "job")
			durable.Schedule(rec.wf, "ctl", "* * * * *", tickInput(0))
			// witness ticks every minute whatever happens to ctl: once it has
			// run a tick, the schedule loop has seen that time.
			durable.Schedule(rec.wf, "witness", "* * * * *", tickInput(0))
		})
		ctx := ctxT(t)
		list, err := e.ListSchedules(ctx)
		require.NoError(t, err)
		require.Len(t, list, 2)
		ctl := list[0]
		require.Equal(t, "ctl", ctl.Name)
		require.Equal(t, "job", ctl.Workflow)
		require.Equal(t, "* * * * *", ctl.Spec)
		require.Equal(t, "UTC", ctl.Location)
		require.False(t, ctl.Paused)
		require.True(t, ctl.Declared)
		require.True(t, ctl.LastTick.IsZero())
		require.Equal(t, at(1, 0, 1, 0), ctl.NextTick)

		clock.Set(at(1, 0, 1, 0))
		waitLastTick(t, e, "ctl", at(1, 0, 1, 0))
		ctl = schedule(t, e, "ctl")
		require.Equal(t, at(1, 0, 2, 0), ctl.NextTick)
		require.Equal(t, "sched:ctl:2030-01-01T00:01:00Z", ctl.LastRunID)

		// Paused: no runs.
		require.NoError(t, e.PauseSchedule(ctx, "ctl"))
		require.NoError(t, e.PauseSchedule(ctx, "ctl"), "pausing twice is fine")
		ctl = schedule(t, e, "ctl")
		require.True(t, ctl.Paused)
		require.True(t, ctl.NextTick.IsZero())
		clock.Set(at(1, 0, 5, 30))
		waitLastTick(t, e, "witness", at(1, 0, 5, 0))
		require.Equal(t, ids("ctl", at(1, 0, 1, 0)), b.runIDs(t, "ctl"))

		// Resumed: the ticks of the pause are not run; the next one is.
		require.NoError(t, e.ResumeSchedule(ctx, "ctl"))
		require.NoError(t, e.ResumeSchedule(ctx, "ctl"), "resuming twice is fine")
		ctl = schedule(t, e, "ctl")
		require.False(t, ctl.Paused)
		require.Equal(t, at(1, 0, 6, 0), ctl.NextTick)
		clock.Set(at(1, 0, 6, 0))
		waitLastTick(t, e, "ctl", at(1, 0, 6, 0))
		require.Equal(t, ids("ctl", at(1, 0, 1, 0), at(1, 0, 6, 0)), b.runIDs(t, "ctl"))

		// A new spec, in force at once.
		require.NoError(t, e.SetScheduleSpec(ctx, "ctl", "*/10 * * * *", nil))
		ctl = schedule(t, e, "ctl")
		require.Equal(t, "*/10 * * * *", ctl.Spec)
		require.Equal(t, at(1, 0, 10, 0), ctl.NextTick)
		clock.Set(at(1, 0, 7, 0))
		waitLastTick(t, e, "witness", at(1, 0, 7, 0))
		require.Equal(t, ids("ctl", at(1, 0, 1, 0), at(1, 0, 6, 0)), b.runIDs(t, "ctl"))
		clock.Set(at(1, 0, 10, 0))
		waitLastTick(t, e, "ctl", at(1, 0, 10, 0))
		require.Equal(t, ids("ctl", at(1, 0, 1, 0), at(1, 0, 6, 0), at(1, 0, 10, 0)), b.runIDs(t, "ctl"))

		// Triggered by hand: a run of its own, once per given tick.
		id, err := e.TriggerSchedule(ctx, "ctl", time.Time{})
		require.NoError(t, err)
		require.Equal(t, "sched:ctl:manual:2030-01-01T00:10:00Z", id)
		h, err := rec.wf.Handle(ctx, id)
		require.NoError(t, err)
		out, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "2030-01-01T00:10:00Z 2030-01-01T00:10:00Z", out)
		again, err := e.TriggerSchedule(ctx, "ctl", at(1, 0, 10, 0))
		require.NoError(t, err)
		require.Equal(t, id, again)
		manual := at(1, 0, 10, 0).Add(1500 * time.Millisecond)
		id2, err := e.TriggerSchedule(ctx, "ctl", manual)
		require.NoError(t, err)
		require.Equal(t, "sched:ctl:manual:2030-01-01T00:10:01.5Z", id2)
		h, err = rec.wf.Handle(ctx, id2)
		require.NoError(t, err)
		out, err = h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "2030-01-01T00:10:01Z 2030-01-01T00:10:01Z", out, "RFC 3339 output drops the fraction")
		require.Equal(t, 1, rec.executions(id))

		// Backfill [00:00, 00:30): 00:10 ran already, 00:20 is in the future.
		runs, err := e.BackfillSchedule(ctx, "ctl", at(1, 0, 0, 0), at(1, 0, 30, 0))
		require.NoError(t, err)
		require.Equal(t, []durable.ScheduledRun{
			{Tick: at(1, 0, 0, 0), WorkflowID: "sched:ctl:2030-01-01T00:00:00Z", Started: true},
			{Tick: at(1, 0, 10, 0), WorkflowID: "sched:ctl:2030-01-01T00:10:00Z", Started: false},
			{Tick: at(1, 0, 20, 0), WorkflowID: "sched:ctl:2030-01-01T00:20:00Z", Started: true},
		}, runs)
		again2, err := e.BackfillSchedule(ctx, "ctl", at(1, 0, 0, 0), at(1, 0, 30, 0))
		require.NoError(t, err)
		for _, r := range again2 {
			require.False(t, r.Started, "a second backfill starts nothing: %s", r.WorkflowID)
		}
		// The normal 00:20 tick finds its run and starts nothing.
		clock.Set(at(1, 0, 20, 0))
		waitLastTick(t, e, "ctl", at(1, 0, 20, 0))
		require.Equal(t, ids("ctl", at(1, 0, 0, 0), at(1, 0, 1, 0), at(1, 0, 6, 0), at(1, 0, 10, 0), at(1, 0, 20, 0)),
			b.runIDs(t, "ctl")[:5])
		for _, id := range b.runIDs(t, "ctl") {
			h, err := rec.wf.Handle(ctx, id)
			require.NoError(t, err)
			_, err = h.Result(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, rec.executions(id), id)
		}

		// Deleted: gone from the list, no more ticks.
		require.NoError(t, e.DeleteSchedule(ctx, "ctl"))
		require.ErrorIs(t, e.DeleteSchedule(ctx, "ctl"), durable.ErrScheduleNotFound)
		list, err = e.ListSchedules(ctx)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, "witness", list[0].Name)
		before := b.runIDs(t, "ctl")
		clock.Set(at(1, 0, 30, 0))
		waitLastTick(t, e, "witness", at(1, 0, 30, 0))
		require.Equal(t, before, b.runIDs(t, "ctl"))
		_, err = e.TriggerSchedule(ctx, "ctl", time.Time{})
		require.ErrorIs(t, err, durable.ErrScheduleNotFound)
		// The report comes after the pass's ticks, so it may trail the witness's.
		require.Eventually(t, func() bool { return strings.Contains(b.logs.String(), "was deleted from the database") },
			30*time.Second, 5*time.Millisecond)
		require.Equal(t, 1, strings.Count(b.logs.String(), "was deleted from the database"), "reported once")
	})

	// ChangesReachEveryReplica: a spec change or a pause made
	// through one executor is applied by the others.
	t.Run("ChangesReachEveryReplica", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		clock := newClock(at(1, 0, 0, 30))
		declare := func(e *durable.Engine) {
			r := registerTickRecorder(e, "job")
			durable.Schedule(r.wf, "shared", "* * * * *", tickInput(0))
			durable.Schedule(r.wf, "witness", "* * * * *", tickInput(0))
		}
		a := b.engine(t, withClock(clock, func(c *durable.Config) { c.ExecutorID = "A" }), declare)
		bb := b.engine(t, withClock(clock, func(c *durable.Config) { c.ExecutorID = "B" }), declare)
		ctx := ctxT(t)
		clock.Set(at(1, 0, 1, 0))
		waitLastTick(t, a, "shared", at(1, 0, 1, 0))

		require.NoError(t, bb.SetScheduleSpec(ctx, "shared", "*/5 * * * *", nil))
		clock.Set(at(1, 0, 2, 0))
		waitLastTick(t, a, "witness", at(1, 0, 2, 0))
		require.Equal(t, ids("shared", at(1, 0, 1, 0)), b.runIDs(t, "shared"))

		// Only A is left: it fires by the spec B set.
		require.NoError(t, bb.Shutdown(ctx))
		clock.Set(at(1, 0, 5, 0))
		waitLastTick(t, a, "shared", at(1, 0, 5, 0))
		waitLastTick(t, a, "witness", at(1, 0, 5, 0)) // A fired both before it stops
		require.Equal(t, ids("shared", at(1, 0, 1, 0), at(1, 0, 5, 0)), b.runIDs(t, "shared"))
		var owner string
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT executor_id FROM "+pgx.Identifier{b.schema, "workflows"}.Sanitize()+
			" WHERE id = $1", ids("shared", at(1, 0, 5, 0))[0]).Scan(&owner))
		require.Equal(t, "A", owner)

		// A pause made through A holds for B when it comes back.
		require.NoError(t, a.PauseSchedule(ctx, "shared"))
		require.NoError(t, a.Shutdown(ctx))
		clock.Set(at(1, 0, 10, 0))
		c := b.engine(t, withClock(clock, func(c *durable.Config) { c.ExecutorID = "B" }), declare)
		require.True(t, schedule(t, c, "shared").Paused)
		require.Equal(t, ids("witness", at(1, 0, 1, 0), at(1, 0, 2, 0), at(1, 0, 5, 0), at(1, 0, 10, 0)), b.runIDs(t, "witness"))
		require.Equal(t, ids("shared", at(1, 0, 1, 0), at(1, 0, 5, 0)), b.runIDs(t, "shared"))
	})

	// SpecSourceOfTruth: a spec changed at run time survives
	// restarts of the same code; a deploy that declares another spec wins.
	t.Run("SpecSourceOfTruth", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		clock := newClock(at(1, 0, 0, 30))
		declare := func(spec string, catchUp int) func(e *durable.Engine) {
			return func(e *durable.Engine) {
				r := registerTickRecorder(e, "job")
				durable.Schedule(r.wf, "src", spec, tickInput(catchUp))
			}
		}
		ctx := ctxT(t)
		e1 := b.engine(t, withClock(clock), declare("* * * * *", 0))
		require.NoError(t, e1.SetScheduleSpec(ctx, "src", "*/5 * * * *", nil))
		require.NoError(t, e1.Shutdown(ctx))

		e2 := b.engine(t, withClock(clock), declare("* * * * *", 0))
		s := schedule(t, e2, "src")
		require.Equal(t, "*/5 * * * *", s.Spec, "the same code keeps the run-time change")
		require.NoError(t, e2.PauseSchedule(ctx, "src"))
		require.NoError(t, e2.Shutdown(ctx))

		e3 := b.engine(t, withClock(clock), declare("*/15 * * * *", 2))
		s = schedule(t, e3, "src")
		require.Equal(t, "*/15 * * * *", s.Spec, "a new declaration in code wins")
		require.Equal(t, 2, s.CatchUp)
		require.True(t, s.Paused, "a pause survives deploys")
		require.True(t, s.NextTick.IsZero())
	})

	// TimeZonesAndInput: specs read in a zone, given by option or
	// prefix; the input function gets the tick in that zone, the ID and
	// ScheduledTime in UTC; a fixed input.
	t.Run("TimeZonesAndInput", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		paris, err := time.LoadLocation("Europe/Paris")
		require.NoError(t, err)
		clock := newClock(at(1, 7, 0, 0))
		var fixed *durable.Workflow[string, string]
		var zoned *durable.Workflow[string, string]
		e := b.engine(t, withClock(clock), func(e *durable.Engine) {
			zoned = durable.Register(e, "zoned", func(wctx durable.Context, in string) (string, error) {
				st, _ := durable.ScheduledTime(wctx)
				return in + " " + st.Format(time.RFC3339), nil
			}, nil)
			fixed = durable.Register(e, "fixed", func(wctx durable.Context, in string) (string, error) { return in, nil }, nil)
			input := &durable.ScheduleOpts[string]{InputFunc: func(t time.Time) string { return t.Format(time.RFC3339) }}
			durable.Schedule(zoned, "paris", "0 9 * * *", &durable.ScheduleOpts[string]{Location: paris, InputFunc: input.InputFunc})
			durable.Schedule(zoned, "new-york", "CRON_TZ=America/New_York 0 9 * * *", input)
			durable.Schedule(fixed, "fixed", "0 8 * * *", &durable.ScheduleOpts[string]{Input: "the same every day"})
		})
		ctx := ctxT(t)
		require.Equal(t, "Europe/Paris", schedule(t, e, "paris").Location)
		require.Equal(t, "America/New_York", schedule(t, e, "new-york").Location)
		require.Equal(t, at(1, 8, 0, 0), schedule(t, e, "paris").NextTick)
		require.Equal(t, at(1, 14, 0, 0), schedule(t, e, "new-york").NextTick)

		clock.Set(at(1, 14, 0, 0))
		waitLastTick(t, e, "new-york", at(1, 14, 0, 0))
		waitLastTick(t, e, "paris", at(1, 8, 0, 0))
		waitLastTick(t, e, "fixed", at(1, 8, 0, 0))
		for id, want := range map[string]string{
			"sched:paris:2030-01-01T08:00:00Z":    "2030-01-01T09:00:00+01:00 2030-01-01T08:00:00Z",
			"sched:new-york:2030-01-01T14:00:00Z": "2030-01-01T09:00:00-05:00 2030-01-01T14:00:00Z",
		} {
			h, err := zoned.Handle(ctx, id)
			require.NoError(t, err)
			out, err := h.Result(ctx)
			require.NoError(t, err)
			require.Equal(t, want, out)
		}
		h, err := fixed.Handle(ctx, "sched:fixed:2030-01-01T08:00:00Z")
		require.NoError(t, err)
		out, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "the same every day", out)

		// A new spec at run time, with a zone by prefix or by argument.
		require.NoError(t, e.SetScheduleSpec(ctx, "paris", "CRON_TZ=Asia/Tokyo 0 9 * * *", nil))
		s := schedule(t, e, "paris")
		require.Equal(t, "Asia/Tokyo", s.Location)
		require.Equal(t, at(2, 0, 0, 0), s.NextTick, "09:00 in Tokyo is midnight UTC")
		require.NoError(t, e.SetScheduleSpec(ctx, "paris", "0 10 * * *", nil))
		s = schedule(t, e, "paris")
		require.Equal(t, "Asia/Tokyo", s.Location, "nil keeps the zone")
		require.Equal(t, at(2, 1, 0, 0), s.NextTick)
		require.NoError(t, e.SetScheduleSpec(ctx, "paris", "0 10 * * *", paris))
		s = schedule(t, e, "paris")
		require.Equal(t, "Europe/Paris", s.Location)
		require.Equal(t, at(2, 9, 0, 0), s.NextTick)

		// Outside a scheduled run, ScheduledTime says so.
		h2, err := zoned.Start(ctx, "plain", &durable.StartOpts{ID: "sched-lookalike:2030-01-01T08:00:00Z"})
		require.NoError(t, err)
		out, err = h2.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "plain 0001-01-01T00:00:00Z", out)
	})

	// StoredByAnotherBinary: a schedule stored by a binary that
	// this one does not match is reported at error level, once, and not fired.
	t.Run("StoredByAnotherBinary", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		clock := newClock(at(1, 0, 0, 30))
		ctx := ctxT(t)
		a := b.engine(t, withClock(clock), func(e *durable.Engine) {
			r := registerTickRecorder(e, "billing")
			durable.Schedule(r.wf, "invoices", "* * * * *", tickInput(0))
			durable.Schedule(r.wf, "reminders", "* * * * *", tickInput(0))
		})
		require.NoError(t, a.Shutdown(ctx))

		// Another binary: no "billing" workflow at all.
		other := b.engine(t, withClock(clock), func(e *durable.Engine) {
			r := registerTickRecorder(e, "reports")
			durable.Schedule(r.wf, "report", "* * * * *", tickInput(0))
		})
		// A third: registers "billing" but declares no schedule.
		third := b.engine(t, withClock(clock), func(e *durable.Engine) { registerTickRecorder(e, "billing") })
		for minute := 1; minute <= 3; minute++ {
			clock.Set(at(1, 0, minute, 0))
			waitLastTick(t, other, "report", at(1, 0, minute, 0))
		}
		require.Empty(t, b.runIDs(t, "invoices"))
		logs := b.logs.String()
		for _, name := range []string{"invoices", "reminders"} {
			require.Equal(t, 1, countLines(logs, "level=ERROR", "runs a workflow not registered here", "schedule="+name), logs)
			require.Equal(t, 1, countLines(logs, "level=ERROR", "is not declared here", "schedule="+name), logs)
		}
		s := schedule(t, other, "invoices")
		require.False(t, s.Declared)
		require.True(t, schedule(t, other, "report").Declared)
		// A trigger of a schedule this binary does not declare is stored for
		// an executor that does; none does here, so it waits.
		id, err := other.TriggerSchedule(ctx, "invoices", at(1, 0, 3, 0))
		require.NoError(t, err)
		require.Equal(t, "sched:invoices:manual:2030-01-01T00:03:00Z", id)
		require.Equal(t, []time.Time{at(1, 0, 3, 0)}, schedule(t, other, "invoices").Triggers)
		_, err = other.TriggerSchedule(ctx, "nope", time.Time{})
		require.ErrorIs(t, err, durable.ErrScheduleNotFound)
		_, err = third.BackfillSchedule(ctx, "invoices", at(1, 0, 0, 0), at(1, 0, 2, 0))
		require.ErrorIs(t, err, durable.ErrNotRegistered)
	})

	// ThroughQueue: a burst of catch-up ticks goes through a queue
	// and respects its concurrency limit; each tick is still run once.
	t.Run("ThroughQueue", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		clock := newClock(at(1, 0, 0, 30))
		var mu sync.Mutex
		running, maxRunning := 0, 0
		declare := func(e *durable.Engine) {
			q := durable.RegisterQueue(e, "one-at-a-time", &durable.QueueOpts{GlobalConcurrency: 1})
			wf := durable.Register(e, "slow-tick", func(wctx durable.Context, tick time.Time) (string, error) {
				mu.Lock()
				running++
				maxRunning = max(maxRunning, running)
				mu.Unlock()
				_, err := durable.Step(wctx, "work", func(ctx context.Context) (int, error) {
					time.Sleep(20 * time.Millisecond)
					return 1, nil
				}, nil)
				mu.Lock()
				running--
				mu.Unlock()
				return tick.Format(time.RFC3339), err
			}, nil)
			durable.Schedule(wf, "queued", "0 * * * * *", &durable.ScheduleOpts[time.Time]{
				InputFunc: func(t time.Time) time.Time { return t }, CatchUp: 4, Queue: q,
			})
		}
		first := b.engine(t, withClock(clock), declare)
		require.NoError(t, first.Shutdown(ctxT(t)))
		clock.Set(at(1, 0, 10, 30))
		b.engine(t, withClock(clock), declare)
		want := ids("queued", at(1, 0, 6, 0), at(1, 0, 7, 0), at(1, 0, 8, 0), at(1, 0, 9, 0), at(1, 0, 10, 0))
		require.Equal(t, want, b.runIDs(t, "queued"))
		q := "SELECT count(*) FROM " + b.schema + ".workflows WHERE id LIKE 'sched:queued:%' AND status = 'success' AND queue_name = 'one-at-a-time'"
		require.Eventually(t, func() bool {
			var n int
			_ = b.pool.QueryRow(ctxT(t), q).Scan(&n)
			return n == len(want)
		}, 30*time.Second, 5*time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, 1, maxRunning, "the queue's limit held for the burst")
	})

	// Tags: every run a schedule starts carries its ScheduleOpts.Tags, and
	// ListWorkflows finds them by tag: the ticks, through a queue too, a
	// manual trigger and a backfill.
	t.Run("Tags", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		clock := newClock(at(1, 0, 0, 30))
		tags := map[string]string{"team": "billing", "kind": "report"}
		e := b.engine(t, withClock(clock), func(e *durable.Engine) {
			q := durable.RegisterQueue(e, "tagged", nil)
			wf := durable.Register(e, "tagged-tick", func(wctx durable.Context, in string) (string, error) { return in, nil }, nil)
			durable.Schedule(wf, "direct", "0 * * * * *", &durable.ScheduleOpts[string]{Tags: tags})
			durable.Schedule(wf, "queued", "0 * * * * *", &durable.ScheduleOpts[string]{Tags: tags, Queue: q})
			durable.Schedule(wf, "plain", "0 * * * * *", nil)
		})
		ctx := ctxT(t)
		clock.Set(at(1, 0, 1, 30))
		for _, name := range []string{"direct", "queued", "plain"} {
			waitLastTick(t, e, name, at(1, 0, 1, 0))
		}
		manual, err := e.TriggerSchedule(ctx, "direct", time.Time{})
		require.NoError(t, err)
		backfilled, err := e.BackfillSchedule(ctx, "queued", at(1, 0, 0, 0), at(1, 0, 0, 1))
		require.NoError(t, err)
		require.Len(t, backfilled, 1)
		want := []string{manual, backfilled[0].WorkflowID}
		for _, name := range []string{"direct", "queued"} {
			want = append(want, ids(name, at(1, 0, 1, 0))...)
		}
		for _, id := range want {
			require.Equal(t, tags, tagsOf(t, e, id), id)
		}
		require.Nil(t, tagsOf(t, e, ids("plain", at(1, 0, 1, 0))[0]))
		found, _, err := e.ListWorkflows(ctx, &durable.ListParams{Tags: map[string]string{"team": "billing"}})
		require.NoError(t, err)
		var got []string
		for _, w := range found {
			got = append(got, w.ID)
		}
		require.ElementsMatch(t, want, got)
	})

	// TriggerFromElsewhere: a process that does not declare the
	// schedule, and is not even launched (an operator tool), triggers it; an
	// executor that declares it starts the run, once, even when the trigger
	// is asked for twice, and while the schedule is paused.
	t.Run("TriggerFromElsewhere", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var rec *tickRecorder
		worker := b.engine(t, nil, func(e *durable.Engine) {
			rec = registerTickRecorder(e, "rt")
			durable.Schedule(rec.wf, "rt", "0 0 1 1 *", tickInput(0)) // yearly: never fires during the test
		})
		ctx := ctxT(t)
		require.NoError(t, worker.PauseSchedule(ctx, "rt"))

		ops, err := durable.New(b.pool, b.cfg) // never launched
		require.NoError(t, err)
		tick := time.Date(2031, 2, 3, 4, 5, 6, 7_000_000, time.UTC)
		id, err := ops.TriggerSchedule(ctx, "rt", tick)
		require.NoError(t, err)
		require.Equal(t, "sched:rt:manual:2031-02-03T04:05:06.007Z", id)
		again, err := ops.TriggerSchedule(ctx, "rt", tick)
		require.NoError(t, err)
		require.Equal(t, id, again)

		var h *durable.Handle[string]
		require.Eventually(t, func() bool {
			h, err = rec.wf.Handle(ctx, id)
			return err == nil
		}, 30*time.Second, 10*time.Millisecond, "the declaring executor starts the run")
		out, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "2031-02-03T04:05:06Z 2031-02-03T04:05:06Z", out)
		require.Eventually(t, func() bool { return len(schedule(t, ops, "rt").Triggers) == 0 }, 30*time.Second, 10*time.Millisecond)
		require.Equal(t, 1, rec.executions(id))
		require.Equal(t, []string{id}, b.runIDs(t, "rt"))

		_, err = ops.TriggerSchedule(ctx, "missing", time.Time{})
		require.ErrorIs(t, err, durable.ErrScheduleNotFound)
	})
}

func countLines(logs string, parts ...string) int {
	n := 0
lines:
	for _, l := range strings.Split(logs, "\n") {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue lines
			}
		}
		n++
	}
	return n
}

// FuzzScheduleSpec: no spec crashes declaration; each is accepted or
// refused with ErrInvalidArgument.
func FuzzScheduleSpec(f *testing.F) {
	for _, s := range []string{"* * * * *", "*/5 * * * * *", "@every 1s", "@daily", "TZ=UTC", "CRON_TZ=Europe/Paris 0 9 * * *",
		"TZ= ", "@every -1s", "0-70/3 * * * *", "* * * * * ? *", "CRON_TZ=", "1,2,3-9/0 * * * *"} {
		f.Add(s)
	}
	// TrySchedule never touches the database: a pool that never connects.
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	require.NoError(f, err)
	f.Cleanup(pool.Close)
	f.Fuzz(func(t *testing.T, spec string) {
		e, err := durable.New(pool, &durable.Config{Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		w := durable.Register(e, "w", func(wctx durable.Context, in int) (int, error) { return in, nil }, nil)
		err = durable.TrySchedule(w, "s", spec, nil)
		if err != nil {
			require.ErrorIs(t, err, durable.ErrInvalidArgument)
		}
	})
}
