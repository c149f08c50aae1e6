package durable

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/sysdb"
)

// CancelOpts are options of [Engine.Cancel].
type CancelOpts struct {
	// Children also cancels the run's child workflows, recursively.
	Children bool
	// Compensate runs the compensations a run registered ([Compensate])
	// before it ends as cancelled: the run stays pending until an
	// execution has replayed it up to where it was, stopped it there and
	// run them, durably (a crash half-way resumes them). Its result is
	// then the *CompensationError, matching ErrCancelled (or
	// ErrCompensationFailed when an undo failed for good). A parked run is
	// woken for it; a run that never executed (queued, or started in a
	// transaction and not yet claimed) has nothing to undo and is
	// cancelled at once. Without it, Cancel ends the run at once and no
	// compensation runs.
	Compensate bool
}

// Cancel cancels the run id (queued, running, sleeping or waiting). A run
// executing somewhere stops at its next step boundary (its step context is
// cancelled, a sleep or wait wakes up); a parked or queued run never starts
// again. Its result is an error matching [ErrCancelled] and
// context.Canceled. A queued run keeps its queue slot until its code has
// stopped. Cancelling a finished run is a no-op.
func (e *Engine) Cancel(ctx context.Context, id string, opts *CancelOpts) error {
	if err := checkName("workflow ID", id); err != nil {
		return err
	}
	children, comp := opts != nil && opts.Children, opts != nil && opts.Compensate
	errb := encodeError(fmt.Errorf("durable: workflow %q was cancelled: %w", id, ErrCancelled))
	cancelled, err := e.cq.Cancel(ctx, e.pool, sysdb.CancelParams{ID: id, Children: children, Error: errb, Compensate: comp})
	if err != nil {
		return fmt.Errorf("durable: cancel %q: %w", id, err)
	}
	e.met.cancelled(ctx, len(cancelled))
	for _, cid := range cancelled {
		if r := e.runner.active.load(cid); r != nil {
			r.cancelCause(ErrCancelled)
		}
	}
	if len(cancelled) == 0 {
		if _, err := readRun(ctx, e.q, e.pool, id); err != nil {
			return err
		}
	}
	return nil
}

// ResumeOpts are options of [Engine.Resume].
type ResumeOpts struct {
	// RetryFailedStep removes the run's last recorded step when it recorded
	// a failure, so that step runs again instead of replaying its error:
	// for a run that failed because a provider was down longer than the
	// step's retries lasted.
	RetryFailedStep bool
}

// Resume restarts a cancelled, dead-lettered or failed run from its last
// checkpoint: recorded steps are replayed, the rest runs (a queued run
// goes back to its queue). Its recovery attempts start again from zero.
// A queued run cancelled while its code ran holds its queue slot until
// that code has stopped (a step that ignores its context runs to its
// end); Resume waits for that, as long as ctx allows. opts may be nil.
func (e *Engine) Resume(ctx context.Context, id string, opts *ResumeOpts) error {
	if err := checkName("workflow ID", id); err != nil {
		return err
	}
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 250*time.Millisecond) {
		err := e.resume(ctx, id, opts)
		if !errors.Is(err, errStopping) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("durable: resume %q: its cancelled code is still stopping: %w", id, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// errStopping: the run is a cancelled queued run whose code still runs.
var errStopping = errors.New("durable: run still stopping")

func (e *Engine) resume(ctx context.Context, id string, opts *ResumeOpts) error {
	resumed := false
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		var err error
		if resumed, err = e.cq.Resume(ctx, tx, id); err != nil || !resumed {
			return err
		}
		if opts != nil && opts.RetryFailedStep {
			_, err = e.cq.DropFailedStep(ctx, tx, id)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("durable: resume %q: %w", id, err)
	}
	if resumed {
		e.recov.Wake()
		return nil
	}
	info, err := readRun(ctx, e.q, e.pool, id)
	if err != nil {
		return err
	}
	switch info.status {
	case StatusCancelled, StatusDead, StatusError:
		// The statement refused it only while its cancelled code was
		// stopping; that may have ended since (the read comes after):
		// try again.
		return errStopping
	}
	return fmt.Errorf("%w: workflow %q is %s; only cancelled, dead or failed runs can be resumed", ErrInvalidArgument, id, info.status)
}

// ForkOpts are options of [Workflow.Fork] and [Engine.Fork].
type ForkOpts struct {
	// ID of the new run. Defaults to a new UUIDv7.
	ID string
	// AppVersion of the new run: only executors of that version run it.
	// Defaults to the engine's Config.AppVersion.
	AppVersion string
	// Workflow is the workflow the new run is a run of. Defaults to the
	// source run's. Another workflow must replay the reused steps as they
	// were recorded (the same steps in the same order): the same code
	// with other settings, such as an agent defined again with another
	// prompt or model (agentkit's Agent.ForkAt).
	Workflow string
	// Tags are the new run's tags, as StartOpts.Tags; an empty, non-nil
	// map gives it none. Defaults to nil: the source run's tags as they
	// are now (those its code set after the fork's position included).
	Tags map[string]string
}

// Fork starts a new run of w with the input of run id, reusing the outputs
// id recorded before step position fromStep (0 reruns everything): the
// "fix the bug, re-run from the failed step" path. Steps before fromStep
// are replayed, not run again. It fails with ErrInvalidArgument when
// fromStep is past the run's last recorded step.
func (w *Workflow[P, R]) Fork(ctx context.Context, id string, fromStep int, opts *ForkOpts) (*Handle[R], error) {
	newID, err := w.e.fork(ctx, id, w.def.name, fromStep, opts)
	if err != nil {
		return nil, err
	}
	return &Handle[R]{e: w.e, id: newID}, nil
}

// Fork is [Workflow.Fork] for a process that does not register the run's
// workflow (an operator tool): it forks run id of whatever workflow and
// returns the new run's ID. An executor of the new run's AppVersion that
// registers the workflow runs it.
func (e *Engine) Fork(ctx context.Context, id string, fromStep int, opts *ForkOpts) (string, error) {
	if err := checkName("workflow ID", id); err != nil {
		return "", err
	}
	return e.fork(ctx, id, "", fromStep, opts)
}

// fork forks run id, which must be a run of workflow name unless name is "".
func (e *Engine) fork(ctx context.Context, id, name string, fromStep int, opts *ForkOpts) (_ string, err error) {
	if name != "" {
		if err := checkExisting(ctx, e.q, e.pool, id, name, nil, ""); err != nil {
			return "", err
		}
	} else if info, err := readRun(ctx, e.q, e.pool, id); err != nil {
		return "", err
	} else {
		name = info.name
	}
	var o ForkOpts
	if opts != nil {
		o = *opts
	}
	newID := o.ID
	if newID == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return "", err
		}
		newID = u.String()
	}
	if err := checkName("workflow ID", newID); err != nil {
		return "", err
	}
	if o.Workflow != "" {
		if err := checkName("ForkOpts.Workflow", o.Workflow); err != nil {
			return "", err
		}
		name = o.Workflow
	}
	version := o.AppVersion
	if version == "" {
		version = e.cfg.AppVersion
	} else if len(version) > maxNameLen {
		return "", fmt.Errorf("%w: ForkOpts.AppVersion is longer than %d bytes", ErrInvalidArgument, maxNameLen)
	}
	tags, err := encodeTags("ForkOpts.Tags", o.Tags)
	if err != nil {
		return "", err
	}
	sp := e.tr.fork(ctx, name, newID, id, fromStep)
	defer func() { sp.end(err) }()
	err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		n, err := e.cq.CountSteps(ctx, tx, id)
		if err != nil {
			return err
		}
		if fromStep < 0 || fromStep > n {
			return fmt.Errorf("%w: fork of %q from step %d: the run has %d recorded steps (0..%d)", ErrInvalidArgument, id, fromStep, n, n)
		}
		err = e.cq.ForkRun(ctx, tx, sysdb.ForkRunParams{SourceID: id, ID: newID, AppVersion: version, TraceContext: sp.traceparent(),
			Workflow: o.Workflow, ReplaceTags: o.Tags != nil, Tags: tags})
		if err != nil {
			return err
		}
		_, err = e.cq.ForkSteps(ctx, tx, sysdb.ForkStepsParams{SourceID: id, ID: newID, Before: fromStep})
		return err
	})
	if err != nil {
		var pgErr interface{ SQLState() string }
		if errors.As(err, &pgErr) && pgErr.SQLState() == "23505" {
			return "", fmt.Errorf("%w: fork target %q", ErrWorkflowConflict, newID)
		}
		if errors.Is(err, ErrInvalidArgument) {
			return "", err
		}
		return "", fmt.Errorf("durable: fork %q: %w", id, err)
	}
	e.met.started(ctx, name, startFork)
	e.recov.Wake()
	return newID, nil
}

// Patched reports whether the calling run takes the new code path of the
// patch named name. Runs that reach this point after the patch was deployed
// record a marker and take it (true); runs that had already passed this
// point under the old code replay without it (false), so their recorded
// steps still line up. Wrap changed workflow code in
// `if durable.Patched(wctx, "fix-x") { new } else { old }`.
func Patched(wctx Context, name string) (bool, error) {
	if err := checkName("patch name", name); err != nil {
		return false, err
	}
	r := wctx.workflowRun()
	marker := "durable.patch:" + name
	rec, err := r.hist.at(int(r.next.Load()))
	if err != nil {
		return false, err
	}
	if rec != nil && rec.name != marker {
		return false, nil // recorded under the old code: no marker here
	}
	_, err = step(wctx, marker, func(context.Context) (bool, error) { return true, nil }, &StepOpts{Retry: noRetry})
	return err == nil, err
}
