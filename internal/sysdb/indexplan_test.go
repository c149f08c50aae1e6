package sysdb

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/pgtest"
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

// TestIndexPlannedOncePerConnection: a batch statement sent by
// queryIndexPlanned is planned once per connection, generic from its
// first execution on: no custom plan first (five per connection by
// default), whose planning cost a drain ~3% of its server CPU when each
// of its connections ran a statement only a few times.
func TestIndexPlannedOncePerConnection(t *testing.T) {
	t.Parallel()
	pgtest.SkipIfPooled(t, "the prepared statements it reads are those of one server connection")
	pool, schema := migrated(t)
	ctx := context.Background()
	on(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, epoch, executor_id)
VALUES ('a', 'w', 'pending', 'v', 1, 'x'), ('b', 'w', 'pending', 'v', 1, 'x')`)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	q := New(schema, false)
	for _, id := range []string{"a", "b", "c"} {
		_, _, err := q.FinishWorkflows(ctx, conn, []*FinishOneParams{{ID: id, Epoch: 1, Status: "success", Output: json.RawMessage(`1`)}})
		require.NoError(t, err)
	}
	var generic, custom int
	require.NoError(t, conn.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`,
		q.finishWorkflows).Scan(&generic, &custom))
	require.Equal(t, [2]int{3, 0}, [2]int{generic, custom}, "executions of the batch finish by its generic plan and by custom ones")
}
