package sysdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The typed statements of step checkpoints (see core_runs.go for the
// payload types).

// InsertStepParams is one step checkpoint, written only while its run is
// pending at Epoch: the arguments of InsertStep and InsertStepTx, and a
// row of InsertSteps and of the finishes that carry steps.
type InsertStepParams struct {
	WorkflowID    string
	Pos           int
	Name, Status  string
	Output, Error json.RawMessage // nil: NULL
	Attempts      int
	StartedAt     time.Time
	Epoch         int64
}

// uniqueViolation is the SQLSTATE of a step already recorded at its
// position.
const uniqueViolation = "23505"

// InsertStep writes one step checkpoint. written is false when the run is
// not pending at p.Epoch (fenced, or ended) or the step is already recorded:
// the statement has no ON CONFLICT clause (see InsertSteps), its unique
// violation is read as "not written".
func (q *Queries) InsertStep(ctx context.Context, db DBTX, p InsertStepParams) (written bool, err error) {
	tag, err := db.Exec(ctx, q.insertStep, p.WorkflowID, p.Pos, p.Name, p.Status, p.Output, p.Error, p.Attempts, p.StartedAt, p.Epoch)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == uniqueViolation {
		return false, nil
	}
	return tag.RowsAffected() == 1, err
}

// InsertSteps is InsertStep for many checkpoints in one statement (group
// commit): written[i] reports whether steps[i] was written (a fenced one
// is not). A step already recorded fails the whole statement with a unique
// violation; on any error no step is reported written.
func (q *Queries) InsertSteps(ctx context.Context, db DBTX, steps []*InsertStepParams) (written []bool, err error) {
	n := len(steps)
	var c stepColumns
	c.make(n)
	epochs := make(int8Array, n)
	type key struct {
		id  string
		pos int32
	}
	index := make(map[key]int, n)
	for i, s := range steps {
		c.add(s)
		epochs[i] = s.Epoch
		index[key{s.WorkflowID, int32(s.Pos)}] = i
	}
	rows, err := db.Query(ctx, q.insertSteps, c.ids, c.pos, c.names, c.statuses, c.outputs, c.errs, c.attempts, c.started, epochs)
	var k key // scanned into row after row: its fields escape once per batch
	return markWritten(rows, err, n, func(rows pgx.Rows) (int, error) {
		err := rows.Scan(&k.id, &k.pos)
		i, ok := index[k]
		if !ok {
			i = -1
		}
		return i, err
	})
}

// QueueInsertStepTx queues the checkpoint of a transaction step on b, to
// be sent inside the step's transaction ahead of its COMMIT. Where
// InsertStep would touch no row, it raises CheckpointRefused, which aborts
// the transaction: the COMMIT behind it then commits nothing. A step
// already recorded is refused too.
func (q *Queries) QueueInsertStepTx(b *pgx.Batch, p InsertStepParams) {
	b.Queue(q.insertStepTx, p.WorkflowID, p.Pos, p.Name, p.Status, p.Output, p.Error, p.Attempts, p.StartedAt, p.Epoch)
}

// CompleteIntentParams are the arguments of CompleteIntent.
type CompleteIntentParams struct {
	WorkflowID    string
	Pos           int
	Status        string
	Output, Error json.RawMessage // nil: NULL
	Attempts      int
	Epoch         int64
}

// CompleteIntent records the outcome of the intent step at p.Pos;
// completed is false when the run is not pending at p.Epoch or the step is
// not an intent (any more).
func (q *Queries) CompleteIntent(ctx context.Context, db DBTX, p CompleteIntentParams) (completed bool, err error) {
	tag, err := db.Exec(ctx, q.completeIntent, p.WorkflowID, p.Pos, p.Status, p.Output, p.Error, p.Attempts, p.Epoch)
	return tag.RowsAffected() == 1, err
}

// LoadStepsManyParams are the arguments of LoadStepsMany.
type LoadStepsManyParams struct {
	WorkflowIDs []string
	Budget      int // bytes of outputs and errors
	Window      int // steps of a run at most
	From        int // the first position read
}

// LoadStepsManyRow is one recorded step of a run LoadStepsMany read, or
// the only row of a run without steps from From on (HasStep false).
type LoadStepsManyRow struct {
	Run           int // index of the run in WorkflowIDs
	HasStep       bool
	Pos           int
	Name, Status  string
	Output, Error []byte
	Attempts      int
	// More: the run has steps recorded beyond the window read. Recorded:
	// how many steps it has (with From 0; else the window's). Both are the
	// same on every row of a run.
	More     bool
	Recorded int
}

// LoadStepsMany reads one window of recorded steps, from position p.From
// on, of each of the first runs of p.WorkflowIDs, in order: at most
// p.Window steps of a run, those whose outputs and errors fit p.Budget (the
// first step whatever its size), and the runs whose windows together fit
// p.Budget (the first run whatever its size). It calls each for every row,
// by run and position. The runs taken are WorkflowIDs[:n], n being one more
// than the last row's Run.
func (q *Queries) LoadStepsMany(ctx context.Context, db DBTX, p LoadStepsManyParams, each func(LoadStepsManyRow)) error {
	if p.Window < 1 {
		return fmt.Errorf("load steps: window %d, want at least 1", p.Window)
	}
	rows, err := db.Query(ctx, q.loadStepsMany, p.WorkflowIDs, p.Budget, p.Window, p.From)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var rank, recorded int64
		var pos, attempts *int32
		var name, status *string
		var row LoadStepsManyRow
		if err := rows.Scan(&rank, &pos, &name, &status, &row.Output, &row.Error, &attempts, &row.More, &recorded); err != nil {
			return err
		}
		if rank < 1 || rank > int64(len(p.WorkflowIDs)) {
			return fmt.Errorf("load steps: run rank %d out of 1..%d", rank, len(p.WorkflowIDs))
		}
		row.Run, row.Recorded = int(rank-1), int(recorded)
		if pos != nil {
			row.HasStep, row.Pos, row.Name, row.Status, row.Attempts = true, int(*pos), *name, *status, int(*attempts)
		}
		each(row)
	}
	return rows.Err()
}

// stepColumns are step checkpoints as the array arguments of the batch
// statements.
type stepColumns struct {
	ids, names, statuses textArray
	pos, attempts        int4Array
	outputs, errs        jsonArray
	started              timeArray
}

func (c *stepColumns) make(n int) {
	*c = stepColumns{ids: make(textArray, 0, n), names: make(textArray, 0, n), statuses: make(textArray, 0, n),
		pos: make(int4Array, 0, n), attempts: make(int4Array, 0, n), outputs: make(jsonArray, 0, n),
		errs: make(jsonArray, 0, n), started: make(timeArray, 0, n)}
}

// stepColumnsOf returns steps as columns.
func stepColumnsOf(steps []*InsertStepParams) *stepColumns {
	var c stepColumns
	c.make(len(steps))
	for _, s := range steps {
		c.add(s)
	}
	return &c
}

// finishArgs are the columns as the steps' arguments of the batch
// finishes that record steps ($6-$13).
func (c *stepColumns) finishArgs() []any {
	return []any{c.ids, c.pos, c.names, c.statuses, c.outputs, c.errs, c.attempts, c.started}
}

func (c *stepColumns) add(s *InsertStepParams) {
	c.ids, c.names, c.statuses = append(c.ids, s.WorkflowID), append(c.names, s.Name), append(c.statuses, s.Status)
	c.pos, c.attempts = append(c.pos, int32(s.Pos)), append(c.attempts, int32(s.Attempts))
	c.outputs, c.errs, c.started = append(c.outputs, s.Output), append(c.errs, s.Error), append(c.started, s.StartedAt)
}
