// Package recovery finds the runs that need an executor and gives them
// this one: at Launch, the runs this executor ID left pending in an
// earlier incarnation; then, in the sweeper, runs without a live owner
// (their executor's lease expired, they were committed unowned by
// StartTx, or they were parked and are due) and runs of this executor an
// outage left without an execution (strays). Each run it claims holds a
// recovery slot until its execution here ends.
package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/internal/clock"
	"github.com/durable-go/durable/internal/errs"
	"github.com/durable-go/durable/internal/service"
	"github.com/durable-go/durable/internal/sysdb"
	"github.com/durable-go/durable/internal/testsignal"
)

// Config configures the recovery of one executor. The funcs are the
// engine's: recovery claims runs, the engine executes them.
type Config struct {
	Pool       *pgxpool.Pool // the application's pool
	Queries    *sysdb.RecoveryQueries
	ExecutorID string
	AppVersion string
	// Names returns the workflow names this binary registers (fixed at
	// Launch, before recovery runs).
	Names func() []string
	// Slots is how many claimed runs may execute at once
	// (Config.RecoveryConcurrency).
	Slots int
	// Batch is the most runs one claim takes.
	Batch    int
	LeaseTTL time.Duration
	// PollInterval returns the engine's polling period; the sweeper looks
	// at least every min(LeaseTTL/3, PollInterval()).
	PollInterval func() time.Duration
	Logger       *slog.Logger
	// Clock paces the periodic stray check and the cleanup of dead
	// executors. Defaults to clock.Real.
	Clock clock.Clock

	// Launch executes runs just claimed, each holding a recovery slot
	// that it gives back (GiveSlots) when its execution ends.
	Launch func(ctx context.Context, runs []sysdb.ClaimedRow) error
	// JudgesLeases reports whether the runs of executors whose lease
	// expired may be taken over now (lease.Service.JudgesLeases).
	JudgesLeases func() bool
	// NoteTrouble asks for a stray check (lease.Service.NoteTrouble);
	// TakeStrayCheck takes the request.
	NoteTrouble    func()
	TakeStrayCheck func() bool
	// Executing returns the IDs of the runs executing here; IsExecuting
	// tells whether one run is.
	Executing   func() map[string]bool
	IsExecuting func(id string) bool
	// ReleaseStopped gives back the queue slots of cancelled runs this
	// executor holds and no longer executes (not in executing).
	ReleaseStopped func(ctx context.Context, executing map[string]bool) error
	// Requeue returns the queued runs without a live owner to their
	// queues; with own, also this executor ID's, left by an earlier
	// incarnation.
	Requeue func(ctx context.Context, own bool) error
	// WakeQueue wakes the dispatcher of a queue of this engine, if it has
	// one of that name.
	WakeQueue func(name string)
	// NextWake returns the time until the next parked run is due (nil:
	// none).
	NextWake func(ctx context.Context) (*time.Duration, error)
}

// Service is the recovery of one executor. Its sweeper runs between Start
// and Stop; ClaimOwn and ReportOrphansElsewhere run at Launch, before it.
type Service struct {
	service.Loop
	cfg      Config
	clock    clock.Clock
	slots    slots
	launches launchGate
	kick     chan struct{} // wakes the sweeper

	lastOrphanReport string // the sweeper's, or Launch's before it starts

	signals signals
}

// signals tell the tests what the sweeper did.
type signals struct {
	Swept      testsignal.Signal[Pass] // a sweep pass ended
	SlotsFreed testsignal.Signal[int]  // slots were given back (GiveSlots)
}

// Pass is what one sweep pass did.
type Pass struct {
	Claimed int // runs without a live owner it claimed
	Strays  int // strays it found
}

// New returns the recovery of cfg.ExecutorID, with every slot free.
func New(cfg Config) *Service {
	s := &Service{cfg: cfg, clock: clock.Or(cfg.Clock), kick: make(chan struct{}, 1)}
	s.slots.free = cfg.Slots
	return s
}

// Start starts the sweeper.
func (s *Service) Start(ctx context.Context) error { return s.StartLoop(ctx, s.sweep) }

// Wake makes the sweeper look now: an unowned run was committed, a parked
// one is due, or slots came free.
func (s *Service) Wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// ClaimOwn runs at Launch, before the engine is launched: it hands back
// pending runs of this executor ID that this binary cannot run, and claims
// the others (left by an earlier incarnation) as far as the recovery slots
// allow, handing back the rest unowned for any executor to claim. As no
// run of this incarnation exists yet, every run it finds is an earlier
// one's. The caller launches the runs it claimed, each in a slot.
func (s *Service) ClaimOwn(ctx context.Context) ([]sysdb.ClaimedRow, error) {
	if err := s.cfg.Requeue(ctx, true); err != nil {
		return nil, err
	}
	names := s.cfg.Names()
	released, err := s.cfg.Queries.ReleaseUnrunnable(ctx, s.cfg.Pool, sysdb.ReleaseUnrunnableParams{
		ExecutorID: s.cfg.ExecutorID, AppVersion: s.cfg.AppVersion, Names: names})
	if err != nil {
		return nil, err
	}
	for _, r := range released {
		s.reportUnrunnable(r)
	}
	slots := s.slots.take(s.cfg.Slots)
	all, err := s.claimOwnUpTo(ctx, slots)
	if err != nil {
		s.slots.give(slots)
		return nil, err
	}
	s.slots.give(slots - len(all))
	if len(all) < slots {
		return all, nil
	}
	ids := make([]string, len(all))
	for i, c := range all {
		ids[i] = c.ID
	}
	n, err := s.cfg.Queries.HandBackOwn(ctx, s.cfg.Pool, sysdb.HandBackOwnParams{
		ExecutorID: s.cfg.ExecutorID, AppVersion: s.cfg.AppVersion, Names: names, Claimed: ids})
	if err != nil {
		s.slots.give(len(all))
		return nil, err
	}
	if n > 0 {
		s.cfg.Logger.Info("durable: pending runs of this executor beyond Config.RecoveryConcurrency handed back for any executor to claim",
			"count", n, "resumed_here", len(all))
	}
	return all, nil
}

// claimOwnUpTo claims up to limit pending runs of this executor ID, in
// batches that walk (created_at, id) forward, so a run is claimed once.
func (s *Service) claimOwnUpTo(ctx context.Context, limit int) ([]sysdb.ClaimedRow, error) {
	var all []sysdb.ClaimedRow
	p := sysdb.ClaimOwnParams{ExecutorID: s.cfg.ExecutorID, AppVersion: s.cfg.AppVersion, Names: s.cfg.Names()}
	for len(all) < limit {
		p.Limit = min(s.cfg.Batch, limit-len(all))
		got, err := s.cfg.Queries.ClaimOwn(ctx, s.cfg.Pool, p)
		if err != nil {
			return nil, err
		}
		for _, c := range got {
			all = append(all, c.ClaimedRow)
			if c.Created.After(p.AfterCreated) || (c.Created.Equal(p.AfterCreated) && c.ID > p.AfterID) {
				p.AfterCreated, p.AfterID = c.Created, c.ID
			}
		}
		if len(got) < p.Limit {
			break
		}
	}
	return all, nil
}

func (s *Service) reportUnrunnable(r sysdb.ReleaseUnrunnableRow) {
	switch {
	case r.AppVersion != s.cfg.AppVersion:
		s.cfg.Logger.Warn("durable: pending run belongs to another application version; left for an executor of that version",
			"workflow_id", r.ID, "workflow", r.Name, "run_app_version", r.AppVersion, "app_version", s.cfg.AppVersion)
	default:
		s.cfg.Logger.Error("durable: pending run of a workflow not registered in this binary; left for an executor that registers it",
			"workflow_id", r.ID, "workflow", r.Name, "err", errs.NotRegistered)
	}
}

// ReportOrphansElsewhere logs pending runs without a live owner that this
// executor will not take: another application version, or a workflow name
// this binary does not register. It logs only when the picture changed
// since its last report.
func (s *Service) ReportOrphansElsewhere(ctx context.Context) {
	groups, err := s.cfg.Queries.CountOtherVersions(ctx, s.cfg.Pool, sysdb.CountOtherVersionsParams{
		AppVersion: s.cfg.AppVersion, Names: s.cfg.Names()})
	if err != nil {
		if ctx.Err() == nil { // not the engine stopping
			s.cfg.Logger.Warn("durable: count runs of other versions", "err", err)
		}
		return
	}
	summary := fmt.Sprint(groups)
	if summary == s.lastOrphanReport {
		return
	}
	s.lastOrphanReport = summary
	for _, g := range groups {
		if g.AppVersion != s.cfg.AppVersion {
			s.cfg.Logger.Warn("durable: pending runs wait for an executor of their application version",
				"workflow", g.Name, "run_app_version", g.AppVersion, "count", g.Count)
		} else {
			s.cfg.Logger.Error("durable: pending runs of a workflow not registered in this binary",
				"workflow", g.Name, "count", g.Count, "err", errs.NotRegistered)
		}
	}
}

// ClaimOrphans claims up to limit runs without a live owner and launches
// them, each in a recovery slot: the caller took limit slots (TakeSlots),
// and those not used are given back. It returns how many runs it took.
// Whether it may take the runs of executors whose lease expired
// (Config.JudgesLeases) is decided once it holds a connection: a wait for
// one, the pool busy with the application's work, must not stretch a
// judgement made before it, in which time this executor's heartbeat may
// have failed.
func (s *Service) ClaimOrphans(ctx context.Context, limit int) (int, error) {
	var got []sysdb.ClaimedRow
	conn, err := s.cfg.Pool.Acquire(ctx)
	if err == nil {
		got, err = s.cfg.Queries.ClaimOrphans(ctx, conn, sysdb.ClaimOrphansParams{ExecutorID: s.cfg.ExecutorID,
			AppVersion: s.cfg.AppVersion, Names: s.cfg.Names(), Limit: limit, TakeExpired: s.cfg.JudgesLeases()})
		conn.Release()
	}
	if err != nil {
		s.slots.give(limit)
		return 0, err
	}
	s.slots.give(limit - len(got)) // no wake-up: this is the sweeper
	if len(got) == limit && limit < s.cfg.Batch {
		s.slots.starve() // more may wait for a slot
	}
	if len(got) == 0 {
		return 0, nil
	}
	return len(got), s.cfg.Launch(ctx, got)
}

// sweep takes over runs without a live owner, adopts strays, returns the
// queued runs of dead executors to their queues and reports the runs left
// for other versions (at most once a period: a pass runs at every
// wake-up, and the report reads every run in flight). It wakes on Wake
// and polls every min(LeaseTTL/3, PollInterval) as a safety net, sooner
// when a parked run is due.
func (s *Service) sweep(ctx context.Context) {
	period := min(s.cfg.LeaseTTL/3, s.cfg.PollInterval())
	t := time.NewTimer(period)
	defer t.Stop()
	lastCleanup, lastStrayCheck, lastReport := s.clock.Now(), s.clock.Now(), s.clock.Now()
	for {
		var pass Pass
		for {
			limit := s.slots.take(s.cfg.Batch)
			if limit == 0 {
				break // every recovery slot is in use: a run giving one back wakes us
			}
			n, err := s.ClaimOrphans(ctx, limit)
			pass.Claimed += n
			if err != nil {
				s.cfg.NoteTrouble()
				if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
					s.cfg.Logger.Warn("durable: takeover sweep failed", "err", err)
				}
				break
			}
			if n < limit {
				break
			}
		}
		if now := s.clock.Now(); now.Sub(lastStrayCheck) > strayCheckEvery {
			lastStrayCheck = now
			s.cfg.NoteTrouble()
		}
		n, err := s.adoptStrays(ctx)
		pass.Strays = n
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("durable: resume stray runs", "err", err)
		}
		if err := s.cfg.Requeue(ctx, false); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("durable: requeue runs of dead executors", "err", err)
		}
		if now := s.clock.Now(); now.Sub(lastReport) >= period {
			lastReport = now
			s.ReportOrphansElsewhere(ctx)
		}
		if now := s.clock.Now(); now.Sub(lastCleanup) > 10*time.Minute {
			lastCleanup = now
			if _, err := s.cfg.Queries.DeleteDeadExecutors(ctx, s.cfg.Pool); err != nil && ctx.Err() == nil {
				s.cfg.Logger.Warn("durable: delete dead executors", "err", err)
			}
		}
		s.signals.Swept.Signal(pass)
		// Sleep until the next parked run is due, at most one period.
		wait := period
		if next, err := s.cfg.NextWake(ctx); err == nil && next != nil {
			wait = min(wait, max(*next, time.Millisecond))
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
	}
}
