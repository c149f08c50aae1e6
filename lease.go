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
func newLease(e *Engine) *lease.Service {
	return lease.New(lease.Config{Pool: e.pool, Queries: e.lq, ExecutorID: e.cfg.ExecutorID,
		Incarnation: e.incarnation, AppVersion: e.cfg.AppVersion, LeaseTTL: e.cfg.LeaseTTL, Logger: e.log})
}

// fenceCheck runs the ownership check of a fence check on the lease's
// connections. When the engine has hard-stopped (they may be closed) it
// returns ErrShutdown.
func (rn *runner) fenceCheck(ctx context.Context, p sysdb.OwnershipCheckParams) (sysdb.OwnershipCheckRow, error) {
	if rn.e.hardCtx.Err() != nil {
		return sysdb.OwnershipCheckRow{}, fmt.Errorf("durable: fence check: %w", ErrShutdown)
	}
	return rn.e.lease.FenceCheck(ctx, p)
}
