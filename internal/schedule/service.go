// Package schedule fires the ticks of the cron schedules declared in this
// binary. Every executor that declares a schedule evaluates it from its
// row in the schedules table, with no leader: the workflow ID of a tick
// is the same on every executor, so the first insert of its run wins, and
// every change of the row is a compare-and-set on its version.
package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/durable-go/durable/internal/clock"
	"github.com/durable-go/durable/internal/errs"
	"github.com/durable-go/durable/internal/service"
	"github.com/durable-go/durable/internal/sysdb"
	"github.com/durable-go/durable/internal/testsignal"
)

// LaunchTimeoutDefault is the default of Config.LaunchTimeout.
const LaunchTimeoutDefault = 10 * time.Second

// Config is what the service needs from the engine.
type Config struct {
	// Queries are the schedule statements, run on DB.
	Queries *sysdb.ScheduleQueries
	DB      sysdb.DBTX
	// Clock tells the time of the ticks. Defaults to clock.Real.
	Clock clock.Clock
	// Log receives the reports of the service. Defaults to slog.Default().
	Log *slog.Logger
	// PollInterval is the longest sleep between two passes, so changes
	// made by other executors are seen.
	PollInterval func() time.Duration
	// LaunchTimeout bounds the first pass, run by Start (storing the
	// declared schedules, starting the ticks due at boot); past it the
	// loop takes over. Defaults to LaunchTimeoutDefault.
	LaunchTimeout time.Duration

	// CanStart returns nil while new runs may start, or why not.
	CanStart func() error
	// Start starts a run of workflow under id with input in this process;
	// created is false when a run with that ID exists already. An error
	// matching errs.WorkflowConflict says the ID belongs to a run of
	// another workflow.
	// tags are the run's tags, encoded (nil: none).
	Start func(ctx context.Context, workflow, id string, input, tags []byte) (created bool, err error)
	// Enqueue is Start through queue.
	Enqueue func(ctx context.Context, workflow, queue, id string, input, tags []byte) (created bool, err error)
	// Registered reports whether workflow is registered in this binary.
	Registered func(workflow string) bool
}

// Def is a schedule declared in this binary.
type Def struct {
	Name     string
	Workflow string // the name of the workflow it runs
	Spec     string // as declared
	Location string // zone name the declared spec is read in
	CatchUp  int
	// Input makes the input of the run of a tick, given in Location.
	Input func(tick time.Time) ([]byte, error)
	// Queue is the queue the scheduled runs go through; "": they start
	// in the executor that fires the tick.
	Queue string
	// Tags are the tags of every run it starts, encoded (nil: none).
	Tags []byte
}

// signals are the test signals of the service.
type signals struct {
	// PassDone: a pass over the stored schedules ended; the value is how
	// long the loop sleeps before the next one.
	PassDone testsignal.Signal[time.Duration]
	// TickFired: the cursor of a schedule moved past a tick; the value is
	// the tick's workflow ID.
	TickFired testsignal.Signal[string]
}

// Service fires the ticks of the schedules declared in this binary and
// makes the changes asked for at run time. Declare the schedules, then
// Start it; Stop ends its loop.
type Service struct {
	service.Loop
	cfg     Config
	clock   clock.Clock
	kick    chan struct{} // wakes the loop after a change made here
	specs   specCache
	reports reports
	signals signals

	mu       sync.Mutex
	declared map[string]*Def
	upserted bool // the declared schedules are stored
}

// New returns a service with no schedule declared.
func New(cfg Config) *Service {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.LaunchTimeout <= 0 {
		cfg.LaunchTimeout = LaunchTimeoutDefault
	}
	return &Service{
		cfg:      cfg,
		clock:    clock.Or(cfg.Clock),
		kick:     make(chan struct{}, 1),
		declared: map[string]*Def{},
	}
}

// Declare adds d to the schedules this binary fires; it returns false,
// and changes nothing, if a schedule of that name is declared already.
func (s *Service) Declare(d *Def) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.declared[d.Name]; dup {
		return false
	}
	s.declared[d.Name] = d
	return true
}

// Declared reports whether this binary declares schedule name.
func (s *Service) Declared(name string) bool { return s.def(name) != nil }

// Start stores the declared schedules, starts the ticks due now and, if
// this binary declares any schedule, starts the loop. ctx bounds the
// first pass (with Config.LaunchTimeout); its values are kept for the
// loop, its end is not.
func (s *Service) Start(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, s.cfg.LaunchTimeout)
	wait := s.pass(pctx)
	cancel()
	if len(s.names()) == 0 {
		return nil
	}
	return s.StartLoop(ctx, func(ctx context.Context) { s.loop(ctx, wait) })
}

// Wake makes the loop pass at once: a schedule changed, or a manual tick
// was asked for.
func (s *Service) Wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *Service) now() time.Time { return s.clock.Now() }

// cursorNow is the clock in whole seconds, the start of a count of ticks.
func (s *Service) cursorNow() time.Time { return s.now().UTC().Truncate(time.Second) }

func (s *Service) def(name string) *Def {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.declared[name]
}

func (s *Service) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.declared))
	for n := range s.declared {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// loop sleeps until the next tick due, a change made in this process, or
// the poll interval (changes made by other executors), then fires what is
// due.
func (s *Service) loop(ctx context.Context, wait time.Duration) {
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

// pass evaluates every stored schedule once, starts the ticks due, and
// returns how long to sleep.
func (s *Service) pass(ctx context.Context) (wait time.Duration) {
	wait = s.cfg.PollInterval()
	defer func() { s.signals.PassDone.Signal(wait) }()
	log := s.cfg.Log
	if err := s.upsertDeclared(ctx); err != nil {
		if ctx.Err() == nil {
			log.Warn("durable: store declared schedules", "err", err)
		}
		return wait
	}
	rows, err := s.cfg.Queries.List(ctx, s.cfg.DB)
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("durable: read schedules", "err", err)
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
		if row.Workflow != d.Workflow {
			s.reports.once(row.Name, "workflow", func() {
				log.Error("durable: schedule runs another workflow in the database than in this binary (a deploy in progress?); this executor does not fire it",
					"schedule", row.Name, "workflow", row.Workflow, "declared_workflow", d.Workflow)
			})
			continue
		}
		s.fireTriggers(ctx, d, row)
		if row.Paused {
			continue
		}
		ts, err := s.specs.spec(row.Spec, row.Location)
		if err != nil {
			s.reports.once(row.Name, "spec:"+row.Spec+"\x00"+row.Location, func() {
				log.Error("durable: schedule has an invalid stored spec; fix it with SetScheduleSpec", "schedule", row.Name, "err", err)
			})
			continue
		}
		next, err := s.fire(ctx, d, row, ts)
		switch {
		case errors.Is(err, errChanged):
			wait = 0
		case err != nil:
			if ctx.Err() == nil && !errors.Is(err, errs.Shutdown) {
				log.Warn("durable: schedule tick not started; retrying", "schedule", row.Name, "err", err)
			}
		case !next.IsZero():
			wait = min(wait, next.Sub(s.now()))
		}
	}
	for _, name := range s.names() {
		if !stored[name] {
			s.reports.once(name, "deleted", func() {
				log.Warn("durable: schedule declared in this binary was deleted from the database; it is stored again at the next Launch",
					"schedule", name)
			})
		}
	}
	return max(wait, 0)
}

// reports remembers the problems of schedules already logged, so each is
// logged once per process.
type reports struct {
	mu   sync.Mutex
	seen map[string]bool // by schedule and kind
}

// once runs log the first time problem kind of schedule name is met.
func (r *reports) once(name, kind string, log func()) {
	key := name + "\x00" + kind
	r.mu.Lock()
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	seen := r.seen[key]
	r.seen[key] = true
	r.mu.Unlock()
	if !seen {
		log()
	}
}

func (s *Service) reportUndeclared(row *sysdb.ScheduleRow) {
	s.reports.once(row.Name, "undeclared", func() {
		if !s.cfg.Registered(row.Workflow) {
			s.cfg.Log.Error("durable: schedule stored by another binary runs a workflow not registered here; this executor does not fire it",
				"schedule", row.Name, "workflow", row.Workflow, "err", errs.NotRegistered)
			return
		}
		s.cfg.Log.Error("durable: schedule stored by another binary is not declared here; this executor does not fire it",
			"schedule", row.Name, "workflow", row.Workflow)
	})
}

// upsertDeclared stores the schedules declared in this binary, once.
func (s *Service) upsertDeclared(ctx context.Context) error {
	s.mu.Lock()
	done := s.upserted
	defs := make([]*Def, 0, len(s.declared))
	for _, d := range s.declared {
		defs = append(defs, d)
	}
	s.mu.Unlock()
	if done {
		return nil
	}
	sort.Slice(defs, func(i, j int) bool { return defs[i].Name < defs[j].Name })
	cursor := s.cursorNow()
	for _, d := range defs {
		ts, err := s.specs.spec(d.Spec, d.Location)
		if err != nil {
			return err // checked at declaration; unreachable
		}
		if err := s.cfg.Queries.Upsert(ctx, s.cfg.DB, sysdb.ScheduleUpsertParams{Name: d.Name, Workflow: d.Workflow, Spec: d.Spec,
			Location: d.Location, CatchUp: d.CatchUp, Cursor: cursor, NextTick: ts.next(cursor)}); err != nil {
			return fmt.Errorf("schedule %q: %w", d.Name, err)
		}
	}
	s.mu.Lock()
	s.upserted = true
	s.mu.Unlock()
	return nil
}
