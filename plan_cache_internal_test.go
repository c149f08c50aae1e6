package durable

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/sysdb"
)

// TestGenericPlansFromASmallTable: the batch statements that update runs
// by key (the batch finishes, the queue's and recovery's claims) keep
// their plans on a connection (see queryIndexPlanned in internal/sysdb),
// and a plan made while the runs table was small must still find its
// runs through an index once the table holds thousands: a generic plan
// that read the table whole had been kept while it grew, and a drain then
// cost the server 3-4x its CPU per run. Each statement is sent through
// its typed method on one connection with generic plans forced, first on
// a table of 10 runs (where the plan is made), then on one of 6,000
// with the same plan; the connection's scan counts of workflows
// (pg_stat_xact_user_tables) must then show no sequential scan.
func TestGenericPlansFromASmallTable(t *testing.T) {
	t.Parallel()
	ctx, pool, schema := migratedSchema(t)
	wf := pgx.Identifier{schema, "workflows"}.Sanitize()
	const runs, batch = 3000, 50
	execAll(ctx, t, pool,
		// No analyze in between: the plans' shape must not hang on it.
		`ALTER TABLE `+wf+` SET (autovacuum_enabled = false)`,
		`INSERT INTO `+pgx.Identifier{schema, "queues"}.Sanitize()+` (name, global_concurrency) VALUES ('q', 100)`,
		`INSERT INTO `+wf+` (id, name, status, app_version, epoch, executor_id)
		 SELECT 'r' || i, 'w', 'pending', 'v', 2, 'x' FROM generate_series(1, 5) i`,
		`INSERT INTO `+wf+` (id, name, status, app_version, epoch, queue_name)
		 SELECT 'e' || i, 'w', 'enqueued', 'v', 0, 'q' FROM generate_series(1, 5) i`)

	q := sysdb.New(schema, true)
	ids := make([]string, batch)
	for i := range ids {
		ids[i] = fmt.Sprintf("r%d", i+1)
	}
	out := json.RawMessage(`1`)
	now := time.Now()
	steps := make([]*sysdb.InsertStepParams, batch)
	finishes := make([]*sysdb.FinishOneParams, batch)
	for i, id := range ids {
		steps[i] = &sysdb.InsertStepParams{WorkflowID: id, Pos: 1, Name: "s", Status: "done", Output: out, Attempts: 1, StartedAt: now, Epoch: 2}
		finishes[i] = &sysdb.FinishOneParams{ID: id, Epoch: 2, Status: "success", Output: out}
	}
	qq := sysdb.NewQueueQueries(schema, q.Channel)
	rq := sysdb.NewRecoveryQueries(schema, q.Channel)
	queued := make([]string, batch)
	for i := range queued {
		queued[i] = fmt.Sprintf("e%d", i+1)
	}
	hand := sysdb.HandOnParams{IDs: ids, Queues: []string{"q"}, Running: []int{batch}, ExecutorID: "x", AppVersion: "v", Workflows: []string{"w"}}
	cases := []struct {
		name string
		call func(db sysdb.DBTX) error
	}{
		{"FinishWorkflows", func(db sysdb.DBTX) error { _, _, err := q.FinishWorkflows(ctx, db, finishes); return err }},
		{"FinishStepsMany", func(db sysdb.DBTX) error {
			_, _, err := q.FinishStepsMany(ctx, db, sysdb.FinishStepsManyParams{Runs: finishes, Steps: steps})
			return err
		}},
		{"FinishHandOn", func(db sysdb.DBTX) error { _, _, _, err := q.FinishHandOn(ctx, db, finishes, nil, hand); return err }},
		{"FinishHandOn with steps", func(db sysdb.DBTX) error { _, _, _, err := q.FinishHandOn(ctx, db, finishes, steps, hand); return err }},
		{"ClaimSimple", func(db sysdb.DBTX) error {
			_, err := qq.ClaimSimple(ctx, db, sysdb.ClaimSimpleParams{Queue: "q", ExecutorID: "y", AppVersion: "v", Workflows: []string{"w"}, Limit: batch})
			return err
		}},
		{"ClaimIDs", func(db sysdb.DBTX) error {
			_, err := qq.ClaimIDs(ctx, db, sysdb.ClaimIDsParams{IDs: queued, ExecutorID: "y", AppVersion: "v"})
			return err
		}},
		{"ClaimOwn", func(db sysdb.DBTX) error {
			_, err := rq.ClaimOwn(ctx, db, sysdb.ClaimOwnParams{ExecutorID: "x", AppVersion: "v", Names: []string{"w"}, Limit: batch})
			return err
		}},
		{"ClaimOrphans", func(db sysdb.DBTX) error {
			_, err := rq.ClaimOrphans(ctx, db, sysdb.ClaimOrphansParams{ExecutorID: "y", AppVersion: "v", Names: []string{"w"}, Limit: batch, TakeExpired: true})
			return err
		}},
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	c := conn.Conn()
	if c.Config().DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		t.Skip("the pool does not keep prepared statements")
	}
	if _, err := c.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = c.Exec(context.Background(), "RESET plan_cache_mode") }()
	// seqScans runs call in a transaction it rolls back, and returns how
	// many rows of workflows its sequential scans read.
	seqScans := func(call func(db sysdb.DBTX) error) (read int64) {
		t.Helper()
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		// The counts not yet reported by this connection: read before and
		// after.
		count := func() (n int64) {
			if err := tx.QueryRow(ctx, `SELECT coalesce(seq_tup_read, 0) FROM pg_stat_xact_user_tables WHERE relid = $1::regclass`, wf).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		before := count()
		if err := call(tx); err != nil {
			t.Fatal(err)
		}
		return count() - before
	}
	for _, cs := range cases {
		seqScans(cs.call) // the plan is made on 10 runs
	}
	execAll(ctx, t, pool,
		`INSERT INTO `+wf+` (id, name, status, app_version, epoch, executor_id, queue_name)
		 SELECT 'r' || i, 'w', 'pending', 'v', 2, 'x', CASE WHEN i > 100 THEN 'q' END FROM generate_series(6, `+fmt.Sprint(runs)+`) i`,
		`INSERT INTO `+wf+` (id, name, status, app_version, epoch, queue_name)
		 SELECT 'e' || i, 'w', 'enqueued', 'v', 0, 'q' FROM generate_series(6, `+fmt.Sprint(runs)+`) i`)
	for _, cs := range cases {
		if read := seqScans(cs.call); read > 0 {
			t.Errorf("%s: with the plan made on 10 runs, a sequential scan read %d rows of %d", cs.name, read, 2*runs)
		}
	}
}
