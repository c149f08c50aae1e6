package durable

import (
	"github.com/durable-go/durable/internal/commit"
)

// newCommitWriter returns the group commit of e's starts, step checkpoints
// and finishes (internal/commit).
func newCommitWriter(e *Engine) *commit.Writer {
	return commit.New(commit.Config{
		DB:                   e.pool,
		Queries:              e.q,
		AppVersion:           e.cfg.AppVersion,
		ExecutorID:           e.cfg.ExecutorID,
		Alone:                e.knobs.NoGroupCommit,
		Ctx:                  e.hardCtx,
		IsTransient:          isTransient,
		RetryBG:              e.runner.retryBG,
		WakeParentOfFinished: e.runner.wakeParentOfFinished,
		Log:                  e.log,
		OnBatch:              e.met.batchFunc(),
		HandOn:               e.queues.handOn,
	})
}
