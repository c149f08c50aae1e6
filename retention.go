package durable

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/sysdb"
)

// Limits and defaults of retention.
const (
	// PruneBatchDefault is how many runs one prune transaction deletes
	// unless PruneOpts.BatchSize says otherwise.
	PruneBatchDefault = 1000
	// PruneBatchMax is the largest PruneOpts.BatchSize.
	PruneBatchMax = 10000
	// RetentionIntervalDefault is the default of Config.RetentionInterval.
	RetentionIntervalDefault = time.Hour
)

// PruneOpts are options of [Engine.Prune].
type PruneOpts struct {
	// BatchSize is how many runs one transaction deletes, with all their
	// rows. Each batch is its own short transaction. At most PruneBatchMax.
	// Defaults to PruneBatchDefault.
	BatchSize int
	// MaxRuns bounds the runs this call deletes; the next call goes on
	// where it stopped. Defaults to 0: no bound.
	MaxRuns int
}

// PruneResult counts what [Engine.Prune] deleted.
type PruneResult struct {
	Runs     int64 // workflow runs
	Steps    int64 // their recorded steps
	Messages int64 // messages sent to them, consumed or not
	Events   int64 // their published events
	Streams  int64 // their stream entries
	Batches  int   // transactions that deleted something
}

func (r *PruneResult) add(o PruneResult) {
	r.Runs += o.Runs
	r.Steps += o.Steps
	r.Messages += o.Messages
	r.Events += o.Events
	r.Streams += o.Streams
	r.Batches += o.Batches
}

// Prune deletes the runs that finished (success, error, cancelled or dead)
// before the time before, oldest first, with their steps, messages,
// events and stream entries. It works from any process, launched or not.
//
// It deletes in batches of PruneOpts.BatchSize runs, each batch one short
// transaction that skips rows locked by others (FOR UPDATE SKIP LOCKED):
// it never waits on live work, and the only rows it locks are those of
// the finished runs it deletes. A pending or queued run is never touched,
// and neither are:
//   - a child run whose parent exists and did not itself finish before
//     before: a parent may still await its child, so a child goes with its
//     parent or after it;
//   - a queued run that started within its queue's rate period, since the
//     rate limit counts those starts.
//
// A pruned run is gone: its ID can be used again (a Start with it starts a
// new run), ErrWorkflowNotFound answers a handle of it, and a
// [Engine.BackfillSchedule] over its tick starts the tick again. So keep
// finished runs for longer than anything may still ask for them.
//
// If ctx ends, Prune stops (the batch in flight rolls back) and returns
// what the committed batches deleted, with ctx's error.
func (e *Engine) Prune(ctx context.Context, before time.Time, opts *PruneOpts) (PruneResult, error) {
	var o PruneOpts
	if opts != nil {
		o = *opts
	}
	switch {
	case before.IsZero():
		return PruneResult{}, fmt.Errorf("%w: Prune needs a cutoff time", ErrInvalidArgument)
	case o.BatchSize < 0 || o.BatchSize > PruneBatchMax:
		return PruneResult{}, fmt.Errorf("%w: PruneOpts.BatchSize %d is outside 1..%d", ErrInvalidArgument, o.BatchSize, PruneBatchMax)
	case o.MaxRuns < 0:
		return PruneResult{}, fmt.Errorf("%w: PruneOpts.MaxRuns must not be negative", ErrInvalidArgument)
	}
	res, _, err := e.prune(ctx, before, o, false)
	return res, err
}

// prune deletes in batches. With exclusive, each batch first tries the
// schema's retention lock inside its own transaction, and the pass stops
// (skipped) when another executor holds it. The lock is taken per batch
// transaction, not per session, so it needs no sticky connection (it
// holds behind PgBouncer in transaction mode) and can never be left
// behind; concurrent prunes would be safe anyway (SKIP LOCKED), the lock
// only saves executors from doing the same walk at once.
func (e *Engine) prune(ctx context.Context, before time.Time, o PruneOpts, exclusive bool) (total PruneResult, skipped bool, err error) {
	if o.BatchSize == 0 {
		o.BatchSize = PruneBatchDefault
	}
	var afterAt time.Time
	afterID := ""
	for o.MaxRuns == 0 || total.Runs < int64(o.MaxRuns) {
		if err := ctx.Err(); err != nil {
			return total, false, fmt.Errorf("durable: prune: %w", err)
		}
		limit := o.BatchSize
		if o.MaxRuns > 0 {
			limit = min(limit, o.MaxRuns-int(total.Runs))
		}
		var row sysdb.PruneBatchRow
		batch := func(db sysdb.DBTX) (err error) {
			row, err = e.rq.PruneBatch(ctx, db, sysdb.PruneBatchParams{Before: before, AfterAt: afterAt, AfterID: afterID, Limit: limit})
			return err
		}
		if exclusive {
			err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
				got, err := e.rq.TryLock(ctx, tx)
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
			err = batch(e.pool)
		}
		if err != nil {
			return total, false, fmt.Errorf("durable: prune runs finished before %s: %w", before.Format(time.RFC3339), err)
		}
		if skipped {
			return total, true, nil
		}
		if row.Runs > 0 {
			total.add(PruneResult{Runs: row.Runs, Steps: row.Steps, Messages: row.Messages, Events: row.Events,
				Streams: row.Streams, Batches: 1})
		}
		// Fewer than asked: nothing unlocked and due is left past the walk.
		if row.LastAt == nil || row.Runs < int64(limit) {
			break
		}
		afterAt, afterID = *row.LastAt, *row.LastID
	}
	return total, false, nil
}

// retentionLoop prunes runs older than Config.Retention every
// Config.RetentionInterval, one executor at a time (see prune). The first pass
// comes soon after Launch (within a minute), so processes restarted more
// often than the interval still prune.
func (e *Engine) retentionLoop(ctx context.Context) {
	first := min(e.cfg.RetentionInterval, time.Minute)
	wait := time.Duration(rand.Int64N(int64(first))) + 1
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := e.retentionPass(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("durable: retention pass failed", "err", err)
		}
		t.Reset(e.cfg.RetentionInterval)
	}
}

// retentionPass runs one prune, unless another executor is running one.
func (e *Engine) retentionPass(ctx context.Context) error {
	started := time.Now()
	res, skipped, err := e.prune(ctx, started.Add(-e.cfg.Retention), PruneOpts{}, true)
	if skipped && res.Runs == 0 {
		e.log.Debug("durable: retention pass skipped: another executor is running one")
		return nil
	}
	if res.Runs > 0 || err != nil {
		e.log.Info("durable: retention pass", "runs", res.Runs, "steps", res.Steps, "messages", res.Messages,
			"events", res.Events, "streams", res.Streams, "batches", res.Batches, "took", time.Since(started), "err", err)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
