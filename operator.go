package durable

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/sysdb"
)

// Workflow returns run id as [Engine.ListWorkflows] lists it, with its
// input and output. It fails with ErrWorkflowNotFound for an unknown ID.
// It works from any process, for any run.
func (e *Engine) Workflow(ctx context.Context, id string) (WorkflowInfo, error) {
	if err := checkName("workflow ID", id); err != nil {
		return WorkflowInfo{}, err
	}
	runs, err := e.listRuns(ctx, sysdb.ListFilter{ID: id, Limit: 1, Payloads: true})
	if err != nil {
		return WorkflowInfo{}, err
	}
	if len(runs) == 0 {
		return WorkflowInfo{}, fmt.Errorf("%w: %q", ErrWorkflowNotFound, id)
	}
	return runs[0], nil
}

// ListQueues returns the stats of every queue declared in the database,
// by name: those of every binary sharing it, not only this one's.
func (e *Engine) ListQueues(ctx context.Context) ([]QueueStats, error) {
	rows, err := e.pool.Query(ctx, e.qq.Names)
	if err != nil {
		return nil, fmt.Errorf("durable: list queues: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("durable: list queues: %w", err)
	}
	out := make([]QueueStats, 0, len(names))
	for _, name := range names {
		st, err := e.QueueRef(name).Stats(ctx)
		if errors.Is(err, ErrQueueNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// markWaiting records that the run blocks in memory on topic, for
// WorkflowInfo.WaitTopic. It is called only once a Recv found no message,
// off the path of a message that is already there. A failure only costs
// the listing its topic, so it is logged, not returned.
func (r *run) markWaiting(topic string) {
	if _, err := r.e.pool.Exec(r.e.hardCtx, r.e.wq.SetWaitTopic, r.id, r.epoch, topic); err != nil {
		r.e.log.Warn("durable: record wait topic", "workflow_id", r.id, "topic", topic, "error", err)
	}
}

// unmarkWaiting clears what markWaiting recorded once the wait is over.
func (r *run) unmarkWaiting(topic string) {
	if _, err := r.e.pool.Exec(r.e.hardCtx, r.e.wq.ClearWaitTopic, r.id, r.epoch, topic); err != nil {
		r.e.log.Warn("durable: clear wait topic", "workflow_id", r.id, "topic", topic, "error", err)
	}
}
