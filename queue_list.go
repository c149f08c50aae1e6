package durable

import (
	"context"
	"fmt"
	"time"

	"github.com/durable-go/durable/internal/sysdb"
)

// ListQueues returns a snapshot of every queue declared in the database,
// by any binary, by name: depth, running count, pause and live limits, as
// [Queue.Stats] gives for one. It works from any process, launched or not.
func (e *Engine) ListQueues(ctx context.Context) ([]QueueStats, error) {
	rows, err := e.pool.Query(ctx, sysdb.ListQueues(e.cfg.Schema))
	if err != nil {
		return nil, fmt.Errorf("durable: list queues: %w", err)
	}
	defer rows.Close()
	var out []QueueStats
	for rows.Next() {
		var st QueueStats
		var period int64
		if err := rows.Scan(&st.Name, &st.Settings.GlobalConcurrency, &st.Settings.WorkerConcurrency,
			&st.Settings.PartitionConcurrency, &st.Settings.RateLimit, &period, &st.Paused,
			&st.Settings.ReleaseSlotWhileParked, &st.Ready, &st.Delayed, &st.Running); err != nil {
			return nil, fmt.Errorf("durable: list queues: %w", err)
		}
		st.Settings.RatePeriod = time.Duration(period) * time.Millisecond
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("durable: list queues: %w", err)
	}
	return out, nil
}
