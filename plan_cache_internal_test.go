package durable

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/sysdb"
)

// TestBatchFinishPlannedForTheTableAsItIs: the batch finish and the
// queue's claim are planned at each execution, never kept as a generic
// plan on their connection. A
// generic plan made while the runs table was small (a fresh install, a
// truncated schema) scans the table, and a connection keeps it while the
// table grows, until an ANALYZE replans it: in the bench's scale scenario
// each finish batch then read the whole table (the drain cost the server
// 3-4x its CPU per run). With batches of 200 on a table of 2,000 runs,
// Postgres switches a statement prepared by name to a generic plan after
// five executions; the check reads pg_prepared_statements.
func TestBatchFinishPlannedForTheTableAsItIs(t *testing.T) {
	t.Parallel()
	ctx, pool, schema := migratedSchema(t)
	wf := pgx.Identifier{schema, "workflows"}.Sanitize()
	execAll(ctx, t, pool, `ALTER TABLE `+wf+` SET (autovacuum_enabled = false)`,
		`INSERT INTO `+wf+` (id, name, status, app_version, epoch, executor_id, queue_name)
SELECT 'r' || i, 'w', 'pending', 'v', 2, 'x', 'q' FROM generate_series(0, 1999) i`)
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	q := sysdb.New(schema, true)
	out := json.RawMessage(`1`)
	for b := 0; b < 10; b++ {
		var runs []*sysdb.FinishOneParams
		for i := 200 * b; i < 200*(b+1); i++ {
			runs = append(runs, &sysdb.FinishOneParams{ID: fmt.Sprintf("r%d", i), Epoch: 2, Status: "success", Output: out})
		}
		done, _, err := q.FinishWorkflows(ctx, c, runs)
		if err != nil {
			t.Fatal(err)
		}
		for i, ok := range done {
			if !ok {
				t.Fatalf("run r%d was not finished", 200*b+i)
			}
		}
	}
	// The queue's claim, the same way: ten claims of 200 queued runs.
	execAll(ctx, t, pool, `INSERT INTO `+wf+` (id, name, status, app_version, epoch, queue_name)
SELECT 'e' || i, 'w', 'enqueued', 'v', 0, 'q' FROM generate_series(0, 1999) i`)
	qq := sysdb.NewQueueQueries(schema, q.Channel)
	for b := 0; b < 10; b++ {
		got, err := qq.ClaimSimple(ctx, c, sysdb.ClaimSimpleParams{Queue: "q", ExecutorID: "x", AppVersion: "v", Workflows: []string{"w"}, Limit: 200})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 200 {
			t.Fatalf("claim %d took %d runs, want 200", b, len(got))
		}
	}
	for _, st := range []struct{ name, like string }{
		{"the batch finish", "%unnest($1::text[], $2::bigint[], $3::text[], $4::json[], $5::json[])%"},
		{"the queue's claim", "%SET status = 'pending', executor_id = $2%ORDER BY priority, created_at, id LIMIT $5%"},
	} {
		var generic int64
		if err := c.QueryRow(ctx, `SELECT coalesce(sum(generic_plans), 0) FROM pg_prepared_statements
WHERE statement LIKE $1 AND statement NOT LIKE '%pg_prepared_statements%'`, st.like).Scan(&generic); err != nil {
			t.Fatal(err)
		}
		if generic > 0 {
			t.Errorf("%s ran %d times with a generic plan kept on its connection", st.name, generic)
		}
	}
}
