package durable

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/internal/sysdb"
)

// The lease's connections. The heartbeat that renews this executor's lease
// and the checks that tell whether a run is still this executor's (fence
// checks) must never wait for a connection behind the application's work:
// with the user's pool full of transaction steps blocked on locks (or of
// steps holding connections), a heartbeat waiting for one timed out every
// period, the lease expired, and a peer took over the runs of an executor
// that was alive and executing them. They go through a pool of their own,
// made at Launch from a copy of the user's pool config (so it connects the
// same way: same server or PgBouncer, same hooks and query mode) and closed
// at Shutdown; the user's pool is never closed by the engine.
//
// It has two connections: one a fence check may use, one that stays free
// for the heartbeat (fence checks take turns, see leasePool.fence).

const leasePoolConns = 2

type leasePool struct {
	pool  *pgxpool.Pool
	fence chan struct{} // held by the fence check using its connection
}

// openLeasePool makes the lease's pool (at Launch). It connects on first use.
func (e *Engine) openLeasePool() error {
	cfg := e.pool.Config() // a copy
	cfg.MaxConns = leasePoolConns
	cfg.MinConns = 0
	cfg.MinIdleConns = 0
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return fmt.Errorf("durable: launch: lease pool: %w", err)
	}
	e.lease = &leasePool{pool: p, fence: make(chan struct{}, 1)}
	return nil
}

// closeLeasePool closes the lease's pool (at Shutdown, after the heartbeat
// stopped and every run's context ended).
func (e *Engine) closeLeasePool() {
	if e.lease != nil {
		e.lease.pool.Close()
	}
}

// fenceCheck runs the ownership check of a fence check on the lease's
// pool. When the engine has hard-stopped (its pool may be closed) it
// returns ErrShutdown.
func (e *Engine) fenceCheck(ctx context.Context, p sysdb.OwnershipCheckParams) (sysdb.OwnershipCheckRow, error) {
	if e.hardCtx.Err() != nil {
		return sysdb.OwnershipCheckRow{}, fmt.Errorf("durable: fence check: %w", ErrShutdown)
	}
	select {
	case e.lease.fence <- struct{}{}:
	case <-ctx.Done():
		return sysdb.OwnershipCheckRow{}, ctx.Err()
	}
	defer func() { <-e.lease.fence }()
	return e.lq.OwnershipCheck(ctx, e.lease.pool, p)
}
