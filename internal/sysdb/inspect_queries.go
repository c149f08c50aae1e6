package sysdb

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// InspectQueries are the statements that read runs, their recorded steps
// and their events for operators (listings, inspection), and a run's
// recorded step for its own replay.
type InspectQueries struct {
	schema         string
	step           string
	listSteps      string
	listStepWindow string
	listEvents     string
}

// NewInspectQueries renders the inspection statements for schema.
func NewInspectQueries(schema string) *InspectQueries {
	r := func(s string) string { return Render(s, schema) }
	return &InspectQueries{
		schema: schema,

		// $1 workflow_id, $2 pos.
		step: r(`SELECT ` + stepRowColumns + `
FROM {{schema}}.steps WHERE workflow_id = $1 AND pos = $2`),

		// $1 workflow_id.
		listSteps: r(`SELECT ` + stepRowColumns + `
FROM {{schema}}.steps WHERE workflow_id = $1 ORDER BY pos`),

		// A window of listSteps: from position $2, at most $3 steps; or,
		// when $2 is negative, the last $3. Every row carries the count of
		// all the run's steps; with none in the window, one row of NULLs
		// does; with no run $1, no row (one round trip, no separate read of
		// the run: the dashboard's live refresh calls it every second).
		listStepWindow: r(`SELECT c.n, s.pos, s.name, s.status, s.attempts, s.started_at, s.finished_at, s.output, s.error
FROM (SELECT count(*) AS n FROM {{schema}}.steps WHERE workflow_id = $1) c
CROSS JOIN (SELECT FROM {{schema}}.workflows WHERE id = $1) run
LEFT JOIN LATERAL (
	(SELECT * FROM {{schema}}.steps WHERE workflow_id = $1 AND $2::int >= 0 AND pos >= $2 ORDER BY pos LIMIT $3)
	UNION ALL
	(SELECT * FROM {{schema}}.steps WHERE workflow_id = $1 AND $2::int < 0 ORDER BY pos DESC LIMIT $3)
) s ON true
ORDER BY s.pos`),

		// The events a run published, latest value per key: one row of NULLs
		// for a run without events, no row for no run. $1 workflow_id.
		listEvents: r(`SELECT e.key, e.value, e.updated_at FROM {{schema}}.workflows w
LEFT JOIN {{schema}}.events e ON e.workflow_id = w.id
WHERE w.id = $1 ORDER BY e.key`),
	}
}

// stepRowColumns are the columns of a StepRow, in order.
const stepRowColumns = `pos, name, status, attempts, started_at, finished_at, output, error`

// StepRow is a recorded step. A NULL column is a nil pointer or slice.
type StepRow struct {
	Pos        int
	Name       string
	Status     string // "done", "error" or "intent"
	Attempts   int
	StartedAt  *time.Time
	FinishedAt time.Time
	Output     []byte // as stored (JSON)
	Error      []byte // as stored (JSON)
}

// scanStep reads the stepRowColumns of row into s.
func scanStep(row pgx.Row) (StepRow, error) {
	var s StepRow
	err := row.Scan(&s.Pos, &s.Name, &s.Status, &s.Attempts, &s.StartedAt, &s.FinishedAt, &s.Output, &s.Error)
	return s, err
}

// StepParams names a recorded step.
type StepParams struct {
	WorkflowID string
	Pos        int
}

// Step returns the step run p.WorkflowID recorded at p.Pos, or
// pgx.ErrNoRows.
func (q *InspectQueries) Step(ctx context.Context, db DBTX, p StepParams) (StepRow, error) {
	return scanStep(db.QueryRow(ctx, q.step, p.WorkflowID, p.Pos))
}

// ListSteps returns the steps run workflowID recorded, in position order.
func (q *InspectQueries) ListSteps(ctx context.Context, db DBTX, workflowID string) ([]StepRow, error) {
	rows, err := db.Query(ctx, q.listSteps, workflowID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (StepRow, error) { return scanStep(row) })
}

// ListStepWindowParams selects a window of a run's recorded steps.
type ListStepWindowParams struct {
	WorkflowID string
	From       int // the first position; negative: the last Limit steps
	Limit      int
}

// StepWindow is a window of a run's recorded steps.
type StepWindow struct {
	Steps []StepRow // in position order
	Total int       // the steps the run recorded in all
}

// ListStepWindow returns the window p selects; found is false when there
// is no run p.WorkflowID.
func (q *InspectQueries) ListStepWindow(ctx context.Context, db DBTX, p ListStepWindowParams) (w StepWindow, found bool, err error) {
	rows, err := db.Query(ctx, q.listStepWindow, p.WorkflowID, p.From, p.Limit)
	if err != nil {
		return w, false, err
	}
	defer rows.Close()
	for rows.Next() {
		found = true
		var pos, attempts *int
		var name, status *string
		var started, finished *time.Time
		var output, errb []byte
		if err := rows.Scan(&w.Total, &pos, &name, &status, &attempts, &started, &finished, &output, &errb); err != nil {
			return StepWindow{}, false, err
		}
		if pos == nil { // no step in the window
			continue
		}
		w.Steps = append(w.Steps, StepRow{Pos: *pos, Name: *name, Status: *status, Attempts: *attempts,
			StartedAt: started, FinishedAt: *finished, Output: output, Error: errb})
	}
	if err := rows.Err(); err != nil {
		return StepWindow{}, false, err
	}
	return w, found, nil
}

// EventRow is the latest value a run published under a key.
type EventRow struct {
	Key       string
	Value     []byte // as stored (JSON)
	UpdatedAt time.Time
}

// ListEvents returns the events run workflowID published, the latest value
// per key, in key order; found is false when there is no such run.
func (q *InspectQueries) ListEvents(ctx context.Context, db DBTX, workflowID string) (events []EventRow, found bool, err error) {
	rows, err := db.Query(ctx, q.listEvents, workflowID)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	for rows.Next() {
		found = true
		var key *string
		var updated *time.Time
		var value []byte
		if err := rows.Scan(&key, &value, &updated); err != nil {
			return nil, false, err
		}
		if key == nil { // the run has no event
			continue
		}
		events = append(events, EventRow{Key: *key, Value: value, UpdatedAt: *updated})
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	return events, found, nil
}
