package sysdb

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/pgtest"
)

// TestSetTag: SetTag records its step and changes the run's tags in one
// statement, fenced by the run's epoch and status, once per position; a
// tag over the limit records the step (false) and changes nothing; the
// last tag removed leaves NULL; an unchanged value writes the step alone.
func TestSetTag(t *testing.T) {
	c := newCore(t)
	tq := NewTagQueries(c.schema)
	c.run("r", 2, "pending")
	c.run("done", 1, "success")
	set := func(id string, epoch int64, pos int, key, value string) SetTagRow {
		t.Helper()
		row, err := tq.SetTag(c.ctx, c.pool, SetTagParams{WorkflowID: id, Epoch: epoch, Pos: pos, Name: "durable.tag:" + key,
			Key: key, Value: value, StartedAt: time.Now(), MaxTags: 3})
		require.NoError(t, err)
		return row
	}
	tags := func() string { return c.text(`SELECT tags::text FROM {{schema}}.workflows WHERE id = 'r'`) }
	version := func() string { return c.text(`SELECT xmin::text FROM {{schema}}.workflows WHERE id = 'r'`) }
	written := SetTagRow{Owned: true, Fits: true, Written: true}

	require.Equal(t, written, set("r", 2, 0, "a", "1"))
	require.Equal(t, `{"a": "1"}`, tags())
	require.Equal(t, SetTagRow{Owned: true, Fits: true}, set("r", 2, 0, "a", "other"), "the step is recorded: not again")
	require.Equal(t, `{"a": "1"}`, tags())
	require.Equal(t, SetTagRow{}, set("r", 1, 1, "b", "2"), "an older owner")
	require.Equal(t, SetTagRow{}, set("done", 1, 0, "b", "2"), "a finished run")
	require.Equal(t, "<nil>", c.text(`SELECT tags::text FROM {{schema}}.workflows WHERE id = 'done'`))
	require.Empty(t, c.steps("done"))

	require.Equal(t, written, set("r", 2, 1, "a", "2"))
	before := version()
	require.Equal(t, written, set("r", 2, 2, "a", "2"))
	require.Equal(t, before, version(), "an unchanged value leaves the row alone")
	require.Equal(t, written, set("r", 2, 3, "b", "2"))
	require.Equal(t, written, set("r", 2, 4, "c", "3"))
	require.Equal(t, SetTagRow{Owned: true, Written: true}, set("r", 2, 5, "d", "4"), "a fourth tag")
	require.Equal(t, `{"a": "2", "b": "2", "c": "3"}`, tags())
	require.Equal(t, written, set("r", 2, 6, "c", "new"), "a new value of a tag it has fits")
	require.Equal(t, written, set("r", 2, 7, "a", ""))
	require.Equal(t, written, set("r", 2, 8, "nope", ""), "removing a tag it does not have")
	require.Equal(t, `{"b": "2", "c": "new"}`, tags())
	require.Equal(t, written, set("r", 2, 9, "b", ""))
	require.Equal(t, written, set("r", 2, 10, "c", ""))
	require.Equal(t, "<nil>", tags(), "no tags left: NULL")

	require.Equal(t, []string{
		"0 durable.tag:a done true - 1", "1 durable.tag:a done true - 1", "2 durable.tag:a done true - 1",
		"3 durable.tag:b done true - 1", "4 durable.tag:c done true - 1", "5 durable.tag:d done false - 1",
		"6 durable.tag:c done true - 1", "7 durable.tag:a done true - 1", "8 durable.tag:nope done true - 1",
		"9 durable.tag:b done true - 1", "10 durable.tag:c done true - 1",
	}, c.steps("r"))
}

// TestRunsStartWithTags: every statement that creates a run writes its
// tags, or NULL for none; a debounced enqueue that collapses into a
// queued run keeps that run's; a fork copies its source's unless told
// otherwise.
func TestRunsStartWithTags(t *testing.T) {
	f := newBatchFix(t)
	f.declare("q", QueueSettings{})
	dq := NewDebounceQueries(f.schema, ChannelName(f.schema))
	cq := NewControlQueries(f.schema, ChannelName(f.schema))
	tags := func(s string) json.RawMessage { return json.RawMessage(s) }
	in := json.RawMessage(`1`)
	ok := func(_ any, err error) {
		t.Helper()
		require.NoError(t, err)
	}

	ok(f.q.InsertWorkflow(f.ctx, f.pool, InsertWorkflowParams{ID: "start", Name: "w", AppVersion: "v", Input: in, Tags: tags(`{"via":"start"}`)}))
	ok(f.q.InsertWorkflow(f.ctx, f.pool, InsertWorkflowParams{ID: "start-none", Name: "w", AppVersion: "v", Input: in}))
	ok(f.q.InsertOwned(f.ctx, f.pool, InsertOwnedParams{AppVersion: "v", ExecutorID: "x",
		Run: &OwnedRun{ID: "owned", Name: "w", Input: in, Tags: tags(`{"via":"owned"}`)}}))
	ok(f.q.InsertWorkflows(f.ctx, f.pool, InsertWorkflowsParams{AppVersion: "v", ExecutorID: "x", Runs: []*OwnedRun{
		{ID: "owned-1", Name: "w", Input: in}, {ID: "owned-2", Name: "w", Input: in, Tags: tags(`{"via":"owned-2"}`)}}}))
	ok(f.q.InsertWorkflows(f.ctx, f.pool, InsertWorkflowsParams{AppVersion: "v", ExecutorID: "x", Runs: []*OwnedRun{
		{ID: "owned-3", Name: "w", Input: in}}}))
	ok(f.queueFix.q.Enqueue(f.ctx, f.pool, EnqueueParams{ID: "enq", Workflow: "w", AppVersion: "v", Input: in, Queue: "q", Tags: tags(`{"via":"enq"}`)}))
	ok(f.bq.EnqueueMany(f.ctx, f.pool, EnqueueManyParams{Queue: "q", Workflow: "w", AppVersion: "v", Runs: []QueuedRun{
		{ID: "enq-1", Input: in, Tags: tags(`{"via":"enq-1"}`)}, {ID: "enq-2", Input: in}}}))
	ok(f.bq.EnqueueMany(f.ctx, f.pool, EnqueueManyParams{Queue: "q", Workflow: "w", AppVersion: "v", Runs: []QueuedRun{{ID: "enq-3", Input: in}}}))
	ok(f.bq.StartMany(f.ctx, f.pool, StartManyParams{Workflow: "w", AppVersion: "v", Runs: []StartedRun{
		{ID: "many-1", Input: in}, {ID: "many-2", Input: in, Tags: tags(`{"via":"many-2"}`)}}}))
	deb := DebounceParams{ID: "deb", Workflow: "w", AppVersion: "v", Input: in, Queue: "q", Key: "k", Start: time.Now().Add(time.Hour),
		Tags: tags(`{"via":"deb"}`)}
	ok(dq.Upsert(f.ctx, f.pool, deb))
	deb.ID, deb.Tags = "deb-2", tags(`{"via":"deb-2"}`)
	res, err := dq.Upsert(f.ctx, f.pool, deb)
	require.NoError(t, err)
	require.Equal(t, DebounceRow{QueueFound: true, ID: "deb"}, res, "collapsed")
	for _, p := range []ForkRunParams{
		{SourceID: "start", ID: "fork-same", AppVersion: "v"},
		{SourceID: "start", ID: "fork-other", AppVersion: "v", ReplaceTags: true, Tags: tags(`{"via":"fork"}`)},
		{SourceID: "start", ID: "fork-none", AppVersion: "v", ReplaceTags: true},
	} {
		require.NoError(t, cq.ForkRun(f.ctx, f.pool, p))
	}

	rows, err := f.pool.Query(f.ctx, Render(`SELECT id || ' ' || coalesce(tags::text, '-') FROM {{schema}}.workflows ORDER BY id`, f.schema))
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{
		`deb {"via": "deb"}`,
		`enq {"via": "enq"}`, `enq-1 {"via": "enq-1"}`, `enq-2 -`, `enq-3 -`,
		`fork-none -`, `fork-other {"via": "fork"}`, `fork-same {"via": "start"}`,
		`many-1 -`, `many-2 {"via": "many-2"}`,
		`owned {"via": "owned"}`, `owned-1 -`, `owned-2 {"via": "owned-2"}`, `owned-3 -`,
		`start {"via": "start"}`, `start-none -`,
	}, got)
}

// TestListByTags: a tags filter keeps the runs that have every tag given,
// key and value, combined with the other filters, in both shapes of the
// listing; each run's tags land in RunRow.Tags.
func TestListByTags(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	q := NewInspectQueries(schema)
	base := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	for i, r := range []struct{ id, status, tags string }{
		{"none", "success", ""},
		{"eu", "success", `{"region": "eu"}`},
		{"eu-acme", "error", `{"region": "eu", "customer": "acme"}`},
		{"us-acme", "success", `{"region": "us", "customer": "acme"}`},
		{"eu-acme-2", "success", `{"region": "eu", "customer": "acme", "tier": "gold"}`},
		{"eu-Acme", "success", `{"region": "eu", "customer": "Acme"}`},
	} {
		var tags *string
		if r.tags != "" {
			tags = &r.tags
		}
		opsExec(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, created_at, tags)
			VALUES ($1, 'w', $2, 'v', $3, $4)`, r.id, r.status, base.Add(time.Duration(i)*time.Second), tags)
	}
	for _, c := range []struct {
		name string
		f    ListFilter
		want []string
	}{
		{"one tag", ListFilter{Tags: map[string]string{"region": "eu"}}, []string{"eu-Acme", "eu-acme-2", "eu-acme", "eu"}},
		{"two tags", ListFilter{Tags: map[string]string{"region": "eu", "customer": "acme"}}, []string{"eu-acme-2", "eu-acme"}},
		{"another value", ListFilter{Tags: map[string]string{"customer": "ACME"}}, []string{}},
		{"a key alone is no match", ListFilter{Tags: map[string]string{"tier": ""}}, []string{}},
		{"with a status", ListFilter{Tags: map[string]string{"customer": "acme"}, Statuses: []string{"success"}}, []string{"eu-acme-2", "us-acme"}},
		{"with IDs", ListFilter{Tags: map[string]string{"customer": "acme"}, IDs: []string{"eu", "us-acme"}}, []string{"us-acme"}},
		{"with an ID prefix", ListFilter{Tags: map[string]string{"customer": "acme"}, IDPrefix: "eu"}, []string{"eu-acme-2", "eu-acme"}},
	} {
		for _, limit := range []int{1, minStatusPlanRows, 1000} {
			f := c.f
			f.Limit = limit
			rows, err := q.List(ctx, pool, f)
			require.NoError(t, err, c.name)
			require.Equal(t, c.want[:min(limit, len(c.want))], listIDs(rows), "%s, limit %d", c.name, limit)
		}
	}
	rows, err := q.List(ctx, pool, ListFilter{IDs: []string{"none", "eu-acme-2"}, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"region": "eu", "customer": "acme", "tier": "gold"}, rows[0].Tags)
	require.Nil(t, rows[1].Tags)
}

// TestListByTagsReadsTheTagsIndex: a listing by tags finds the tagged
// runs through workflows_tags_idx, however old they are and however small
// the page, instead of walking the history of untagged runs; with custom
// and generic plans.
func TestListByTagsReadsTheTagsIndex(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	const history, tagged = 20000, 40
	// The tagged runs are the oldest, all in a region; most of them are
	// one customer's, with the same tags (the statistics' most common
	// value, which a planner trusts).
	opsExec(t, pool, schema, fmt.Sprintf(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, created_at, tags)
		SELECT 't' || i, 'w', 'success', 'v', now() - interval '1 day' + i * interval '1 second',
			jsonb_build_object('customer', CASE WHEN i %% 10 = 7 THEN 'c' || i ELSE 'acme' END, 'region', 'eu')
		FROM generate_series(1, %d) i`, tagged))
	opsExec(t, pool, schema, fmt.Sprintf(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, created_at)
		SELECT 'r' || i, 'w', 'success', 'v', now() - (%[1]d - i) * interval '1 second' FROM generate_series(1, %[1]d) i`, history))
	opsExec(t, pool, schema, `ANALYZE {{schema}}.workflows`)
	for _, tags := range []map[string]string{{"region": "eu"}, {"customer": "acme"}, {"customer": "acme", "region": "eu"}, {"customer": "c17"}} {
		for _, statuses := range [][]string{nil, {"success"}} {
			for _, limit := range []int{1, 10, minStatusPlanRows - 1} {
				sql, args := listSQL(schema, ListFilter{Tags: tags, Statuses: statuses, Limit: limit + 1})
				for _, mode := range planModes {
					n, plan := pgtest.ExplainRows(ctx, t, pool, mode, sql, args)
					if n > tagged || !strings.Contains(plan, "workflows_tags_idx") {
						t.Errorf("tags %v, statuses %v, limit %d, %s: the listing read %d rows of %d runs (%d tagged); plan: %s",
							tags, statuses, limit, mode, n, history+tagged, tagged, plan)
					}
				}
			}
		}
	}
}

// TestTagsKeepUpdatesHOT: the tags column is in workflows_tags_idx alone,
// a partial index of tagged runs, so an update that changes no indexed
// column (the wait topic of a Recv, the notify flag of a remote waiter)
// stays a HOT update, writing no index entry, for a tagged run as for an
// untagged one.
func TestTagsKeepUpdatesHOT(t *testing.T) {
	c := newCore(t)
	require.Contains(t, c.text(`SELECT pg_get_indexdef(to_regclass($1))`, c.schema+".workflows_tags_idx"),
		"USING gin (tags jsonb_path_ops) WHERE (tags IS NOT NULL)", "untagged runs have no entry")
	rows, err := c.pool.Query(c.ctx, `SELECT i.relname FROM pg_index x
		JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
		JOIN pg_namespace n ON n.oid = t.relnamespace
		JOIN pg_attribute a ON a.attrelid = t.oid AND a.attname = 'tags'
		WHERE n.nspname = $1 AND t.relname = 'workflows' AND (a.attnum = ANY (x.indkey)
			OR pg_get_expr(x.indexprs, x.indrelid) LIKE '%tags%' OR pg_get_expr(x.indpred, x.indrelid) LIKE '%tags%')
		ORDER BY 1`, c.schema)
	require.NoError(t, err)
	indexes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"workflows_tags_idx"}, indexes)

	c.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, tags)
		VALUES ('tagged', 'w', 'pending', 'v', 'x', 1, '{"k": "v"}'), ('plain', 'w', 'pending', 'v', 'x', 1, NULL)`)
	wq := NewWaitQueries(c.schema, "")
	tq := NewTagQueries(c.schema)
	// hot returns how many of the updates write makes are HOT, and how
	// many it makes: the change of the counts of the session's statistics
	// (not sent before the transaction ends) over write, in a transaction.
	hot := func(id string, write func(tx pgx.Tx)) (int, int) {
		t.Helper()
		tx, err := c.pool.Begin(c.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(c.ctx) }()
		counts := func() (h, n int) {
			require.NoError(t, tx.QueryRow(c.ctx, Render(`SELECT pg_stat_get_xact_tuples_hot_updated('{{schema}}.workflows'::regclass),
				pg_stat_get_xact_tuples_updated('{{schema}}.workflows'::regclass)`, c.schema)).Scan(&h, &n))
			return h, n
		}
		h0, n0 := counts()
		write(tx)
		h, n := counts()
		return h - h0, n - n0
	}
	for _, id := range []string{"tagged", "plain"} {
		h, n := hot(id, func(tx pgx.Tx) {
			set, err := wq.SetWaitTopic(c.ctx, tx, WaitTopicParams{ID: id, Epoch: 1, Topic: "t"})
			require.NoError(t, err)
			require.True(t, set)
		})
		require.Equal(t, [2]int{1, 1}, [2]int{h, n}, "%s: wait topic", id)
		h, n = hot(id, func(tx pgx.Tx) {
			watched, err := c.q.WatchWorkflow(c.ctx, tx, id)
			require.NoError(t, err)
			require.True(t, watched)
		})
		require.Equal(t, [2]int{1, 1}, [2]int{h, n}, "%s: watch", id)
	}
	// A change of the tags is not HOT: the index gets the run's new entry.
	h, n := hot("tagged", func(tx pgx.Tx) {
		row, err := tq.SetTag(c.ctx, tx, SetTagParams{WorkflowID: "tagged", Epoch: 1, Pos: 0, Name: "durable.tag:k", Key: "k", Value: "w",
			StartedAt: time.Now(), MaxTags: 32})
		require.NoError(t, err)
		require.True(t, row.Written)
	})
	require.Equal(t, [2]int{0, 1}, [2]int{h, n}, "SetTag")
}
