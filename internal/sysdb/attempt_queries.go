package sysdb

import (
	"context"
	"encoding/json"
)

// AttemptQueries are the statements of durable step attempts: the failed
// attempts of a step not recorded yet (step_attempts), written before
// each retry and read when runs are resumed, so a crash does not grant a
// step its whole retry budget again.
type AttemptQueries struct {
	recordAttempt string
	loadAttempts  string
}

// NewAttemptQueries renders the attempt statements for schema.
func NewAttemptQueries(schema string) *AttemptQueries {
	r := func(s string) string { return Render(s, schema) }
	return &AttemptQueries{
		// Counts the failed attempts of a step, only while its run is
		// pending and owned at epoch $6 (FOR SHARE: a change of owner waits
		// for this write, as for a checkpoint), so an executor that lost
		// the run cannot add to them.
		// $1 workflow_id, $2 pos, $3 name, $4 attempts, $5 error, $6 epoch.
		recordAttempt: r(`INSERT INTO {{schema}}.step_attempts (workflow_id, pos, name, attempts, error)
SELECT $1, $2, $3, $4, $5
FROM {{schema}}.workflows w
WHERE w.id = $1 AND w.epoch = $6 AND w.status = 'pending'
FOR SHARE OF w
ON CONFLICT (workflow_id, pos) DO UPDATE SET name = EXCLUDED.name, attempts = EXCLUDED.attempts,
	error = EXCLUDED.error, updated_at = now()`),

		// The failed attempts of the steps of runs $1 that have no recorded
		// outcome (an intent counts as none: its effect may run again).
		// $1 workflow_ids.
		loadAttempts: r(`SELECT a.workflow_id, a.pos, a.attempts FROM {{schema}}.step_attempts a
WHERE a.workflow_id = ANY($1::text[])
	AND NOT EXISTS (SELECT 1 FROM {{schema}}.steps s
		WHERE s.workflow_id = a.workflow_id AND s.pos = a.pos AND s.status <> 'intent')`),
	}
}

// RecordAttemptParams are the arguments of RecordAttempt.
type RecordAttemptParams struct {
	WorkflowID string
	Pos        int
	Name       string
	Attempts   int             // failed so far, this one included
	Error      json.RawMessage // the failure; nil: NULL
	Epoch      int64
}

// RecordAttempt records that p.Attempts attempts of the step at p.Pos
// failed. written is false when the run is not pending at p.Epoch.
func (q *AttemptQueries) RecordAttempt(ctx context.Context, db DBTX, p RecordAttemptParams) (written bool, err error) {
	tag, err := db.Exec(ctx, q.recordAttempt, p.WorkflowID, p.Pos, p.Name, p.Attempts, p.Error, p.Epoch)
	return tag.RowsAffected() == 1, err
}

// LoadAttemptsRow is a step of a run with failed attempts and no outcome.
type LoadAttemptsRow struct {
	WorkflowID string
	Pos        int
	Attempts   int
}

// LoadAttempts reads the failed attempts of the unrecorded steps of the
// runs ids (most runs have none).
func (q *AttemptQueries) LoadAttempts(ctx context.Context, db DBTX, ids []string) ([]LoadAttemptsRow, error) {
	rows, err := db.Query(ctx, q.loadAttempts, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []LoadAttemptsRow
	for rows.Next() {
		var r LoadAttemptsRow
		if err := rows.Scan(&r.WorkflowID, &r.Pos, &r.Attempts); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
