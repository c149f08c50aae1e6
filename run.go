package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/hooks"
	"github.com/durable-go/durable/internal/sysdb"
)

// Context is the context of workflow code. It is a [context.Context] that
// also carries the run; pass it to [Step], [TxStep] and the other durable
// calls. Workflow code must be deterministic: see the package doc.
type Context interface {
	context.Context
	// WorkflowID returns the ID of the running workflow.
	WorkflowID() string
	workflowRun() *run
}

type wfContext struct {
	context.Context
	r *run
}

func (c *wfContext) WorkflowID() string { return c.r.id }
func (c *wfContext) workflowRun() *run  { return c.r }

// run is one execution of a workflow in this process, from start or
// resume until it finishes or stops.
type run struct {
	e           *Engine
	id          string
	name        string
	epoch       int64
	ctx         context.Context // workflow and step code's context: hard shutdown, deadline
	cancel      context.CancelFunc
	cancelCause context.CancelCauseFunc // cancels r.ctx with a cause (ErrCancelled)
	deadline    time.Time               // zero: none
	queue       *Queue                  // the queue whose slot this run holds here, if any

	hist *recorded    // the steps recorded before this execution (recorded.go)
	next atomic.Int32 // next step position, taken under hist's lock
	// Failed attempts of unrecorded steps, recorded before this execution
	// (attempts.go).
	failed priorAttempts

	mu   sync.Mutex
	stop error // set once: the run must end without finishing (fenced, shutdown) or fail (non-determinism)

	// Plain step checkpoints not written yet (pending.go).
	deferSteps bool // the run defers them (set before it executes)
	deferred   deferredSteps

	tr     *tspan                      // this execution's span; nil without tracing (trace.go)
	m      runMeters                   // its workflow's instruments; zero without metrics (metrics.go)
	logger atomic.Pointer[slog.Logger] // made on first use (log.go)

	undo         []compensation // registered by Compensate, under mu (compensate.go)
	compensating atomic.Bool    // the compensations run: the deadline no longer applies
	// cancelComp: a Cancel asked the run to compensate and end as
	// cancelled (set by the claim, or by cancelRequested).
	cancelComp atomic.Bool

	replaying *replayMode // non-nil: a replay-only execution, which runs no step and writes nothing (replay.go)
}

type stepRecord struct {
	pos      int
	name     string
	status   string
	output   []byte
	err      []byte
	attempts int
}

const (
	stepDone   = "done"
	stepError  = "error"
	stepIntent = "intent"
)

// halt records why the run must stop; the first reason wins.
func (r *run) halt(err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stop == nil {
		r.stop = err
	}
	return r.stop
}

func (r *run) halted() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stop
}

// begin assigns the next step position to a call named name and returns
// the recorded step at that position, if any.
func (r *run) begin(name string) (int, *stepRecord, error) {
	if r.deferSteps {
		if err := r.deferred.flush(); err != nil { // pending.go
			return 0, nil, err
		}
	}
	if err := r.halted(); err != nil {
		return 0, nil, err
	}
	pos, rec, err := r.hist.take(r)
	if err != nil {
		return pos, nil, err
	}
	if rec != nil {
		if rec.name != name {
			if r.e.knobs.Boundary != nil {
				_ = r.e.knobs.Boundary(hooks.Boundary{RunID: r.id, Pos: pos, Name: name, Point: hooks.Diverged})
			}
			return pos, nil, r.halt(&NonDeterminismError{WorkflowID: r.id, Pos: pos, Recorded: rec.name, Called: name})
		}
		return pos, rec, nil
	}
	if r.replaying != nil {
		// The end of the recorded history: a live execution goes on here.
		return pos, nil, r.halt(errReplayEnd)
	}
	if err := r.interrupted(); err != nil {
		return pos, nil, err
	}
	if r.e.knobs.Boundary != nil {
		return pos, nil, boundary(r, pos, name, hooks.BeforeStep)
	}
	return pos, nil, nil
}

// interrupted halts the run if it must not start new work: the engine is
// stopping or the run passed its deadline.
func (r *run) interrupted() error {
	if err := r.cancelled(); err != nil {
		return err
	}
	if r.pastDeadline() {
		return r.halt(r.deadlineError())
	}
	if r.e.isStopping() || r.e.hardCtx.Err() != nil {
		return r.halt(fmt.Errorf("workflow %q stopped at a step boundary: %w", r.id, ErrShutdown))
	}
	return nil
}

// cancelled halts the run if Cancel reached it (the cause of its context)
// and returns the halt reason; nil if it was not cancelled.
func (r *run) cancelled() error {
	if errors.Is(context.Cause(r.ctx), ErrCancelled) {
		return r.halt(fmt.Errorf("durable: workflow %q: %w", r.id, ErrCancelled))
	}
	return nil
}

func (r *run) pastDeadline() bool {
	return !r.deadline.IsZero() && !r.compensating.Load() && !r.e.clock.now().Before(r.deadline)
}

func (r *run) deadlineError() error {
	return fmt.Errorf("durable: workflow %q passed its deadline %s: %w", r.id, r.deadline.Format(time.RFC3339Nano), context.DeadlineExceeded)
}

// cutShort turns an error a step returned after the engine cancelled its
// context (shutdown or deadline) into the run's halt reason.
func (r *run) cutShort(pos int, name string, err error) error {
	if err == nil || r.ctx.Err() == nil {
		return err
	}
	return r.haltEnded(fmt.Sprintf("step %d %q interrupted", pos, name))
}

// haltEnded halts the run whose context ended and returns why: cancelled,
// past its deadline, or the engine stopping (what says what was cut).
func (r *run) haltEnded(what string) error {
	if err := r.cancelled(); err != nil {
		return err
	}
	if r.e.hardCtx.Err() == nil && r.pastDeadline() {
		return r.halt(r.deadlineError())
	}
	return r.halt(fmt.Errorf("durable: workflow %q: %s: %w", r.id, what, ErrShutdown))
}

// sleep waits d of the engine's clock unless the engine begins to stop.
func (r *run) sleep(d time.Duration) error {
	if r.e.clock.fake != nil {
		return r.e.clock.wait(r, nil, r.e.clock.now().Add(d), 0)
	}
	return sleepReal(r, d)
}

// retryDB runs op until it succeeds, fails with a non-transient error, or
// the run's context ends. It is how checkpoint writes ride out a database
// outage instead of failing the run.
func (r *run) retryDB(what string, op func(ctx context.Context) error) error {
	// r.e.hardCtx, not r.ctx: a run past its deadline still records its end.
	err, stopped := retryTransient(r.e.hardCtx, op, func(attempt int, err error) {
		if attempt == 1 || attempt%10 == 0 {
			r.log().Warn("durable: database write failed, retrying", "op", what, "attempt", attempt, "err", err)
		}
	})
	if stopped {
		return r.halt(fmt.Errorf("workflow %q: %s: %w", r.id, what, ErrShutdown))
	}
	return err
}

// checkpoint writes the outcome of a step: the one statement of the live
// path. It returns nil when the outcome is recorded (by this call or by an
// earlier try whose acknowledgement was lost).
func (r *run) checkpoint(pos int, name, status string, output, errb []byte, attempts int, started time.Time) error {
	return r.writeCheckpoint(r.stepWrite(pos, name, status, output, errb, attempts, started))
}

// stepWrite is the checkpoint of the step at pos, fenced by the run's epoch.
func (r *run) stepWrite(pos int, name, status string, output, errb []byte, attempts int, started time.Time) *sysdb.InsertStepParams {
	return &sysdb.InsertStepParams{WorkflowID: r.id, Pos: pos, Name: name, Status: status, Output: output, Error: errb,
		Attempts: attempts, StartedAt: started, Epoch: r.epoch}
}

func (r *run) writeCheckpoint(w *sysdb.InsertStepParams) error {
	pos, name, status := w.Pos, w.Name, w.Status
	var written bool
	err := r.retryDB("record step", func(ctx context.Context) error {
		var err error
		written, err = r.e.commit.WriteStep(ctx, w)
		return err
	})
	if err != nil {
		if h := r.halted(); h != nil {
			return h
		}
		return r.halt(fmt.Errorf("durable: workflow %q: record step %d %q: %w", r.id, pos, name, err))
	}
	if written {
		return nil
	}
	return r.diagnose(pos, name, status == stepIntent)
}

// diagnose explains a fenced write that touched no row: the run changed
// owner or ended, or the step was already recorded by this same owner.
func (r *run) diagnose(pos int, name string, intentOK bool) error {
	var own sysdb.OwnershipCheckRow
	err := r.retryDB("check ownership", func(ctx context.Context) error {
		var err error
		own, err = r.e.runner.fenceCheck(ctx, sysdb.OwnershipCheckParams{WorkflowID: r.id, Pos: pos})
		return err
	})
	status, epoch, stepStatus := own.Status, own.Epoch, own.StepStatus
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return r.halt(fmt.Errorf("durable: workflow %q was deleted while running: %w", r.id, ErrFenced))
	case err != nil:
		if h := r.halted(); h != nil {
			return h
		}
		return r.halt(fmt.Errorf("durable: workflow %q: check ownership: %w", r.id, err))
	case epoch != r.epoch:
		return r.halt(fmt.Errorf("durable: workflow %q step %d %q: owner epoch is %d, this executor had %d: %w",
			r.id, pos, name, epoch, r.epoch, ErrFenced))
	case status == string(StatusCancelled):
		return r.halt(fmt.Errorf("durable: workflow %q: %w", r.id, ErrCancelled))
	case status != string(StatusPending):
		return r.halt(fmt.Errorf("durable: workflow %q already finished with status %s: %w", r.id, status, ErrFenced))
	case stepStatus != nil && (*stepStatus != stepIntent || intentOK):
		return nil // recorded by an earlier try of ours
	}
	return r.halt(fmt.Errorf("durable: workflow %q step %d %q: checkpoint not written for an unknown reason: %w", r.id, pos, name, ErrFenced))
}

// wfDef is a registered workflow with its types erased.
type wfDef struct {
	name        string
	call        func(wctx Context, input []byte) ([]byte, error)
	maxRecovery int
	deferSteps  bool         // DeferStepCheckpoints (pending.go)
	retry       *RetryPolicy // WorkflowOpts.Retry, defaults applied; nil: none (retry.go)
}

// encodePayload encodes v as JSON within limit bytes (Config.MaxPayloadBytes).
// What it is, for errors, is fmt.Sprintf(what, name), made only then.
func encodePayload(v any, limit int, what, name string) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, Permanent(fmt.Errorf("durable: encode %s: %w", fmt.Sprintf(what, name), err))
	}
	if len(b) > limit {
		return nil, &PayloadTooLargeError{What: fmt.Sprintf(what, name), Size: len(b), Limit: limit}
	}
	return b, nil
}
