package durable

import (
	"context"
	"fmt"
	"time"

	"github.com/durable-go/durable/internal/maintenance"
	"github.com/durable-go/durable/internal/sysdb"
)

// Limits and defaults of retention.
const (
	// PruneBatchDefault is how many runs one prune transaction deletes
	// unless PruneOpts.BatchSize says otherwise.
	PruneBatchDefault = maintenance.PruneBatchDefault
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
	res, err := e.retention.Prune(ctx, before, maintenance.PruneOpts(o))
	return PruneResult(res), err
}

// newRetention makes the engine's retention pass (internal/maintenance),
// started at Launch when Config.Retention is set; Prune works without it.
func newRetention(e *Engine) *maintenance.Retention {
	return maintenance.NewRetention(maintenance.RetentionConfig{Pool: e.pool, Queries: sysdb.NewRetentionQueries(e.cfg.Schema),
		Retention: e.cfg.Retention, Interval: e.cfg.RetentionInterval, Logger: e.log})
}
