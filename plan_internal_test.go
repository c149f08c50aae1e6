package durable

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	cases := []struct {
		name string
		sql  string
		args []any
	}{
		{"InsertStep", q.InsertStep, []any{"r7", 1, "s", "done", out, nil, 1, now, 2}},
		{"InsertSteps", q.InsertSteps, []any{ids, fillN(batch, int32(1)), fillN(batch, "s"), fillN(batch, "done"), fillN(batch, out), fillN[json.RawMessage](batch, nil), fillN(batch, int32(1)), fillN(batch, now), fillN(batch, int64(2))}},
		{"InsertStepTx", q.InsertStepTx, []any{"r7", 1, "s", "done", out, nil, 1, now, 2}},
		{"CompleteIntent", q.CompleteIntent, []any{"r7", 1, "done", out, nil, 1, 2}},
		{"FinishOne", q.FinishOne, []any{"r7", 2, "success", out, nil}},
		{"FinishWorkflows", q.FinishWorkflows, []any{ids, fillN(batch, int64(2)), fillN(batch, "success"), fillN(batch, out), fillN[json.RawMessage](batch, nil)}},
		{"WakeParent", q.WakeParent, []any{"r7", "p7"}},
		{"Park", wq.Park, []any{"r7", 2, now.Add(time.Hour), "t"}},
		{"HandBack", wq.HandBack, []any{"r7", 2}},
		{"Append", sq.Append, []any{ids, fillN(batch, "k"), fillN(batch, int64(0)), fillN(batch, out), fillN(batch, false), fillN[*int64](batch, nil), fillN(batch, int64(2)), false}},
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		for _, c := range cases {
			looked, plan := explainRows(ctx, t, pool, mode, c.sql, c.args)
			// A lookup by primary key reads one row per run; the batch
			// statements also read the batch once more (lock, then update).
			if limit := 4 * batch; looked > limit {
				t.Errorf("%s (%s): the plan looked at %d rows of workflows for at most %d runs; want <= %d\n%s",
					c.name, mode, looked, batch, limit, plan)
			}
		}
	}
}

// fillN returns n copies of v: typed, so that pgx encodes them in every
// exec mode.
func fillN[T any](n int, v T) []T {
	s := make([]T, n)
	for i := range s {
		s[i] = v
	}
	return s
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

// explainRows runs sql under EXPLAIN ANALYZE in a transaction it rolls
// back and returns how many rows of the workflows table its plan nodes read
// (rows returned plus rows removed by a filter, times loops, and rows a
// join filter removed), with the plan's text.
func explainRows(ctx context.Context, t *testing.T, pool *pgxpool.Pool, mode, sql string, args []any) (int, string) {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode); err != nil {
		t.Fatal(err)
	}
	var raw []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&raw); err != nil {
		t.Fatalf("explain %s: %v", sql, err)
	}
	var top []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &top); err != nil || len(top) != 1 {
		t.Fatalf("explain output: %v: %s", err, raw)
	}
	return top[0].Plan.rowsOf("workflows"), string(raw)
}

type planNode struct {
	NodeType        string     `json:"Node Type"`
	Relation        string     `json:"Relation Name"`
	ActualRows      float64    `json:"Actual Rows"`
	ActualLoops     float64    `json:"Actual Loops"`
	RemovedByFilter float64    `json:"Rows Removed by Filter"`
	RemovedByJoin   float64    `json:"Rows Removed by Join Filter"`
	Plans           []planNode `json:"Plans"`
}

func (n *planNode) rowsOf(rel string) int {
	total := n.RemovedByJoin * n.ActualLoops
	if n.Relation == rel && strings.HasSuffix(n.NodeType, "Scan") {
		total += (n.ActualRows + n.RemovedByFilter) * n.ActualLoops
	}
	for i := range n.Plans {
		total += float64(n.Plans[i].rowsOf(rel))
	}
	return int(total)
}

// TestListByIDsReadsOnlyThoseRuns: a listing by IDs finds the runs by
// primary key, however small its page. Ordered by creation time under a
// LIMIT, the planner would otherwise walk the listing index from the newest
// run and test each against the IDs: the whole table when they are old.
func TestListByIDsReadsOnlyThoseRuns(t *testing.T) {
	t.Parallel()
	ctx, pool, schema := migratedSchema(t)
	const runs, asked = 20000, 100
	wf := pgx.Identifier{schema, "workflows"}.Sanitize()
	execAll(ctx, t, pool,
		fmt.Sprintf(`INSERT INTO %s (id, name, status, app_version, created_at)
		  SELECT 'r' || i, 'w', 'success', 'v', now() - (%[2]d - i) * interval '1 second' FROM generate_series(1, %[2]d) i`, wf, runs),
		`ANALYZE `+wf,
	)
	ids := make([]string, asked) // the oldest runs
	for i := range ids {
		ids[i] = fmt.Sprintf("r%d", i+1)
	}
	for _, limit := range []int{1, 10, ListLimitDefault} {
		f, err := ListParams{IDs: ids, Limit: limit, OmitPayloads: true}.filter()
		if err != nil {
			t.Fatal(err)
		}
		sql, args := sysdb.ListWorkflows(schema, f)
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			n, plan := explainRows(ctx, t, pool, mode, sql, args)
			if n > asked {
				t.Errorf("limit %d, %s: the listing read %d rows of %d runs for %d IDs; plan: %s", limit, mode, n, runs, asked, plan)
			}
		}
	}
}

// TestListByRareStatusReadsOnlyThoseRuns: a listing by a status few runs
// have (failures among many successes, the runs in flight, a queue's
// backlog), of the runs waiting on a topic (an approval inbox), of a run's
// children or of an ID prefix, reads those runs from their indexes, however
// old they are. Ordered by creation time under a LIMIT, the planner would
// otherwise walk the listing index from the newest run (or scan the table)
// and test each run: the whole history. A listing of successes, the common status, walks that
// index and reads about a page. It also checks the page holds the right
// runs, in order.
func TestListByRareStatusReadsOnlyThoseRuns(t *testing.T) {
	t.Parallel()
	ctx, pool, schema := migratedSchema(t)
	const history, each = 20000, 20
	wf := pgx.Identifier{schema, "workflows"}.Sanitize()
	// The rare runs are the oldest: each kind below has `each` of them;
	// pending runs come owned, unowned and parked; some wait on a topic;
	// the last kind are children of one run.
	kinds := []struct{ id, status, executor, queue, wake, topic, parent string }{
		{"err", "error", "NULL", "NULL", "NULL", "NULL", "NULL"},
		{"can", "cancelled", "NULL", "NULL", "NULL", "NULL", "NULL"},
		{"dead", "dead", "NULL", "NULL", "NULL", "NULL", "NULL"},
		{"enq", "enqueued", "NULL", "'q'", "NULL", "'ask:' || i", "NULL"},
		{"own", "pending", "'x'", "NULL", "NULL", "'ask:' || i", "NULL"},
		{"unown", "pending", "NULL", "NULL", "NULL", "NULL", "NULL"},
		{"park", "pending", "NULL", "NULL", "'infinity'", "'ask:' || i", "NULL"},
		{"kid", "success", "NULL", "NULL", "NULL", "NULL", "'mom'"},
	}
	var stmts []string
	for k, kind := range kinds {
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO %s (id, name, status, app_version, executor_id, queue_name, wake_at, wait_topic, parent_id, created_at)
		  SELECT '%s' || i, 'w', '%s', 'v', %s, %s, %s, %s, %s, now() - interval '1 day' + (%d * %d + i) * interval '1 second'
		  FROM generate_series(1, %d) i`, wf, kind.id, kind.status, kind.executor, kind.queue, kind.wake, kind.topic, kind.parent, k, each, each))
	}
	stmts = append(stmts,
		fmt.Sprintf(`INSERT INTO %s (id, name, status, app_version, created_at)
		  SELECT 'r' || i, 'w', 'success', 'v', now() - (%[2]d - i) * interval '1 second' FROM generate_series(1, %[2]d) i`, wf, history),
		`ANALYZE `+wf)
	execAll(ctx, t, pool, stmts...)

	type listing struct {
		p    ListParams
		cond string // the same filter, for the reference query
	}
	var cases []listing
	for _, statuses := range [][]Status{
		{StatusError}, {StatusCancelled, StatusDead}, {StatusPending}, {StatusEnqueued}, {StatusSuccess},
		{StatusPending, StatusEnqueued}, {StatusDead, StatusPending},
	} {
		var names []string
		for _, s := range statuses {
			names = append(names, "'"+string(s)+"'")
		}
		cases = append(cases, listing{ListParams{Statuses: statuses}, "status IN (" + strings.Join(names, ", ") + ")"})
	}
	cases = append(cases, listing{ListParams{WaitTopicPrefix: "ask:"}, "status IN ('pending', 'enqueued') AND wait_topic LIKE 'ask:%'"},
		listing{ListParams{Parent: "mom"}, "parent_id = 'mom'"},
		listing{ListParams{IDPrefix: "park"}, "id LIKE 'park%'"})
	for _, c := range cases {
		for _, limit := range []int{1, 10, ListLimitDefault} {
			c.p.Limit, c.p.OmitPayloads = limit, true
			f, err := c.p.filter()
			if err != nil {
				t.Fatal(err)
			}
			sql, args := sysdb.ListWorkflows(schema, f)
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				n, plan := explainRows(ctx, t, pool, mode, sql, args)
				if n > len(kinds)*each {
					t.Errorf("%s, limit %d, %s: the listing read %d rows of %d runs (%d not successes); plan: %s",
						c.cond, limit, mode, n, history+len(kinds)*each, len(kinds)*each, plan)
				}
			}
			var want, got []string
			rows, err := pool.Query(ctx, `SELECT id FROM `+wf+` WHERE `+c.cond+` ORDER BY created_at DESC, id DESC LIMIT $1`, f.Limit)
			if err == nil {
				want, err = pgx.CollectRows(rows, pgx.RowTo[string])
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(want) == 0 {
				t.Fatalf("%s: no run to list", c.cond)
			}
			if rows, err = pool.Query(ctx, sql, args...); err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				info, err := scanWorkflowInfo(rows)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, info.ID)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s, limit %d: listed %v, want %v", c.cond, limit, got, want)
			}
		}
	}
}

// TestQueueCountsReadOnlyLiveRuns: a queue's counts (Queue.Stats, and each
// queue's row of ListQueues, which a dashboard reads every few seconds)
// read the queue's queued and running runs from their partial indexes, not
// the queue's finished history, and count them right.
func TestQueueCountsReadOnlyLiveRuns(t *testing.T) {
	t.Parallel()
	ctx, pool, schema := migratedSchema(t)
	const history = 20000
	const ready, delayed, running = 20, 10, 30
	wf := pgx.Identifier{schema, "workflows"}.Sanitize()
	execAll(ctx, t, pool,
		`INSERT INTO `+pgx.Identifier{schema, "queues"}.Sanitize()+` (name) VALUES ('q'), ('idle')`,
		fmt.Sprintf(`INSERT INTO %s (id, name, status, app_version, queue_name, created_at)
		  SELECT 'h' || i, 'w', 'success', 'v', 'q', now() - interval '1 day' + i * interval '1 ms' FROM generate_series(1, %d) i`, wf, history),
		fmt.Sprintf(`INSERT INTO %s (id, name, status, app_version, queue_name, not_before)
		  SELECT 'e' || i, 'w', 'enqueued', 'v', 'q', CASE WHEN i > %d THEN now() + interval '1 hour' END
		  FROM generate_series(1, %d) i`, wf, ready, ready+delayed),
		fmt.Sprintf(`INSERT INTO %s (id, name, status, app_version, executor_id, queue_name)
		  SELECT 'p' || i, 'w', 'pending', 'v', 'x', 'q' FROM generate_series(1, %d) i`, wf, running),
		`ANALYZE `+wf,
	)
	qq := sysdb.NewQueueQueries(schema, "c")
	for _, c := range []struct {
		name string
		sql  string
		args []any
	}{
		{"Stats", qq.Stats, []any{"q"}},
		{"ListQueues", sysdb.ListQueues(schema), nil},
	} {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			if n, plan := explainRows(ctx, t, pool, mode, c.sql, c.args); n > ready+delayed+running {
				t.Errorf("%s, %s: read %d rows of %d runs for %d queued or running; plan: %s",
					c.name, mode, n, history+ready+delayed+running, ready+delayed+running, plan)
			}
		}
	}
	var r, d, p int
	if err := pool.QueryRow(ctx, qq.Stats, "q").Scan(&r, &d, &p); err != nil {
		t.Fatal(err)
	}
	if r != ready || d != delayed || p != running {
		t.Errorf("Stats: ready %d, delayed %d, running %d; want %d, %d, %d", r, d, p, ready, delayed, running)
	}
	rows, err := pool.Query(ctx, `SELECT name, ready, delayed, running FROM (`+sysdb.ListQueues(schema)+`) l`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name, &r, &d, &p); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s:%d/%d/%d", name, r, d, p))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"idle:0/0/0", fmt.Sprintf("q:%d/%d/%d", ready, delayed, running)}; !slices.Equal(got, want) {
		t.Errorf("ListQueues: %v, want %v", got, want)
	}
}
