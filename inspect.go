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
		var s stepRow
		if err := rows.Scan(&s.pos, &s.name, &s.status, &s.attempts, &s.started, &s.finished, &s.output, &s.errb); err != nil {
			return nil, fmt.Errorf("durable: list steps of %q: %w", id, err)
		}
		out = append(out, s.record())
	}
	return out, rows.Err()
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
	rows, err := e.pool.Query(ctx, e.q.ListStepWindow, id, from, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("durable: list steps of %q: %w", id, err)
	}
	defer rows.Close()
	var out []StepRecord
	total, found := 0, false
	for rows.Next() {
		found = true
		var s stepRow
		var pos, attempts *int
		var name, status *string
		var finished *time.Time
		if err := rows.Scan(&total, &pos, &name, &status, &attempts, &s.started, &finished, &s.output, &s.errb); err != nil {
			return nil, 0, fmt.Errorf("durable: list steps of %q: %w", id, err)
		}
		if pos == nil { // no step in the window
			continue
		}
		s.pos, s.name, s.status, s.attempts, s.finished = *pos, *name, *status, *attempts, *finished
		out = append(out, s.record())
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("durable: list steps of %q: %w", id, err)
	}
	if !found {
		return nil, 0, fmt.Errorf("%w: %q", ErrWorkflowNotFound, id)
	}
	return out, total, nil
}

// stepRow is a row of the steps table as the listings read it.
type stepRow struct {
	pos, attempts int
	name, status  string
	started       *time.Time
	finished      time.Time
	output, errb  []byte
}

func (s *stepRow) record() StepRecord {
	r := StepRecord{Pos: s.pos, Name: s.name, Status: s.status, Attempts: s.attempts, FinishedAt: s.finished, Output: s.output}
	if s.started != nil {
		r.StartedAt = *s.started
	}
	if s.errb != nil {
		r.Err = decodeError(s.errb)
	}
	return r
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
	rows, err := e.pool.Query(ctx, e.q.ListEvents, id)
	if err != nil {
		return nil, fmt.Errorf("durable: list events of %q: %w", id, err)
	}
	defer rows.Close()
	var out []EventRecord
	found := false
	for rows.Next() {
		found = true
		var key *string
		var updated *time.Time
		var ev EventRecord
		if err := rows.Scan(&key, &ev.Value, &updated); err != nil {
			return nil, fmt.Errorf("durable: list events of %q: %w", id, err)
		}
		if key == nil { // the run has no event
			continue
		}
		ev.Key, ev.UpdatedAt = *key, *updated
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("durable: list events of %q: %w", id, err)
	}
	if !found {
		return nil, fmt.Errorf("%w: %q", ErrWorkflowNotFound, id)
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
	sql, args := sysdb.ListWorkflows(e.cfg.Schema, sysdb.ListFilter{IDs: []string{id}, Limit: 1, Payloads: true})
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
