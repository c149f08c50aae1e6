package sysdb

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/pgtest"
)

// opsExec runs sql, its schema marker rendered for schema, on pool.
func opsExec(tb testing.TB, pool *pgxpool.Pool, schema, sql string, args ...any) {
	tb.Helper()
	_, err := pool.Exec(context.Background(), Render(sql, schema), args...)
	require.NoError(tb, err, sql)
}

// listIDs returns the IDs of rows, in order.
func listIDs(rows []RunRow) []string {
	ids := []string{}
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	return ids
}

// TestList: each filter of the listing keeps exactly the runs it names,
// newest first (by creation time, then ID), in both shapes of the
// statement (a small page, planned in a CTE, and a large one), and each
// column lands in its field.
func TestList(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	q := NewInspectQueries(schema)
	base := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }
	// id, status, name, executor, queue, parent, wake_at, wait_topic, created (s)
	for _, r := range []struct {
		id, status, name        string
		executor, queue, parent *string
		wake                    *time.Time
		topic                   *string
		created                 int
	}{
		{"ok-1", "success", "a", nil, nil, nil, nil, nil, 1},
		{"err-1", "error", "b", nil, opsPtr("q"), opsPtr("ok-1"), nil, nil, 2},
		{"own-1", "pending", "a", opsPtr("x"), nil, nil, nil, opsPtr("ask:1"), 3},
		{"park-1", "pending", "a", nil, nil, opsPtr("ok-1"), opsPtr(time.Now().Add(time.Hour)), opsPtr("ask:2"), 4},
		{"enq-1", "enqueued", "b", nil, opsPtr("q"), nil, nil, opsPtr("ask:3"), 5},
		{"can-1", "cancelled", "a", nil, nil, nil, nil, nil, 5},
		{"dead-1", "dead", "a", nil, nil, nil, nil, nil, 6},
		{"p_1", "success", "a", nil, nil, nil, nil, opsPtr("ask:4"), 7},
		{"pa1", "pending", "a", nil, nil, nil, nil, nil, 8},
	} {
		opsExec(t, pool, schema, `INSERT INTO {{schema}}.workflows
			(id, status, name, app_version, executor_id, queue_name, parent_id, wake_at, wait_topic, created_at, input, output)
			VALUES ($1, $2, $3, 'v', $4, $5, $6, $7, $8, $9, '{"in":1}', '{"out":2}')`,
			r.id, r.status, r.name, r.executor, r.queue, r.parent, r.wake, r.topic, at(r.created))
	}
	// A Select waiting in memory on two topics (its waits marked on its
	// row, no wait_topic), and a finished run that still has waits.
	opsExec(t, pool, schema, `UPDATE {{schema}}.workflows SET wait_any = ARRAY['msg:first', 'msg:ask:5', 'done:x'] WHERE id = 'pa1'`)
	opsExec(t, pool, schema, `UPDATE {{schema}}.workflows SET wait_any = ARRAY['msg:ask:6'] WHERE id = 'p_1'`)
	all := []string{"pa1", "p_1", "dead-1", "enq-1", "can-1", "park-1", "own-1", "err-1", "ok-1"}
	keep := func(ids ...string) []string {
		return slices.DeleteFunc(slices.Clone(all), func(id string) bool { return !slices.Contains(ids, id) })
	}
	for _, c := range []struct {
		name string
		f    ListFilter
		want []string
	}{
		{"all", ListFilter{}, all},
		{"pending", ListFilter{Statuses: []string{"pending"}}, keep("own-1", "park-1", "pa1")},
		{"enqueued", ListFilter{Statuses: []string{"enqueued"}}, keep("enq-1")},
		{"success", ListFilter{Statuses: []string{"success"}}, keep("ok-1", "p_1")},
		{"error", ListFilter{Statuses: []string{"error"}}, keep("err-1")},
		{"cancelled or dead", ListFilter{Statuses: []string{"cancelled", "dead"}}, keep("can-1", "dead-1")},
		{"unknown status", ListFilter{Statuses: []string{"paused"}}, keep()},
		{"name", ListFilter{Name: "b"}, keep("err-1", "enq-1")},
		{"queue", ListFilter{Queue: "q"}, keep("err-1", "enq-1")},
		{"parent", ListFilter{Parent: "ok-1"}, keep("err-1", "park-1")},
		{"IDs", ListFilter{IDs: []string{"ok-1", "dead-1", "nope"}}, keep("ok-1", "dead-1")},
		{"no IDs", ListFilter{IDs: []string{}}, keep()},
		{"ID prefix", ListFilter{IDPrefix: "p"}, keep("p_1", "pa1", "park-1")},
		{"ID prefix with a wildcard", ListFilter{IDPrefix: "p_"}, keep("p_1")},
		{"wait topic of live runs", ListFilter{WaitTopicPrefix: "ask:"}, keep("own-1", "park-1", "enq-1", "pa1")},
		{"a Select's first topic", ListFilter{WaitTopicPrefix: "first"}, keep("pa1")},
		{"a wait that is not a topic", ListFilter{WaitTopicPrefix: "x"}, keep()},
		{"from, to", ListFilter{From: at(2), To: at(6)}, keep("err-1", "own-1", "park-1", "enq-1", "can-1")},
		{"after a cursor", ListFilter{HasAfter: true, AfterAt: at(5), AfterID: "can-1"}, keep("park-1", "own-1", "err-1", "ok-1")},
		{"after a cursor on a tie", ListFilter{HasAfter: true, AfterAt: at(5), AfterID: "enq-1"}, keep("can-1", "park-1", "own-1", "err-1", "ok-1")},
		{"combined", ListFilter{Statuses: []string{"pending"}, Name: "a", Parent: "ok-1"}, keep("park-1")},
	} {
		for _, limit := range []int{2, minStatusPlanRows, 1000} {
			f := c.f
			f.Limit = limit
			rows, err := q.List(ctx, pool, f)
			require.NoError(t, err, c.name)
			want := c.want[:min(limit, len(c.want))]
			require.Equal(t, want, listIDs(rows), "%s, limit %d", c.name, limit)
		}
	}

	// The columns, without and with payloads.
	rows, err := q.List(ctx, pool, ListFilter{IDs: []string{"err-1", "park-1", "p_1"}, Limit: 10})
	require.NoError(t, err)
	require.Len(t, rows, 3)
	for _, r := range rows {
		require.Nil(t, r.Input)
		require.Nil(t, r.Output)
	}
	require.Nil(t, rows[0].WaitTopic, "the topic of a finished run")
	require.Equal(t, "ask:2", *rows[1].WaitTopic)
	for prefix, want := range map[string]string{"": "first", "ask:": "ask:5", "first": "first"} {
		rows, err := q.List(ctx, pool, ListFilter{IDs: []string{"pa1"}, WaitTopicPrefix: prefix, Limit: 10})
		require.NoError(t, err)
		require.Len(t, rows, 1)
		require.Equal(t, want, *rows[0].WaitTopic, "a Select shows its first topic that matches the prefix %q", prefix)
	}
	opsExec(t, pool, schema, `UPDATE {{schema}}.workflows SET recovery_attempts = 3, deadline = $2, started_at = $3,
		error = '{"msg":"boom"}', trace_context = 'tc', updated_at = $4 WHERE id = $1`, "err-1", at(100), at(50), at(60))
	rows, err = q.List(ctx, pool, ListFilter{IDs: []string{"err-1"}, Limit: 1, Payloads: true})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	r := rows[0]
	require.Equal(t, "err-1", r.ID)
	require.Equal(t, "b", r.Name)
	require.Equal(t, "error", r.Status)
	require.Equal(t, "v", r.AppVersion)
	require.Nil(t, r.ExecutorID)
	require.Equal(t, "ok-1", *r.ParentID)
	require.Equal(t, "q", *r.QueueName)
	require.True(t, r.CreatedAt.Equal(at(2)), "created_at %v", r.CreatedAt)
	require.True(t, r.UpdatedAt.Equal(at(60)), "updated_at %v", r.UpdatedAt)
	require.Equal(t, 3, r.RecoveryAttempts)
	require.True(t, r.Deadline.Equal(at(100)), "deadline %v", r.Deadline)
	require.JSONEq(t, `{"msg":"boom"}`, string(r.Error))
	require.True(t, r.StartedAt.Equal(at(50)), "started_at %v", r.StartedAt)
	require.JSONEq(t, `{"in":1}`, string(r.Input))
	require.JSONEq(t, `{"out":2}`, string(r.Output))
	require.Nil(t, r.WaitTopic)
	require.Equal(t, "tc", *r.TraceContext)
	rows, err = q.List(ctx, pool, ListFilter{IDs: []string{"own-1"}, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, "x", *rows[0].ExecutorID)
	require.Nil(t, rows[0].ParentID)
	require.Nil(t, rows[0].Deadline)
	require.Nil(t, rows[0].Error)
}

// TestListRecreatedRun: a run written under the ID of one deleted by hand
// (its creation log entry left behind) is listed at its own creation
// time, not the deleted run's.
func TestListRecreatedRun(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	base := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	for i, id := range []string{"x", "y"} {
		opsExec(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, status, name, app_version, created_at)
			VALUES ($1, 'success', 'w', 'v', $2)`, id, base.Add(time.Duration(i)*time.Second))
	}
	opsExec(t, pool, schema, `DELETE FROM {{schema}}.workflows WHERE id = 'x'`)
	opsExec(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, status, name, app_version, created_at)
		VALUES ('x', 'success', 'w', 'v', $1)`, base.Add(time.Minute))
	got, err := NewInspectQueries(schema).List(ctx, pool, ListFilter{Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"x", "y"}, listIDs(got), "newest first, by the new run's creation time")
}

// opsPtr returns a pointer to a copy of v.
func opsPtr[T any](v T) *T { return &v }

// TestListByIDsReadsOnlyThoseRuns: a listing by IDs finds the runs by
// primary key, however small its page, on tables vacuumed and analyzed (a
// walk of the creation log at its cheapest). Walking the log from the
// newest run and testing each against the IDs would read the whole table
// when they are old.
func TestListByIDsReadsOnlyThoseRuns(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	const runs, asked = 20000, 100
	opsExec(t, pool, schema, fmt.Sprintf(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, created_at)
		SELECT 'r' || i, 'w', 'success', 'v', now() - (%[1]d - i) * interval '1 second' FROM generate_series(1, %[1]d) i`, runs))
	opsExec(t, pool, schema, `VACUUM ANALYZE {{schema}}.workflows, {{schema}}.workflows_created`)
	ids := make([]string, asked) // the oldest runs
	for i := range ids {
		ids[i] = fmt.Sprintf("r%d", i+1)
	}
	for _, limit := range []int{1, 10, minStatusPlanRows - 1} {
		// A page of limit runs, and the row that tells whether another follows.
		sql, args := listSQL(schema, ListFilter{IDs: ids, Limit: limit + 1})
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			n, plan := pgtest.ExplainRows(ctx, t, pool, mode, sql, args)
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
// and test each run: the whole history. A listing of successes, the common
// status, walks that index and reads about a page. It also checks the page
// holds the right runs, in order.
func TestListByRareStatusReadsOnlyThoseRuns(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	q := NewInspectQueries(schema)
	const history, each = 20000, 20
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
	for k, kind := range kinds {
		opsExec(t, pool, schema, fmt.Sprintf(`INSERT INTO {{schema}}.workflows
			(id, name, status, app_version, executor_id, queue_name, wake_at, wait_topic, parent_id, created_at)
			SELECT '%s' || i, 'w', '%s', 'v', %s, %s, %s, %s, %s, now() - interval '1 day' + (%d * %d + i) * interval '1 second'
			FROM generate_series(1, %d) i`, kind.id, kind.status, kind.executor, kind.queue, kind.wake, kind.topic, kind.parent, k, each, each))
	}
	// The owned runs wait in a Select instead, on two topics.
	opsExec(t, pool, schema, `UPDATE {{schema}}.workflows SET wait_any = ARRAY['msg:other', 'msg:' || wait_topic], wait_topic = NULL
		WHERE id LIKE 'own%'`)
	opsExec(t, pool, schema, fmt.Sprintf(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, created_at)
		SELECT 'r' || i, 'w', 'success', 'v', now() - (%[1]d - i) * interval '1 second' FROM generate_series(1, %[1]d) i`, history))
	opsExec(t, pool, schema, `ANALYZE {{schema}}.workflows`)

	type listing struct {
		f    ListFilter
		cond string // the same filter, for the reference query
	}
	var cases []listing
	for _, statuses := range [][]string{
		{"error"}, {"cancelled", "dead"}, {"pending"}, {"enqueued"}, {"success"},
		{"pending", "enqueued"}, {"dead", "pending"},
	} {
		var names []string
		for _, s := range statuses {
			names = append(names, "'"+s+"'")
		}
		cases = append(cases, listing{ListFilter{Statuses: statuses}, "status IN (" + strings.Join(names, ", ") + ")"})
	}
	cases = append(cases, listing{ListFilter{WaitTopicPrefix: "ask:"}, "status IN ('pending', 'enqueued') AND (wait_topic LIKE 'ask:%' OR EXISTS (SELECT 1 FROM unnest(wait_any) k WHERE k LIKE 'msg:ask:%'))"},
		listing{ListFilter{Parent: "mom"}, "parent_id = 'mom'"},
		listing{ListFilter{IDPrefix: "park"}, "id LIKE 'park%'"})
	for _, c := range cases {
		for _, limit := range []int{1, 10, minStatusPlanRows - 1} {
			f := c.f
			f.Limit = limit + 1 // a page, and the row that tells whether another follows
			sql, args := listSQL(schema, f)
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				n, plan := pgtest.ExplainRows(ctx, t, pool, mode, sql, args)
				if n > len(kinds)*each {
					t.Errorf("%s, limit %d, %s: the listing read %d rows of %d runs (%d not successes); plan: %s",
						c.cond, limit, mode, n, history+len(kinds)*each, len(kinds)*each, plan)
				}
			}
			rows, err := pool.Query(ctx, Render(`SELECT id FROM {{schema}}.workflows WHERE `+c.cond+
				` ORDER BY created_at DESC, id DESC LIMIT $1`, schema), f.Limit)
			require.NoError(t, err)
			want, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			require.NotEmpty(t, want, "%s: no run to list", c.cond)
			got, err := q.List(ctx, pool, f)
			require.NoError(t, err)
			require.Equal(t, want, listIDs(got), "%s, limit %d", c.cond, limit)
		}
	}
}

// TestListPlannedOnce: on a table of many runs, a connection plans the
// listing once and reuses that plan. With the page size a parameter, the
// plan made without its value reckons on a tenth of the table, which costs
// more than the plan for a page, so Postgres planned the listing anew at
// every call (20,000 runs are enough; the bench's growth run found it at
// a million).
func TestListPlannedOnce(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	q := NewInspectQueries(schema)
	opsExec(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, created_at)
		SELECT 'r' || i, 'w', 'success', 'v', now() - (20000 - i) * interval '1 second' FROM generate_series(1, 20000) i`)
	opsExec(t, pool, schema, `ANALYZE {{schema}}.workflows`)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	filters := map[string]ListFilter{
		"first page":  {Limit: 51},
		"next page":   {Limit: 51, HasAfter: true, AfterAt: time.Now().Add(-time.Hour), AfterID: "r1"},
		"by name":     {Limit: 51, Name: "w"},
		"by statuses": {Limit: 1001, Statuses: []string{"success"}},
	}
	for name, f := range filters {
		for range 8 {
			_, err := q.List(ctx, conn, f)
			require.NoError(t, err, name)
		}
		sql, _ := listSQL(schema, f)
		var generic, custom int64
		require.NoError(t, conn.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`,
			sql).Scan(&generic, &custom), name)
		require.LessOrEqual(t, custom, int64(5), "%s: planned %d times for 8 calls (generic plans used: %d)", name, custom, generic)
	}
}
