package durable

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/durable-go/durable/internal/sysdb"
)

// claimed is a run this executor just took ownership of.
type claimed struct {
	id, name string
	input    []byte
	epoch    int64
	attempts int
	deadline *time.Time
	queue    *string
	trace    *string        // W3C trace context stored at start
	queued   *time.Duration // time since the run was created (enqueued)
}

// claimedOf is the claimed run of a claim statement's row.
func claimedOf(c sysdb.ClaimedRow) claimed {
	return claimed{id: c.ID, name: c.Name, input: c.Input, epoch: c.Epoch, attempts: c.Attempts,
		deadline: c.Deadline, queue: c.Queue, trace: c.Trace, queued: c.Queued}
}

// claimedFrom is claimedOf for rows.
func claimedFrom(rows []sysdb.ClaimedRow) []claimed {
	out := make([]claimed, len(rows))
	for i, c := range rows {
		out[i] = claimedOf(c)
	}
	return out
}

// claimOwn runs at Launch, before the engine is launched: it hands back
// pending runs of this executor ID that this binary cannot run, and claims
// the others (left by an earlier incarnation) as far as the recovery slots
// allow, handing back the rest unowned for any executor to claim (see
// resume.go). As no run of this incarnation exists yet, every run it finds
// is an earlier one's. The caller starts the runs it claimed.
func (e *Engine) claimOwn(ctx context.Context) ([]claimed, error) {
	if err := e.requeue(ctx, true); err != nil {
		return nil, err
	}
	released, err := e.rcq.ReleaseUnrunnable(ctx, e.pool, sysdb.ReleaseUnrunnableParams{
		ExecutorID: e.cfg.ExecutorID, AppVersion: e.cfg.AppVersion, Names: e.names})
	if err != nil {
		return nil, err
	}
	for _, r := range released {
		e.reportUnrunnable(r.ID, r.Name, r.AppVersion)
	}
	slots := e.recov.take(e.cfg.RecoveryConcurrency)
	all, err := e.claimOwnUpTo(ctx, slots)
	if err != nil {
		e.recov.give(slots)
		return nil, err
	}
	e.recov.give(slots - len(all))
	if len(all) < slots {
		return all, nil
	}
	ids := make([]string, len(all))
	for i, c := range all {
		ids[i] = c.id
	}
	n, err := e.rcq.HandBackOwn(ctx, e.pool, sysdb.HandBackOwnParams{
		ExecutorID: e.cfg.ExecutorID, AppVersion: e.cfg.AppVersion, Names: e.names, Claimed: ids})
	if err != nil {
		e.recov.give(len(all))
		return nil, err
	}
	if n > 0 {
		e.log.Info("durable: pending runs of this executor beyond Config.RecoveryConcurrency handed back for any executor to claim",
			"count", n, "resumed_here", len(all))
	}
	return all, nil
}

// claimOwnUpTo claims up to limit pending runs of this executor ID, in
// batches that walk (created_at, id) forward, so a run is claimed once.
func (e *Engine) claimOwnUpTo(ctx context.Context, limit int) ([]claimed, error) {
	var all []claimed
	afterCreated, afterID := time.Time{}, ""
	for len(all) < limit {
		batch := min(RecoveryBatchDefault, limit-len(all))
		got, err := e.rcq.ClaimOwn(ctx, e.pool, sysdb.ClaimOwnParams{ExecutorID: e.cfg.ExecutorID, AppVersion: e.cfg.AppVersion,
			Names: e.names, Limit: batch, AfterCreated: afterCreated, AfterID: afterID})
		if err != nil {
			return nil, err
		}
		for _, c := range got {
			all = append(all, claimedOf(c.ClaimedRow))
			if c.Created.After(afterCreated) || (c.Created.Equal(afterCreated) && c.ID > afterID) {
				afterCreated, afterID = c.Created, c.ID
			}
		}
		if len(got) < batch {
			break
		}
	}
	return all, nil
}

func (e *Engine) reportUnrunnable(id, name, version string) {
	switch {
	case version != e.cfg.AppVersion:
		e.log.Warn("durable: pending run belongs to another application version; left for an executor of that version",
			"workflow_id", id, "workflow", name, "run_app_version", version, "app_version", e.cfg.AppVersion)
	default:
		e.log.Error("durable: pending run of a workflow not registered in this binary; left for an executor that registers it",
			"workflow_id", id, "workflow", name, "err", ErrNotRegistered)
	}
}

// reportOrphansElsewhere logs pending runs without a live owner that this
// executor will not take: another application version, or a workflow name
// this binary does not register.
func (e *Engine) reportOrphansElsewhere(ctx context.Context) {
	groups, err := e.rcq.CountOtherVersions(ctx, e.pool, sysdb.CountOtherVersionsParams{AppVersion: e.cfg.AppVersion, Names: e.names})
	if err != nil {
		if ctx.Err() == nil { // not the engine stopping
			e.log.Warn("durable: count runs of other versions", "err", err)
		}
		return
	}
	// Log only when the picture changed, not on every sweep.
	summary := fmt.Sprint(groups)
	if summary == e.lastOrphanReport {
		return
	}
	e.lastOrphanReport = summary
	for _, g := range groups {
		name, version, n := g.Name, g.AppVersion, g.Count
		if version != e.cfg.AppVersion {
			e.log.Warn("durable: pending runs wait for an executor of their application version",
				"workflow", name, "run_app_version", version, "count", n)
		} else {
			e.log.Error("durable: pending runs of a workflow not registered in this binary",
				"workflow", name, "count", n, "err", ErrNotRegistered)
		}
	}
}

// claimOrphans takes up to limit runs without a live owner (ClaimOrphans)
// and executes them, each in a recovery slot; the caller took limit slots,
// and those not used are given back. It returns how many runs it took.
// Whether it may take the runs of executors whose lease expired
// (judgesLeases) is decided once it holds a connection: a wait for one, the
// pool busy with the application's work, must not stretch a judgement made
// before it, in which time this executor's heartbeat may have failed.
func (e *Engine) claimOrphans(ctx context.Context, limit int) (int, error) {
	var got []sysdb.ClaimedRow
	conn, err := e.pool.Acquire(ctx)
	if err == nil {
		got, err = e.rcq.ClaimOrphans(ctx, conn, sysdb.ClaimOrphansParams{ExecutorID: e.cfg.ExecutorID,
			AppVersion: e.cfg.AppVersion, Names: e.names, Limit: limit, TakeExpired: e.judgesLeases()})
		conn.Release()
	}
	if err != nil {
		e.recov.give(limit)
		return 0, err
	}
	e.recov.give(limit - len(got)) // no wake-up: this is the sweeper
	if len(got) == limit && limit < RecoveryBatchDefault {
		e.recov.starve() // more may wait for a slot
	}
	return len(got), e.startClaimed(ctx, claimedFrom(got), nil)
}

func (e *Engine) deadLetter(ctx context.Context, c claimed, limit int) {
	dle := &DeadLetterError{WorkflowID: c.id, Attempts: c.attempts - 1, Limit: limit}
	errb := encodeError(dle)
	if _, err := e.rcq.DeadLetter(ctx, e.pool, sysdb.DeadLetterParams{ID: c.id, Epoch: c.epoch, Error: errb}); err != nil {
		e.log.Warn("durable: dead-letter run", "workflow_id", c.id, "err", err)
		return
	}
	e.log.Error("durable: run dead-lettered: its executor kept dying while running it", "workflow_id", c.id,
		"workflow", c.name, "recovery_attempts", c.attempts-1, "limit", limit)
	e.traceDeadLetter(&c, limit, dle)
	e.hub.wake(c.id, &outcome{status: StatusDead, err: errb})
}

// heartbeatLoop renews this executor's lease every LeaseTTL/3. After a
// failure (the database is away) it tries again sooner, with backoff, so
// the lease is renewed as soon as the database is back, before peers
// decide this executor died.
func (e *Engine) heartbeatLoop(ctx context.Context) {
	period := e.cfg.LeaseTTL / 3
	t := time.NewTimer(period)
	defer t.Stop()
	retry := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		hctx, cancel := context.WithTimeout(ctx, period)
		// On the lease's own pool (lease.go): never behind the application's work.
		renewed, err := e.lq.Heartbeat(hctx, e.lease.pool, sysdb.HeartbeatParams{ExecutorID: e.cfg.ExecutorID, Incarnation: e.incarnation, LeaseTTL: e.cfg.LeaseTTL})
		cancel()
		if err != nil {
			e.cutOffAt.Store(time.Now().UnixNano())
			e.noteDBTrouble()
			retry = min(max(2*retry, 50*time.Millisecond), period, time.Second)
			t.Reset(jitter(retry, 0.2))
		} else {
			retry = 0
			t.Reset(period)
		}
		switch {
		case err != nil:
			if ctx.Err() == nil {
				e.log.Warn("durable: heartbeat failed", "err", err, "retry_in", retry)
			}
		case !renewed:
			// The row is gone or another process took this executor ID.
			e.log.Error("durable: executor lease lost: another process uses this ExecutorID, or the row was deleted; runs in flight here will be fenced",
				"executor_id", e.cfg.ExecutorID)
		}
	}
}

// sweepLoop takes over runs without a live owner: those of executors whose
// lease expired, and unowned runs committed by StartTx. It wakes on
// notifications and polls every LeaseTTL/3 as a safety net.
func (e *Engine) sweepLoop(ctx context.Context) {
	period := min(e.cfg.LeaseTTL/3, e.pollInterval())
	t := time.NewTimer(period)
	defer t.Stop()
	lastCleanup, lastStrayCheck := time.Now(), time.Now()
	for {
		for {
			limit := e.recov.take(RecoveryBatchDefault)
			if limit == 0 {
				break // every recovery slot is in use: a run giving one back wakes us
			}
			n, err := e.claimOrphans(ctx, limit)
			if err != nil {
				e.noteDBTrouble()
				if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
					e.log.Warn("durable: takeover sweep failed", "err", err)
				}
				break
			}
			if n < limit {
				break
			}
		}
		if time.Since(lastStrayCheck) > strayCheckEvery {
			lastStrayCheck = time.Now()
			e.noteDBTrouble()
		}
		if err := e.adoptStrays(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("durable: resume stray runs", "err", err)
		}
		if err := e.requeue(ctx, false); err != nil && ctx.Err() == nil {
			e.log.Warn("durable: requeue runs of dead executors", "err", err)
		}
		e.reportOrphansElsewhere(ctx)
		if time.Since(lastCleanup) > 10*time.Minute {
			lastCleanup = time.Now()
			if _, err := e.rcq.DeleteDeadExecutors(ctx, e.pool); err != nil && ctx.Err() == nil {
				e.log.Warn("durable: delete dead executors", "err", err)
			}
		}
		// Sleep until the next parked run is due, at most one period.
		wait := period
		var next *time.Duration
		if err := e.pool.QueryRow(ctx, e.wq.NextWake).Scan(&next); err == nil && next != nil {
			wait = min(wait, max(*next, time.Millisecond))
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-e.kick:
		}
	}
}
