package durable

import (
	"context"
	"fmt"

	"github.com/durable-go/durable/internal/lease"
	"github.com/durable-go/durable/internal/sysdb"
)

// newLease makes the engine's lease (internal/lease): its heartbeat, the
// judgement of outages, and the connections of its own the heartbeat and
// the fence checks use, never behind the application's work. Its pool is
// opened at Launch and closed at Shutdown; the user's pool is never
// closed by the engine.
func (e *Engine) newLease() *lease.Service {
	return lease.New(lease.Config{Pool: e.pool, Queries: e.lq, ExecutorID: e.cfg.ExecutorID,
		Incarnation: e.incarnation, AppVersion: e.cfg.AppVersion, LeaseTTL: e.cfg.LeaseTTL, Logger: e.log})
}

// fenceCheck runs the ownership check of a fence check on the lease's
// connections. When the engine has hard-stopped (they may be closed) it
// returns ErrShutdown.
func (e *Engine) fenceCheck(ctx context.Context, p sysdb.OwnershipCheckParams) (sysdb.OwnershipCheckRow, error) {
	if e.hardCtx.Err() != nil {
		return sysdb.OwnershipCheckRow{}, fmt.Errorf("durable: fence check: %w", ErrShutdown)
	}
	return e.lease.FenceCheck(ctx, p)
}

// noteDBTrouble says a database call of a path that makes runs owned by
// this executor failed: a claim or a start may have committed without its
// answer arriving, so the next sweep looks for strays (internal/recovery).
func (e *Engine) noteDBTrouble() { e.lease.NoteTrouble() }

// judgesLeases reports whether this executor may take over the runs of
// peers whose lease expired (see lease.Service.JudgesLeases).
func (e *Engine) judgesLeases() bool { return e.lease.JudgesLeases() }
