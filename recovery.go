package durable

import (
	"context"
	"time"

	"github.com/durable-go/durable/internal/recovery"
	"github.com/durable-go/durable/internal/sysdb"
)

// claimed is a run this executor just took ownership of, as the claim
// statements return it.
type claimed = sysdb.ClaimedRow

// newRecovery makes the engine's recovery (internal/recovery): its own
// runs at Launch, the sweeper's takeover of runs without a live owner and
// of strays, and the recovery slots (Config.RecoveryConcurrency) the runs
// it claims execute in.
func newRecovery(e *Engine) *recovery.Service {
	return recovery.New(recovery.Config{
		Pool:         e.pool,
		Queries:      e.rcq,
		ExecutorID:   e.cfg.ExecutorID,
		AppVersion:   e.cfg.AppVersion,
		Names:        func() []string { return e.names },
		Slots:        e.cfg.RecoveryConcurrency,
		Batch:        RecoveryBatchDefault,
		LeaseTTL:     e.cfg.LeaseTTL,
		PollInterval: e.listener.interval,
		Logger:       e.log,
		Launch: func(ctx context.Context, runs []sysdb.ClaimedRow) error {
			e.met.recovered(runs, recoveryTakeover)
			return e.runner.startClaimed(ctx, runs, nil)
		},
		JudgesLeases:   e.lease.JudgesLeases,
		NoteTrouble:    e.lease.NoteTrouble,
		TakeStrayCheck: e.lease.TakeStrayCheck,
		Executing:      e.runner.active.ids,
		IsExecuting:    func(id string) bool { return e.runner.active.load(id) != nil },
		ReleaseStopped: e.runner.releaseStopped,
		Requeue:        e.queues.requeue,
		WakeQueue:      e.queues.wake,
		NextWake: func(ctx context.Context) (*time.Duration, error) {
			next, ok, err := e.wq.NextWake(ctx, e.pool)
			if err != nil || !ok {
				return nil, err
			}
			return &next, nil
		},
	})
}
