package durable

import (
	"context"
	"time"
)

// Reconcile. The database can say a run is pending and owned by this
// executor while no goroutine here runs it:
//   - its finish record was lost: finishes commit without waiting for the
//     WAL flush (see FinishOne in internal/sysdb), so a crash of Postgres
//     itself can undo the last few hundred milliseconds of them;
//   - a write of the run failed while the database was away, and the run
//     stopped here without an outcome.
//
// Boot recovery only looks at runs once, and takeover only at runs of dead
// executors, so a live executor compares its own pending runs with the ones
// it executes, every reconcileEvery and soon after the notification
// connection comes back, and resumes the difference by replay (or returns
// queued ones to their queue). Replay returns the recorded outcome of every
// step, so none of them runs again.

// reconcileAge is how long a row must have been left alone before it is
// reconciled: it keeps a run that was just inserted or claimed, and is on
// its way to a goroutine, out of the comparison.
func (e *Engine) reconcileAge() time.Duration { return max(e.cfg.LeaseTTL, 2*time.Second) }

// reconcileEvery is the period of the reconcile pass.
func (e *Engine) reconcileEvery() time.Duration { return max(e.cfg.LeaseTTL, 2*time.Second) }

// reconcileSoon asks the sweeper for a reconcile pass once rows written
// just before an outage are old enough to be compared.
func (e *Engine) reconcileSoon() {
	e.reconcileMu.Lock()
	e.reconcileAt = time.Now().Add(e.reconcileAge())
	e.reconcileMu.Unlock()
}

// reconcileIfDue runs a reconcile pass when one is due. The sweeper calls it.
func (e *Engine) reconcileIfDue(ctx context.Context) {
	e.reconcileMu.Lock()
	if e.reconcileAt.IsZero() {
		e.reconcileAt = time.Now().Add(e.reconcileEvery())
	}
	due := !time.Now().Before(e.reconcileAt)
	if due {
		e.reconcileAt = time.Now().Add(e.reconcileEvery())
	}
	e.reconcileMu.Unlock()
	if !due {
		return
	}
	if _, err := e.reconcile(ctx); err != nil && ctx.Err() == nil {
		e.log.Warn("durable: reconcile own runs", "err", err)
	}
}

// reconcile resumes pending runs this executor owns but does not execute,
// and returns queued ones to their queue. It reports how many it took.
func (e *Engine) reconcile(ctx context.Context) (int, error) {
	active := []string{} // not nil: a NULL array would match no row
	e.active.Range(func(k, _ any) bool {
		active = append(active, k.(string))
		return true
	})
	age := e.reconcileAge()
	total := 0
	for {
		got, err := scanClaimed(e.pool.Query(ctx, e.q.ReconcileOwn, e.cfg.ExecutorID, e.cfg.AppVersion, e.names,
			RecoveryBatchDefault, active, age))
		if err != nil {
			return total, err
		}
		for _, c := range got {
			e.log.Warn("durable: run pending in the database but not running here; resuming it by replay",
				"workflow_id", c.id, "workflow", c.name)
		}
		total += len(got)
		if err := e.startClaimed(ctx, got, nil); err != nil {
			return total, err
		}
		if len(got) < RecoveryBatchDefault {
			break
		}
	}
	rows, err := e.pool.Query(ctx, e.q.RequeueOwn, e.cfg.ExecutorID, active, age)
	if err != nil {
		return total, err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var n int64
		var ignored *string
		if err := rows.Scan(&name, &n, &ignored); err != nil {
			return total, err
		}
		total += int(n)
		e.log.Warn("durable: queued runs pending in the database but not running here; returned to their queue",
			"queue", name, "count", n)
		if q := e.queues[name]; q != nil {
			q.wake()
		}
	}
	return total, rows.Err()
}
