package durable

import (
	"cmp"
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/durable-go/durable/internal/commit"
	"github.com/durable-go/durable/internal/hooks"
	"github.com/durable-go/durable/internal/lease"
	"github.com/durable-go/durable/internal/maintenance"
	"github.com/durable-go/durable/internal/notify"
	"github.com/durable-go/durable/internal/recovery"
	"github.com/durable-go/durable/internal/schedule"
	"github.com/durable-go/durable/internal/sysdb"
)

// Defaults of [Config].
const (
	SchemaDefault              = "durable"
	AppVersionDefault          = "unversioned"
	LeaseTTLDefault            = 15 * time.Second
	LeaseTTLMin                = 200 * time.Millisecond
	PollIntervalDefault        = 5 * time.Second
	MaxRecoveryAttemptsDefault = 20
	MaxPayloadBytesDefault     = 8 << 20
	RecoveryBatchDefault       = 1000
	RecoveryConcurrencyDefault = 1000
	ParkThresholdDefault       = 30 * time.Second
)

// Config configures an [Engine]. The zero value works.
type Config struct {
	// Schema is the Postgres schema holding the engine's tables. It is one
	// identifier, quoted when used, so any name is safe.
	// Defaults to SchemaDefault ("durable").
	Schema string

	// AppVersion names the version of the workflow code in this binary. An
	// executor only recovers runs started under the same AppVersion, so set
	// it explicitly (a release tag) and change it when workflow code changes
	// in a way that would break recorded runs. Defaults to AppVersionDefault.
	AppVersion string

	// ExecutorID identifies this process among the executors sharing the
	// database. Give each replica a stable ID (a pod or host name) so that a
	// restarted process resumes its own runs at once in Launch; with a
	// generated ID they are taken over by a live executor once the old
	// lease expires. Defaults to the host name plus a random suffix.
	ExecutorID string

	// LeaseTTL is how long an executor's lease lasts without a heartbeat.
	// Runs of an executor whose lease expired are taken over by a live one.
	// Heartbeats happen every LeaseTTL/3. Defaults to LeaseTTLDefault; at
	// least LeaseTTLMin.
	LeaseTTL time.Duration

	// PollInterval is the safety-net period of waits that are normally woken
	// by LISTEN/NOTIFY (results, takeover of unowned runs).
	// Defaults to PollIntervalDefault.
	PollInterval time.Duration

	// MaxRecoveryAttempts is how many times a run may be recovered (its
	// executor died while running it) before it moves to the dead-letter
	// status. A run that Shutdown stopped at a step boundary does not
	// count. A workflow can override it. Defaults to MaxRecoveryAttemptsDefault.
	MaxRecoveryAttempts int

	// RecoveryConcurrency limits how many of the runs this executor claims
	// through recovery execute at once: its own runs resumed at Launch,
	// runs taken over from executors that died, unowned runs committed by
	// StartTx, and parked runs whose wait is over. Each holds one of these
	// slots until its execution here ends (it finishes, parks or stops);
	// the sweeper claims more as slots free up, and at Launch the own runs
	// beyond the limit are handed back unowned, for any executor to
	// claim. It bounds the memory that replaying a large backlog takes;
	// queued runs follow their queue's limits instead.
	// Defaults to RecoveryConcurrencyDefault (1000).
	RecoveryConcurrency int

	// MaxPayloadBytes limits the encoded size of each input and output.
	// Defaults to MaxPayloadBytesDefault (8 MiB).
	MaxPayloadBytes int

	// StepRetry is the retry policy of steps that set none.
	// Defaults to the zero RetryPolicy's defaults (see [RetryPolicy]).
	StepRetry RetryPolicy

	// SkipMigrate makes Launch check the schema version instead of applying
	// migrations; Launch then fails with ErrSchemaOutdated on an old schema.
	// Use it when a DBA applies [MigrationSQL] by hand. Defaults to false.
	SkipMigrate bool

	// Logger receives the engine's logs; logs about a run carry its
	// workflow_id and workflow name, logs about a step also step, step_pos
	// and attempt. [Logger] gives workflow and step code a logger with the
	// same attributes. Defaults to slog.Default().
	Logger *slog.Logger

	// TracerProvider receives the engine's OpenTelemetry spans: one per
	// start, per execution of a run, per executed step and per wait, all of
	// a run's executions in one trace, across recoveries in other processes
	// (see the package doc). The engine never uses the global provider.
	// Defaults to nil: no spans, no allocation, a nil check per hook (an
	// OpenTelemetry no-op provider is treated the same).
	TracerProvider trace.TracerProvider

	// MeterProvider receives the engine's OpenTelemetry metrics: runs
	// started and finished, workflow and step durations, queue depth and
	// wait, recoveries, group-commit batch sizes, parked runs (see
	// docs/metrics.md for the instruments and their attributes).
	// Defaults to OpenTelemetry's global provider (otel.GetMeterProvider),
	// which records nothing until the program sets one; a no-op provider
	// (go.opentelemetry.io/otel/metric/noop) turns metrics off: each hook
	// then costs a nil check.
	MeterProvider metric.MeterProvider

	// PollOnly turns LISTEN/NOTIFY off, for connection poolers that break
	// LISTEN (PgBouncer in transaction mode): the engine neither listens
	// nor sends notifications (a NOTIFY takes a server-wide lock at
	// commit). Waits for results and queue dispatch then poll every
	// PollInterval, so lower it (e.g. 100ms). Without PollOnly, Launch
	// checks that a notification it sends comes back; if none does within
	// 2s, it logs a warning and polls every 100ms (or PollInterval, if
	// shorter) instead. See docs/poolers.md. Defaults to false.
	PollOnly bool

	// ParkThreshold: a wait (Sleep, Recv) longer than this parks the run:
	// its goroutine and memory are released, the run stays as rows, and any
	// executor resumes it by replay when its timer fires or its message
	// arrives. Shorter waits wait in memory. Defaults to ParkThresholdDefault.
	ParkThreshold time.Duration

	// DeferStepCheckpoints lets a plain step ([Step], [Go]) return before
	// its checkpoint is committed. The checkpoint is then written before
	// the run's next durable call (any step, Sleep, Recv, Send, SetEvent,
	// child start), within the run's finish statement when the workflow
	// returns first, or alone 2 ms after the step returned, whichever comes
	// first. A run whose last step is followed by its return saves a round
	// trip and a commit: a one-step workflow is two statements instead of
	// three (bench/README.md says what that is worth).
	//
	// The cost: a process that dies in that window, or an engine stopped
	// in it, runs the step again on resume, as it would had it died during
	// the step (plain steps are
	// at-least-once; see the idempotency keys). Nothing durable the run does
	// after the step can precede its checkpoint, so no later effect can see
	// an output that the resumed run then computes differently; only what
	// workflow code does outside durable calls (a log line) can. Transaction
	// steps, intent steps and the other durable calls are never deferred.
	// Defaults to false: a step returns once its checkpoint is committed.
	// WorkflowOpts.DeferStepCheckpoints turns it on for one workflow.
	DeferStepCheckpoints bool

	// Retention, when set, makes the engine delete the runs that finished
	// longer than Retention ago, with their steps, messages, events and
	// streams (see [Engine.Prune]), every RetentionInterval, in one
	// executor at a time. Defaults to 0: runs are kept until pruned by hand.
	Retention time.Duration

	// RetentionInterval is the period of the retention pass.
	// Defaults to RetentionIntervalDefault (1h).
	RetentionInterval time.Duration
}

var schemaNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]{0,62}$`)

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	out.Schema = cmp.Or(out.Schema, SchemaDefault)
	out.AppVersion = cmp.Or(out.AppVersion, AppVersionDefault)
	if out.ExecutorID == "" {
		host, _ := os.Hostname()
		out.ExecutorID = cmp.Or(host, "executor") + "-" + randomHex(4)
	}
	out.LeaseTTL = cmp.Or(out.LeaseTTL, LeaseTTLDefault)
	out.PollInterval = cmp.Or(out.PollInterval, PollIntervalDefault)
	out.MaxRecoveryAttempts = cmp.Or(out.MaxRecoveryAttempts, MaxRecoveryAttemptsDefault)
	out.RecoveryConcurrency = cmp.Or(out.RecoveryConcurrency, RecoveryConcurrencyDefault)
	out.MaxPayloadBytes = cmp.Or(out.MaxPayloadBytes, MaxPayloadBytesDefault)
	out.ParkThreshold = cmp.Or(out.ParkThreshold, ParkThresholdDefault)
	out.StepRetry = out.StepRetry.withDefaults()
	out.RetentionInterval = cmp.Or(out.RetentionInterval, RetentionIntervalDefault)
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out
}

func (c *Config) validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: Config.%s %s", ErrInvalidArgument, field, fmt.Sprintf(format, args...))
	}
	if err := checkName("Config.AppVersion", c.AppVersion); err != nil {
		return err
	}
	if err := checkName("Config.ExecutorID", c.ExecutorID); err != nil {
		return err
	}
	switch {
	case !schemaNameRE.MatchString(c.Schema):
		return bad("Schema", "%q must be a plain identifier (letters, digits, _ and $, at most 63 bytes, not starting with a digit)", c.Schema)
	case c.LeaseTTL < LeaseTTLMin:
		return bad("LeaseTTL", "%v is below the minimum %v", c.LeaseTTL, LeaseTTLMin)
	case c.PollInterval < 0:
		return bad("PollInterval", "must not be negative")
	case c.MaxRecoveryAttempts < 0:
		return bad("MaxRecoveryAttempts", "must not be negative")
	case c.RecoveryConcurrency < 0:
		return bad("RecoveryConcurrency", "must not be negative")
	case c.MaxPayloadBytes < 0:
		return bad("MaxPayloadBytes", "must not be negative")
	case c.ParkThreshold < 0:
		return bad("ParkThreshold", "must not be negative")
	case c.Retention < 0:
		return bad("Retention", "must not be negative")
	case c.RetentionInterval < 0:
		return bad("RetentionInterval", "must not be negative")
	}
	return c.StepRetry.validate("Config.StepRetry")
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// migrationFS holds the migrations, 001_baseline.sql first. Every install,
// new or old, is made by applying them in order: one code path, the one
// that upgrades production schemas, run by every test. schema.sql (the
// whole current schema, for reading) is not applied; TestSchemaSQL proves
// it is what the migrations build.
//
//go:embed migrations
var migrationFS embed.FS

func migrations() []sysdb.Migration {
	migs, err := sysdb.LoadMigrations(migrationFS, "migrations")
	if err != nil {
		panic("durable: embedded migrations are broken: " + err.Error())
	}
	return migs
}

// SchemaVersion is the schema version this library needs.
func SchemaVersion() int {
	migs := migrations()
	return migs[len(migs)-1].Version
}

// MigrationSQL returns the whole migration script for schema (SchemaDefault
// when empty), for a DBA to review and apply by hand. It is idempotent.
func MigrationSQL(schema string) (string, error) {
	schema = cmp.Or(schema, SchemaDefault)
	if !schemaNameRE.MatchString(schema) {
		return "", fmt.Errorf("%w: schema %q must be a plain identifier", ErrInvalidArgument, schema)
	}
	return sysdb.Script(migrations(), schema), nil
}

// Migrate applies the pending migrations to schema (SchemaDefault when
// empty) through pool. Concurrent calls, from any number of processes, are
// serialised by an advisory lock held by each migration's transaction
// (which also works through a pooler in transaction mode). Launch calls it
// unless Config.SkipMigrate.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	schema = cmp.Or(schema, SchemaDefault)
	if !schemaNameRE.MatchString(schema) {
		return fmt.Errorf("%w: schema %q must be a plain identifier", ErrInvalidArgument, schema)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("durable: migrate: %w", err)
	}
	defer conn.Release()
	if _, err := sysdb.Migrate(ctx, conn.Conn(), migrations(), schema); err != nil {
		return fmt.Errorf("durable: migrate schema %q: %w", schema, err)
	}
	return nil
}

// Engine runs workflows. Make one with [New], register workflows with
// [Register], then call [Engine.Launch]. It is safe for concurrent use.
type Engine struct {
	pool        *pgxpool.Pool
	cfg         Config
	knobs       hooks.Knobs // test and measurement knobs
	clock       engineClock // the system clock, or a test's (clock.go)
	q           *sysdb.Queries
	qq          *sysdb.QueueQueries
	pq          *sysdb.PartitionQueries
	bq          *sysdb.BatchQueries
	dq          *sysdb.DebounceQueries
	wq          *sysdb.WaitQueries
	sq          *sysdb.StreamQueries
	cq          *sysdb.ControlQueries
	iq          *sysdb.InspectQueries
	lq          *sysdb.LeaseQueries
	rcq         *sysdb.RecoveryQueries
	aq          *sysdb.AttemptQueries
	tgq         *sysdb.TagQueries
	log         *slog.Logger
	tr          tracer  // the engine's spans
	met         *meters // the engine's metrics; nil: off (metrics.go)
	incarnation string

	mu       sync.Mutex
	defs     map[string]*wfDef
	names    []string // registered names, sorted; fixed at Launch
	state    engineState
	stopping chan struct{} // closed when Shutdown begins

	hardCtx    context.Context // parent of every run's context
	hardCancel context.CancelCauseFunc
	runner     *runner                // executes runs (runner.go)
	lease      *lease.Service         // the lease, its heartbeat and connections, the outage judgement (lease.go)
	recov      *recovery.Service      // the sweeper and the recovery slots (recovery.go)
	retention  *maintenance.Retention // the retention pass (retention.go)

	hub       *notify.Hub[*outcome]
	commit    *commit.Writer
	stepDelay time.Duration // longest wait of a deferred step checkpoint (pending.go)

	queues *queueSet // the queues worked here, their dispatcher (queue_set.go)

	sched    *schedule.Service // cron schedules (schedule.go, internal/schedule)
	streamw  streamService     // stream entries (internal/stream)
	listener *listener         // notifications and the polling period (listen.go)
}

type engineState int

const (
	stateNew engineState = iota
	stateLaunched
	stateStopping
	stateStopped
)

// New returns an engine that uses pool for all its work. The caller owns the
// pool: the engine never closes it. cfg may be nil.
func New(pool *pgxpool.Pool, cfg *Config) (*Engine, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: New needs a *pgxpool.Pool", ErrInvalidArgument)
	}
	knobs := hooks.Take(cfg)
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	hardCtx, hardCancel := context.WithCancelCause(context.Background())
	q := sysdb.New(c.Schema, !c.PollOnly)
	e := &Engine{
		pool:        pool,
		cfg:         c,
		knobs:       knobs,
		clock:       newEngineClock(knobs),
		q:           q,
		qq:          sysdb.NewQueueQueries(c.Schema, q.NotifyTo),
		pq:          sysdb.NewPartitionQueries(c.Schema),
		bq:          sysdb.NewBatchQueries(c.Schema, q.NotifyTo),
		dq:          sysdb.NewDebounceQueries(c.Schema, q.NotifyTo),
		wq:          sysdb.NewWaitQueries(c.Schema, q.NotifyTo),
		sq:          sysdb.NewStreamQueries(c.Schema, q.NotifyTo),
		cq:          sysdb.NewControlQueries(c.Schema, q.NotifyTo),
		iq:          sysdb.NewInspectQueries(c.Schema),
		lq:          sysdb.NewLeaseQueries(c.Schema),
		rcq:         sysdb.NewRecoveryQueries(c.Schema, q.NotifyTo),
		aq:          sysdb.NewAttemptQueries(c.Schema),
		tgq:         sysdb.NewTagQueries(c.Schema),
		log:         c.Logger.With("durable.executor", c.ExecutorID),
		incarnation: randomHex(8),
		defs:        map[string]*wfDef{},
		stopping:    make(chan struct{}),
		hardCtx:     hardCtx,
		hardCancel:  hardCancel,
		hub:         notify.NewHub[*outcome](),
	}
	e.listener = newListener(e) // first: the services below take its polling period
	e.queues = newQueueSet(e)
	e.runner = newRunner(e)
	e.lease = newLease(e)
	e.recov = newRecovery(e)
	e.retention = newRetention(e)
	e.tr = tracer{t: newTracer(c.TracerProvider), appVersion: c.AppVersion, executorID: c.ExecutorID}
	e.met = newMeters(c.MeterProvider, e)
	e.commit = newCommitWriter(e)
	e.stepDelay = stepFlushDelay
	e.streamw = newStreamWriter(e)
	e.sched = newScheduler(e)
	return e, nil
}

// ExecutorID returns this engine's executor ID.
func (e *Engine) ExecutorID() string { return e.cfg.ExecutorID }

// Schema returns the Postgres schema holding the engine's tables.
func (e *Engine) Schema() string { return e.cfg.Schema }

// AppVersion returns the configured application version.
func (e *Engine) AppVersion() string { return e.cfg.AppVersion }

// Launch checks the database (reachable, schema migrated, LISTEN delivering
// notifications unless Config.PollOnly), registers this executor's lease,
// resumes this executor's pending runs and starts the background services
// (notifications, heartbeats, takeover of runs whose executor died).
// Register every workflow before Launch. A database that cannot be reached
// yet is waited for, with backoff, until ctx ends; an error that waiting
// cannot fix (a bad password, missing privileges) fails Launch at once.
func (e *Engine) Launch(ctx context.Context) error {
	e.mu.Lock()
	if e.state != stateNew {
		e.mu.Unlock()
		return errors.New("durable: Launch called twice")
	}
	e.names = make([]string, 0, len(e.defs))
	for name := range e.defs {
		e.names = append(e.names, name)
	}
	sort.Strings(e.names)
	e.mu.Unlock()
	e.queues.dispatcher = e.queues.newDispatcher()

	if err := awaitDatabase(ctx, e.pool, e.log); err != nil { // boot.go
		return err
	}
	if err := e.lease.Open(); err != nil {
		return err
	}
	// The LISTEN connection opens while the schema is checked and the
	// executor registered (a new connection is the slowest part of a
	// launch); recovery below waits for both.
	lctx, cancelListen := context.WithCancel(ctx)
	defer cancelListen()
	listening := e.listener.start(lctx)
	fail := func(err error) error {
		cancelListen()
		_ = e.listener.loop.Stop(context.Background())
		e.lease.Close()
		return err
	}
	if err := e.prepareLaunch(ctx); err != nil {
		return fail(err)
	}
	if err := <-listening; errors.Is(err, errDeafListen) {
		e.listener.pollInstead()
		// The check waited listenProbeTimeout, maybe longer than the lease
		// registered meanwhile: renew it before this executor claims runs.
		if _, err := e.lease.Renew(ctx); err != nil {
			return fail(fmt.Errorf("durable: launch: renew lease: %w", err))
		}
	} else if err != nil {
		return fail(err)
	}
	// A new executor cannot tell whether the database was just away:
	// it gives peers the same time to renew their leases (judgesLeases).
	e.lease.CutOff(time.Now())
	// This executor's own runs are claimed before it is launched: no run
	// of this incarnation exists yet to be mistaken for an earlier one's.
	own, err := e.recov.ClaimOwn(ctx)
	if err != nil {
		return fail(fmt.Errorf("durable: launch: recovery: %w", err))
	}
	e.met.recovered(own, recoveryRestart)
	if err := e.streamw.Start(ctx); err != nil { // before any run executes
		return fail(err)
	}
	e.mu.Lock()
	e.state = stateLaunched
	e.mu.Unlock()
	if err := e.runner.startClaimed(ctx, own, nil); err != nil {
		// Those not started stay ours and pending: the sweeper resumes them.
		e.log.Warn("durable: launch: resume runs", "err", err)
	}
	e.recov.ReportOrphansElsewhere(ctx)
	_ = e.lease.Start(ctx) // the heartbeat; fails only when started twice
	_ = e.recov.Start(ctx) // the sweeper
	_ = e.queues.dispatcher.Start(ctx)
	// The declared schedules are stored, the ticks due now started, and
	// the loop started if this binary declares any schedule.
	if err := e.sched.Start(e.hardCtx); err != nil {
		e.log.Warn("durable: start schedules", "err", err)
	}
	if e.cfg.Retention > 0 {
		_ = e.retention.Start(ctx)
	}
	e.log.Info("durable: engine launched", "app_version", e.cfg.AppVersion, "schema", e.cfg.Schema, "workflows", len(e.names), "queues", len(e.queues.byName))
	return nil
}

// prepareLaunch brings the schema up to date (or checks it is, with
// SkipMigrate), registers this executor and declares its queues.
func (e *Engine) prepareLaunch(ctx context.Context) error {
	if e.cfg.SkipMigrate {
		conn, err := e.pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("durable: launch: %w", err)
		}
		missing, err := sysdb.Missing(ctx, conn.Conn(), migrations(), e.cfg.Schema)
		conn.Release()
		if err != nil {
			return fmt.Errorf("durable: launch: %w", err)
		}
		if len(missing) > 0 {
			return fmt.Errorf("%w: schema %q lacks migrations %v that this library needs: apply MigrationSQL or unset Config.SkipMigrate",
				ErrSchemaOutdated, e.cfg.Schema, missing)
		}
	} else if err := Migrate(ctx, e.pool, e.cfg.Schema); err != nil {
		return err
	}
	host, _ := os.Hostname()
	reg, err := e.lease.Register(ctx, host, os.Getpid())
	if err != nil {
		return fmt.Errorf("durable: launch: register executor %q: %w", e.cfg.ExecutorID, err)
	}
	hintIDCollation(e.log, e.cfg.Schema, reg.IDCollation, reg.DBCollate, reg.DBProvider)

	if err := e.queues.declare(ctx); err != nil {
		return fmt.Errorf("durable: launch: %w", err)
	}
	return nil
}

// hintIDCollation tells the operator of an install made before migration
// 015, in a database whose default collation is a language's, that its run
// IDs and keys still compare in that collation, which costs the server
// 20-40% more per run than C, and how to change it. column is the ID
// column's collation, dbCollate and provider the database's default (as
// RegisterExecutor returns them; provider is nil before Postgres 15).
func hintIDCollation(log *slog.Logger, schema, column, dbCollate string, provider *string) {
	cDefault := (provider == nil || *provider == "c") && (dbCollate == "C" || dbCollate == "POSIX")
	if column != "default" || cDefault {
		return
	}
	log.Info(`durable: run IDs and keys compare in the database's default collation, not "C"; `+
		`each run's writes cost the server 20-40% more: apply the ALTER TABLE statements of migration 015 `+
		`(015_identifiers_collate_c.sql) and the same change of workflows_created.run_id (migration 026) `+
		`in a maintenance window, after dropping the views of migration 018 `+
		`(018_views_v1.sql), which it then creates again`, "schema", schema, "datcollate", dbCollate)
}

// Shutdown stops the engine. New starts fail with [ErrShutdown]; running
// workflows finish the step they are in and stop at the next step boundary,
// where they are handed back: any executor of the same AppVersion (this one
// after a restart, or a live peer) resumes them at once, and the stop does
// not count as a recovery attempt. When every run has stopped, the lease is
// released. If ctx ends first, step contexts are cancelled and Shutdown
// returns ctx's error; the runs cut short stay with this executor as after a
// crash, and the lease expires on its own. Shutdown never closes the pool.
func (e *Engine) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	switch e.state {
	case stateNew:
		e.state = stateStopped
		e.mu.Unlock()
		return nil
	case stateStopping, stateStopped:
		e.mu.Unlock()
		return nil
	}
	e.state = stateStopping
	close(e.stopping)
	e.mu.Unlock()

	// A service's Stop waits for it to end, whatever ctx says.
	wait := context.WithoutCancel(ctx)
	_ = e.recov.Stop(wait)
	_ = e.retention.Stop(wait)
	_ = e.sched.Stop(context.Background())
	_ = e.queues.dispatcher.Stop(context.Background()) // no pass may launch runs past this point
	err := e.runner.stop(ctx)
	_ = e.lease.Stop(wait)
	if err == nil {
		// Every run stopped: let peers take over our pending runs now.
		if rerr := e.lease.Release(ctx); rerr != nil {
			e.log.Warn("durable: shutdown: release lease", "err", rerr)
		}
	}
	_ = e.listener.loop.Stop(context.Background())
	_ = e.streamw.Stop(ctx) // after the runs: they flush their entries
	e.hardCancel(ErrShutdown)
	e.lease.Close()
	e.met.close()
	e.mu.Lock()
	e.state = stateStopped
	e.mu.Unlock()
	return err
}

func (e *Engine) isStopping() bool {
	select {
	case <-e.stopping:
		return true
	default:
		return false
	}
}

// canStart reports whether new runs may start.
func (e *Engine) canStart() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch e.state {
	case stateNew:
		return ErrNotLaunched
	case stateLaunched:
		return nil
	}
	return ErrShutdown
}
