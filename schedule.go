package durable

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

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
var ErrScheduleNotFound = errors.New("durable: schedule not found")

// scheduleLaunchTimeout bounds the work Launch does for schedules (writing
// the declared ones, starting the ticks due at boot). Past it, the schedule
// loop takes over.
const scheduleLaunchTimeout = 10 * time.Second

// schedIDPrefix starts the workflow ID of every scheduled run; a manual
// run's ID has manualSuffix after the schedule name.
const (
	schedIDPrefix = "sched:"
	manualSuffix  = ":manual"
)

// cronParser reads schedule specs: standard five-field cron, an optional
// leading seconds field, descriptors (@hourly, @every 90s) and a
// TZ=/CRON_TZ= prefix.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

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
	if strings.HasSuffix(name, manualSuffix) {
		// Its ticks' IDs would be those of manual runs of another schedule.
		return fmt.Errorf("%w: schedule name %q must not end in %q", ErrInvalidArgument, name, manualSuffix)
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
	ts, err := parseSpec(spec, o.Location)
	if err != nil {
		return bad("%v", err)
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
			return e.encodePayload(f(tick), "%s", what)
		}
	} else {
		b, err := e.encodePayload(o.Input, "%s", what)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		}
		input = func(time.Time) ([]byte, error) { return b, nil }
	}
	d := &schedDef{name: name, def: w.def, spec: spec, location: ts.loc.String(), catchUp: o.CatchUp, input: input, queue: o.Queue}

	s := e.schedules()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state != stateNew {
		return bad("declare schedules before Launch")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.declared[name]; dup {
		return bad("a schedule with this name is already declared")
	}
	s.declared[name] = d
	return nil
}

// ScheduledTime returns the tick of a run started by a schedule (the
// scheduled time, in UTC; for [Engine.TriggerSchedule], the time given to
// it) and true; for any other run it returns false. It is read from the
// workflow ID, so it is the same on every replay.
func ScheduledTime(wctx Context) (time.Time, bool) {
	return parseTickID(wctx.WorkflowID())
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
	s := e.schedules()
	rows, err := s.list(ctx)
	if err != nil {
		return nil, fmt.Errorf("durable: list schedules: %w", err)
	}
	out := make([]ScheduleInfo, len(rows))
	for i, r := range rows {
		out[i] = ScheduleInfo{
			Name: r.Name, Workflow: r.Workflow, Spec: r.Spec, Location: r.Location, CatchUp: r.CatchUp,
			Paused: r.Paused, LastTick: r.LastTick, LastRunID: r.LastRunID, NextTick: r.NextTick,
			Declared: s.def(r.Name) != nil, Triggers: r.Triggers, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		}
	}
	return out, nil
}

// PauseSchedule stops the ticks of schedule name on every executor until
// [Engine.ResumeSchedule]. A tick that was already being started when the
// pause committed may still run.
func (e *Engine) PauseSchedule(ctx context.Context, name string) error {
	s := e.schedules()
	return s.update(ctx, name, "pause", func(r *sysdb.ScheduleRow) (bool, error) {
		if r.Paused {
			return false, nil
		}
		r.Paused, r.NextTick = true, time.Time{}
		return true, nil
	})
}

// ResumeSchedule resumes a paused schedule. The ticks that passed while it
// was paused are not run: counting restarts at the resume.
func (e *Engine) ResumeSchedule(ctx context.Context, name string) error {
	s := e.schedules()
	return s.update(ctx, name, "resume", func(r *sysdb.ScheduleRow) (bool, error) {
		if !r.Paused {
			return false, nil
		}
		ts, err := s.tickSpec(r.Spec, r.Location)
		if err != nil {
			return false, err
		}
		r.Paused, r.Cursor = false, e.cursorNow()
		r.NextTick = ts.next(r.Cursor)
		return true, nil
	})
}

// SetScheduleSpec changes the spec of schedule name, for every executor
// (each picks it up within Config.PollInterval, this one at once), and
// keeps it across restarts until the code declares a different spec. loc
// is the time zone to read it in; nil keeps the schedule's (a
// "CRON_TZ=Zone " prefix of spec sets it too). Ticks are
// counted from now on. A bad spec or zone fails with [ErrInvalidArgument]
// and changes nothing.
func (e *Engine) SetScheduleSpec(ctx context.Context, name, spec string, loc *time.Location) error {
	s := e.schedules()
	if loc != nil {
		if _, err := parseSpec(spec, loc); err != nil {
			return fmt.Errorf("%w: schedule %q: %v", ErrInvalidArgument, name, err)
		}
	}
	return s.update(ctx, name, "set spec", func(r *sysdb.ScheduleRow) (bool, error) {
		l := loc
		if l == nil && !hasZonePrefix(spec) {
			var err error
			if l, err = s.location(r.Location); err != nil {
				return false, err
			}
		}
		ts, err := parseSpec(spec, l)
		if err != nil {
			return false, fmt.Errorf("%w: schedule %q: %v", ErrInvalidArgument, name, err)
		}
		r.Spec, r.Location, r.Cursor = spec, ts.loc.String(), e.cursorNow()
		r.NextTick = time.Time{}
		if !r.Paused {
			r.NextTick = ts.next(r.Cursor)
		}
		return true, nil
	})
}

// DeleteSchedule deletes schedule name: no executor fires it any more.
// A binary that still declares it stores it again at its next Launch, so
// remove it from the code too to delete it for good. Runs already started
// are not touched.
func (e *Engine) DeleteSchedule(ctx context.Context, name string) error {
	if err := checkName("schedule name", name); err != nil {
		return err
	}
	s := e.schedules()
	found, err := s.q.Delete(ctx, e.pool, name)
	if err != nil {
		return fmt.Errorf("durable: delete schedule %q: %w", name, err)
	}
	if !found {
		return fmt.Errorf("%w: %q", ErrScheduleNotFound, name)
	}
	s.wake()
	return nil
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
	s := e.schedules()
	if tick.IsZero() {
		tick = e.now()
	}
	if s.def(name) == nil || e.canStart() != nil {
		return s.requestTrigger(ctx, name, tick)
	}
	d, _, ts, err := s.resolve(ctx, name)
	if err != nil {
		return "", err
	}
	id := manualID(name, tick)
	input, err := d.input(tick.In(ts.loc))
	if err != nil {
		return "", err
	}
	if _, err := e.startDef(ctx, d.def, id, input); err != nil {
		return "", err
	}
	return id, nil
}

func manualID(name string, tick time.Time) string {
	return schedIDPrefix + name + manualSuffix + ":" + tick.UTC().Format(time.RFC3339Nano)
}

// requestTrigger stores a manual tick for an executor that declares
// schedule name to start.
func (s *scheduler) requestTrigger(ctx context.Context, name string, tick time.Time) (string, error) {
	tick = tick.UTC().Truncate(time.Microsecond) // as stored
	found, err := s.q.RequestTrigger(ctx, s.e.pool, sysdb.ScheduleTriggerParams{Name: name, Tick: tick})
	if err != nil {
		return "", fmt.Errorf("durable: trigger schedule %q: %w", name, err)
	}
	if !found {
		return "", fmt.Errorf("%w: %q", ErrScheduleNotFound, name)
	}
	return manualID(name, tick), nil
}

// fireTriggers starts the manual ticks stored for schedule row, declared
// here as d, and removes them. Two executors may both start one: its
// workflow ID makes that one run.
func (s *scheduler) fireTriggers(ctx context.Context, d *schedDef, row *sysdb.ScheduleRow) {
	if len(row.Triggers) == 0 {
		return
	}
	ts, err := s.tickSpec(row.Spec, row.Location)
	if err != nil {
		return // reported by the caller's pass
	}
	for _, tick := range row.Triggers {
		if s.e.canStart() != nil {
			return
		}
		if _, err := s.start(ctx, d, manualID(row.Name, tick), tick, ts.loc); err != nil {
			if ctx.Err() == nil {
				s.e.log.Warn("durable: manual schedule tick not started; retrying", "schedule", row.Name, "tick", tick, "err", err)
			}
			continue
		}
		if err := s.q.TriggerDone(ctx, s.e.pool, sysdb.ScheduleTriggerParams{Name: row.Name, Tick: tick}); err != nil && ctx.Err() == nil {
			s.e.log.Warn("durable: clear manual schedule tick", "schedule", row.Name, "tick", tick, "err", err)
		}
	}
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
	s := e.schedules()
	d, row, ts, err := s.resolve(ctx, name)
	if err != nil {
		return nil, err
	}
	ticks, err := ts.between(row.Cursor, from, to, BackfillMaxTicks)
	if err != nil {
		return nil, fmt.Errorf("%w: backfill of schedule %q: %v", ErrInvalidArgument, name, err)
	}
	out := make([]ScheduledRun, 0, len(ticks))
	for _, tick := range ticks {
		id := tickID(name, tick)
		input, err := d.input(tick.In(ts.loc))
		if err != nil {
			return out, err
		}
		created, err := e.startDef(ctx, d.def, id, input)
		if err != nil {
			return out, err
		}
		out = append(out, ScheduledRun{Tick: tick, WorkflowID: id, Started: created})
	}
	return out, nil
}

// schedDef is a schedule declared in this binary.
type schedDef struct {
	name     string
	def      *wfDef
	spec     string // as declared
	location string // zone name the declared spec is read in
	catchUp  int
	input    func(tick time.Time) ([]byte, error)
	queue    *Queue // nil: start in the firing executor
}

// scheduler fires the ticks of the schedules declared in this binary.
type scheduler struct {
	e    *Engine
	q    *sysdb.ScheduleQueries
	kick chan struct{} // wakes the loop after a change made here

	mu       sync.Mutex
	declared map[string]*schedDef
	upserted bool                 // the declared schedules are stored
	reported map[string]bool      // problems already logged, by schedule and kind
	specs    map[string]*tickSpec // parsed specs by spec and zone
	locs     map[string]*time.Location
}

// schedules returns the engine's scheduler, made on first use.
func (e *Engine) schedules() *scheduler {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sched == nil {
		e.sched = &scheduler{
			e:        e,
			q:        sysdb.NewScheduleQueries(e.cfg.Schema, e.q.NotifyTo),
			kick:     make(chan struct{}, 1),
			declared: map[string]*schedDef{},
			reported: map[string]bool{},
			specs:    map[string]*tickSpec{},
			locs:     map[string]*time.Location{},
		}
	}
	return e.sched
}

// startSchedules stores the declared schedules, starts the ticks due now
// and, if this binary declares any schedule, starts the schedule loop. It
// runs at the end of Launch.
func (e *Engine) startSchedules() {
	s := e.schedules()
	ctx, cancel := context.WithTimeout(e.hardCtx, scheduleLaunchTimeout)
	wait := s.pass(ctx)
	cancel()
	if s.count() == 0 {
		return
	}
	e.bg.start("schedules", func(ctx context.Context) { s.loop(ctx, wait) })
}

// stopSchedules stops the schedule loop.
func (e *Engine) stopSchedules() {
	if e.bg != nil {
		e.bg.stop("schedules")
	}
}

func (s *scheduler) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.declared)
}

func (s *scheduler) def(name string) *schedDef {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.declared[name]
}

func (s *scheduler) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// loop sleeps until the next tick due, a change made in this process, or
// the poll interval (changes made by other executors), then fires what is
// due.
func (s *scheduler) loop(ctx context.Context, wait time.Duration) {
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-s.kick:
			t.Stop()
		}
		wait = s.pass(ctx)
	}
}

// errScheduleChanged: the row changed since it was read (another executor
// advanced it, or a change at run time); read it again.
var errScheduleChanged = errors.New("schedule changed concurrently")

// pass evaluates every stored schedule once, starts the ticks due, and
// returns how long to sleep.
func (s *scheduler) pass(ctx context.Context) time.Duration {
	e := s.e
	wait := e.pollInterval()
	if err := s.upsertDeclared(ctx); err != nil {
		if ctx.Err() == nil {
			e.log.Warn("durable: store declared schedules", "err", err)
		}
		return wait
	}
	rows, err := s.list(ctx)
	if err != nil {
		if ctx.Err() == nil {
			e.log.Warn("durable: read schedules", "err", err)
		}
		return wait
	}
	stored := make(map[string]bool, len(rows))
	for i := range rows {
		row := &rows[i]
		stored[row.Name] = true
		d := s.def(row.Name)
		if d == nil {
			s.reportUndeclared(row)
			continue
		}
		if row.Workflow != d.def.name {
			s.reportOnce(row.Name, "workflow", func() {
				e.log.Error("durable: schedule runs another workflow in the database than in this binary (a deploy in progress?); this executor does not fire it",
					"schedule", row.Name, "workflow", row.Workflow, "declared_workflow", d.def.name)
			})
			continue
		}
		s.fireTriggers(ctx, d, row)
		if row.Paused {
			continue
		}
		ts, err := s.tickSpec(row.Spec, row.Location)
		if err != nil {
			s.reportOnce(row.Name, "spec:"+row.Spec+"\x00"+row.Location, func() {
				e.log.Error("durable: schedule has an invalid stored spec; fix it with SetScheduleSpec", "schedule", row.Name, "err", err)
			})
			continue
		}
		next, err := s.fire(ctx, d, row, ts)
		switch {
		case errors.Is(err, errScheduleChanged):
			wait = 0
		case err != nil:
			if ctx.Err() == nil && !errors.Is(err, ErrShutdown) {
				e.log.Warn("durable: schedule tick not started; retrying", "schedule", row.Name, "err", err)
			}
		case !next.IsZero():
			wait = min(wait, next.Sub(e.now()))
		}
	}
	for _, name := range s.names() {
		if !stored[name] {
			s.reportOnce(name, "deleted", func() {
				e.log.Warn("durable: schedule declared in this binary was deleted from the database; it is stored again at the next Launch",
					"schedule", name)
			})
		}
	}
	return max(wait, 0)
}

func (s *scheduler) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.declared))
	for n := range s.declared {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// reportOnce runs log the first time problem kind of schedule name is met
// in this process.
func (s *scheduler) reportOnce(name, kind string, log func()) {
	key := name + "\x00" + kind
	s.mu.Lock()
	seen := s.reported[key]
	s.reported[key] = true
	s.mu.Unlock()
	if !seen {
		log()
	}
}

func (s *scheduler) reportUndeclared(row *sysdb.ScheduleRow) {
	e := s.e
	s.reportOnce(row.Name, "undeclared", func() {
		if _, ok := e.defs[row.Workflow]; !ok {
			e.log.Error("durable: schedule stored by another binary runs a workflow not registered here; this executor does not fire it",
				"schedule", row.Name, "workflow", row.Workflow, "err", ErrNotRegistered)
			return
		}
		e.log.Error("durable: schedule stored by another binary is not declared here; this executor does not fire it",
			"schedule", row.Name, "workflow", row.Workflow)
	})
}

// upsertDeclared stores the schedules declared in this binary, once.
func (s *scheduler) upsertDeclared(ctx context.Context) error {
	s.mu.Lock()
	done := s.upserted
	defs := make([]*schedDef, 0, len(s.declared))
	for _, d := range s.declared {
		defs = append(defs, d)
	}
	s.mu.Unlock()
	if done {
		return nil
	}
	sort.Slice(defs, func(i, j int) bool { return defs[i].name < defs[j].name })
	cursor := s.e.cursorNow()
	for _, d := range defs {
		ts, err := s.tickSpec(d.spec, d.location)
		if err != nil {
			return err // checked at declaration; unreachable
		}
		if err := s.q.Upsert(ctx, s.e.pool, sysdb.ScheduleUpsertParams{Name: d.name, Workflow: d.def.name, Spec: d.spec,
			Location: d.location, CatchUp: d.catchUp, Cursor: cursor, NextTick: ts.next(cursor)}); err != nil {
			return fmt.Errorf("schedule %q: %w", d.name, err)
		}
	}
	s.mu.Lock()
	s.upserted = true
	s.mu.Unlock()
	return nil
}

// fire starts the due ticks of one schedule and moves its cursor past
// each. It returns the next tick to wait for (zero: none).
func (s *scheduler) fire(ctx context.Context, d *schedDef, row *sysdb.ScheduleRow, ts *tickSpec) (time.Time, error) {
	e := s.e
	ticks, skipped := ts.due(row.Cursor, e.now(), row.CatchUp+1)
	version := row.Version
	if len(ticks) > 0 {
		// The row was read at the start of the pass, maybe before a change
		// that committed before the clock reached these ticks: read it again
		// (after the clock), so no run starts under a spec already replaced.
		fresh, err := s.get(ctx, row.Name)
		if err != nil {
			return time.Time{}, err
		}
		if fresh.Version != version {
			return time.Time{}, errScheduleChanged
		}
	}
	for i, tick := range ticks {
		if err := e.canStart(); err != nil {
			return time.Time{}, err
		}
		runID, err := s.start(ctx, d, tickID(row.Name, tick), tick, ts.loc)
		if err != nil {
			return time.Time{}, err
		}
		var ok bool
		version, ok, err = s.q.Advance(ctx, e.pool, sysdb.ScheduleAdvanceParams{Name: row.Name, Version: version, Tick: tick,
			NextTick: ts.next(tick), RunID: runID})
		if err != nil {
			return time.Time{}, fmt.Errorf("advance schedule %q past %v: %w", row.Name, tick, err)
		}
		if !ok {
			return time.Time{}, errScheduleChanged
		}
		if i == 0 && skipped {
			// Logged by the executor whose compare-and-set won, only.
			e.log.Warn("durable: schedule skipped missed ticks (ScheduleOpts.CatchUp)",
				"schedule", row.Name, "after", row.Cursor, "resumed_at", tick, "catch_up", row.CatchUp)
		}
	}
	cursor := row.Cursor
	if len(ticks) > 0 {
		cursor = ticks[len(ticks)-1]
	}
	return ts.next(cursor), nil
}

// start starts the run of one tick and returns its workflow ID, or "" when
// the tick is given up (its input cannot be made, or its ID belongs to a
// run of another workflow): both would fail the same way on every try.
// An error is worth retrying.
func (s *scheduler) start(ctx context.Context, d *schedDef, id string, tick time.Time, loc *time.Location) (string, error) {
	e := s.e
	input, err := d.input(tick.In(loc))
	if err != nil {
		e.log.Error("durable: schedule tick skipped: its input cannot be made", "schedule", d.name, "tick", tick, "err", err)
		return "", nil
	}
	var created bool
	if d.queue != nil {
		created, err = e.enqueueDef(ctx, d.def, d.queue, id, input)
	} else {
		created, err = e.startDef(ctx, d.def, id, input)
	}
	if errors.Is(err, ErrWorkflowConflict) {
		e.log.Error("durable: schedule tick skipped: its workflow ID is taken by a run of another workflow", "schedule", d.name, "workflow_id", id, "err", err)
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if created {
		e.log.Debug("durable: scheduled run started", "schedule", d.name, "workflow_id", id)
	}
	return id, nil
}

// resolve reads schedule name for a manual start: it must be stored,
// declared here, and run the declared workflow.
func (s *scheduler) resolve(ctx context.Context, name string) (*schedDef, *sysdb.ScheduleRow, *tickSpec, error) {
	row, err := s.get(ctx, name)
	if err != nil {
		return nil, nil, nil, err
	}
	d := s.def(name)
	if d == nil {
		return nil, nil, nil, fmt.Errorf("%w: schedule %q (workflow %q) is not declared in this binary", ErrNotRegistered, name, row.Workflow)
	}
	if row.Workflow != d.def.name {
		return nil, nil, nil, fmt.Errorf("%w: schedule %q runs workflow %q in the database but %q in this binary", ErrNotRegistered, name, row.Workflow, d.def.name)
	}
	ts, err := s.tickSpec(row.Spec, row.Location)
	if err != nil {
		return nil, nil, nil, err
	}
	return d, row, ts, nil
}

// update applies change to the stored row of schedule name with a
// compare-and-set, reading again if the row changed meanwhile.
func (s *scheduler) update(ctx context.Context, name, what string, change func(r *sysdb.ScheduleRow) (bool, error)) error {
	for {
		row, err := s.get(ctx, name)
		if err != nil {
			return err
		}
		changed, err := change(row)
		if err != nil || !changed {
			return err
		}
		ok, err := s.q.Update(ctx, s.e.pool, sysdb.ScheduleUpdateParams{Name: row.Name, Version: row.Version, Spec: row.Spec,
			Location: row.Location, Paused: row.Paused, Cursor: row.Cursor, NextTick: row.NextTick})
		if err != nil {
			return fmt.Errorf("durable: %s schedule %q: %w", what, name, err)
		}
		if ok {
			s.wake()
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

func (s *scheduler) list(ctx context.Context) ([]sysdb.ScheduleRow, error) {
	return s.q.List(ctx, s.e.pool)
}

func (s *scheduler) get(ctx context.Context, name string) (*sysdb.ScheduleRow, error) {
	if err := checkName("schedule name", name); err != nil {
		return nil, err
	}
	r, found, err := s.q.Get(ctx, s.e.pool, name)
	if err != nil {
		return nil, fmt.Errorf("durable: read schedule %q: %w", name, err)
	}
	if !found {
		return nil, fmt.Errorf("%w: %q", ErrScheduleNotFound, name)
	}
	return &r, nil
}

// cursorNow is the engine clock in whole seconds, the start of a count of
// ticks.
func (e *Engine) cursorNow() time.Time { return e.now().UTC().Truncate(time.Second) }

// tickSpec reads a stored spec in a stored zone, cached.
func (s *scheduler) tickSpec(spec, location string) (*tickSpec, error) {
	key := spec + "\x00" + location
	s.mu.Lock()
	ts := s.specs[key]
	s.mu.Unlock()
	if ts != nil {
		return ts, nil
	}
	loc, err := s.location(location)
	if err != nil {
		return nil, err
	}
	if ts, err = parseSpec(spec, loc); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.specs[key] = ts
	s.mu.Unlock()
	return ts, nil
}

func (s *scheduler) location(name string) (*time.Location, error) {
	s.mu.Lock()
	loc := s.locs[name]
	s.mu.Unlock()
	if loc != nil {
		return loc, nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("time zone %q: %w", name, err)
	}
	s.mu.Lock()
	s.locs[name] = loc
	s.mu.Unlock()
	return loc, nil
}

// tickSpec is a parsed spec: the ticks of a schedule.
type tickSpec struct {
	sched cron.Schedule
	loc   *time.Location
	// every is the period of an "@every" spec, whose ticks are counted
	// from the schedule's cursor rather than aligned on the calendar.
	every time.Duration
}

// parseSpec parses spec read in loc (UTC when nil); a time zone prefix of
// the spec takes precedence, and must agree with loc when both are given.
func parseSpec(spec string, loc *time.Location) (ts *tickSpec, err error) {
	explicit := loc != nil
	if loc == nil {
		loc = time.UTC
	}
	if err := checkLocation(loc); err != nil {
		return nil, fmt.Errorf("ScheduleOpts.Location: %w", err)
	}
	trimmed := strings.TrimSpace(spec)
	prefixed := hasZonePrefix(trimmed)
	if trimmed == "" {
		return nil, errors.New("spec is empty")
	}
	if prefixed && !strings.Contains(trimmed, " ") {
		return nil, fmt.Errorf("spec %q: a time zone prefix must be followed by a space and a schedule", spec)
	}
	defer func() {
		// The parser is third-party code; a panic on a strange spec is a
		// bad spec, not a crash.
		if p := recover(); p != nil {
			ts, err = nil, fmt.Errorf("spec %q: %v", spec, p)
		}
	}()
	sched, err := cronParser.Parse(trimmed)
	if err != nil {
		return nil, fmt.Errorf("spec %q: %w", spec, err)
	}
	ts = &tickSpec{sched: sched, loc: loc}
	switch c := sched.(type) {
	case *cron.SpecSchedule:
		if prefixed {
			if err := checkLocation(c.Location); err != nil {
				return nil, fmt.Errorf("spec %q: %w", spec, err)
			}
			if explicit && c.Location.String() != loc.String() {
				return nil, fmt.Errorf("spec %q has time zone %q but ScheduleOpts.Location is %q: set the zone once", spec, c.Location, loc)
			}
			ts.loc = c.Location
		} else {
			c.Location = loc
		}
	case cron.ConstantDelaySchedule:
		ts.every = c.Delay
	default:
		return nil, fmt.Errorf("spec %q: unsupported schedule type %T", spec, sched)
	}
	return ts, nil
}

func hasZonePrefix(spec string) bool {
	spec = strings.TrimSpace(spec)
	return strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=")
}

// checkLocation refuses zones that other executors could read differently.
func checkLocation(loc *time.Location) error {
	name := loc.String()
	if loc == time.Local || name == "Local" {
		return errors.New("time.Local differs between machines: name the zone (time.LoadLocation(\"Europe/Paris\"))")
	}
	if _, err := time.LoadLocation(name); err != nil {
		return fmt.Errorf("time zone %q cannot be loaded by name on other executors: use time.LoadLocation with an IANA name: %w", name, err)
	}
	return nil
}

// next returns the first tick after t, in UTC; zero if there is none.
func (ts *tickSpec) next(t time.Time) time.Time {
	n := ts.sched.Next(t)
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// due returns the keep most recent ticks in (after, now], oldest first,
// and whether earlier ticks in that range were left out. It costs about
// keep steps, not one per tick of a long downtime.
func (ts *tickSpec) due(after, now time.Time, keep int) (ticks []time.Time, skipped bool) {
	if ts.every > 0 {
		first := ts.next(after)
		if first.After(now) {
			return nil, false
		}
		n := int64(now.Sub(first)/ts.every) + 1
		k := min(n, int64(keep))
		for i := n - k; i < n; i++ {
			ticks = append(ticks, first.Add(time.Duration(i)*ts.every))
		}
		return ticks, n > k
	}
	// Calendar ticks do not depend on where the search starts: search a
	// window ending at now, growing until it holds keep ticks or reaches
	// after.
	for window := time.Minute; ; window *= 8 {
		from := after
		if now.Sub(after) > window && window < 100*365*24*time.Hour {
			from = now.Add(-window)
		}
		var last []time.Time // the latest keep ticks found so far
		count := 0
		for t := ts.next(from); !t.IsZero() && !t.After(now); t = ts.next(t) {
			count++
			if len(last) == keep {
				copy(last, last[1:])
				last = last[:keep-1]
			}
			last = append(last, t)
		}
		if count >= keep || from.Equal(after) {
			first := ts.next(after)
			return last, count > keep || (!from.Equal(after) && !first.IsZero() && !first.After(from))
		}
	}
}

// between returns the ticks in [from, to), at most limit of them. The
// ticks of an "@every" spec are those of the chain counted from cursor.
func (ts *tickSpec) between(cursor, from, to time.Time, limit int) ([]time.Time, error) {
	var out []time.Time
	add := func(t time.Time) error {
		if len(out) == limit {
			return fmt.Errorf("the range holds more than %d ticks (BackfillMaxTicks): split it", limit)
		}
		out = append(out, t)
		return nil
	}
	if ts.every > 0 {
		base := ts.next(cursor)
		k := ceilDiv(from.Sub(base), ts.every)
		for t := base.Add(time.Duration(k) * ts.every); t.Before(to); t = t.Add(ts.every) {
			if err := add(t); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	for t := ts.next(from.Add(-time.Nanosecond)); !t.IsZero() && t.Before(to); t = ts.next(t) {
		if err := add(t); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ceilDiv is the smallest k with k*d >= x, for d > 0.
func ceilDiv(x, d time.Duration) int64 {
	q := int64(x / d)
	if x%d > 0 {
		q++
	}
	return q
}

// tickID is the workflow ID of a schedule's tick.
func tickID(name string, tick time.Time) string {
	return schedIDPrefix + name + ":" + tick.UTC().Format(time.RFC3339Nano)
}

// parseTickID reads the tick back from a scheduled run's workflow ID: the
// shortest suffix after a colon that is an RFC 3339 time.
func parseTickID(id string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(id, schedIDPrefix)
	if !ok {
		return time.Time{}, false
	}
	for i := len(rest) - 1; i > 0; i-- {
		if rest[i-1] != ':' {
			continue
		}
		if t, err := time.Parse(time.RFC3339Nano, rest[i:]); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}
