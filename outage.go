package durable

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/sysdb"
)

// Riding out database outages. While Postgres is away (restarted, failed
// over, network cut) runs keep their state in memory and retry their writes
// with backoff (run.retryDB); background loops log and try again; nothing is
// marked failed because the database was briefly unreachable. The helpers
// here cover what the run path alone cannot: reads whose answer a run or a
// loop cannot do without, and runs left owned by this executor but not
// executing because the acknowledgement of a claim or start was lost.

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
		t := time.NewTimer(jitter(delay, 0.2))
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
func (e *Engine) retryBG(ctx context.Context, what string, op func(ctx context.Context) error) error {
	err, _ := retryTransient(ctx, op, func(attempt int, err error) {
		e.noteDBTrouble()
		if attempt == 1 || attempt%10 == 0 {
			e.log.Warn("durable: database unreachable, retrying", "op", what, "attempt", attempt, "err", err)
		}
	})
	return err
}

// noteDBTrouble says a database call of a path that makes runs owned by
// this executor failed: a claim or a start may have committed without its
// answer arriving, so the next sweep looks for strays (adoptStrays). The
// sweeper also looks every strayCheckEvery, whatever happened.
func (e *Engine) noteDBTrouble() { e.strayCheck.Store(true) }

const strayCheckEvery = 5 * time.Minute

// notOursToFinish reports whether a run halted for reason h must stay
// pending instead of being finished here: the engine is stopping, the run
// parked, was cancelled or changed owner, or the database was unreachable
// in a way the run could not ride out (then the sweeper resumes it, see
// adoptStrays). Other halts (non-determinism, undecodable records, the
// deadline, a database error that is not a connection problem) fail the run
// visibly.
func (e *Engine) notOursToFinish(h error) bool {
	if handedBack(h) {
		e.noteDBTrouble() // the run is a stray now
		return true
	}
	return errors.Is(h, ErrShutdown) || errors.Is(h, errParked) || errors.Is(h, ErrCancelled) || errors.Is(h, ErrFenced)
}

// handedBack: the run stops without finishing because of the database.
func handedBack(h error) bool { return isTransient(h) && !errors.Is(h, context.DeadlineExceeded) }

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
// the runs its live peers are still executing. A newly launched executor
// waits too: it cannot tell whether the database was just away.
func (e *Engine) judgesLeases() bool {
	return time.Since(time.Unix(0, e.cutOffAt.Load())) > e.cfg.LeaseTTL/2
}

// launchGate tracks the places that make a run owned by this executor and
// then execute it (start, claim, dispatch): between the two, the run is
// neither in the database's past nor in e.active. adoptStrays waits for
// the launches that may have written what it read, so it never mistakes a
// run about to be launched here for a stray.
type launchGate struct {
	mu       sync.Mutex
	last     int64
	inflight map[int64]struct{}
}

// enter marks a launch in flight; call the returned func when it is over.
func (g *launchGate) enter() func() {
	g.mu.Lock()
	g.last++
	n := g.last
	if g.inflight == nil {
		g.inflight = map[int64]struct{}{}
	}
	g.inflight[n] = struct{}{}
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		delete(g.inflight, n)
		g.mu.Unlock()
	}
}

// mark returns the number of the last launch entered so far.
func (g *launchGate) mark() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last
}

// settled reports whether every launch up to mark is over.
func (g *launchGate) settled(mark int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for n := range g.inflight {
		if n <= mark {
			return false
		}
	}
	return true
}

// adoptStrays resumes the pending runs owned by this executor that are not
// executing in this process and not parked. They exist when a database
// outage cut a connection after a claim or a start committed but before
// its answer arrived: the runs are ours, our lease is live, so no peer
// takes them over. A queued one goes back to its queue (its slot must be
// taken through the queue's limits); any other is claimed again, with a
// new epoch, and executed.
func (e *Engine) adoptStrays(ctx context.Context) error {
	if !e.strayCheck.Swap(false) {
		return nil
	}
	// Runs executing here before the read are not strays, even if they
	// finish (and leave e.active) before the check below: the read may
	// still have seen them pending. One that halts on a database error
	// later marks the trouble again, and the next sweep looks at it.
	executing := e.active.ids()
	if err := e.releaseStopped(ctx, executing); err != nil {
		e.noteDBTrouble()
		return err
	}
	candidates, err := e.rcq.OwnUnparked(ctx, e.pool, sysdb.OwnUnparkedParams{
		ExecutorID: e.cfg.ExecutorID, AppVersion: e.cfg.AppVersion, Names: e.names})
	if err != nil {
		e.noteDBTrouble()
		return err
	}
	if len(candidates) == 0 {
		return nil
	}
	// A launch that wrote a row we read entered the gate before our read
	// ended: once those are over, their runs are in e.active (or done).
	mark := e.launches.mark()
	for giveUp := time.Now().Add(5 * time.Second); !e.launches.settled(mark); {
		if time.Now().After(giveUp) {
			e.noteDBTrouble()
			return nil // a launch is slow (the database is away?): next sweep
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	var found []sysdb.OwnUnparkedRow
	for _, s := range candidates {
		if !executing[s.ID] && e.active.load(s.ID) == nil {
			found = append(found, s)
		}
	}
	for _, s := range found {
		p := sysdb.StrayParams{ID: s.ID, Epoch: s.Epoch, ExecutorID: e.cfg.ExecutorID}
		if s.Queued {
			queue, ok, err := e.rcq.RequeueStray(ctx, e.pool, p)
			if err != nil {
				e.noteDBTrouble() // look again on the next sweep
			}
			if !ok {
				continue
			}
			e.log.Info("durable: stray run of this executor returned to its queue", "workflow_id", s.ID, "queue", queue)
			if q := e.queues[queue]; q != nil {
				q.wake()
			}
			continue
		}
		if e.recov.take(1) == 0 {
			e.noteDBTrouble() // no recovery slot free (resume.go): look again on the next sweep
			continue
		}
		got, err := e.rcq.ClaimStray(ctx, e.pool, p)
		if err != nil {
			e.noteDBTrouble()
		}
		if err != nil || len(got) == 0 {
			e.recov.give(1)
			continue
		}
		e.log.Info("durable: resuming a stray run of this executor", "workflow_id", s.ID)
		if err := e.startClaimed(ctx, claimedFrom(got), nil); err != nil {
			return err
		}
	}
	return nil
}

// releaseStopped gives back the queue slots of cancelled runs that this
// executor holds and no longer executes: their code stopped without the
// release going through (an outage, a finish that found the run
// cancelled before the cancel's notification arrived).
func (e *Engine) releaseStopped(ctx context.Context, executing map[string]bool) error {
	rows, err := e.pool.Query(ctx, e.qq.OwnStopping, e.cfg.ExecutorID)
	if err != nil {
		return err
	}
	type held struct {
		ID    string
		Epoch int64
	}
	hs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[held])
	if err != nil {
		return err
	}
	for _, h := range hs {
		if !executing[h.ID] && e.active.load(h.ID) == nil {
			if _, err := e.pool.Exec(ctx, e.qq.Release, h.ID, h.Epoch); err != nil {
				return err
			}
		}
	}
	return nil
}
