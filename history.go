package durable

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
)

// HistoryFormat is the version of the history format [ExportHistory]
// writes. [ReadHistory] refuses a history of another version.
const HistoryFormat = 1

// History is the recorded history of one run: its input and its recorded
// steps, what a resume of the run replays. [ExportHistory] writes it as
// JSON (the fields' tags name the keys); [ReplayHistory] and
// durabletest.ReplayFile replay today's code against it.
type History struct {
	// Format is HistoryFormat.
	Format     int    `json:"format"`
	WorkflowID string `json:"workflow_id"`
	Workflow   string `json:"workflow"` // the registered workflow name
	AppVersion string `json:"app_version"`
	Status     Status `json:"status"` // the run's status when it was exported
	// Input is the run's input, as stored (JSON).
	Input json.RawMessage `json:"input"`
	// Output is the workflow's result, as stored, once it succeeded.
	Output json.RawMessage `json:"output,omitempty"`
	// Error is the recorded error of a failed, cancelled or dead run, as
	// stored: the JSON form of a [RecordedError].
	Error json.RawMessage `json:"error,omitempty"`
	// Steps are the recorded steps, by position. The engine's own calls
	// are steps too, named "durable.sleep", "durable.recv:<topic>",
	// "child:<workflow>" and so on.
	Steps []HistoryStep `json:"steps"`
}

// HistoryStep is one recorded step of a [History].
type HistoryStep struct {
	Pos    int    `json:"pos"`
	Name   string `json:"name"`
	Status string `json:"status"` // "done", "error", or "intent" (an IntentStep whose effect is in flight)
	// Output is the step's result, as stored (JSON), when it is done.
	Output json.RawMessage `json:"output,omitempty"`
	// Error is the step's recorded error, the JSON form of a
	// [RecordedError], when it failed.
	Error    json.RawMessage `json:"error,omitempty"`
	Attempts int             `json:"attempts,omitempty"`
}

// LoadHistory reads the recorded history of run id, in one snapshot, with
// nothing written. It works for any run, in flight or finished, from any
// process.
func LoadHistory(ctx context.Context, e *Engine, id string) (*History, error) {
	if e == nil {
		return nil, fmt.Errorf("%w: LoadHistory needs an engine", ErrInvalidArgument)
	}
	if err := checkName("workflow ID", id); err != nil {
		return nil, err
	}
	var h *History
	err := readOnly(ctx, e, pgx.RepeatableRead, func(tx pgx.Tx) error {
		row, found, err := e.q.WorkflowByID(ctx, tx, id)
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("%w: %q", ErrWorkflowNotFound, id)
		}
		steps, err := e.iq.ListSteps(ctx, tx, id)
		if err != nil {
			return err
		}
		h = &History{Format: HistoryFormat, WorkflowID: row.ID, Workflow: row.Name, AppVersion: row.AppVersion,
			Status: Status(row.Status), Input: row.Input, Output: row.Output, Error: row.Error, Steps: []HistoryStep{}}
		for _, s := range steps {
			h.Steps = append(h.Steps, HistoryStep{Pos: s.Pos, Name: s.Name, Status: s.Status, Output: s.Output, Error: s.Error, Attempts: s.Attempts})
		}
		return nil
	})
	if errors.Is(err, ErrWorkflowNotFound) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("durable: load history of %q: %w", id, err)
	}
	return h, nil
}

// ExportHistory writes the recorded history of run id to w as indented
// JSON (see [History]): a file to commit next to the workflow's tests and
// replay with durabletest.ReplayFile. It reads in one snapshot and writes
// nothing to the database. The command line does the same:
// `durable history export ID > run.json`.
func ExportHistory(ctx context.Context, e *Engine, id string, w io.Writer) error {
	h, err := LoadHistory(ctx, e, id)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(h); err != nil {
		return fmt.Errorf("durable: export history of %q: %w", id, err)
	}
	return nil
}

// ReadHistory reads a history written by [ExportHistory] and checks it: a
// malformed one is an [ErrInvalidArgument] naming the field.
func ReadHistory(r io.Reader) (*History, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var h History
	if err := dec.Decode(&h); err != nil {
		return nil, fmt.Errorf("%w: history: %v", ErrInvalidArgument, err)
	}
	if err := h.validate(); err != nil {
		return nil, err
	}
	// The values as the engine stores them: compact, as encoding/json
	// writes them (ExportHistory indents them).
	h.Input, h.Output, h.Error = compact(h.Input), compact(h.Output), compact(h.Error)
	for i := range h.Steps {
		h.Steps[i].Output, h.Steps[i].Error = compact(h.Steps[i].Output), compact(h.Steps[i].Error)
	}
	return &h, nil
}

// compact returns the valid JSON b without insignificant space.
func compact(b json.RawMessage) json.RawMessage {
	if b == nil {
		return nil
	}
	var out bytes.Buffer
	_ = json.Compact(&out, b) // valid: checked by validate
	return out.Bytes()
}

func (h *History) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: history: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
	}
	switch {
	case h.Format == 0:
		return bad("format is missing (want %d)", HistoryFormat)
	case h.Format != HistoryFormat:
		return bad("format %d is not %d, the version this library reads", h.Format, HistoryFormat)
	case !json.Valid(h.Input):
		return bad("input is missing or not JSON")
	case h.Status != "" && !validStatus(h.Status):
		return bad("status %q is not a run status", h.Status)
	}
	if err := checkName("history.workflow", h.Workflow); err != nil {
		return err
	}
	if err := checkName("history.workflow_id", h.WorkflowID); err != nil {
		return err
	}
	seen := make(map[int]bool, len(h.Steps))
	for i, s := range h.Steps {
		switch {
		case s.Pos < 0:
			return bad("steps[%d].pos %d is negative", i, s.Pos)
		case seen[s.Pos]:
			return bad("steps[%d].pos %d is recorded twice", i, s.Pos)
		case s.Status != stepDone && s.Status != stepError && s.Status != stepIntent:
			return bad("steps[%d].status %q is not done, error or intent", i, s.Status)
		case s.Output != nil && !json.Valid(s.Output):
			return bad("steps[%d].output is not JSON", i)
		case s.Error != nil && !json.Valid(s.Error):
			return bad("steps[%d].error is not JSON", i)
		}
		if err := checkName(fmt.Sprintf("history.steps[%d].name", i), s.Name); err != nil {
			return err
		}
		seen[s.Pos] = true
	}
	return nil
}

func validStatus(s Status) bool {
	switch s {
	case StatusEnqueued, StatusPending, StatusSuccess, StatusError, StatusCancelled, StatusDead:
		return true
	}
	return false
}

// ReplayError reports a recorded history that the code registered on an
// engine cannot replay: a resume of the run would stop it. Err is the
// cause: a [*NonDeterminismError] (the code calls another step than the
// one recorded at Pos), a [*DecodeError] (a recorded value no longer
// decodes into the code's type), [ErrNotRegistered], or what the code
// itself returned or panicked with ([*PanicError]) while replaying.
type ReplayError struct {
	WorkflowID string
	Workflow   string
	// Pos is the position of the last durable call the code made; -1
	// when it made none.
	Pos int
	Err error
}

func (e *ReplayError) Error() string {
	return fmt.Sprintf("durable: replay of run %q of workflow %q stopped: %v", e.WorkflowID, e.Workflow, e.Err)
}
func (e *ReplayError) Unwrap() error { return e.Err }

// ReplayHistory replays the code registered on e against h as a resume of
// the run would: a recorded step returns its recorded output or error
// without running its function, and the first durable call with no record
// (a step, a wait, an event) ends the replay, as that is where a live
// execution would go on. Nothing is executed and nothing is written; e
// need not be launched, and its database is not used. It returns nil when
// the code replays h, a [*ReplayError] when a resume would stop the run (a
// failure of the code is no divergence when the run recorded a failure as
// well), and ctx's error when ctx ended first.
//
// Code that blocks outside durable calls (it should not: see the package
// doc) can outlive the replay, which returns when ctx ends.
func ReplayHistory(ctx context.Context, e *Engine, h *History) error {
	if e == nil || h == nil {
		return fmt.Errorf("%w: ReplayHistory needs an engine and a history", ErrInvalidArgument)
	}
	if err := h.validate(); err != nil {
		return err
	}
	def := registered(e, h.Workflow)
	if def == nil {
		return &ReplayError{WorkflowID: h.WorkflowID, Workflow: h.Workflow, Pos: -1,
			Err: fmt.Errorf("%w: workflow %q is not registered on this engine", ErrNotRegistered, h.Workflow)}
	}
	steps := make(map[int]*stepRecord, len(h.Steps))
	for _, s := range h.Steps {
		steps[s.Pos] = &stepRecord{pos: s.Pos, name: s.Name, status: s.Status, output: s.Output, err: s.Error, attempts: s.Attempts}
	}
	o, err := replayHistory(ctx, e, def, h.WorkflowID, h.Input, wholeHistory(steps), h.Status.Finished())
	if err != nil {
		return err
	}
	if o.err == nil || (o.byCode && h.Status == StatusError) {
		return nil
	}
	return &ReplayError{WorkflowID: h.WorkflowID, Workflow: h.Workflow, Pos: o.pos, Err: o.err}
}

// registered returns the workflow registered on e under name, or nil.
func registered(e *Engine, name string) *wfDef {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.defs[name]
}

// readOnly runs f in a read-only transaction at level iso: the database
// itself refuses any write in it. It is rolled back: it wrote nothing.
func readOnly(ctx context.Context, e *Engine, iso pgx.TxIsoLevel, f func(tx pgx.Tx) error) error {
	tx, err := e.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	return f(tx)
}
