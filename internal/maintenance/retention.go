// Package maintenance keeps the engine's tables in shape: the retention
// pass deletes the runs that finished long ago, in one executor at a time.
package maintenance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/internal/clock"
	"github.com/durable-go/durable/internal/service"
	"github.com/durable-go/durable/internal/sysdb"
	"github.com/durable-go/durable/internal/testsignal"
)

// PruneBatchDefault is how many runs one prune transaction deletes unless
// PruneOpts.BatchSize says otherwise.
const PruneBatchDefault = 1000

// PruneOpts are the options of a prune (durable.PruneOpts).
type PruneOpts struct {
	BatchSize int // runs one transaction deletes; 0: PruneBatchDefault
	MaxRuns   int // runs the prune deletes at most; 0: no bound
}

// PruneResult counts what a prune deleted (durable.PruneResult).
type PruneResult struct {
	Runs     int64 // workflow runs
	Steps    int64 // their recorded steps
	Messages int64 // messages sent to them, consumed or not
	Events   int64 // their published events
	Streams  int64 // their stream entries
	Batches  int   // transactions that deleted something
}

// RetentionConfig configures the retention pass.
type RetentionConfig struct {
	Pool    *pgxpool.Pool // the application's pool
	Queries *sysdb.RetentionQueries
	// Retention is how long finished runs are kept.
	Retention time.Duration
	// Interval is the period of the pass. The first pass comes within
	// min(Interval, 1m) of Start, so processes restarted more often than
	// the interval still prune.
	Interval time.Duration
	Logger   *slog.Logger
	// Clock tells the pass its cutoff (now - Retention). Defaults to
	// clock.Real.
	Clock clock.Clock
}

// Retention prunes the runs that finished longer than Retention ago,
// every Interval, between Start and Stop; Prune works without it.
type Retention struct {
	service.Loop
	cfg   RetentionConfig
	clock clock.Clock

	signals retentionSignals
}

// retentionSignals tell the tests what the pass did.
type retentionSignals struct {
	PassDone testsignal.Signal[Pass]
}

// Pass is what one retention pass did.
type Pass struct {
	Result  PruneResult
	Skipped bool // another executor was running one
	Err     error
}

// NewRetention returns the retention pass of cfg.
func NewRetention(cfg RetentionConfig) *Retention {
	return &Retention{cfg: cfg, clock: clock.Or(cfg.Clock)}
}

// Start starts the pass's loop.
func (r *Retention) Start(ctx context.Context) error { return r.StartLoop(ctx, r.loop) }

func (r *Retention) loop(ctx context.Context) {
	first := min(r.cfg.Interval, time.Minute)
	t := time.NewTimer(time.Duration(rand.Int64N(int64(first))) + 1)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := r.pass(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("durable: retention pass failed", "err", err)
		}
		t.Reset(r.cfg.Interval)
	}
}

// pass runs one prune, unless another executor is running one.
func (r *Retention) pass(ctx context.Context) error {
	started := r.clock.Now()
	res, skipped, err := r.prune(ctx, started.Add(-r.cfg.Retention), PruneOpts{}, true)
	r.signals.PassDone.Signal(Pass{Result: res, Skipped: skipped, Err: err})
	if skipped && res.Runs == 0 {
		r.cfg.Logger.Debug("durable: retention pass skipped: another executor is running one")
		return nil
	}
	if res.Runs > 0 || err != nil {
		r.cfg.Logger.Info("durable: retention pass", "runs", res.Runs, "steps", res.Steps, "messages", res.Messages,
			"events", res.Events, "streams", res.Streams, "batches", res.Batches, "took", r.clock.Now().Sub(started), "err", err)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// Prune deletes the runs that finished before before, oldest first, in
// batches of o.BatchSize runs, each its own short transaction, with their
// steps, messages, events and stream entries (see PruneBatch for what it
// holds back). If ctx ends, it stops and returns what the committed
// batches deleted, with ctx's error.
func (r *Retention) Prune(ctx context.Context, before time.Time, o PruneOpts) (PruneResult, error) {
	res, _, err := r.prune(ctx, before, o, false)
	return res, err
}

// prune deletes in batches. With exclusive, each batch first tries the
// schema's retention lock inside its own transaction, and the prune stops
// (skipped) when another executor holds it. The lock is taken per batch
// transaction, not per session, so it needs no sticky connection (it
// holds behind PgBouncer in transaction mode) and can never be left
// behind; concurrent prunes would be safe anyway (SKIP LOCKED), the lock
// only saves executors from doing the same walk at once.
func (r *Retention) prune(ctx context.Context, before time.Time, o PruneOpts, exclusive bool) (total PruneResult, skipped bool, err error) {
	if o.BatchSize == 0 {
		o.BatchSize = PruneBatchDefault
	}
	p := sysdb.PruneBatchParams{Before: before}
	for o.MaxRuns == 0 || total.Runs < int64(o.MaxRuns) {
		if err := ctx.Err(); err != nil {
			return total, false, fmt.Errorf("durable: prune: %w", err)
		}
		p.Limit = o.BatchSize
		if o.MaxRuns > 0 {
			p.Limit = min(p.Limit, o.MaxRuns-int(total.Runs))
		}
		var b sysdb.PruneBatchRow
		batch := func(db sysdb.DBTX) (err error) {
			b, err = r.cfg.Queries.PruneBatch(ctx, db, p)
			return err
		}
		if exclusive {
			err = pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
				got, err := r.cfg.Queries.TryLock(ctx, tx)
				if err != nil {
					return err
				}
				if !got {
					skipped = true
					return nil
				}
				return batch(tx)
			})
		} else {
			err = batch(r.cfg.Pool)
		}
		if err != nil {
			return total, false, fmt.Errorf("durable: prune runs finished before %s: %w", before.Format(time.RFC3339), err)
		}
		if skipped {
			return total, true, nil
		}
		if b.Runs > 0 {
			total.Runs += b.Runs
			total.Steps += b.Steps
			total.Messages += b.Messages
			total.Events += b.Events
			total.Streams += b.Streams
			total.Batches++
		}
		// Fewer than asked: nothing unlocked and due is left past the walk.
		if b.LastAt == nil || b.Runs < int64(p.Limit) {
			break
		}
		p.AfterAt, p.AfterID = *b.LastAt, *b.LastID
	}
	return total, false, nil
}
