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
func (e *Engine) newRecovery() *recovery.Service {
	return recovery.New(recovery.Config{
		Pool:         e.pool,
		Queries:      e.rcq,
		ExecutorID:   e.cfg.ExecutorID,
		AppVersion:   e.cfg.AppVersion,
		Names:        func() []string { return e.names },
		Slots:        e.cfg.RecoveryConcurrency,
		Batch:        RecoveryBatchDefault,
		LeaseTTL:     e.cfg.LeaseTTL,
		PollInterval: e.pollInterval,
		Logger:       e.log,
		Launch: func(ctx context.Context, runs []sysdb.ClaimedRow) error {
			return e.startClaimed(ctx, runs, nil)
		},
		JudgesLeases:   e.judgesLeases,
		NoteTrouble:    e.noteDBTrouble,
		TakeStrayCheck: e.lease.TakeStrayCheck,
		Executing:      e.active.ids,
		IsExecuting:    func(id string) bool { return e.active.load(id) != nil },
		ReleaseStopped: e.releaseStopped,
		Requeue:        e.requeue,
		WakeQueue: func(name string) {
			if q := e.queues[name]; q != nil {
				q.wake()
			}
		},
		NextWake: func(ctx context.Context) (*time.Duration, error) {
			next, ok, err := e.wq.NextWake(ctx, e.pool)
			if err != nil || !ok {
				return nil, err
			}
			return &next, nil
		},
	})
}

// deadLetter moves claimed run c, over its recovery limit, to the dead
// status instead of running it.
func (e *Engine) deadLetter(ctx context.Context, c claimed, limit int) {
	dle := &DeadLetterError{WorkflowID: c.ID, Attempts: c.Attempts - 1, Limit: limit}
	errb := encodeError(dle)
	if _, err := e.rcq.DeadLetter(ctx, e.pool, sysdb.DeadLetterParams{ID: c.ID, Epoch: c.Epoch, Error: errb}); err != nil {
		e.log.Warn("durable: dead-letter run", "workflow_id", c.ID, "err", err)
		return
	}
	e.log.Error("durable: run dead-lettered: its executor kept dying while running it", "workflow_id", c.ID,
		"workflow", c.Name, "recovery_attempts", c.Attempts-1, "limit", limit)
	e.tr.deadLetter(&c, limit, dle)
	e.hub.Wake(c.ID, &outcome{status: StatusDead, err: errb})
}
