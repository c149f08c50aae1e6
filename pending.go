package durable

import (
	"sync"
	"time"

	"github.com/durable-go/durable/internal/sysdb"
)

// Deferred step checkpoints. A plain step's checkpoint need not be written
// before the workflow code goes on, only before anything that code does
// can depend on it durably: before the run's next durable call (every one
// passes through run.begin), with the run's finish, or stepFlushDelay
// after the step returned, whichever comes first. A run whose last step is
// followed by its return (a one-step workflow, the last call of an agent
// loop) so writes that checkpoint inside its finish statement: one round
// trip and one commit fewer.
//
// Nothing observable comes between a step and the write of its checkpoint
// that the eager write would not also allow: workflow code between durable
// calls is deterministic and has no effects of its own, and a process that
// dies before the write runs the step again, as one dying during the step
// or before an eager write does (the at-least-once window of a plain step).
// stepFlushDelay bounds how much longer that window gets when workflow
// code, against the rules, blocks between calls (a [Future.Wait] on a slow
// step is the legitimate case).

// stepFlushDelay is how long a step checkpoint may wait for the run's next
// write before it is written alone.
const stepFlushDelay = 2 * time.Millisecond

// deferCheckpoint queues w to be written with the run's next write.
func (r *run) deferCheckpoint(w *sysdb.InsertStepParams) {
	r.mu.Lock()
	r.pending = append(r.pending, w)
	if len(r.pending) == 1 {
		if r.flushTimer == nil {
			r.flushTimer = time.AfterFunc(r.e.stepDelay, func() { _ = r.flushPending() })
		} else {
			r.flushTimer.Reset(r.e.stepDelay)
		}
	}
	r.mu.Unlock()
}

// takePending returns the checkpoints not written yet and forgets them.
// The caller holds flushMu, so no write of earlier ones is in flight.
func (r *run) takePending() []*sysdb.InsertStepParams {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := r.pending
	if ws != nil {
		r.pending = nil
		r.flushTimer.Stop()
	}
	return ws
}

// flushPending writes the deferred checkpoints, or waits for a write of
// them in flight; a failure halts the run and is returned.
func (r *run) flushPending() error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	ws := r.takePending()
	switch len(ws) {
	case 0:
		return nil
	case 1:
		return r.writeCheckpoint(ws[0])
	}
	// Steps of parallel futures: written concurrently, so that group
	// commit puts them in one statement.
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() { errs[i] = r.writeCheckpoint(w) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// pendingForFinish takes the deferred checkpoints for the run's finish
// statement, after any write of them in flight has ended.
func (r *run) pendingForFinish() []*sysdb.InsertStepParams {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	return r.takePending()
}
