package durable_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
)

// The least-privilege model of docs/least-privilege.md, checked end to end
// with a role that is no superuser, cannot create schemas or anything in
// the database, and sees no schema but its own.

// TestLeastPrivilege runs the engine under the two set-ups of
// docs/least-privilege.md, with a role that has no attribute.
func TestLeastPrivilege(t *testing.T) {
	t.Parallel()

	// SchemaOwner: a role that owns only its schema (a DBA
	// ran `CREATE SCHEMA durable AUTHORIZATION app` once) migrates it and runs
	// everything: steps, transaction steps on an app table in the same schema,
	// queues, schedules, messages, events, streams, recovery.
	t.Run("SchemaOwner", func(t *testing.T) {
		t.Parallel()
		admin := pgtest.Pool(t)
		ctx := ctxT(t)
		role := restrictedRole(t, admin)
		schema := "lp_owner_" + role[len("durable_lp_"):]
		ident := pgx.Identifier{schema}.Sanitize()
		mustExec(t, admin, "CREATE SCHEMA "+ident+" AUTHORIZATION "+pgx.Identifier{role}.Sanitize())
		t.Cleanup(func() { mustExec(t, admin, "DROP SCHEMA IF EXISTS "+ident+" CASCADE") })

		pool := rolePool(t, role)
		requireNoDDLOutside(t, pool, schema)
		mustExec(t, pool, "CREATE TABLE "+ident+".orders (id text PRIMARY KEY, qty int NOT NULL)")
		exerciseEngine(t, ctx, pool, schema, nil)
		requireOwnsNothingOutside(t, admin, role, schema)
	})

	// DMLOnly: a DBA applies durable.MigrationSQL as an
	// administrator and grants the application role USAGE on the schema and
	// DML on its tables but SELECT only on schema_migrations, nothing else. The
	// engine runs with Config.SkipMigrate, and also without it (Launch finds
	// nothing to migrate and runs no DDL); the role cannot rewrite the version.
	t.Run("DMLOnly", func(t *testing.T) {
		t.Parallel()
		admin := pgtest.Pool(t)
		ctx := ctxT(t)
		role := restrictedRole(t, admin)
		schema := "lp_dml_" + role[len("durable_lp_"):]
		ident, r := pgx.Identifier{schema}.Sanitize(), pgx.Identifier{role}.Sanitize()
		t.Cleanup(func() { mustExec(t, admin, "DROP SCHEMA IF EXISTS "+ident+" CASCADE") })

		script, err := durable.MigrationSQL(schema)
		require.NoError(t, err)
		conn, err := admin.Acquire(ctx)
		require.NoError(t, err)
		_, err = conn.Conn().PgConn().Exec(ctx, script).ReadAll()
		conn.Release()
		require.NoError(t, err)
		mustExec(t, admin, "CREATE TABLE "+ident+".orders (id text PRIMARY KEY, qty int NOT NULL)")
		// The grants of docs/least-privilege.md, word for word.
		for _, g := range []string{
			"GRANT USAGE ON SCHEMA " + ident + " TO " + r,
			"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + ident + " TO " + r,
			"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA " + ident + " TO " + r,
			"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA " + ident + " TO " + r,
			"REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON " + ident + ".schema_migrations FROM " + r,
		} {
			mustExec(t, admin, g)
		}

		pool := rolePool(t, role)
		requireNoDDLOutside(t, pool, schema)
		_, err = pool.Exec(ctx, "CREATE TABLE "+ident+".mine (x int)")
		requireSQLState(t, err, "42501") // no DDL in the schema either
		requireVersionReadOnly(t, pool, schema)

		exerciseEngine(t, ctx, pool, schema, func(c *durable.Config) { c.SkipMigrate = true })
		// Without SkipMigrate: an up-to-date schema needs no DDL.
		exerciseEngine(t, ctx, pool, schema, nil)
		requireVersionReadOnly(t, pool, schema)
		requireOwnsNothingOutside(t, admin, role, schema)
	})
}

// requireVersionReadOnly: the role reads the schema version but cannot
// rewrite it (claim a migration applied, or make Launch apply one again).
func requireVersionReadOnly(t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	ctx := ctxT(t)
	table := pgx.Identifier{schema, "schema_migrations"}.Sanitize()
	var v int
	require.NoError(t, pool.QueryRow(ctx, "SELECT max(version) FROM "+table).Scan(&v))
	require.Equal(t, durable.SchemaVersion(), v)
	for _, sql := range []string{
		"INSERT INTO " + table + " (version, name) VALUES (9999, 'forged')",
		"UPDATE " + table + " SET version = version + 1000",
		"DELETE FROM " + table,
		"TRUNCATE " + table,
	} {
		_, err := pool.Exec(ctx, sql)
		requireSQLState(t, err, "42501")
	}
}

// restrictedRole creates a login role with no attributes and no grants,
// dropped when the test ends. It skips the test when the server's user
// cannot create roles.
func restrictedRole(t *testing.T, admin *pgxpool.Pool) string {
	t.Helper()
	ctx := ctxT(t)
	var can bool
	require.NoError(t, admin.QueryRow(ctx, "SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user").Scan(&can))
	if !can {
		t.Skip("the DATABASE_URL user cannot create roles")
	}
	role := "durable_lp_" + randomSuffix(t)
	r := pgx.Identifier{role}.Sanitize()
	mustExec(t, admin, "CREATE ROLE "+r+" LOGIN PASSWORD 'lp-"+role+"' NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS")
	t.Cleanup(func() {
		// Runs after the schema's cleanup (registered later, so earlier).
		mustExec(t, admin, "DROP OWNED BY "+r)
		mustExec(t, admin, "DROP ROLE "+r)
	})
	return role
}

var roleSeq atomic.Uint64

func randomSuffix(t *testing.T) string {
	return fmt.Sprintf("%d_%d", time.Now().UnixNano()%1e9, roleSeq.Add(1))
}

// rolePool connects as role (trust authentication on the scripts/pg
// cluster; the password for servers that ask for one).
func rolePool(t *testing.T, role string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	cfg.ConnConfig.User = role
	cfg.ConnConfig.Password = "lp-" + role
	cfg.MaxConns = 10
	pool, err := pgxpool.NewWithConfig(ctxT(t), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var user string
	require.NoError(t, pool.QueryRow(ctxT(t), "SELECT current_user").Scan(&user))
	require.Equal(t, role, user)
	return pool
}

func mustExec(t *testing.T, pool *pgxpool.Pool, sql string) {
	t.Helper()
	_, err := pool.Exec(context.Background(), sql)
	require.NoError(t, err, sql)
}

func requireSQLState(t *testing.T, err error, code string) {
	t.Helper()
	var pe *pgconn.PgError
	require.True(t, errors.As(err, &pe), "want SQLSTATE %s, got %v", code, err)
	require.Equal(t, code, pe.Code, pe.Message)
}

// requireNoDDLOutside checks the role really is restricted: no superuser,
// no CREATE on the database, no CREATE on any schema but its own.
func requireNoDDLOutside(t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	ctx := ctxT(t)
	var super, createDB bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT rolsuper, has_database_privilege(current_database(), 'CREATE')
FROM pg_roles WHERE rolname = current_user`).Scan(&super, &createDB))
	require.False(t, super)
	require.False(t, createDB)
	_, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema + "_other"}.Sanitize())
	requireSQLState(t, err, "42501")
	rows, err := pool.Query(ctx, `SELECT nspname FROM pg_namespace
WHERE nspname <> $1 AND nspname NOT LIKE 'pg\_%' AND nspname <> 'information_schema' AND has_schema_privilege(oid, 'CREATE')`, schema)
	require.NoError(t, err)
	others, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	if len(others) > 0 { // public on Postgres 14 and older grants CREATE to everyone
		t.Logf("the role may create objects in %v (server default); the test checks it creates none", others)
	}
}

// requireOwnsNothingOutside: the engine created no object outside schema.
func requireOwnsNothingOutside(t *testing.T, admin *pgxpool.Pool, role, schema string) {
	t.Helper()
	var n int
	require.NoError(t, admin.QueryRow(ctxT(t), `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relowner = (SELECT oid FROM pg_roles WHERE rolname = $1) AND n.nspname <> $2 AND n.nspname <> 'pg_toast'`, role, schema).Scan(&n))
	require.Zero(t, n, "objects owned by %s outside %s", role, schema)
}

type lpOrder struct {
	ID  string
	Qty int
}

// exerciseEngine runs the engine's features through pool on schema, twice
// over a hard stop so the second engine recovers a run of the first.
func exerciseEngine(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema string, mutate func(*durable.Config)) {
	t.Helper()
	orders := pgx.Identifier{schema, "orders"}.Sanitize()
	execID := "lp-" + randomSuffix(t)
	cfg := func() *durable.Config {
		c := &durable.Config{Schema: schema, AppVersion: "lp", ExecutorID: execID, LeaseTTL: time.Second, PollInterval: 200 * time.Millisecond,
			StepRetry: durable.RetryPolicy{BaseDelay: time.Millisecond}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		if mutate != nil {
			mutate(c)
		}
		return forPooler(c)
	}
	var order *durable.Workflow[lpOrder, int]
	var child *durable.Workflow[int, int]
	var ticked *durable.Workflow[int, string]
	var blocker *durable.Workflow[string, string]
	started := make(chan struct{}, 1)
	register := func(e *durable.Engine, first bool) *durable.Queue {
		q := durable.RegisterQueue(e, "lp-queue", &durable.QueueOpts{GlobalConcurrency: 2, RateLimit: 100, RatePeriod: time.Second})
		child = durable.Register(e, "lp-child", func(wctx durable.Context, n int) (int, error) { return n * 2, nil }, nil)
		order = durable.Register(e, "lp-order", func(wctx durable.Context, o lpOrder) (int, error) {
			qty, err := durable.Step(wctx, "price", func(ctx context.Context) (int, error) { return o.Qty, nil }, nil)
			if err != nil {
				return 0, err
			}
			if _, err := durable.TxStep(wctx, "insert", func(ctx context.Context, tx pgx.Tx) (int, error) {
				_, err := tx.Exec(ctx, "INSERT INTO "+orders+" (id, qty) VALUES ($1, $2)", o.ID, qty)
				return 0, err
			}, nil); err != nil {
				return 0, err
			}
			if err := durable.SetEvent(wctx, "stage", "inserted"); err != nil {
				return 0, err
			}
			if err := durable.StreamWrite(wctx, "log", "inserted "+o.ID); err != nil {
				return 0, err
			}
			if err := durable.StreamClose(wctx, "log"); err != nil {
				return 0, err
			}
			if err := durable.Sleep(wctx, 5*time.Millisecond); err != nil {
				return 0, err
			}
			extra, ok, err := durable.Recv[int](wctx, "extra", time.Minute)
			if err != nil || !ok {
				return 0, fmt.Errorf("recv: %v %v", ok, err)
			}
			h, err := child.StartChild(wctx, qty+extra, nil)
			if err != nil {
				return 0, err
			}
			return h.Await(wctx)
		}, nil)
		ticked = durable.Register(e, "lp-ticked", func(wctx durable.Context, in int) (string, error) { return "tick", nil }, nil)
		durable.Schedule(ticked, "lp-every-second", "* * * * * *", nil)
		blocker = durable.Register(e, "lp-blocker", func(wctx durable.Context, in string) (string, error) {
			if first {
				started <- struct{}{}
				<-wctx.Done()
				return "", wctx.Err()
			}
			return "recovered " + in, nil
		}, nil)
		return q
	}

	e1, err := durable.New(pool, cfg())
	require.NoError(t, err)
	q := register(e1, true)
	require.NoError(t, e1.Launch(ctx))
	id := "order-" + execID
	h, err := order.Start(ctx, lpOrder{ID: id, Qty: 3}, &durable.StartOpts{ID: id})
	require.NoError(t, err)
	require.NoError(t, durable.Send(ctx, e1, id, "extra", 4, &durable.SendOpts{IdempotencyKey: "k1"}))
	require.NoError(t, durable.Send(ctx, e1, id, "extra", 4, &durable.SendOpts{IdempotencyKey: "k1"}))
	got, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 14, got)
	stage, ok, err := durable.GetEvent[string](ctx, e1, id, "stage", 0)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "inserted", stage)
	entries, done, err := durable.StreamEntries[string](ctx, e1, id, "log", 0, 0)
	require.NoError(t, err)
	require.True(t, done)
	require.Len(t, entries, 1)
	steps, err := e1.ListSteps(ctx, id)
	require.NoError(t, err)
	require.NotEmpty(t, steps)
	var qty int
	require.NoError(t, pool.QueryRow(ctx, "SELECT qty FROM "+orders+" WHERE id = $1", id).Scan(&qty))
	require.Equal(t, 3, qty)

	qh, err := child.Enqueue(ctx, q, 21, nil)
	require.NoError(t, err)
	n, err := qh.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 42, n)
	_, err = q.Stats(ctx)
	require.NoError(t, err)
	require.NoError(t, q.Update(ctx, &durable.QueueOpts{GlobalConcurrency: 3}))

	// A scheduled tick runs.
	require.Eventually(t, func() bool {
		runs, _, err := e1.ListWorkflows(ctx, &durable.ListParams{IDPrefix: "sched:lp-every-second:", Statuses: []durable.Status{durable.StatusSuccess}})
		return err == nil && len(runs) > 0
	}, 30*time.Second, 50*time.Millisecond)
	scheds, err := e1.ListSchedules(ctx)
	require.NoError(t, err)
	require.Len(t, scheds, 1)
	require.NoError(t, e1.PauseSchedule(ctx, "lp-every-second"))

	// Cancel works.
	ch, err := blocker.Start(ctx, "cancel-me", &durable.StartOpts{ID: "cancel-" + execID})
	require.NoError(t, err)
	<-started
	require.NoError(t, e1.Cancel(ctx, ch.ID(), nil))
	_, err = ch.Result(ctx)
	require.ErrorIs(t, err, durable.ErrCancelled)

	// Recovery: a run in flight when its executor dies is resumed by the
	// next boot of that executor.
	_, err = blocker.Start(ctx, "x", &durable.StartOpts{ID: "blocked-" + execID})
	require.NoError(t, err)
	<-started
	hardStop(t, e1)

	e2, err := durable.New(pool, cfg())
	require.NoError(t, err)
	register(e2, false)
	require.NoError(t, e2.Launch(ctx))
	defer func() { require.NoError(t, e2.Shutdown(context.Background())) }()
	bh, err := blocker.Handle(ctx, "blocked-"+execID)
	require.NoError(t, err)
	out, err := bh.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "recovered x", out)
	require.NoError(t, e2.ResumeSchedule(ctx, "lp-every-second"))

	// Operations: inspection, queue listing, retention.
	_, err = e2.Inspect(ctx, id)
	require.NoError(t, err)
	queues, err := e2.ListQueues(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, queues)
	pruned, err := e2.Prune(ctx, time.Now().Add(time.Hour), nil)
	require.NoError(t, err)
	require.Positive(t, pruned.Runs)
	var left int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "workflows"}.Sanitize()+" WHERE id = $1", id).Scan(&left))
	require.Zero(t, left, "the finished run was pruned")
}
