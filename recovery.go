package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
	rows, err := e.pool.Query(ctx, e.q.ReleaseUnrunnable, e.cfg.ExecutorID, e.cfg.AppVersion, e.names)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id, name, version string
		if err := rows.Scan(&id, &name, &version); err != nil {
			rows.Close()
			return nil, err
		}
		e.reportUnrunnable(id, name, version)
	}
	if err := rows.Err(); err != nil {
		return nil, err
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
	var n int64
	var ignored *string
	if err := e.pool.QueryRow(ctx, e.q.HandBackOwn, e.cfg.ExecutorID, e.cfg.AppVersion, e.names, ids).Scan(&n, &ignored); err != nil {
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
		rows, err := e.pool.Query(ctx, e.q.ClaimOwn, e.cfg.ExecutorID, e.cfg.AppVersion, e.names, batch, afterCreated, afterID)
		if err != nil {
			return nil, err
		}
		n := 0
		for rows.Next() {
			var c claimed
			var created time.Time
			if err := rows.Scan(&c.id, &c.name, &c.input, &c.epoch, &c.attempts, &c.deadline, &c.queue, &c.trace, &c.queued, &created); err != nil {
				rows.Close()
				return nil, err
			}
			all = append(all, c)
			n++
			if created.After(afterCreated) || (created.Equal(afterCreated) && c.id > afterID) {
				afterCreated, afterID = created, c.id
			}
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if n < batch {
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
	rows, err := e.pool.Query(ctx, e.q.CountOtherVersions, e.cfg.AppVersion, e.names)
	if err != nil {
		if ctx.Err() == nil { // not the engine stopping
			e.log.Warn("durable: count runs of other versions", "err", err)
		}
		return
	}
	type group struct {
		name, version string
		n             int64
	}
	var groups []group
	for rows.Next() {
		var g group
		if rows.Scan(&g.name, &g.version, &g.n) != nil {
			rows.Close()
			return
		}
		groups = append(groups, g)
	}
	if rows.Err() != nil {
		return
	}
	// Log only when the picture changed, not on every sweep.
	summary := fmt.Sprint(groups)
	if summary == e.lastOrphanReport {
		return
	}
	e.lastOrphanReport = summary
	for _, g := range groups {
		name, version, n := g.name, g.version, g.n
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
	var got []claimed
	conn, err := e.pool.Acquire(ctx)
	if err == nil {
		got, err = scanClaimed(conn.Query(ctx, e.q.ClaimOrphans, e.cfg.ExecutorID, e.cfg.AppVersion, e.names, limit, e.judgesLeases()))
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
	return len(got), e.startClaimed(ctx, got, nil)
}

func (e *Engine) deadLetter(ctx context.Context, c claimed, limit int) {
	dle := &DeadLetterError{WorkflowID: c.id, Attempts: c.attempts - 1, Limit: limit}
	errb := encodeError(dle)
	rows, err := e.pool.Query(ctx, e.q.DeadLetter, c.id, c.epoch, json.RawMessage(errb))
	if err == nil {
		rows.Close()
		err = rows.Err()
	}
	if err != nil {
		e.log.Warn("durable: dead-letter run", "workflow_id", c.id, "err", err)
		return
	}
	e.log.Error("durable: run dead-lettered: its executor kept dying while running it", "workflow_id", c.id,
		"workflow", c.name, "recovery_attempts", c.attempts-1, "limit", limit)
	e.tr.deadLetter(&c, limit, dle)
	e.hub.Wake(c.id, &outcome{status: StatusDead, err: errb})
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
		tag, err := e.lease.pool.Exec(hctx, e.q.Heartbeat, e.cfg.ExecutorID, e.incarnation, e.cfg.LeaseTTL.Milliseconds())
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
		case tag.RowsAffected() == 0:
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
			if _, err := e.pool.Exec(ctx, e.q.DeleteDeadExecutors); err != nil && ctx.Err() == nil {
				e.log.Warn("durable: delete dead executors", "err", err)
			}
		}
		// Sleep until the next parked run is due, at most one period.
		wait := period
		if next, ok, err := e.wq.NextWake(ctx, e.pool); err == nil && ok {
			wait = min(wait, max(next, time.Millisecond))
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

// scanClaimed reads the rows of a claim statement.
func scanClaimed(rows pgx.Rows, err error) ([]claimed, error) {
	if err != nil {
		return nil, err
	}
	var got []claimed
	for rows.Next() {
		var c claimed
		if err := rows.Scan(&c.id, &c.name, &c.input, &c.epoch, &c.attempts, &c.deadline, &c.queue, &c.trace, &c.queued); err != nil {
			rows.Close()
			return nil, err
		}
		got = append(got, c)
	}
	return got, rows.Err()
}
