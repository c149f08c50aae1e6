package durable

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
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
	if _, err := readRun(ctx, e.q, e.pool, id); err != nil {
		return nil, err
	}
	steps, err := e.iq.ListSteps(ctx, e.pool, id)
	if err != nil {
		return nil, fmt.Errorf("durable: list steps of %q: %w", id, err)
	}
	return stepRecords(steps), nil
}

// StepWindowMax bounds the steps one [Engine.ListStepWindow] returns.
const StepWindowMax = 10000

// ListStepWindow returns at most limit recorded steps of run id, in
// position order, from position from on, or the last limit of them when
// from is negative; and how many steps the run has recorded in all. It is
// [Engine.ListSteps] for runs too long to read whole (an agent of
// thousands of turns).
func (e *Engine) ListStepWindow(ctx context.Context, id string, from, limit int) ([]StepRecord, int, error) {
	if limit < 1 || limit > StepWindowMax {
		return nil, 0, fmt.Errorf("%w: ListStepWindow: limit %d is outside 1..%d", ErrInvalidArgument, limit, StepWindowMax)
	}
	if from > math.MaxInt32 || from < math.MinInt32 {
		return nil, 0, fmt.Errorf("%w: ListStepWindow: from %d is out of range", ErrInvalidArgument, from)
	}
	if err := checkName("workflow ID", id); err != nil {
		return nil, 0, err
	}
	w, found, err := e.iq.ListStepWindow(ctx, e.pool, sysdb.ListStepWindowParams{WorkflowID: id, From: from, Limit: limit})
	if err != nil {
		return nil, 0, fmt.Errorf("durable: list steps of %q: %w", id, err)
	}
	if !found {
		return nil, 0, fmt.Errorf("%w: %q", ErrWorkflowNotFound, id)
	}
	return stepRecords(w.Steps), w.Total, nil
}

// stepRecords converts recorded steps for the caller; nil for none.
func stepRecords(steps []sysdb.StepRow) []StepRecord {
	var out []StepRecord
	for _, s := range steps {
		r := StepRecord{Pos: s.Pos, Name: s.Name, Status: s.Status, Attempts: s.Attempts, FinishedAt: s.FinishedAt, Output: s.Output}
		if s.StartedAt != nil {
			r.StartedAt = *s.StartedAt
		}
		if s.Error != nil {
			r.Err = decodeError(s.Error)
		}
		out = append(out, r)
	}
	return out
}

// EventRecord is the latest value run published under a key with
// [SetEvent], as listed by [Engine.ListEvents].
type EventRecord struct {
	Key       string
	Value     json.RawMessage
	UpdatedAt time.Time
}

// ListEvents returns the events run id published, the latest value per
// key, in key order. It works from any process, for any run.
func (e *Engine) ListEvents(ctx context.Context, id string) ([]EventRecord, error) {
	if err := checkName("workflow ID", id); err != nil {
		return nil, err
	}
	rows, found, err := e.iq.ListEvents(ctx, e.pool, id)
	if err != nil {
		return nil, fmt.Errorf("durable: list events of %q: %w", id, err)
	}
	if !found {
		return nil, fmt.Errorf("%w: %q", ErrWorkflowNotFound, id)
	}
	var out []EventRecord
	for _, ev := range rows {
		out = append(out, EventRecord{Key: ev.Key, Value: ev.Value, UpdatedAt: ev.UpdatedAt})
	}
	return out, nil
}

// Inspect returns run id, with its input and output, as [Engine.ListWorkflows]
// describes runs. It works from any process, for any run, and fails with
// [ErrWorkflowNotFound] for an unknown ID.
func (e *Engine) Inspect(ctx context.Context, id string) (WorkflowInfo, error) {
	if err := checkName("workflow ID", id); err != nil {
		return WorkflowInfo{}, err
	}
	runs, err := e.iq.List(ctx, e.pool, sysdb.ListFilter{IDs: []string{id}, Limit: 1, Payloads: true})
	if err != nil {
		return WorkflowInfo{}, fmt.Errorf("durable: inspect %q: %w", id, err)
	}
	if len(runs) == 0 {
		return WorkflowInfo{}, fmt.Errorf("%w: %q", ErrWorkflowNotFound, id)
	}
	return workflowInfo(runs[0]), nil
}
