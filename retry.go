package durable

import (
	"context"
	"errors"
	"fmt"

	"github.com/durable-go/durable/internal/sysdb"
)

// A workflow's retry policy (WorkflowOpts.Retry): a run whose code fails
// is run again from its last checkpoint after a backoff, its retries
// counted with it, until the policy's attempts are spent; then it fails.

// retryableRun reports whether the failure cause of r's code may be
// retried by its workflow's policy: not a Permanent one (a Permanent step
// failure, a panic, an undecodable record or payload), not non-determinism
// (the same code fails the same way), not the run's own deadline, and not
// a cancel or a shutdown.
func retryableRun(r *run, cause error) bool {
	switch {
	case errors.Is(cause, ErrPermanent), errors.Is(cause, ErrNonDeterministic), errors.Is(cause, ErrDecode),
		errors.Is(cause, ErrPayloadTooLarge), errors.Is(cause, ErrCancelled), errors.Is(cause, ErrShutdown):
		return false
	}
	return !r.pastDeadline() && r.e.hardCtx.Err() == nil
}

// retryLater applies policy p to r, whose code failed with cause. It
// returns retried when the run is scheduled to run again (this execution
// then ends without finishing, and nothing of it is compensated), or when
// the decision halted the run (lost, cancelled, the engine stopping: see
// r.halted()). Otherwise the run fails now with err: cause, or after the
// first attempt, cause wrapped with the number of attempts made.
func retryLater(r *run, p *RetryPolicy, cause error) (retried bool, err error) {
	if p == nil || r.replaying != nil || !retryableRun(r, cause) {
		return false, cause
	}
	var n int
	if err := r.retryDB("read the run's retries", func(ctx context.Context) error {
		var err error
		n, err = r.e.cq.Retries(ctx, r.e.pool, r.id)
		return err
	}); err != nil {
		return true, r.halt(err)
	}
	if n+1 >= p.MaxAttempts {
		if n == 0 {
			return false, cause
		}
		return false, fmt.Errorf("durable: workflow %q failed after %d attempts: %w", r.id, n+1, cause)
	}
	if r.deferSteps {
		// The checkpoints the failed attempt has not written yet are kept:
		// the next attempt replays those steps.
		if err := r.deferred.flush(); err != nil { // pending.go
			return true, err
		}
	}
	delay := p.wait(n + 1)
	var ok bool
	if err := r.retryDB("schedule a retry", func(ctx context.Context) error {
		var err error
		ok, err = r.e.cq.RetryLater(ctx, r.e.pool, sysdb.RetryLaterParams{ID: r.id, Epoch: r.epoch, Retries: n,
			WakeAt: r.e.clock.now().Add(delay)})
		return err
	}); err != nil {
		return true, r.halt(err)
	}
	if !ok {
		return true, r.diagnose(-1, "retry", false)
	}
	r.e.recov.Wake() // it computes the next wake-up time
	r.log().Info("durable: run failed; its workflow's retry policy runs it again from its last checkpoint",
		"attempt", n+1, "retry_in", delay, "err", cause)
	return true, nil
}
