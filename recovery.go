package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
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

// recoverOwn runs at Launch: it hands back pending runs of this executor
// ID that this binary cannot run, then resumes all the others.
func (e *Engine) recoverOwn(ctx context.Context) error {
	if err := e.requeue(ctx, true); err != nil {
		return err
	}
	rows, err := e.pool.Query(ctx, e.q.ReleaseUnrunnable, e.cfg.ExecutorID, e.cfg.AppVersion, e.names)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id, name, version string
		if err := rows.Scan(&id, &name, &version); err != nil {
			rows.Close()
			return err
		}
		e.reportUnrunnable(id, name, version)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	afterCreated, afterID := time.Time{}, ""
	for {
		rows, err := e.pool.Query(ctx, e.q.ClaimOwn, e.cfg.ExecutorID, e.cfg.AppVersion, e.names, RecoveryBatchDefault, afterCreated, afterID)
		if err != nil {
			return err
		}
		var got []claimed
		for rows.Next() {
			var c claimed
			var created time.Time
			if err := rows.Scan(&c.id, &c.name, &c.input, &c.epoch, &c.attempts, &c.deadline, &c.queue, &c.trace, &c.queued, &created); err != nil {
				rows.Close()
				return err
			}
			got = append(got, c)
			if created.After(afterCreated) || (created.Equal(afterCreated) && c.id > afterID) {
				afterCreated, afterID = created, c.id
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if err := e.startClaimed(ctx, got, nil); err != nil {
			return err
		}
		if len(got) < RecoveryBatchDefault {
			break
		}
	}
	e.reportOrphansElsewhere(ctx)
	return nil
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

// claim takes up to one batch of runs with query (ClaimOwn or
// ClaimOrphans), loads their recorded steps in one query, and executes them.
func (e *Engine) claim(ctx context.Context, query string, args ...any) (int, error) {
	got, err := scanClaimed(e.pool.Query(ctx, query, append([]any{e.cfg.ExecutorID, e.cfg.AppVersion, e.names, RecoveryBatchDefault}, args...)...))
	if err != nil {
		return 0, err
	}
	return len(got), e.startClaimed(ctx, got, nil)
}

// startClaimed loads the recorded steps of runs this executor just claimed,
// in one query, and executes them (or dead-letters those over their
// recovery limit). q is the queue whose slots they take, if any.
func (e *Engine) startClaimed(ctx context.Context, got []claimed, q *Queue) error {
	if len(got) == 0 {
		return nil
	}
	// A queued run at epoch 1 was just claimed for the first time (it
	// was enqueued at epoch 0, and every later hand-back bumps the epoch):
	// it has no recorded steps to load. (Not so for other claims: a fork
	// is made at epoch 0 with the steps it copied.)
	ids := make([]string, 0, len(got))
	for _, c := range got {
		if q == nil || c.epoch != 1 {
			ids = append(ids, c.id)
		}
	}
	var steps map[string]map[int]*stepRecord
	err := e.retryBG(ctx, "load steps of claimed runs", func(ctx context.Context) error {
		if len(ids) == 0 {
			return nil
		}
		var err error
		steps, err = e.loadSteps(ctx, ids)
		return err
	})
	if err != nil {
		// Claimed but not started (a database error that is not a lost
		// connection, or shutdown): the runs stay owned by us and pending;
		// the sweeper resumes them as strays, or the next boot does.
		e.noteDBTrouble()
		if q != nil {
			q.releaseN(len(got))
		}
		return fmt.Errorf("load steps of %d claimed runs: %w", len(ids), err)
	}
	for _, c := range got {
		def := e.defs[c.name]
		if c.attempts > def.maxRecovery {
			e.deadLetter(ctx, c, def.maxRecovery)
			if q != nil {
				q.release()
			}
			continue
		}
		if c.attempts > 0 {
			e.log.Info("durable: resuming run", "workflow_id", c.id, "workflow", c.name, "recovery_attempt", c.attempts, "recorded_steps", len(steps[c.id]))
		}
		r := e.newRun(c.id, c.name, c.epoch, steps[c.id], c.deadline)
		r.queue = q
		e.traceClaimed(r, &c)
		e.launch(r, def, c.input)
	}
	return nil
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
		tag, err := e.pool.Exec(hctx, e.q.Heartbeat, e.cfg.ExecutorID, e.incarnation, e.cfg.LeaseTTL.Milliseconds())
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
	period := min(e.cfg.LeaseTTL/3, e.cfg.PollInterval)
	t := time.NewTimer(period)
	defer t.Stop()
	lastCleanup, lastStrayCheck := time.Now(), time.Now()
	for {
		for {
			n, err := e.claim(ctx, e.q.ClaimOrphans, e.judgesLeases())
			if err != nil {
				e.noteDBTrouble()
				if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
					e.log.Warn("durable: takeover sweep failed", "err", err)
				}
				break
			}
			if n < RecoveryBatchDefault {
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
		if e.judgesLeases() { // else peers' queued runs stay where they are for now
			if err := e.requeue(ctx, false); err != nil && ctx.Err() == nil {
				e.log.Warn("durable: requeue runs of dead executors", "err", err)
			}
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
