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

// deferredSteps are the plain step checkpoints of a run not written yet.
type deferredSteps struct {
	r       *run // the run they are of
	mu      sync.Mutex
	pending []*sysdb.InsertStepParams // guarded by mu
	timer   *time.Timer               // writes them stepFlushDelay after the first
	flushMu sync.Mutex                // held while pending checkpoints are written
}

// add queues w to be written with the run's next write.
func (d *deferredSteps) add(w *sysdb.InsertStepParams) {
	d.mu.Lock()
	d.pending = append(d.pending, w)
	if len(d.pending) == 1 {
		if d.timer == nil {
			d.timer = time.AfterFunc(d.r.e.stepDelay, func() { _ = d.flush() })
		} else {
			d.timer.Reset(d.r.e.stepDelay)
		}
	}
	d.mu.Unlock()
}

// take returns the checkpoints not written yet and forgets them. The
// caller holds flushMu, so no write of earlier ones is in flight.
func (d *deferredSteps) take() []*sysdb.InsertStepParams {
	d.mu.Lock()
	defer d.mu.Unlock()
	ws := d.pending
	if ws != nil {
		d.pending = nil
		d.timer.Stop()
	}
	return ws
}

// flush writes the deferred checkpoints, or waits for a write of them in
// flight; a failure halts the run and is returned.
func (d *deferredSteps) flush() error {
	d.flushMu.Lock()
	defer d.flushMu.Unlock()
	ws := d.take()
	switch len(ws) {
	case 0:
		return nil
	case 1:
		return d.r.writeCheckpoint(ws[0])
	}
	// Steps of parallel futures: written concurrently, so that group
	// commit puts them in one statement.
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() { errs[i] = d.r.writeCheckpoint(w) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// forFinish takes the deferred checkpoints for the run's finish
// statement, after any write of them in flight has ended.
func (d *deferredSteps) forFinish() []*sysdb.InsertStepParams {
	d.flushMu.Lock()
	defer d.flushMu.Unlock()
	return d.take()
}
