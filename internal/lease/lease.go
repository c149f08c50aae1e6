// Package lease keeps this executor's lease: its row in the executors
// table, registered at Launch, renewed by a heartbeat and released at
// Shutdown. Peers take over the runs of an executor whose lease expired.
// It also judges the database's outages for the rest of the engine: when
// this executor was last cut off from the database (its heartbeat failed),
// whether it may therefore judge its peers' leases, and whether the
// sweeper should look for runs an outage left without an execution.
//
// The heartbeat and the fence checks (is this run still ours?) go through
// a pool of the lease's own, so that they never wait for a connection
// behind the application's work: with the application's pool full of
// transaction steps blocked on locks, a heartbeat waiting for one would
// time out every period, the lease would expire, and a peer would take
// over the runs of an executor alive and executing them.
package lease

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/internal/clock"
	"github.com/durable-go/durable/internal/service"
	"github.com/durable-go/durable/internal/sysdb"
	"github.com/durable-go/durable/internal/testsignal"
)

// Conns is how many connections the lease's pool has: one a fence check
// may use, one that stays free for the heartbeat (fence checks take
// turns).
const Conns = 2

// Config configures the lease of one executor.
type Config struct {
	// Pool is the application's pool. Registration runs on it; the
	// lease's own pool is made from a copy of its config, so that it
	// connects the same way (same server or PgBouncer, same hooks and
	// query mode). The service never closes it.
	Pool        *pgxpool.Pool
	Queries     *sysdb.LeaseQueries
	ExecutorID  string
	Incarnation string // this process's
	AppVersion  string
	// LeaseTTL is how long the lease lasts without a heartbeat; the
	// heartbeat renews it every LeaseTTL/3.
	LeaseTTL time.Duration
	Logger   *slog.Logger
	// Clock tells when this executor was cut off and whether it may judge
	// leases again. Defaults to clock.Real.
	Clock clock.Clock
}

// Service is the lease of one executor. Open its pool first; Start and
// Stop run the heartbeat; Close closes the pool.
type Service struct {
	service.Loop
	cfg   Config
	clock clock.Clock

	pool  *pgxpool.Pool // the lease's own connections, from Open to Close
	fence chan struct{} // held by the fence check using its connection

	cutOffAt   atomic.Int64 // unix ns of the last failed heartbeat (or of Launch)
	strayCheck atomic.Bool  // the next sweep looks for stray runs

	signals signals
}

// signals tell the tests what the heartbeat did.
type signals struct {
	Renewed testsignal.Signal[bool]  // a heartbeat went through: whether it renewed the lease
	Failed  testsignal.Signal[error] // a heartbeat failed
}

// New returns the lease of cfg.ExecutorID; it does nothing before Open.
func New(cfg Config) *Service {
	return &Service{cfg: cfg, clock: clock.Or(cfg.Clock), fence: make(chan struct{}, 1)}
}

// Open makes the lease's pool (at Launch). It connects on first use.
func (s *Service) Open() error {
	cfg := s.cfg.Pool.Config() // a copy
	cfg.MaxConns = Conns
	cfg.MinConns = 0
	cfg.MinIdleConns = 0
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return fmt.Errorf("durable: launch: lease pool: %w", err)
	}
	s.pool = p
	return nil
}

// Close closes the lease's pool (at Shutdown, after the heartbeat stopped
// and every run's context ended). Closing a lease never opened does
// nothing.
func (s *Service) Close() {
	if s.pool != nil {
		s.pool.Close()
	}
}

// Register takes this executor's lease, whoever held it, on the
// application's pool. It returns the collations Launch's hint reads.
func (s *Service) Register(ctx context.Context, hostname string, pid int) (sysdb.RegisterExecutorRow, error) {
	return s.cfg.Queries.RegisterExecutor(ctx, s.cfg.Pool, sysdb.RegisterExecutorParams{ExecutorID: s.cfg.ExecutorID,
		Incarnation: s.cfg.Incarnation, AppVersion: s.cfg.AppVersion, Hostname: hostname, PID: pid, LeaseTTL: s.cfg.LeaseTTL})
}

// Renew renews the lease once, on the lease's pool. renewed is false when
// the lease is not this incarnation's any more.
func (s *Service) Renew(ctx context.Context) (renewed bool, err error) {
	return s.cfg.Queries.Heartbeat(ctx, s.pool, sysdb.HeartbeatParams{ExecutorID: s.cfg.ExecutorID,
		Incarnation: s.cfg.Incarnation, LeaseTTL: s.cfg.LeaseTTL})
}

// Release expires the lease at once, so that peers take over this
// executor's pending runs now (at Shutdown, once every run stopped).
func (s *Service) Release(ctx context.Context) error {
	return s.cfg.Queries.ReleaseLease(ctx, s.pool, sysdb.ReleaseLeaseParams{ExecutorID: s.cfg.ExecutorID, Incarnation: s.cfg.Incarnation})
}

// Start starts the heartbeat.
func (s *Service) Start(ctx context.Context) error { return s.StartLoop(ctx, s.heartbeat) }

// heartbeat renews the lease every LeaseTTL/3. After a failure (the
// database is away) it tries again sooner, with backoff, so the lease is
// renewed as soon as the database is back, before peers decide this
// executor died.
func (s *Service) heartbeat(ctx context.Context) {
	period := s.cfg.LeaseTTL / 3
	t := time.NewTimer(period)
	defer t.Stop()
	retry := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		hctx, cancel := context.WithTimeout(ctx, period)
		renewed, err := s.Renew(hctx)
		cancel()
		if err != nil {
			s.CutOff(s.clock.Now())
			s.NoteTrouble()
			retry = min(max(2*retry, 50*time.Millisecond), period, time.Second)
			t.Reset(clock.Jitter(retry, 0.2))
		} else {
			retry = 0
			t.Reset(period)
		}
		switch {
		case err != nil:
			if ctx.Err() == nil {
				s.cfg.Logger.Warn("durable: heartbeat failed", "err", err, "retry_in", retry)
			}
			s.signals.Failed.Signal(err)
		case !renewed:
			// The row is gone or another process took this executor ID.
			s.cfg.Logger.Error("durable: executor lease lost: another process uses this ExecutorID, or the row was deleted; runs in flight here will be fenced",
				"executor_id", s.cfg.ExecutorID)
			s.signals.Renewed.Signal(false)
		default:
			s.signals.Renewed.Signal(true)
		}
	}
}

// FenceCheck runs the ownership check of a fence check on the lease's
// pool, one check at a time, so that the heartbeat always finds a
// connection free.
func (s *Service) FenceCheck(ctx context.Context, p sysdb.OwnershipCheckParams) (sysdb.OwnershipCheckRow, error) {
	select {
	case s.fence <- struct{}{}:
	case <-ctx.Done():
		return sysdb.OwnershipCheckRow{}, ctx.Err()
	}
	defer func() { <-s.fence }()
	return s.cfg.Queries.OwnershipCheck(ctx, s.pool, p)
}

// CutOff records that this executor was cut off from the database at at
// (its heartbeat failed), or could not tell whether it was (at Launch).
func (s *Service) CutOff(at time.Time) { s.cutOffAt.Store(at.UnixNano()) }

// JudgesLeases reports whether this executor may take over the runs of
// peers whose lease expired. An executor that was itself cut off from the
// database waits LeaseTTL/2 after that: in an outage every lease runs out
// at once, and the live peers need a moment to renew theirs (they retry
// within a second) before a lease that expired means a dead executor.
// Without the wait, the first executor back would take over the runs its
// live peers are still executing. A newly launched executor waits too: it
// cannot tell whether the database was just away.
func (s *Service) JudgesLeases() bool {
	return s.clock.Now().Sub(time.Unix(0, s.cutOffAt.Load())) > s.cfg.LeaseTTL/2
}

// NoteTrouble says a database call of a path that makes runs owned by
// this executor failed: a claim or a start may have committed without its
// answer arriving, so the next sweep looks for strays.
func (s *Service) NoteTrouble() { s.strayCheck.Store(true) }

// TakeStrayCheck reports whether the sweep should look for strays, and
// clears the request.
func (s *Service) TakeStrayCheck() bool { return s.strayCheck.Swap(false) }
