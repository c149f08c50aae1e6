package durable

import (
	"fmt"
	"strings"
	"testing"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/sysdb"
)

// TestListWorkflowsByTagsReadsTheTagsIndex: the statement ListWorkflows
// sends for ListParams.Tags finds the tagged runs through
// workflows_tags_idx (EXPLAIN ANALYZE, custom and generic plans), however
// old they are and however small the page, instead of reading the history
// of untagged runs.
func TestListWorkflowsByTagsReadsTheTagsIndex(t *testing.T) {
	t.Parallel()
	ctx, pool, schema := migratedSchema(t)
	e, err := New(pool, &Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	const history, tagged = 20000, 30
	runs := sysdb.Render("{{schema}}.workflows", schema)
	execAll(ctx, t, pool,
		fmt.Sprintf(`INSERT INTO %s (id, name, status, app_version, created_at, tags)
			SELECT 't' || i, 'w', 'success', 'v', now() - interval '1 day' + i * interval '1 second', '{"customer": "acme"}'
			FROM generate_series(1, %d) i`, runs, tagged),
		fmt.Sprintf(`INSERT INTO %s (id, name, status, app_version, created_at)
			SELECT 'r' || i, 'w', 'success', 'v', now() - (%d - i) * interval '1 second' FROM generate_series(1, %[2]d) i`, runs, history),
		"ANALYZE "+runs)
	for _, limit := range []int{1, 10, ListLimitDefault} {
		f, err := ListParams{Tags: map[string]string{"customer": "acme"}, Limit: limit, OmitPayloads: true}.filter()
		if err != nil {
			t.Fatal(err)
		}
		sql, args := statementOf(func(db sysdb.DBTX) { _, _ = e.iq.List(ctx, db, f) })
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			looked, plan := pgtest.ExplainRows(ctx, t, pool, mode, sql, args)
			if looked > tagged || !strings.Contains(plan, `"workflows_tags_idx"`) {
				t.Errorf("limit %d (%s): the plan read %d rows of workflows for %d tagged runs, or not through workflows_tags_idx\n%s",
					limit, mode, looked, tagged, plan)
			}
		}
	}
}
