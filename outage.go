package durable

import (
	"context"
	"errors"
	"time"

	"github.com/durable-go/durable/internal/clock"
	"github.com/durable-go/durable/internal/sysdb"
)

// Riding out database outages. While Postgres is away (restarted, failed
// over, network cut) runs keep their state in memory and retry their writes
// with backoff (run.retryDB); background loops log and try again; nothing is
// marked failed because the database was briefly unreachable. The helpers
// here cover what the run path alone cannot: reads whose answer a run or a
// loop cannot do without. Runs left owned by this executor but not
// executing, because the acknowledgement of a claim or start was lost, are
// the recovery's (internal/recovery, its strays).

// retryTransient runs op until it succeeds or fails with an error that is
// not a connection-class one (see isTransient), backing off from 20 ms to
// 2 s between tries; onRetry sees each failure that is tried again. When
// ctx ends first it returns ctx's error and stopped.
func retryTransient(ctx context.Context, op func(ctx context.Context) error, onRetry func(attempt int, err error)) (err error, stopped bool) {
	delay := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := op(ctx)
		if err == nil || !isTransient(err) {
			return err, false
		}
		if ctx.Err() != nil {
			return ctx.Err(), true
		}
		onRetry(attempt, err)
		t := time.NewTimer(clock.Jitter(delay, 0.2))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err(), true
		}
		delay = min(delay*2, 2*time.Second)
	}
}

// retryBG is retryTransient for the background loops and the reads runs
// depend on: every failure asks for a stray check, and is logged now and
// then.
func (rn *runner) retryBG(ctx context.Context, what string, op func(ctx context.Context) error) error {
	err, _ := retryTransient(ctx, op, func(attempt int, err error) {
		rn.e.lease.NoteTrouble()
		if attempt == 1 || attempt%10 == 0 {
			rn.e.log.Warn("durable: database unreachable, retrying", "op", what, "attempt", attempt, "err", err)
		}
	})
	return err
}

// notOursToFinish reports whether a run halted for reason h must stay
// pending instead of being finished here: the engine is stopping, the run
// parked, was cancelled or changed owner, or the database was unreachable
// in a way the run could not ride out (then the sweeper resumes it as a
// stray, see internal/recovery). Other halts (non-determinism, undecodable records, the
// deadline, a database error that is not a connection problem) fail the run
// visibly.
func (rn *runner) notOursToFinish(h error) bool {
	if handedBack(h) {
		rn.e.lease.NoteTrouble() // the run is a stray now
		return true
	}
	return errors.Is(h, ErrShutdown) || errors.Is(h, errParked) || errors.Is(h, ErrCancelled) || errors.Is(h, ErrFenced)
}

// handedBack: the run stops without finishing because of the database.
func handedBack(h error) bool { return isTransient(h) && !errors.Is(h, context.DeadlineExceeded) }

// wakeParentOfFinished wakes the parent parked on run id if id is
// finished, and the runs parked in a Select on it if a waiter watches it.
// A finish whose answer was lost in an outage is retried and then touches
// no row; the wake-up of the first try may not have happened.
func (rn *runner) wakeParentOfFinished(ctx context.Context, id string) {
	err := rn.retryBG(ctx, "wake parent", func(ctx context.Context) error {
		info, err := readRun(ctx, rn.e.q, rn.e.pool, id)
		if err != nil || !info.status.Finished() {
			return err
		}
		if info.notify {
			if err := rn.e.q.WakeWatchers(ctx, rn.e.pool, []string{id}); err != nil {
				return err
			}
		}
		if info.parent == nil {
			return nil
		}
		_, err = rn.e.q.WakeParent(ctx, rn.e.pool, sysdb.WakeParentParams{ChildID: id, ParentID: *info.parent})
		return err
	})
	if err != nil && ctx.Err() == nil && !errors.Is(err, ErrWorkflowNotFound) {
		rn.e.log.Warn("durable: wake parent", "workflow_id", id, "err", err)
	}
}

// releaseStopped gives back the queue slots of cancelled runs that this
// executor holds and no longer executes: their code stopped without the
// release going through (an outage, a finish that found the run
// cancelled before the cancel's notification arrived).
func (rn *runner) releaseStopped(ctx context.Context, executing map[string]bool) error {
	hs, err := rn.e.qq.OwnStopping(ctx, rn.e.pool, rn.e.cfg.ExecutorID)
	if err != nil {
		return err
	}
	for _, h := range hs {
		if !executing[h.ID] && rn.active.load(h.ID) == nil {
			if _, err := rn.e.qq.Release(ctx, rn.e.pool, sysdb.ReleaseParams{ID: h.ID, Epoch: h.Epoch}); err != nil {
				return err
			}
		}
	}
	return nil
}
