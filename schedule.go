package durable

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/durable-go/durable/internal/clock"
	"github.com/durable-go/durable/internal/errs"
	"github.com/durable-go/durable/internal/schedule"
	"github.com/durable-go/durable/internal/sysdb"
)

// Limits of schedules.
const (
	// ScheduleNameMax is the longest schedule name, in bytes: the name is
	// part of the workflow ID of every scheduled run.
	ScheduleNameMax = 200
	// ScheduleCatchUpMax is the largest ScheduleOpts.CatchUp.
	ScheduleCatchUpMax = 1000
	// BackfillMaxTicks is the most ticks one [Engine.BackfillSchedule]
	// call starts; split a longer range into several calls.
	BackfillMaxTicks = 1000
)

// ErrScheduleNotFound: no schedule with that name is stored.
var ErrScheduleNotFound = errs.ScheduleNotFound

// ScheduleOpts are options of a schedule declared with [Schedule].
type ScheduleOpts[P any] struct {
	// Location is the time zone the spec is read in; a "CRON_TZ=Zone " (or
	// "TZ=Zone ") prefix of the spec does the same. It must be loadable by
	// name (time.LoadLocation) on every executor, so time.Local and
	// time.FixedZone are refused. Defaults to UTC.
	Location *time.Location

	// Input is the input of every scheduled run. Defaults to the zero P.
	Input P

	// InputFunc computes the input of each run from its tick (the scheduled
	// time, in Location). It must be deterministic: every executor may call
	// it for the same tick. Set Input or InputFunc, not both.
	// Defaults to nil (Input is used).
	InputFunc func(tick time.Time) P

	// CatchUp is how many missed ticks run after a downtime, besides the
	// most recent due tick, which always runs however late it is. With the
	// default 0 the missed ticks are skipped (and logged); with N the N
	// latest missed ticks run too, oldest first, and older ones are
	// skipped. At most ScheduleCatchUpMax. Defaults to 0.
	CatchUp int

	// Queue is a queue for the scheduled runs to go through instead of
	// starting at once in the executor that fires the tick, so a burst of
	// catch-up ticks or a backfill respects the queue's limits. Each tick is
	// enqueued under its deterministic workflow ID, so it is still queued
	// exactly once. Defaults to nil (no queue).
	Queue *Queue

	// Tags are the tags of every run the schedule starts (its ticks, the
	// manual ones and a backfill's), as StartOpts.Tags: ListWorkflows
	// finds them by ListParams.Tags. Defaults to none.
	Tags map[string]string
}

// Schedule runs w on a cron schedule named name, a stable string stored in
// the database: keep it when the code moves, like a workflow name.
// Declare schedules before [Engine.Launch]. Schedule panics on a
// programmer error (bad name or spec, duplicate name, after Launch);
// [TrySchedule] returns the error instead.
//
// # Schedules
//
// spec is a cron expression read by github.com/robfig/cron/v3: five fields
// (minute hour day-of-month month day-of-week), or six with a leading
// seconds field, or a descriptor (@hourly, @daily, @every 90s). It is read
// in ScheduleOpts.Location or in the zone of a "CRON_TZ=Europe/Paris "
// prefix, UTC by default.
//
// Each tick runs w once, with the input of ScheduleOpts.Input or
// ScheduleOpts.InputFunc(tick), under the workflow ID
// "sched:<name>:<tick in UTC, RFC 3339>"; [ScheduledTime] gives the tick to
// workflow code. Every executor that declares the schedule evaluates it
// from its row in the schedules table, with no leader: the first one to
// insert a tick's run executes it, and the workflow ID makes a second run of
// a tick impossible, whatever the number of replicas and crashes. Ticks
// are counted from the last tick stored, not from process start, so a
// daily schedule fires even when processes restart more often than once a
// day. After a downtime, ScheduleOpts.CatchUp says how many missed ticks
// still run.
//
// The row is the schedule's state: [Engine.ListSchedules] shows it, and
// [Engine.PauseSchedule], [Engine.ResumeSchedule], [Engine.SetScheduleSpec]
// and [Engine.DeleteSchedule] change it for every executor (each re-reads
// it every Config.PollInterval). A spec changed at run time stays in force
// across restarts until the code declares a different spec; a deleted
// schedule comes back at the next Launch of a binary that declares it.
// [Engine.TriggerSchedule] starts a run by hand and
// [Engine.BackfillSchedule] starts the ticks of a past range. A schedule
// stored by another binary is reported in the log, at error level, once.
func Schedule[P, R any](w *Workflow[P, R], name, spec string, opts *ScheduleOpts[P]) {
	if err := TrySchedule(w, name, spec, opts); err != nil {
		panic(err)
	}
}

// TrySchedule is [Schedule] returning an error instead of panicking. Every
// error matches [ErrInvalidArgument].
func TrySchedule[P, R any](w *Workflow[P, R], name, spec string, opts *ScheduleOpts[P]) error {
	if w == nil {
		return fmt.Errorf("%w: schedule %q has a nil workflow", ErrInvalidArgument, name)
	}
	if err := checkName("schedule name", name); err != nil {
		return err
	}
	if len(name) > ScheduleNameMax {
		return fmt.Errorf("%w: schedule name is %d bytes, over the limit of %d", ErrInvalidArgument, len(name), ScheduleNameMax)
	}
	if strings.HasSuffix(name, schedule.ManualSuffix) {
		// Its ticks' IDs would be those of manual runs of another schedule.
		return fmt.Errorf("%w: schedule name %q must not end in %q", ErrInvalidArgument, name, schedule.ManualSuffix)
	}
	var o ScheduleOpts[P]
	if opts != nil {
		o = *opts
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: schedule %q: %s", ErrInvalidArgument, name, fmt.Sprintf(format, args...))
	}
	switch {
	case o.Queue != nil && o.Queue.e != w.e:
		return bad("ScheduleOpts.Queue belongs to another engine")
	case o.CatchUp < 0 || o.CatchUp > ScheduleCatchUpMax:
		return bad("ScheduleOpts.CatchUp %d is outside [0, %d]", o.CatchUp, ScheduleCatchUpMax)
	case o.InputFunc != nil && !reflect.ValueOf(&o.Input).Elem().IsZero():
		return bad("set ScheduleOpts.Input or ScheduleOpts.InputFunc, not both")
	}
	ts, err := schedule.ParseSpec(spec, o.Location)
	if err != nil {
		return bad("%v", err)
	}
	tags, err := encodeTags("ScheduleOpts.Tags", o.Tags)
	if err != nil {
		return fmt.Errorf("schedule %q: %w", name, err)
	}
	e := w.e
	what := fmt.Sprintf("input of schedule %q", name)
	var input func(tick time.Time) ([]byte, error)
	if f := o.InputFunc; f != nil {
		input = func(tick time.Time) (b []byte, err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("durable: %s: InputFunc panicked: %v", what, p)
				}
			}()
			return encodePayload(f(tick), e.cfg.MaxPayloadBytes, "%s", what)
		}
	} else {
		b, err := encodePayload(o.Input, e.cfg.MaxPayloadBytes, "%s", what)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		}
		input = func(time.Time) ([]byte, error) { return b, nil }
	}
	d := &schedule.Def{Name: name, Workflow: w.def.name, Spec: spec, Location: ts.Location().String(), CatchUp: o.CatchUp, Input: input,
		Tags: tags}
	if o.Queue != nil {
		d.Queue = o.Queue.name
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state != stateNew {
		return bad("declare schedules before Launch")
	}
	if !e.sched.Declare(d) {
		return bad("a schedule with this name is already declared")
	}
	return nil
}

// ScheduledTime returns the tick of a run started by a schedule (the
// scheduled time, in UTC; for [Engine.TriggerSchedule], the time given to
// it) and true; for any other run it returns false. It is read from the
// workflow ID, so it is the same on every replay.
func ScheduledTime(wctx Context) (time.Time, bool) {
	return schedule.ParseTickID(wctx.WorkflowID())
}

// ScheduleInfo is a stored schedule, as listed by [Engine.ListSchedules].
type ScheduleInfo struct {
	Name     string
	Workflow string // name of the workflow it runs
	Spec     string // the spec in force
	Location string // time zone the spec is read in
	CatchUp  int
	Paused   bool
	// LastTick is the latest tick whose run was started; zero if none.
	LastTick time.Time
	// LastRunID is the workflow ID of that run.
	LastRunID string
	// NextTick is the next tick to run: in the past when the schedule is
	// behind, zero while paused or when the spec never fires again.
	NextTick time.Time
	// Declared reports whether this binary declares the schedule (and so
	// fires its ticks).
	Declared bool
	// Triggers are manual ticks asked for by [Engine.TriggerSchedule] from
	// a process that does not declare the schedule, waiting for an executor
	// that does to start them.
	Triggers  []time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ListSchedules returns the stored schedules, by name. It sees the
// schedules of every binary sharing the database.
func (e *Engine) ListSchedules(ctx context.Context) ([]ScheduleInfo, error) {
	rows, err := e.sched.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("durable: list schedules: %w", err)
	}
	out := make([]ScheduleInfo, len(rows))
	for i, r := range rows {
		out[i] = ScheduleInfo{
			Name: r.Name, Workflow: r.Workflow, Spec: r.Spec, Location: r.Location, CatchUp: r.CatchUp,
			Paused: r.Paused, LastTick: r.LastTick, LastRunID: r.LastRunID, NextTick: r.NextTick,
			Declared: e.sched.Declared(r.Name), Triggers: r.Triggers, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		}
	}
	return out, nil
}

// PauseSchedule stops the ticks of schedule name on every executor until
// [Engine.ResumeSchedule]. A tick that was already being started when the
// pause committed may still run.
func (e *Engine) PauseSchedule(ctx context.Context, name string) error {
	if err := checkName("schedule name", name); err != nil {
		return err
	}
	return e.sched.Pause(ctx, name)
}

// ResumeSchedule resumes a paused schedule. The ticks that passed while it
// was paused are not run: counting restarts at the resume.
func (e *Engine) ResumeSchedule(ctx context.Context, name string) error {
	if err := checkName("schedule name", name); err != nil {
		return err
	}
	return e.sched.Resume(ctx, name)
}

// SetScheduleSpec changes the spec of schedule name, for every executor
// (each picks it up within Config.PollInterval, this one at once), and
// keeps it across restarts until the code declares a different spec. loc
// is the time zone to read it in; nil keeps the schedule's (a
// "CRON_TZ=Zone " prefix of spec sets it too). Ticks are
// counted from now on. A bad spec or zone fails with [ErrInvalidArgument]
// and changes nothing.
func (e *Engine) SetScheduleSpec(ctx context.Context, name, spec string, loc *time.Location) error {
	if loc != nil {
		if _, err := schedule.ParseSpec(spec, loc); err != nil {
			return fmt.Errorf("%w: schedule %q: %v", ErrInvalidArgument, name, err)
		}
	}
	if err := checkName("schedule name", name); err != nil {
		return err
	}
	return e.sched.SetSpec(ctx, name, spec, loc)
}

// DeleteSchedule deletes schedule name: no executor fires it any more.
// A binary that still declares it stores it again at its next Launch, so
// remove it from the code too to delete it for good. Runs already started
// are not touched.
func (e *Engine) DeleteSchedule(ctx context.Context, name string) error {
	if err := checkName("schedule name", name); err != nil {
		return err
	}
	return e.sched.Delete(ctx, name)
}

// TriggerSchedule starts a run of schedule name now, by hand, paused or
// not, and returns its workflow ID "sched:<name>:manual:<tick>". tick is
// the time the run gets as its tick (the InputFunc argument and
// [ScheduledTime]); zero means now. Triggering the same tick twice starts
// one run.
//
// When this engine is launched and declares the schedule, the run starts
// here before TriggerSchedule returns. Otherwise (an operator tool, a
// binary without the schedule) the trigger is stored with the schedule and
// an executor that declares it starts the run, woken by a notification
// (within its Config.PollInterval at worst); follow it by its ID.
func (e *Engine) TriggerSchedule(ctx context.Context, name string, tick time.Time) (string, error) {
	if err := checkName("schedule name", name); err != nil {
		return "", err
	}
	return e.sched.Trigger(ctx, name, tick)
}

// ScheduledRun is a tick started by [Engine.BackfillSchedule].
type ScheduledRun struct {
	Tick       time.Time // in UTC
	WorkflowID string
	// Started is false when the tick's run existed already (it ran
	// normally or in an earlier backfill) and nothing was started.
	Started bool
}

// BackfillSchedule starts the runs of the ticks of schedule name in
// [from, to), by the spec in force, each under the workflow ID of its
// tick, so ticks that already ran (normally or by an earlier backfill)
// are not run again, and a later normal tick finds its run and starts
// nothing. At most BackfillMaxTicks ticks per call. The runs execute in
// this process. The schedule must be declared in this binary.
func (e *Engine) BackfillSchedule(ctx context.Context, name string, from, to time.Time) ([]ScheduledRun, error) {
	if err := e.canStart(); err != nil {
		return nil, err
	}
	if !from.Before(to) {
		return nil, fmt.Errorf("%w: backfill of schedule %q: from %v is not before to %v", ErrInvalidArgument, name, from, to)
	}
	if err := checkName("schedule name", name); err != nil {
		return nil, err
	}
	runs, err := e.sched.Backfill(ctx, name, from, to, BackfillMaxTicks)
	if runs == nil {
		return nil, err
	}
	out := make([]ScheduledRun, len(runs))
	for i, r := range runs {
		out[i] = ScheduledRun{Tick: r.Tick, WorkflowID: r.WorkflowID, Started: r.Started}
	}
	return out, err
}

// nowFunc is a clock.Clock reading hooks.Knobs.Now.
type nowFunc func() time.Time

func (f nowFunc) Now() time.Time { return f() }

// newScheduler makes the engine's schedule service (internal/schedule):
// it starts runs through the engine and reads the engine's clock.
func newScheduler(e *Engine) *schedule.Service {
	var clk clock.Clock = clock.Real{}
	if e.knobs.Now != nil {
		clk = nowFunc(e.knobs.Now)
	}
	if e.knobs.Clock != nil {
		clk = e.knobs.Clock
	}
	s := schedule.New(schedule.Config{
		Queries:      sysdb.NewScheduleQueries(e.cfg.Schema, e.q.NotifyTo),
		DB:           e.pool,
		Clock:        clk,
		Log:          e.log,
		PollInterval: e.listener.interval,
		CanStart:     e.canStart,
		Start: func(ctx context.Context, workflow, id string, input, tags []byte) (bool, error) {
			return e.runner.start(ctx, e.defs[workflow], id, input, tags)
		},
		Enqueue: func(ctx context.Context, workflow, queue, id string, input, tags []byte) (bool, error) {
			return e.queues.enqueue(ctx, e.defs[workflow], e.QueueRef(queue), id, input, tags)
		},
		Registered: func(workflow string) bool {
			_, ok := e.defs[workflow]
			return ok
		},
	})
	if e.knobs.Clock != nil {
		e.knobs.Clock.OnAdvance(s.Wake) // a move of the clock may make ticks due
	}
	return s
}
