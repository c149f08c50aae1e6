// Package dispatch starts the runs of the queues that an executor works,
// as the queues' limits allow, and returns the queued runs of dead
// executors to their queues.
//
// Each queue has its own dispatch loop. One pass is one transaction: it
// locks the queue's row, which serialises the passes of that queue across
// all executors, so the counts it reads stay true until it commits; it
// counts what the limits depend on and claims at most what each leaves.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/internal/errs"
	"github.com/durable-go/durable/internal/service"
	"github.com/durable-go/durable/internal/sysdb"
	"github.com/durable-go/durable/internal/testsignal"
)

// BatchMax bounds how many runs one pass claims.
const BatchMax = 1000

// batchFirst is how many runs a pass claims after an idle spell. Each pass
// that takes all it asked for doubles the next one, up to BatchMax: a
// backlog is claimed in big batches, but its first runs start after a
// claim of a few runs instead of one of a thousand.
const batchFirst = 64

// Config is what a Dispatcher needs from the engine.
type Config struct {
	Pool       *pgxpool.Pool
	Queries    *sysdb.QueueQueries
	Partitions *sysdb.PartitionQueries
	// ExecutorID and AppVersion identify this executor; a claimed run
	// takes both.
	ExecutorID string
	AppVersion string
	// Workflows are the names of the workflows this executor runs: it
	// claims only their runs.
	Workflows []string
	// Queues are the queues this executor works, one dispatch loop each.
	Queues []*Queue
	// PollInterval returns how long a loop waits for a wake-up before it
	// looks again; it may change while the Dispatcher runs.
	PollInterval func() time.Duration
	// Launch executes the runs just claimed from q. They hold q's slots
	// here until q.Release gives them back, also for the runs it does not
	// start. Its error is logged.
	Launch func(ctx context.Context, q *Queue, claimed []sysdb.ClaimedRow) error
	// Launching marks a pass in flight, from before its claim until its
	// runs are launched; it returns the func that ends the mark. Defaults
	// to no marking.
	Launching func() (done func())
	// DBTrouble is called after a pass failed: a claim may have committed
	// without its answer arriving. Defaults to nothing.
	DBTrouble func()
	// JudgesLeases reports whether this executor may take the runs of
	// executors whose lease expired (Requeue). Defaults to never.
	JudgesLeases func() bool
	// Requeued, if not nil, is told how many runs of a dead executor
	// Requeue returned to their queue, per queue. Defaults to nil.
	Requeued func(queue string, n int)
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Dispatcher runs the dispatch loop of every queue this executor works.
// One service for all the queues: they start and stop together with the
// engine, and their loops share the engine's callbacks.
type Dispatcher struct {
	service.Loop
	cfg     Config
	byName  map[string]*Queue
	signals Signals

	// handOns is held (read) by each hand-on (HandOn) from its claim
	// until its runs are launched, and (write) by Stop to set stopped: no
	// hand-on launches runs once Stop returned, as no pass does. Stop
	// first cancels handOnCtx, which ends the statements of the hand-ons
	// in flight (their finishes are then written without one), so it
	// never waits for a statement stuck in an outage.
	handOns       sync.RWMutex
	stopped       bool // not started, or stopped: HandOn claims nothing
	handOnCtx     context.Context
	cancelHandOns context.CancelFunc
}

// Signals tell tests what a Dispatcher did.
type Signals struct {
	Pass testsignal.Signal[Pass] // a pass ended
}

// Pass is what a pass of a queue's loop did.
type Pass struct {
	Queue   string
	Claimed int           // runs claimed and handed to Launch
	More    bool          // more may be ready: the next pass follows at once
	Wait    time.Duration // else how long the loop waits for a wake-up
	Err     error         // the pass failed
}

// New returns a Dispatcher of the queues of cfg.
func New(cfg Config) *Dispatcher {
	if cfg.Launching == nil {
		cfg.Launching = func() func() { return func() {} }
	}
	if cfg.DBTrouble == nil {
		cfg.DBTrouble = func() {}
	}
	if cfg.JudgesLeases == nil {
		cfg.JudgesLeases = func() bool { return false }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	d := &Dispatcher{cfg: cfg, byName: make(map[string]*Queue, len(cfg.Queues)), stopped: true}
	for _, q := range cfg.Queues {
		d.byName[q.name] = q
	}
	return d
}

// Start starts the dispatch loop of every queue. Each makes a pass at
// once, then whenever its queue is woken or its wait is over.
func (d *Dispatcher) Start(ctx context.Context) error {
	d.handOns.Lock()
	d.stopped = false
	d.handOnCtx, d.cancelHandOns = context.WithCancel(context.Background())
	d.handOns.Unlock()
	return d.StartLoop(ctx, func(ctx context.Context) {
		var wg sync.WaitGroup
		for _, q := range d.cfg.Queues {
			wg.Go(func() { d.loop(ctx, q) })
		}
		wg.Wait()
	})
}

// Stop stops every loop and waits for them to end: a pass in flight is
// cancelled, and its claimed runs, if any, are handed to Launch first. A
// hand-on in flight (HandOn) is cancelled, or launches its runs before
// Stop returns; later ones claim nothing.
func (d *Dispatcher) Stop(ctx context.Context) error {
	d.handOns.RLock()
	if d.cancelHandOns != nil {
		d.cancelHandOns()
	}
	d.handOns.RUnlock()
	err := d.Loop.Stop(ctx)
	d.handOns.Lock()
	d.stopped = true
	d.handOns.Unlock()
	return err
}

// Requeue returns the queued runs without a live owner to their queues
// (with own, also this executor's runs left by its previous incarnation)
// and wakes the dispatchers of those worked here. The runs of executors
// whose lease expired go back only when JudgesLeases says so, asked once
// this holds a connection: a wait for one (the pool busy with the
// application's work) must not stretch a judgement made before it.
func (d *Dispatcher) Requeue(ctx context.Context, own bool) error {
	conn, err := d.cfg.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	back, err := d.cfg.Queries.Requeue(ctx, conn, sysdb.RequeueParams{ExecutorID: d.cfg.ExecutorID, Own: own, ExpiredLeases: d.cfg.JudgesLeases()})
	if err != nil {
		return err
	}
	for _, b := range back {
		if b.Requeued > 0 { // else only slots of cancelled runs came back
			d.cfg.Logger.Info("durable: runs of a dead executor returned to their queue", "queue", b.Queue, "count", b.Requeued)
			if d.cfg.Requeued != nil {
				d.cfg.Requeued(b.Queue, int(b.Requeued))
			}
		}
		if q := d.byName[b.Queue]; q != nil {
			q.Wake()
		}
	}
	return nil
}

// loop starts q's runs in this executor as its limits allow, until ctx
// ends.
func (d *Dispatcher) loop(ctx context.Context, q *Queue) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	batch := batchFirst
	for {
		wait, more := d.pass(ctx, q, batch)
		if ctx.Err() != nil {
			return
		}
		if more {
			batch = min(2*batch, BatchMax)
			continue
		}
		batch = batchFirst
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-q.kick:
		case <-timer.C:
		}
	}
}

// pass runs one dispatch transaction for q, claiming at most batch runs.
// It returns how long to wait before the next one when nothing wakes the
// loop, and whether more work may be ready right away.
func (d *Dispatcher) pass(ctx context.Context, q *Queue, batch int) (wait time.Duration, more bool) {
	defer d.cfg.Launching()()
	poll := d.cfg.PollInterval()
	running := q.Running()
	var got []sysdb.ClaimedRow
	wait = poll
	claimLimit := 0
	keyedMore := false
	err := pgx.BeginFunc(ctx, d.cfg.Pool, func(tx pgx.Tx) error {
		// The queue's row and the counts come in one round trip; the
		// counts are read once the row's lock is held (see LockAndCount).
		// A paused or full queue discards them: pipelined, they cost it
		// no round trip, only their execution.
		row, c, err := d.cfg.Queries.LockAndCount(ctx, tx, q.name)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %q was deleted", errs.QueueNotFound, q.name)
		}
		if err != nil {
			return err
		}
		s := row.Settings
		q.handsOn.Store(!row.Paused && (s.GlobalConcurrency > 0 || s.WorkerConcurrency > 0) && s.RateLimit == 0 &&
			!s.FairShare && s.PartitionConcurrency == 0 && s.PartitionRateLimit == 0 && !row.PartitionLimits)
		if row.Paused {
			return nil
		}
		n := batch
		if s.WorkerConcurrency > 0 {
			n = min(n, s.WorkerConcurrency-running)
		}
		if n <= 0 {
			wait = poll // a local finish wakes us
			return nil
		}
		if c.NextDelayed != nil {
			wait = min(wait, max(*c.NextDelayed, time.Millisecond))
		}
		if s.GlobalConcurrency > 0 {
			n = min(n, s.GlobalConcurrency-c.Running)
		}
		if s.RateLimit > 0 {
			if c.Recent >= s.RateLimit && c.RateFree != nil {
				wait = min(wait, max(*c.RateFree, time.Millisecond))
			}
			n = min(n, s.RateLimit-c.Recent)
		}
		if n <= 0 {
			return nil
		}
		claimLimit = n
		rated := s.RateLimit > 0 || s.PartitionRateLimit > 0
		if s.FairShare || s.PartitionConcurrency > 0 || s.PartitionRateLimit > 0 || row.PartitionLimits {
			var res keyedResult
			res, err = d.claimKeyed(ctx, tx, q.name, row, n, rated)
			got, keyedMore = res.got, res.more
			if res.rateFree > 0 {
				wait = min(wait, res.rateFree)
			}
		} else {
			got, err = d.cfg.Queries.ClaimSimple(ctx, tx, sysdb.ClaimSimpleParams{Queue: q.name, ExecutorID: d.cfg.ExecutorID,
				AppVersion: d.cfg.AppVersion, Workflows: d.cfg.Workflows, Limit: n, Rated: rated})
		}
		return err
	})
	if err != nil {
		d.cfg.DBTrouble()
		if ctx.Err() == nil {
			d.cfg.Logger.Warn("durable: dispatch failed", "queue", q.name, "err", err)
		}
		wait = min(poll, time.Second)
		d.signals.Pass.Signal(Pass{Queue: q.name, Wait: wait, Err: err})
		return wait, false
	}
	if len(got) > 0 {
		q.take(len(got))
		if err := d.cfg.Launch(ctx, q, got); err != nil {
			d.cfg.DBTrouble()
			if ctx.Err() == nil {
				d.cfg.Logger.Warn("durable: start claimed runs", "queue", q.name, "err", err)
			}
		}
		more = len(got) >= claimLimit || keyedMore
	}
	d.signals.Pass.Signal(Pass{Queue: q.name, Claimed: len(got), More: more, Wait: wait})
	return wait, more
}

// HandOn prepares the hand-on of the slots of a finish batch's runs of
// queues to the next ready runs of those queues (sysdb's FinishHandOn):
// it returns the statement's parameters but the runs' IDs, the context
// to run the statement in (ctx, also cancelled by Stop), and ok false
// when no queue qualifies. A queue qualifies when the last pass found its
// limits to be concurrency limits only (the statement checks the live
// settings again): the swap leaves its running count as it was, so no
// dispatch pass has to see a free slot. after must be called once the
// statement ended: committed, it launches the claimed runs as a pass
// would, holding their slots; else it marks the database trouble (the
// statement may have committed unseen).
func (d *Dispatcher) HandOn(ctx context.Context, queues map[string]bool) (stmtCtx context.Context, p sysdb.HandOnParams,
	after func(claimed []sysdb.ClaimedRow, committed bool), ok bool) {
	p = sysdb.HandOnParams{ExecutorID: d.cfg.ExecutorID, AppVersion: d.cfg.AppVersion, Workflows: d.cfg.Workflows}
	for name := range queues {
		if q := d.byName[name]; q != nil && q.HandsOn() {
			p.Queues = append(p.Queues, name)
			p.Running = append(p.Running, q.Running())
		}
	}
	if p.Queues == nil {
		return ctx, p, nil, false
	}
	d.handOns.RLock()
	if d.stopped {
		d.handOns.RUnlock()
		return ctx, p, nil, false
	}
	done := d.cfg.Launching()
	stmtCtx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(d.handOnCtx, cancel)
	return stmtCtx, p, func(got []sysdb.ClaimedRow, committed bool) {
		unhook()
		cancel()
		defer d.handOns.RUnlock()
		defer done()
		if !committed {
			d.cfg.DBTrouble()
			return
		}
		byQueue := map[string][]sysdb.ClaimedRow{}
		for _, c := range got {
			if c.Queue != nil {
				byQueue[*c.Queue] = append(byQueue[*c.Queue], c)
			}
		}
		for name, rows := range byQueue {
			q := d.byName[name]
			q.handOn(len(rows))
			if err := d.cfg.Launch(ctx, q, rows); err != nil {
				d.cfg.DBTrouble()
				if ctx.Err() == nil {
					d.cfg.Logger.Warn("durable: start claimed runs", "queue", name, "err", err)
				}
			}
		}
	}, true
}
