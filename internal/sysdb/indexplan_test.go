package sysdb

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestIndexPlannedReportsCommitError: a batch statement sent with its
// planner setting (queryIndexPlanned) on a pool commits at the end of the
// batch, after its rows were read; an error of that commit is the
// statement's, so a finish that did not commit is never reported
// written. A deferred constraint trigger fails the commit here.
func TestIndexPlannedReportsCommitError(t *testing.T) {
	t.Parallel()
	pool, schema := migratedFresh(t)
	ctx := context.Background()
	on(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, epoch, executor_id)
VALUES ('a', 'w', 'pending', 'v', 1, 'x'), ('b', 'w', 'pending', 'v', 1, 'x')`)
	on(t, pool, schema, `CREATE FUNCTION {{schema}}.refuse() RETURNS trigger LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'refused at commit'; END$$`)
	on(t, pool, schema, `CREATE CONSTRAINT TRIGGER refuse AFTER UPDATE ON {{schema}}.workflows
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {{schema}}.refuse()`)

	q := New(schema, false)
	finished, _, err := q.FinishWorkflows(ctx, pool, []*FinishOneParams{
		{ID: "a", Epoch: 1, Status: "success", Output: json.RawMessage(`1`)},
		{ID: "b", Epoch: 1, Status: "success", Output: json.RawMessage(`2`)},
	})
	require.ErrorContains(t, err, "refused at commit")
	require.Nil(t, finished)
	require.Equal(t, "pending x 1 0", runState(t, pool, schema, "a"), "rolled back")
}
