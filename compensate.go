package durable

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// undoPrefix starts the step name of a compensation, so that a run's steps
// tell the undo work from the work it undoes.
const undoPrefix = "undo:"

// compensation is an undo registered by [Compensate].
type compensation struct {
	name string
	undo func(ctx context.Context) error
	opts *StepOpts
}

// Compensate registers undo as the compensation of the work the workflow
// did before the call (typically the step just returned): if the run's
// code then fails, the engine runs the registered compensations, the
// latest first, before it records the failure. Each runs as a step named
// "undo:" + name, with its own idempotency key ([IdempotencyKey] of its
// context) and its retry policy (opts, as for [Step]); a crash half-way
// resumes them at the first one not recorded, the ones done are not run
// again. A compensation that fails for good (its retries spent, or a
// [Permanent] error) is recorded as a failed step and the others still
// run; the run's error then matches [ErrCompensationFailed]. The run's
// error is a [*CompensationError] that wraps the failure.
//
// Registration is in memory, like a defer: on replay the code registers
// the same compensations again at the same points. Call it right after the
// step whose effect undo reverses, not before the step could have failed.
//
// Compensations run when the code returns an error (a failed step, its own
// error, a panic) or the run passes its StartOpts.Timeout (the undo steps
// then run without that deadline), and when a Cancel asks for them
// (CancelOpts.Compensate; the run then ends as cancelled). They do not
// run for a plain cancel ([Engine.Cancel] ends a run at once), nor when
// the run stops without
// finishing (shutdown, lost ownership, non-determinism: a later execution
// decides).
func Compensate(wctx Context, name string, undo func(ctx context.Context) error, opts *StepOpts) error {
	if err := checkName("compensation name", name); err != nil {
		return err
	}
	if undo == nil {
		return fmt.Errorf("%w: compensation %q has no function", ErrInvalidArgument, name)
	}
	r := wctx.workflowRun()
	r.mu.Lock()
	r.undo = append(r.undo, compensation{name: name, undo: undo, opts: opts})
	r.mu.Unlock()
	return nil
}

// ErrCompensationFailed: a run failed and at least one of its
// compensations failed for good as well. See [Compensate].
var ErrCompensationFailed = errors.New("durable: compensation failed")

// CompensationError is the error of a run whose code failed after it
// registered compensations ([Compensate]), once they ran. It wraps Err, so
// errors.Is matches what the failure matched; it matches
// [ErrCompensationFailed] too when Failed is not empty. Read back from the
// database (Handle.Result of a finished run) it is a [*RecordedError] of
// the same message and kind.
type CompensationError struct {
	WorkflowID string
	// Err is the failure that started the compensations (a cancel's,
	// matching ErrCancelled, for CancelOpts.Compensate).
	Err error
	// Undone counts the compensations that completed.
	Undone int
	// Failed holds the compensations that failed for good, in the order
	// they ran (latest registered first).
	Failed []*StepError
}

func (e *CompensationError) Error() string {
	var b strings.Builder
	what := "failed"
	if errors.Is(e.Err, ErrCancelled) {
		what = "was cancelled"
	}
	fmt.Fprintf(&b, "durable: workflow %q %s and ran its compensations (%d undone", e.WorkflowID, what, e.Undone)
	if len(e.Failed) > 0 {
		fmt.Fprintf(&b, ", %d failed:", len(e.Failed))
		for i, f := range e.Failed {
			if i > 0 {
				b.WriteString(";")
			}
			fmt.Fprintf(&b, " %s", f.Error())
		}
	}
	fmt.Fprintf(&b, "): %v", e.Err)
	return b.String()
}

func (e *CompensationError) Unwrap() error { return e.Err }

func (e *CompensationError) Is(target error) bool {
	return target == ErrCompensationFailed && len(e.Failed) > 0
}

// compensable reports whether the failure cause of r's code lets its
// compensations run: the code's own error, the run's deadline, or a
// Cancel that asked for them. A halt for any other reason (shutdown, lost
// ownership, a plain cancel, non-determinism,
// an undecodable record) ends this execution without finishing the run,
// or fails it in a way a later execution of fixed code must decide on.
func compensable(r *run, cause error) bool {
	if cause == nil || r.e.hardCtx.Err() != nil || errors.Is(cause, ErrShutdown) {
		return false
	}
	if errors.Is(cause, ErrCancelled) {
		return cancelRequested(r)
	}
	h := r.halted()
	return h == nil || (h == cause && errors.Is(h, context.DeadlineExceeded))
}

// compensate runs the compensations r's code registered, latest first, as
// steps after the code failed with cause, and returns the run's error: a
// *CompensationError, or a halt that ended them (the run then stops
// without finishing here, or fails with it). Without compensations, or
// when cause does not let them run (see compensable), it returns cause.
func compensate(r *run, cause error) error {
	r.mu.Lock()
	undo := r.undo
	r.undo = nil
	r.mu.Unlock()
	if len(undo) == 0 || !compensable(r, cause) {
		return cause
	}
	if r.halted() != nil {
		// Past the deadline: the undo steps run without it.
		r.mu.Lock()
		r.stop = nil
		r.mu.Unlock()
	}
	r.compensating.Store(true)
	if r.ctx.Err() != nil && r.replaying == nil {
		detachDeadline(r)
	}
	wctx := &wfContext{Context: r.ctx, r: r}
	ce := &CompensationError{WorkflowID: r.id, Err: cause}
	for i := len(undo) - 1; i >= 0; i-- {
		c := undo[i]
		_, err := step(wctx, undoPrefix+c.name, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, c.undo(ctx)
		}, c.opts)
		var se *StepError
		switch {
		case err == nil:
			ce.Undone++
		case r.halted() == nil && errors.As(err, &se):
			ce.Failed = append(ce.Failed, se)
		default:
			return err
		}
	}
	return ce
}

// detachDeadline gives r a context without its passed deadline for its
// compensations; the engine's hard stop still ends it (a cancel reaches
// them through the fence of their checkpoints).
func detachDeadline(r *run) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.ctx))
	stop := context.AfterFunc(r.e.hardCtx, func() { cancel(context.Cause(r.e.hardCtx)) })
	old := r.cancel
	r.ctx = ctx
	r.cancel = func() { stop(); cancel(nil); old() }
}

// cancelRequested reports whether r was cancelled by a Cancel that asked
// for its compensations (CancelOpts.Compensate): the run, still pending
// at its epoch, is marked so. Such a run ends as cancelled here, after its
// compensations (if it registered any). Read once, when the cancel
// reached the run: a failed read counts as no (a plain cancel, which
// leaves the run to the next execution: it is claimed again and asked).
func cancelRequested(r *run) bool {
	if r.cancelComp.Load() {
		return true
	}
	var asked bool
	err := r.retryDB("read cancel request", func(ctx context.Context) error {
		var err error
		asked, err = r.e.cq.CancelRequested(ctx, r.e.pool, r.id, r.epoch)
		return err
	})
	if err == nil && asked {
		r.cancelComp.Store(true)
	}
	return asked
}
