package durable

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Riding out database outages. While Postgres is away (restarted, failed
// over, network cut) runs keep their state in memory and retry their writes
// with backoff (run.retryDB); background loops log and try again; nothing is
// marked failed because the database was briefly unreachable. The helpers
// here cover what the run path alone cannot: reads whose answer a run or a
// loop cannot do without, and runs left owned by this executor but not
// executing because the acknowledgement of a claim or start was lost.

// retryBG runs op until it succeeds, fails with an error that is not a
// connection-class one (see isTransient), or ctx ends. It is the background
// loops' twin of run.retryDB.
func (e *Engine) retryBG(ctx context.Context, what string, op func(ctx context.Context) error) error {
	delay := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := op(ctx)
		if err == nil || !isTransient(err) || ctx.Err() != nil {
			return err
		}
		if attempt == 1 || attempt%10 == 0 {
			e.log.Warn("durable: database unreachable, retrying", "op", what, "attempt", attempt, "err", err)
		}
		t := time.NewTimer(jitter(delay, 0.2))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		delay = min(delay*2, 2*time.Second)
	}
}

// notOursToFinish reports whether a run halted for reason h must stay
// pending instead of being finished here: the engine is stopping, the run
// parked, was cancelled or changed owner, or the database was unreachable
// in a way the run could not ride out (then the sweeper resumes it, see
// adoptStrays). Other halts (non-determinism, undecodable records, the
// deadline, a database error that is not a connection problem) fail the run
// visibly.
func notOursToFinish(h error) bool {
	return errors.Is(h, ErrShutdown) || errors.Is(h, errParked) || errors.Is(h, ErrCancelled) ||
		errors.Is(h, ErrFenced) || (isTransient(h) && !errors.Is(h, context.DeadlineExceeded))
}

// wakeParentOfFinished wakes the parent parked on run id if id is finished.
// A finish whose answer was lost in an outage is retried and then touches
// no row; the wake-up of the first try may not have happened.
func (e *Engine) wakeParentOfFinished(ctx context.Context, id string) {
	err := e.retryBG(ctx, "wake parent", func(ctx context.Context) error {
		info, err := e.readRun(ctx, e.pool, id)
		if err != nil || !info.status.Finished() || info.parent == nil {
			return err
		}
		rows, err := e.pool.Query(ctx, e.q.WakeParent, id, *info.parent)
		if err == nil {
			rows.Close()
			err = rows.Err()
		}
		return err
	})
	if err != nil && ctx.Err() == nil && !errors.Is(err, ErrWorkflowNotFound) {
		e.log.Warn("durable: wake parent", "workflow_id", id, "err", err)
	}
}

// judgesLeases reports whether this executor may take over the runs of
// peers whose lease expired. An executor that was itself cut off from the
// database (its heartbeat failed) waits LeaseTTL/2 after that: in an outage
// every lease runs out at once, and the live peers need a moment to renew
// theirs (they retry within a second) before a lease that expired means a
// dead executor. Without the wait, the first executor back would take over
// the runs its live peers are still executing.
func (e *Engine) judgesLeases() bool {
	at := e.cutOffAt.Load()
	return at == 0 || time.Since(time.Unix(0, at)) > e.cfg.LeaseTTL/2
}

// launchGate counts the places that make a run owned by this executor and
// then execute it (start, claim, dispatch). adoptStrays only trusts what it
// reads while none is in flight, so it never mistakes a run about to be
// launched here for a stray.
type launchGate struct {
	started, ended atomic.Int64
}

// enter marks a launch in flight; call the returned func when it is over.
func (g *launchGate) enter() func() {
	g.started.Add(1)
	return func() { g.ended.Add(1) }
}

// quiet returns the number of launches so far and whether none is in
// flight.
func (g *launchGate) quiet() (int64, bool) {
	s := g.started.Load()
	return s, g.ended.Load() == s
}

// stray is a pending run owned by this executor that is not executing here.
type stray struct {
	id     string
	epoch  int64
	queued bool
}

// adoptStrays resumes the pending runs owned by this executor that are not
// executing in this process and not parked. They exist when a database
// outage cut a connection after a claim or a start committed but before
// its answer arrived: the runs are ours, our lease is live, so no peer
// takes them over. A queued one goes back to its queue (its slot must be
// taken through the queue's limits); any other is claimed again, with a
// new epoch, and executed.
func (e *Engine) adoptStrays(ctx context.Context) error {
	before, ok := e.launches.quiet()
	if !ok {
		return nil // look again on the next sweep
	}
	rows, err := e.pool.Query(ctx, e.q.OwnUnparked, e.cfg.ExecutorID, e.cfg.AppVersion, e.names)
	if err != nil {
		return err
	}
	var found []stray
	for rows.Next() {
		var s stray
		if err := rows.Scan(&s.id, &s.epoch, &s.queued); err != nil {
			rows.Close()
			return err
		}
		if _, running := e.active.Load(s.id); !running {
			found = append(found, s)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if after, _ := e.launches.quiet(); after != before || len(found) == 0 {
		return nil
	}
	for _, s := range found {
		if s.queued {
			var queue string
			err := e.pool.QueryRow(ctx, e.q.RequeueStray, s.id, s.epoch, e.cfg.ExecutorID).Scan(&queue)
			if err != nil {
				continue // changed meanwhile, or the database is away: next sweep
			}
			e.log.Info("durable: stray run of this executor returned to its queue", "workflow_id", s.id, "queue", queue)
			if q := e.queues[queue]; q != nil {
				q.wake()
			}
			continue
		}
		rows, err := e.pool.Query(ctx, e.q.ClaimStray, s.id, s.epoch, e.cfg.ExecutorID)
		got, err := scanClaimed(rows, err)
		if err != nil || len(got) == 0 {
			continue
		}
		e.log.Info("durable: resuming a stray run of this executor", "workflow_id", s.id)
		if err := e.startClaimed(ctx, got, nil); err != nil {
			return err
		}
	}
	return nil
}
