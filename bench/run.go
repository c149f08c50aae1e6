package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Options configure one benchmark run.
type Options struct {
	URL           string // server to connect to; its database is only used to (re)create Database
	Database      string // dropped if it exists, then created and used for everything
	Rounds        int
	Blocks        int           // sequential scenarios take turns in this many blocks per round
	N             int           // ops per sequential scenario and round (k=10 workflows: N/5)
	TputTotal     int           // ops per throughput scenario and round
	Concurrency   []int         // goroutine counts of the throughput scenarios
	StatsN        int           // workflows per statement-counting batch
	Warmup        int           // untimed ops before each scenario in every round
	MaxConns      int           // engine pool and raw concurrent pool size
	ScaleIdle     time.Duration // the scale scenario's idle window
	ScaleProcs    []int         // its executor process counts
	ScaleRepeats  int           // its rounds per process count
	Growth        []int         // finished runs in history to measure the hot path at (none: skip)
	GrowthSteps   int           // with Growth: the steps of the long run resumed
	GrowthParked  int           // with Growth: runs parked at once (0: skip)
	Soak          time.Duration // steady load for this long (0: skip)
	SoakRetention time.Duration // with Soak: runs finished longer ago are pruned
	QLatN         int           // queued runs per enqueue-to-start variant and round (0: skip)
	DrainN        int           // workflows per queue drain
	DrainRounds   int           // rounds (the first ones) that also measure a queue drain (0: skip)
	RecoveryN     int           // runs recovered after a SIGKILL, once per run (0: skip)
	Flow          bool          // measure fair sharing, the drain by key and debounce, once per run
	Scale         bool          // measure the drain by 1, 2 and 4 executor processes, once per run
	// DrainProfile, when set, is the path prefix of CPU profiles of this
	// process taken during each timed drain: <prefix>.<drain>.r<round>.prof.
	DrainProfile string
	// Peers in the same run (peers.go).
	DBOS           bool // DBOS Transact Go: sequential, throughput and drain
	River          bool // River: drain (defaults and tuned) and insert-to-start latency
	GroupCommitCmp bool // durable with group commit off at the throughput levels >= 32
	PeerN          int  // DBOS ops per sequential scenario and round (10 steps: PeerN/5)
	PeerTput       int  // DBOS ops per throughput level and round (at most TputTotal)
	PeerDrainN     int  // workflows per DBOS drain
	RiverDrainN    int  // jobs per River drain (default: the durable drain's size)
	RiverLatN      int  // River insert-to-start samples per drain round
	DBOSQLatN      int  // DBOS enqueue-to-start samples per polling setting and drain round (0: skip)
	DBOSRecoveryN  int  // DBOS workflows recovered after a SIGKILL, once per run (0: skip)
	OutDir         string
	DropAfter      bool
	Progress       io.Writer // nil: silent
}

// DefaultOptions are the settings of a default run (about 2 minutes on the
// project's 2-vCPU machine).
func DefaultOptions() Options {
	return Options{
		Database:       "durable_bench",
		Rounds:         5,
		Blocks:         10,
		N:              1000,
		TputTotal:      1000,
		Concurrency:    []int{1, 8, 32, 128},
		StatsN:         500,
		Warmup:         20,
		MaxConns:       40,
		QLatN:          300,
		DrainN:         10000,
		DrainRounds:    3,
		RecoveryN:      10000,
		Flow:           true,
		Scale:          true,
		ScaleIdle:      3 * time.Second,
		ScaleProcs:     []int{1, 2, 4, 8},
		ScaleRepeats:   3,
		GrowthSteps:    10000,
		GrowthParked:   100000,
		SoakRetention:  2 * time.Minute,
		DBOS:           true,
		River:          true,
		GroupCommitCmp: true,
		PeerN:          500,
		PeerTput:       500,
		PeerDrainN:     10000, // equal counts: durable's and River's drains are 10,000 too
		RiverDrainN:    10000,
		RiverLatN:      30,
		DBOSQLatN:      30,
		DBOSRecoveryN:  10000, // as durable's RecoveryN
		OutDir:         "results",
	}
}

func (o *Options) validate() error {
	switch {
	case o.URL == "":
		return errors.New("no database URL")
	case o.Database == "" || strings.ContainsAny(o.Database, `"`):
		return fmt.Errorf("bad database name %q", o.Database)
	case o.Rounds < 1, o.Blocks < 1, o.N < 1, o.TputTotal < 1, o.StatsN < 1, o.Warmup < 0:
		return errors.New("rounds, blocks, n, tput and stats-n must be at least 1, warmup at least 0")
	case len(o.Concurrency) == 0:
		return errors.New("no concurrency levels")
	case o.QLatN < 0, o.DrainN < 1, o.DrainRounds < 0, o.RecoveryN < 0:
		return errors.New("qlat-n, drain-rounds and recovery-n must not be negative, drain-n must be at least 1")
	case o.DrainRounds > o.Rounds:
		return fmt.Errorf("drain-rounds %d exceeds rounds %d", o.DrainRounds, o.Rounds)
	case (o.DrainRounds > 0 || o.RecoveryN > 0) && o.MaxConns < floorDrainConc:
		return fmt.Errorf("the drain and recovery floors use %d connections: maxconns %d is too small", floorDrainConc, o.MaxConns)
	}
	if o.PeerN < 1 || o.PeerTput < 1 || o.PeerDrainN < 1 || o.RiverDrainN < 1 || o.RiverLatN < 0 || o.DBOSQLatN < 0 || o.DBOSRecoveryN < 0 {
		return errors.New("peer-n, peer-tput, peer-drain-n and river-drain-n must be at least 1, river-lat-n, dbos-qlat-n and dbos-recovery-n at least 0")
	}
	if o.DBOS && o.DBOSRecoveryN > 0 && o.MaxConns < floorDrainConc {
		return fmt.Errorf("the DBOS recovery floor uses %d connections: maxconns %d is too small", floorDrainConc, o.MaxConns)
	}
	return nil
}

func (o *Options) nK10() int { return max(1, o.N/5) }

func (o *Options) logf(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

// bench holds the connections and workflows of a run.
type bench struct {
	o     *Options
	conn  *pgx.Conn     // sequential floors and the counting queries
	async *pgx.Conn     // floor A without the flush wait (synchronous_commit off)
	raw   *pgxpool.Pool // concurrent floor
	pool  *pgxpool.Pool // the engine's pool
	eng   *durable.Engine
	steps *durable.Workflow[int, int] // k no-op steps
	txwf  *durable.Workflow[int, int] // k transaction steps of one INSERT each

	// the steps workflow with WorkflowOpts.DeferStepCheckpoints
	deferSteps *durable.Workflow[int, int]

	// floor C (ckptfloor.go): a step's checkpoint statement by hand, fenced
	// and plain
	ckptFenced, ckptPlain opFunc

	// Enqueue-to-start latency (queue.go): eng works queue qlat; client is
	// an engine on its own pool that is never launched and only enqueues.
	qlat       *durable.Queue
	qstart     *durable.Workflow[int, int] // its first line reports time.Now()
	clientPool *pgxpool.Pool
	client     *durable.Engine
	cqlat      *durable.Queue              // client.QueueRef("qlat")
	cqstart    *durable.Workflow[int, int] // qstart registered on the client
	starts     sync.Map                    // run ID -> chan time.Time
	seq        atomic.Int64                // run IDs of the latency scenarios
	// The Enqueue call's own duration, of the last run and of every timed
	// run of the round (local, client): the rest of enqueue-to-start is
	// the wake-up and dispatch.
	lastEnqueue time.Duration
	enqueueCall [2][]time.Duration

	peers *peers // nil until openPeers

	noCheckpoint bool   // CHECKPOINT was refused: quiesce only waits
	drainRound   int    // the round the drain being measured is in (for DrainProfile)
	riverTop     []Stmt // River's statements in its last tuned drain

	stmtsOK   bool   // pg_stat_statements works (statementsAvailable)
	stmtsNote string // "" until checked
}

const (
	insertFloorSQL = "INSERT INTO bench_floor (v) VALUES ($1)"
	insertAppSQL   = "INSERT INTO bench_app (v) VALUES ($1)"
)

// Run performs a whole benchmark run and writes its outputs.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	started := time.Now()
	res := &Result{Format: 1, StartedAt: started.UTC().Format(time.RFC3339), Params: paramsOf(&o)}

	if err := recreateDB(ctx, o.URL, o.Database); err != nil {
		return nil, err
	}
	o.logf("bench: fresh database %q", o.Database)
	b, err := open(ctx, &o)
	if err != nil {
		return nil, err
	}
	defer b.close(o.DropAfter)

	if res.Env, err = collectEnv(ctx, b.conn, o.Database); err != nil {
		return nil, err
	}
	o.logf("bench: PostgreSQL %s, fsync=%s, synchronous_commit=%s, wal_sync_method=%s; %s; %d CPUs (%s)",
		res.Env.PGVersion, res.Env.Fsync, res.Env.SynchronousCommit, res.Env.WALSyncMethod,
		res.Env.GoVersion, res.Env.NumCPU, res.Env.CPUModel)

	o.logf("bench: warm-up")
	warm := o
	warm.N, warm.TputTotal, warm.Blocks, warm.Progress = max(o.Warmup, 10), max(o.Warmup, 64), 1, nil
	warm.QLatN = min(o.QLatN, max(o.Warmup, 10))
	b.o = &warm
	err = b.round(ctx, 0, map[string]float64{})
	b.o = &o
	if err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}

	for r := 0; r < o.Rounds; r++ {
		round := Round{Index: r + 1, Values: map[string]float64{}}
		if err := b.round(ctx, r, round.Values); err != nil {
			return nil, fmt.Errorf("round %d: %w", r+1, err)
		}
		if r < o.DrainRounds {
			// Durable's drains and River's take turns going first, so that
			// neither always inherits what the round's scenarios left.
			riverFirst := r%2 == 1
			if riverFirst {
				if err := b.riverDrains(ctx, r, round.Values); err != nil {
					return nil, fmt.Errorf("round %d: %w", r+1, err)
				}
			}
			if res.DrainTop, err = b.drain(ctx, r, round.Values); err != nil {
				return nil, fmt.Errorf("round %d: queue drain: %w", r+1, err)
			}
			if !riverFirst {
				if err := b.riverDrains(ctx, r, round.Values); err != nil {
					return nil, fmt.Errorf("round %d: %w", r+1, err)
				}
			}
			if err := b.dbosDrains(ctx, r, round.Values); err != nil {
				return nil, fmt.Errorf("round %d: %w", r+1, err)
			}
		}
		derive(round.Values, o.Concurrency)
		o.logf("round %d/%d  per-step overhead %.0f µs = %.2fx floor A; 0-step workflow %.2fx floor A",
			r+1, o.Rounds, round.Values["step_overhead_us"], round.Values["ratio_step_overhead"], round.Values["ratio_wf0"])
		res.Rounds = append(res.Rounds, round)
	}
	res.Median = medians(res.Rounds)
	res.RiverTop = b.riverTop
	var dbosCounts *PeerCounts
	if o.DBOS {
		o.logf("bench: counting DBOS's statements, WAL and write transactions")
		if dbosCounts, err = b.countDBOS(ctx); err != nil {
			return nil, err
		}
	}
	b.stopPeers(ctx)

	if o.RecoveryN > 0 {
		o.logf("bench: recovery of %d runs after a SIGKILL", o.RecoveryN)
		if res.Recovery, err = b.recovery(ctx); err != nil {
			return nil, fmt.Errorf("recovery: %w", err)
		}
	}
	if o.Flow {
		o.logf("bench: flow control (fair sharing, the drain by key, debounce)")
		if res.Flow, err = b.flow(ctx); err != nil {
			return nil, fmt.Errorf("flow control: %w", err)
		}
	}
	if o.Scale {
		o.logf("bench: 1, 2, 4 and 8 executor processes")
		if res.Scale, err = b.scale(ctx); err != nil {
			return nil, fmt.Errorf("scale: %w", err)
		}
	}
	if len(o.Growth) > 0 {
		o.logf("bench: the hot path with %v finished runs in history", o.Growth)
		if res.Growth, err = b.growth(ctx); err != nil {
			return nil, fmt.Errorf("growth: %w", err)
		}
	}
	if o.Soak > 0 {
		o.logf("bench: soak for %v", o.Soak)
		if res.Soak, err = b.soak(ctx); err != nil {
			return nil, fmt.Errorf("soak: %w", err)
		}
	}
	if o.DBOS && o.DBOSRecoveryN > 0 {
		o.logf("bench: DBOS recovery of %d workflows after a SIGKILL", o.DBOSRecoveryN)
		if res.DBOSRecovery, err = b.dbosRecovery(ctx); err != nil {
			return nil, fmt.Errorf("dbos recovery: %w", err)
		}
		if res.Recovery != nil && res.DBOSRecovery.PerS > 0 {
			res.DBOSRecovery.RatioDurableVsDBOS = ptr(res.Recovery.PerS / res.DBOSRecovery.PerS)
		}
	}

	o.logf("bench: counting statements, WAL and write transactions (%d workflows per batch)", o.StatsN)
	if res.Counts, err = b.count(ctx); err != nil {
		return nil, err
	}
	res.Counts.DBOS = dbosCounts

	res.Targets = targets(res)
	res.Peer = peerReference()
	res.FinishedAt = time.Now().UTC().Format(time.RFC3339)
	res.DurationS = time.Since(started).Seconds()
	o.logf("bench: done in %.0fs", res.DurationS)

	if o.OutDir != "" {
		if err := res.write(o.OutDir); err != nil {
			return nil, err
		}
		o.logf("bench: wrote %s and %s", filepath.Join(o.OutDir, "latest.json"), filepath.Join(o.OutDir, "latest.md"))
	}
	return res, nil
}

func recreateDB(ctx context.Context, url, db string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect to DATABASE_URL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	ident := pgx.Identifier{db}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", db, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return fmt.Errorf("create database %s: %w", db, err)
	}
	return nil
}

func dropDB(url, db string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)")
}

func poolConfig(o *Options) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(o.URL)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	cfg.ConnConfig.Database = o.Database
	cfg.MaxConns = int32(o.MaxConns)
	return cfg, nil
}

func open(ctx context.Context, o *Options) (b *bench, err error) {
	b = &bench{o: o}
	defer func() {
		if err != nil {
			b.close(o.DropAfter)
		}
	}()
	ccfg, err := pgx.ParseConfig(o.URL)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	ccfg.Database = o.Database
	if b.conn, err = pgx.ConnectConfig(ctx, ccfg); err != nil {
		return nil, fmt.Errorf("connect to %s: %w", o.Database, err)
	}
	acfg := ccfg.Copy()
	acfg.RuntimeParams["synchronous_commit"] = "off"
	if b.async, err = pgx.ConnectConfig(ctx, acfg); err != nil {
		return nil, fmt.Errorf("connect to %s: %w", o.Database, err)
	}
	for _, t := range []string{"bench_floor", "bench_app", "bench_fq"} {
		if _, err := b.conn.Exec(ctx, "CREATE TABLE "+t+" (id bigserial PRIMARY KEY, v text NOT NULL)"); err != nil {
			return nil, fmt.Errorf("create table %s: %w", t, err)
		}
	}
	pcfg, err := poolConfig(o)
	if err != nil {
		return nil, err
	}
	if b.raw, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return nil, err
	}
	if pcfg, err = poolConfig(o); err != nil {
		return nil, err
	}
	if b.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return nil, err
	}
	b.eng, err = durable.New(b.pool, &durable.Config{
		Schema:     "bench",
		AppVersion: "bench",
		Logger:     discard,
	})
	if err != nil {
		return nil, err
	}
	b.steps = durable.Register(b.eng, "steps", noopSteps, nil)
	b.txwf = durable.Register(b.eng, "txsteps", func(wctx durable.Context, k int) (int, error) {
		for i := 0; i < k; i++ {
			_, err := durable.TxStep(wctx, "insert", func(ctx context.Context, tx pgx.Tx) (bool, error) {
				_, err := tx.Exec(ctx, insertAppSQL, "x")
				return err == nil, err
			}, nil)
			if err != nil {
				return 0, err
			}
		}
		return k, nil
	}, nil)
	b.deferSteps = durable.Register(b.eng, "steps_defer", noopSteps, &durable.WorkflowOpts{DeferStepCheckpoints: true})
	b.qstart = durable.Register(b.eng, "qstart", b.qstartBody, nil)
	b.qlat = durable.RegisterQueue(b.eng, qlatQueue, nil)
	if err := b.eng.Launch(ctx); err != nil {
		b.eng = nil
		return nil, err
	}
	if err := b.createCkptFloor(ctx, "bench"); err != nil {
		return nil, err
	}
	b.ckptFenced, b.ckptPlain = b.ckptFloor(true), b.ckptFloor(false)

	// The client: same database and schema, its own pool, never launched.
	if b.clientPool, err = b.newPool(ctx, clientConns, true); err != nil {
		return nil, err
	}
	if b.client, err = durable.New(b.clientPool, &durable.Config{Schema: "bench", AppVersion: "bench", Logger: discard}); err != nil {
		return nil, err
	}
	b.cqstart = durable.Register(b.client, "qstart", notHere[int, int], nil)
	b.cqlat = b.client.QueueRef(qlatQueue)
	if err := b.openPeers(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// noopSteps is the measured workflow: k no-op steps in a row.
func noopSteps(wctx durable.Context, k int) (int, error) {
	for i := 0; i < k; i++ {
		if _, err := durable.Step(wctx, "s", okStep, nil); err != nil {
			return 0, err
		}
	}
	return k, nil
}

// notHere is the body of a workflow registered on an engine that never
// runs it (a client).
func notHere[P, R any](durable.Context, P) (R, error) {
	var zero R
	return zero, errors.New("bench: a client engine ran a workflow")
}

func (b *bench) close(drop bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b.closePeers(ctx, drop)
	if b.eng != nil {
		if err := b.eng.Shutdown(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "bench: shutdown:", err)
		}
	}
	if b.pool != nil {
		b.pool.Close()
	}
	if b.clientPool != nil {
		b.clientPool.Close()
	}
	if b.raw != nil {
		b.raw.Close()
	}
	for _, c := range []*pgx.Conn{b.conn, b.async} {
		if c != nil {
			_ = c.Close(ctx)
		}
	}
	if drop {
		dropDB(b.o.URL, b.o.Database)
	}
}
