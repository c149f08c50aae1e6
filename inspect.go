package durable

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/durable-go/durable/internal/sysdb"
)

// StepRecord is a recorded step of a run, as listed by [Engine.ListSteps].
type StepRecord struct {
	Pos        int
	Name       string
	Status     string // "done", "error", or "intent" (an IntentStep whose effect is in flight)
	Attempts   int
	StartedAt  time.Time
	FinishedAt time.Time
	Output     json.RawMessage // the recorded output, as stored
	Err        error           // the recorded error, or nil
}

// ListSteps returns the recorded steps of run id in position order. It
// works from any process, for any run, finished or not.
func (e *Engine) ListSteps(ctx context.Context, id string) ([]StepRecord, error) {
	if _, err := e.readRun(ctx, e.pool, id); err != nil {
		return nil, err
	}
	rows, err := e.pool.Query(ctx, e.q.ListSteps, id)
	if err != nil {
		return nil, fmt.Errorf("durable: list steps of %q: %w", id, err)
	}
	defer rows.Close()
	var out []StepRecord
	for rows.Next() {
		var s StepRecord
		var started *time.Time
		var output, errb []byte
		if err := rows.Scan(&s.Pos, &s.Name, &s.Status, &s.Attempts, &started, &s.FinishedAt, &output, &errb); err != nil {
			return nil, fmt.Errorf("durable: list steps of %q: %w", id, err)
		}
		if started != nil {
			s.StartedAt = *started
		}
		s.Output = output
		if errb != nil {
			s.Err = decodeError(errb)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// Inspect returns run id, with its input and output, as [Engine.ListWorkflows]
// describes runs. It works from any process, for any run, and fails with
// [ErrWorkflowNotFound] for an unknown ID.
func (e *Engine) Inspect(ctx context.Context, id string) (WorkflowInfo, error) {
	if err := checkName("workflow ID", id); err != nil {
		return WorkflowInfo{}, err
	}
	sql, args := sysdb.ListWorkflows(e.cfg.Schema, sysdb.ListFilter{ID: id, Limit: 1, Payloads: true})
	rows, err := e.pool.Query(ctx, sql, args...)
	if err != nil {
		return WorkflowInfo{}, fmt.Errorf("durable: inspect %q: %w", id, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return WorkflowInfo{}, fmt.Errorf("durable: inspect %q: %w", id, err)
		}
		return WorkflowInfo{}, fmt.Errorf("%w: %q", ErrWorkflowNotFound, id)
	}
	w, err := scanWorkflowInfo(rows)
	if err != nil {
		return WorkflowInfo{}, fmt.Errorf("durable: inspect %q: %w", id, err)
	}
	return w, nil
}
