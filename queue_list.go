package durable

import (
	"context"
	"fmt"
)

// ListQueues returns a snapshot of every queue declared in the database,
// by any binary, by name: depth, running count, pause and live limits, as
// [Queue.Stats] gives for one. It works from any process, launched or not.
func (e *Engine) ListQueues(ctx context.Context) ([]QueueStats, error) {
	rows, err := e.qq.List(ctx, e.pool)
	if err != nil {
		return nil, fmt.Errorf("durable: list queues: %w", err)
	}
	var out []QueueStats
	for _, r := range rows {
		out = append(out, queueStats(r.Name, r.QueueSettingsRow, r.QueueStatsRow))
	}
	return out, nil
}
