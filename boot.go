package durable

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// awaitDatabase is Launch's first contact with the database. A database
// that cannot be reached yet (refused or lost connections, a server
// starting up or shutting down: the connection-class errors of
// isTransient) is waited for with the backoff the running engine uses in
// an outage, so a process that boots before its database (a whole stack
// started at once, a failover in progress) launches when the database
// comes up instead of exiting. ctx bounds the wait. Any other error (a
// bad password, an unknown database or role) fails at once: waiting would
// not fix it.
func awaitDatabase(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error {
	began := time.Now()
	tries := 1
	var last error
	err, stopped := retryTransient(ctx, func(ctx context.Context) error { return pool.Ping(ctx) }, func(attempt int, err error) {
		tries, last = attempt+1, err
		if attempt == 1 || attempt%10 == 0 {
			log.Warn("durable: launch: database unreachable, waiting for it", "attempt", attempt, "err", err)
		}
	})
	switch {
	case stopped && last != nil:
		return fmt.Errorf("durable: launch: database unreachable for %s (%d tries, last: %v): %w",
			time.Since(began).Round(time.Millisecond), tries, last, err)
	case err != nil:
		return fmt.Errorf("durable: launch: database unreachable: %w", err)
	}
	if tries > 1 {
		log.Info("durable: launch: database reachable", "waited", time.Since(began).Round(time.Millisecond), "tries", tries)
	}
	return nil
}
