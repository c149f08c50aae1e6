package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/sysdb"
)

// TestHotWritesFindRunsByPrimaryKey: the statements on the step and finish
// path find each run by its primary key even when the statistics are stale.
// The table is analyzed while every run is finished, then all of them become
// pending, as after a burst: the planner believes almost no run is pending.
// With a partial index on pending runs usable by these statements, or a join
// left to that belief, a write then scans all pending runs once per row (the
// drain of the bench went from 14,000 to 1,800 runs/s). The check counts the
// rows of the workflows table each statement's plan looked at
// (EXPLAIN ANALYZE, rolled back), with custom and with generic plans.
func TestHotWritesFindRunsByPrimaryKey(t *testing.T) {
	t.Parallel()
	ctx, pool, schema := migratedSchema(t)
	const runs, batch = 3000, 50
	wf := pgx.Identifier{schema, "workflows"}.Sanitize()
	for _, st := range []struct {
		sql  string
		args []any
	}{
		// Runs r1..r3000; the first 50 are children of parents p1..p50,
		// which are parked waiting for them.
		{`INSERT INTO ` + wf + ` (id, name, status, app_version, epoch, parent_id)
		  SELECT 'r' || i, 'w', 'success', 'v', 1, CASE WHEN i <= $1 THEN 'p' || i END FROM generate_series(1, $2) i`,
			[]any{batch, runs}},
		{`INSERT INTO ` + wf + ` (id, name, status, app_version, epoch, wake_at, wait_topic)
		  SELECT 'p' || i, 'w', 'success', 'v', 1, now() + interval '1 hour', 'child:r' || i FROM generate_series(1, $1) i`,
			[]any{batch}},
		{`ANALYZE ` + wf, nil},
		{`UPDATE ` + wf + ` SET status = 'pending', epoch = 2, executor_id = CASE WHEN id LIKE 'p%' THEN NULL ELSE 'x' END`, nil},
	} {
		if _, err := pool.Exec(ctx, st.sql, st.args...); err != nil {
			t.Fatalf("%s: %v", st.sql, err)
		}
	}

	q := sysdb.New(schema, true)
	wq := sysdb.NewWaitQueries(schema, q.Channel)
	sq := sysdb.NewStreamQueries(schema, q.Channel)
	ids := make([]string, batch)
	for i := range ids {
		ids[i] = fmt.Sprintf("r%d", i+1)
	}
	now := time.Now()
	out := json.RawMessage(`1`)
	park, parkArgs := statementOf(func(db sysdb.DBTX) {
		_, _ = wq.Park(ctx, db, sysdb.ParkParams{ID: "r7", Epoch: 2, WakeAt: now.Add(time.Hour), Topic: "t"})
	})
	handBack, handBackArgs := statementOf(func(db sysdb.DBTX) {
		_, _ = wq.HandBack(ctx, db, sysdb.HandBackParams{ID: "r7", Epoch: 2})
	})
	appendSQL, appendArgs := statementOf(func(db sysdb.DBTX) {
		_, _ = sq.Append(ctx, db, sysdb.AppendParams{WorkflowIDs: ids, Keys: fillN(batch, "k"), Offsets: fillN(batch, int64(0)),
			Values: fillN(batch, out), Closed: fillN(batch, false), Wseqs: fillN[*int64](batch, nil), Epochs: fillN(batch, int64(2))})
	})
	step := func(id string) *sysdb.InsertStepParams {
		return &sysdb.InsertStepParams{WorkflowID: id, Pos: 1, Name: "s", Status: "done", Output: out, Attempts: 1, StartedAt: now, Epoch: 2}
	}
	steps := make([]*sysdb.InsertStepParams, batch)
	finishes := make([]*sysdb.FinishOneParams, batch)
	for i, id := range ids {
		steps[i], finishes[i] = step(id), &sysdb.FinishOneParams{ID: id, Epoch: 2, Status: "success", Output: out}
	}
	cases := []planCase{
		typedCase(t, "InsertStep", func(db sysdb.DBTX) error { _, err := q.InsertStep(ctx, db, *step("r7")); return err }),
		typedCase(t, "InsertSteps", func(db sysdb.DBTX) error { _, err := q.InsertSteps(ctx, db, steps); return err }),
		typedCase(t, "InsertStepTx", func(db sysdb.DBTX) error {
			b := &pgx.Batch{}
			q.QueueInsertStepTx(b, *step("r7"))
			_, err := db.Exec(ctx, b.QueuedQueries[0].SQL, b.QueuedQueries[0].Arguments...)
			return err
		}),
		typedCase(t, "CompleteIntent", func(db sysdb.DBTX) error {
			_, err := q.CompleteIntent(ctx, db, sysdb.CompleteIntentParams{WorkflowID: "r7", Pos: 1, Status: "done", Output: out, Attempts: 1, Epoch: 2})
			return err
		}),
		typedCase(t, "FinishOne", func(db sysdb.DBTX) error { _, _, err := q.FinishOne(ctx, db, *finishes[6]); return err }),
		typedCase(t, "FinishWorkflows", func(db sysdb.DBTX) error { _, _, err := q.FinishWorkflows(ctx, db, finishes); return err }),
		typedCase(t, "FinishHandOn", func(db sysdb.DBTX) error {
			_, _, _, err := q.FinishHandOn(ctx, db, finishes, steps, sysdb.HandOnParams{IDs: ids, Queues: []string{"q"}, Running: []int{batch},
				ExecutorID: "x", AppVersion: "v", Workflows: []string{"w"}})
			return err
		}),
		typedCase(t, "WakeParent", func(db sysdb.DBTX) error {
			_, err := q.WakeParent(ctx, db, sysdb.WakeParentParams{ChildID: "r7", ParentID: "p7"})
			return err
		}),
		typedCase(t, "SetTag", func(db sysdb.DBTX) error {
			_, err := sysdb.NewTagQueries(schema).SetTag(ctx, db, sysdb.SetTagParams{WorkflowID: "r7", Epoch: 2, Pos: 1, Name: "durable.tag:k",
				Key: "k", Value: "v", StartedAt: now, MaxTags: MaxTags})
			return err
		}),
		typedCase(t, "MarkWaits", func(db sysdb.DBTX) error {
			_, err := wq.MarkWaits(ctx, db, "r7", 2, []string{"msg:t"})
			return err
		}),
		typedCase(t, "ClearWaits", func(db sysdb.DBTX) error { return wq.ClearWaits(ctx, db, "r7", 2) }),
		typedCase(t, "LockRun", func(db sysdb.DBTX) error { return wq.LockRun(ctx, db, "r7") }),
		{"Park", park, parkArgs},
		{"HandBack", handBack, handBackArgs},
		{"Append", appendSQL, appendArgs},
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		for _, c := range cases {
			looked, plan := pgtest.ExplainRows(ctx, t, pool, mode, c.sql, c.args)
			// A lookup by primary key reads one row per run; the batch
			// statements also read the batch once more (lock, then update).
			if limit := 4 * batch; looked > limit {
				t.Errorf("%s (%s): the plan looked at %d rows of workflows for at most %d runs; want <= %d\n%s",
					c.name, mode, looked, batch, limit, plan)
			}
		}
	}
}

// planCase is a statement whose plan a test checks.
type planCase struct {
	name string
	sql  string
	args []any
}

// typedCase is the planCase of the statement that call, a typed method of
// internal/sysdb run on the db it is given, sends.
func typedCase(t *testing.T, name string, call func(db sysdb.DBTX) error) planCase {
	t.Helper()
	c := capture{batchIndex: -1} // of a batch (queryIndexPlanned), its statement
	if err := call(&c); !errors.Is(err, errCaptured) {
		t.Fatalf("%s: the statement was not captured: %v", name, err)
	}
	return planCase{name: name, sql: c.sql, args: c.args}
}

// batchCase is typedCase for a call that sends a batch: the statement at
// index of the batch is the case.
func batchCase(t *testing.T, name string, index int, call func(db sysdb.BatchDB) error) planCase {
	t.Helper()
	c := capture{batchIndex: index}
	if err := call(&c); !errors.Is(err, errCaptured) {
		t.Fatalf("%s: the statement was not captured: %v", name, err)
	}
	return planCase{name: name, sql: c.sql, args: c.args}
}

// capture is a sysdb.DBTX (and a sysdb.BatchDB) that keeps the statement
// sent to it instead of running it: every call fails with errCaptured.
type capture struct {
	sql        string
	args       []any
	batchIndex int // of a batch, the statement kept (-1: the last)
}

// SendBatch keeps the batch's statement at c.batchIndex.
func (c *capture) SendBatch(_ context.Context, b *pgx.Batch) pgx.BatchResults {
	i := c.batchIndex
	if i < 0 {
		i = len(b.QueuedQueries) - 1
	}
	q := b.QueuedQueries[i]
	c.sql, c.args = q.SQL, q.Arguments
	return capturedBatch{}
}

// capturedBatch is the result of a batch sent to a capture.
type capturedBatch struct{}

func (capturedBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, errCaptured }
func (capturedBatch) Query() (pgx.Rows, error)         { return nil, errCaptured }
func (capturedBatch) QueryRow() pgx.Row                { return nil }
func (capturedBatch) Close() error                     { return errCaptured }
func (capturedBatch) Tx() pgx.Tx                       { return nil }

var errCaptured = errors.New("statement captured")

func (c *capture) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.sql, c.args = sql, args
	return pgconn.CommandTag{}, errCaptured
}

func (c *capture) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.sql, c.args = sql, args
	return nil, errCaptured
}

func (c *capture) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	c.sql, c.args = sql, args
	return capturedRow{}
}

type capturedRow struct{}

func (capturedRow) Scan(...any) error { return errCaptured }

// fillN returns n copies of v: typed, so that pgx encodes them in every
// exec mode.
func fillN[T any](n int, v T) []T {
	s := make([]T, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// statementOf returns the statement call sends to its DBTX, and its
// arguments, without running it: call's error is ignored.
func statementOf(call func(db sysdb.DBTX)) (string, []any) {
	var c capture
	call(&c)
	return c.sql, c.args
}

// migratedSchema returns a context bounded for the test, the test pool and
// a fresh schema with every migration applied.
func migratedSchema(t *testing.T) (context.Context, *pgxpool.Pool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	if err := Migrate(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	return ctx, pool, schema
}

// execAll runs each statement on pool, failing the test at the first error.
func execAll(ctx context.Context, t *testing.T, pool *pgxpool.Pool, stmts ...string) {
	t.Helper()
	for _, sql := range stmts {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}
