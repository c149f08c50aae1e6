package durable_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/proctest"
)

// TestMigrate covers installing and upgrading the schema: concurrent
// migrations, the DBA's script, and the collation of the identifier
// columns.
func TestMigrate(t *testing.T) {
	t.Parallel()

	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.Pool(t)
		schema := pgtest.Schema(t)
		ctx := ctxT(t)
		migrateConcurrently(ctx, t, pool, schema)
		var v int
		require.NoError(t, pool.QueryRow(ctx, "SELECT max(version) FROM "+pgx.Identifier{schema, "schema_migrations"}.Sanitize()).Scan(&v))
		require.Equal(t, durable.SchemaVersion(), v)
	})

	// ConcurrentThroughPooler: concurrent Migrate calls through
	// PgBouncer in transaction mode apply each migration once, and leave no
	// migration lock behind on a pooled server connection: a session lock
	// there was released on whichever connection the unlock landed on, so it
	// leaked (and later boots hung), or was granted to a second caller that
	// landed on the holder's connection (and they raced on CREATE SCHEMA).
	t.Run("ConcurrentThroughPooler", func(t *testing.T) {
		t.Parallel()
		pool := poolerPool(t, pgx.QueryExecModeExec, nil)
		direct := pgtest.DirectPool(t)
		ctx := ctxT(t)
		for range 3 {
			schema := pgtest.Schema(t)
			migrateConcurrently(ctx, t, pool, schema)
			var held int
			require.NoError(t, direct.QueryRow(ctx, `SELECT count(*) FROM pg_locks l, (SELECT hashtext($1)::bigint AS k) h
			WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.objid = (h.k & 4294967295)::oid AND l.classid = ((h.k >> 32) & 4294967295)::oid`,
				"durable.migrate:"+schema).Scan(&held))
			require.Zero(t, held, "the migration lock of %s is still held", schema)
		}
	})

	t.Run("SQLForDBAs", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.Pool(t)
		schema := pgtest.Schema(t)
		ctx := ctxT(t)

		// Without migrations, SkipMigrate refuses to launch.
		e, err := durable.New(pool, &durable.Config{Schema: schema, SkipMigrate: true})
		require.NoError(t, err)
		err = e.Launch(ctx)
		require.ErrorIs(t, err, durable.ErrSchemaOutdated)

		script, err := durable.MigrationSQL(schema)
		require.NoError(t, err)
		require.Contains(t, script, `"`+schema+`".workflows`)
		require.NotContains(t, script, "{{schema}}")
		// The DBA runs the script (twice: it is idempotent).
		for i := 0; i < 2; i++ {
			conn, err := pool.Acquire(ctx)
			require.NoError(t, err)
			_, err = conn.Conn().PgConn().Exec(ctx, script).ReadAll()
			conn.Release()
			require.NoError(t, err)
		}
		e, err = durable.New(pool, &durable.Config{Schema: schema, SkipMigrate: true})
		require.NoError(t, err)
		wf := durable.Register(e, "w", func(wctx durable.Context, in int) (int, error) { return in, nil }, nil)
		require.NoError(t, e.Launch(ctx))
		defer func() { require.NoError(t, e.Shutdown(context.Background())) }()
		h, err := wf.Start(ctx, 5, nil)
		require.NoError(t, err)
		out, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 5, out)

		_, err = durable.MigrationSQL(`x"; DROP`)
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		require.True(t, strings.HasPrefix(script, "CREATE SCHEMA"))
	})

	// IdentifierColumnsCompareAsBytes: a new install keys its indexes by
	// identifiers in the C collation, whatever the database's default (see
	// migration 015); an install that already holds runs when it upgrades
	// keeps its columns as they are, since the change rebuilds every index on
	// them under an exclusive lock, and upgrades all the same.
	t.Run("IdentifierColumnsCompareAsBytes", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.Pool(t)
		ctx := ctxT(t)
		columns := []string{
			"workflows.id", "workflows.parent_id", "workflows.executor_id", "workflows.queue_name",
			"workflows.partition_key", "workflows.dedup_id", "steps.workflow_id",
			"messages.workflow_id", "messages.topic", "messages.idem_key",
			"events.workflow_id", "events.key", "streams.workflow_id", "streams.key",
			"executors.id", "queues.name", "workflows_created.run_id",
		}
		collations := func(schema string) map[string]string {
			got := queryMap[string, string](t, pool, `SELECT table_name || '.' || column_name, coalesce(collation_name, '')
			FROM information_schema.columns WHERE table_schema = $1 AND table_name || '.' || column_name = ANY($2)`, schema, columns)
			require.Len(t, got, len(columns))
			return got
		}

		fresh := pgtest.Schema(t)
		require.NoError(t, durable.Migrate(ctx, pool, fresh))
		for col, coll := range collations(fresh) {
			require.Equal(t, "C", coll, "%s of a new install", col)
		}

		// An install at version 14 with a run in it, upgraded by Migrate.
		old := pgtest.Schema(t)
		installBefore015(ctx, t, pool, old)
		require.NoError(t, durable.Migrate(ctx, pool, old))
		for col, coll := range collations(old) {
			require.Empty(t, coll, "%s of an upgraded install keeps the database's collation", col)
		}
		var v int
		require.NoError(t, pool.QueryRow(ctx, "SELECT max(version) FROM "+pgx.Identifier{old, "schema_migrations"}.Sanitize()).Scan(&v))
		require.Equal(t, durable.SchemaVersion(), v)

		// Both kinds of install work: a cancel of a run and its descendants
		// (a recursive query over the ID columns) and listings.
		for _, schema := range []string{fresh, old} {
			_, err := pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "workflows"}.Sanitize()+
				` (id, name, status, app_version, parent_id) VALUES ('p', 'w', 'pending', 'v', NULL), ('c', 'w', 'pending', 'v', 'p'), ('g', 'w', 'pending', 'v', 'c')`)
			require.NoError(t, err)
			e, err := durable.New(pool, &durable.Config{Schema: schema, SkipMigrate: true})
			require.NoError(t, err)
			require.NoError(t, e.Cancel(ctx, "p", &durable.CancelOpts{Children: true}))
			runs, _, err := e.ListWorkflows(ctx, &durable.ListParams{Statuses: []durable.Status{durable.StatusCancelled}, OmitPayloads: true})
			require.NoError(t, err)
			var ids []string
			for _, r := range runs {
				ids = append(ids, r.ID)
			}
			require.ElementsMatch(t, []string{"p", "c", "g"}, ids, schema)
		}
	})

	// LaunchHintsAtIDCollation: in a database whose default collation is a
	// language's (ICU en-US here), Launch on an install made before migration
	// 015 (its run IDs in that collation) logs how to move them to "C"; on a
	// new install it logs nothing of the kind. Both run queued workflows and
	// answer listings there. Skipped where the server cannot create such a
	// database.
	t.Run("LaunchHintsAtIDCollation", func(t *testing.T) {
		t.Parallel()
		ctx := ctxT(t)
		admin := pgtest.Pool(t)
		db := fmt.Sprintf("icu_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+db+" TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C'"); err != nil {
			t.Skipf("cannot create a database with an ICU default collation: %v", err)
		}
		t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP DATABASE "+db+" WITH (FORCE)") })
		cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
		require.NoError(t, err)
		cfg.ConnConfig.Database = db
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)

		for _, old := range []bool{true, false} {
			schema := map[bool]string{true: "old", false: "fresh"}[old]
			if old {
				installBefore015(ctx, t, pool, schema)
			}
			buf := &proctest.Buffer{}
			e, err := durable.New(pool, &durable.Config{Schema: schema, Logger: slog.New(slog.NewTextHandler(buf, nil))})
			require.NoError(t, err)
			wf := durable.Register(e, "w", func(wctx durable.Context, in int) (int, error) {
				return durable.Step(wctx, "double", func(ctx context.Context) (int, error) { return 2 * in, nil }, nil)
			}, nil)
			q := durable.RegisterQueue(e, "q", nil)
			require.NoError(t, e.Launch(ctx))
			require.Equal(t, old, strings.Contains(buf.String(), "migration 015"), "%s install; log:\n%s", schema, buf.String())

			// Either kind of install works in this database: queued runs with
			// a step, a listing by ID prefix and status, the queue's counts.
			enqueueDoubles(ctx, t, wf, q, 10, func(i int) *durable.EnqueueOpts { return &durable.EnqueueOpts{ID: fmt.Sprintf("job-%d", i)} })
			runs, next, err := e.ListWorkflows(ctx, &durable.ListParams{IDPrefix: "job-", Statuses: []durable.Status{durable.StatusSuccess}, Limit: 4})
			require.NoError(t, err)
			require.Len(t, runs, 4)
			require.NotEmpty(t, next)
			st, err := q.Stats(ctx)
			require.NoError(t, err)
			require.Zero(t, st.Ready+st.Delayed+st.Running)
			require.NoError(t, e.Shutdown(ctx))
		}
	})
}

// migrateConcurrently runs six Migrate calls of schema at once through pool
// and checks each migration (each file of migrations/) was applied once.
func migrateConcurrently(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() { errs[i] = durable.Migrate(ctx, pool, schema) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	files, err := filepath.Glob("migrations/*.sql")
	require.NoError(t, err)
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "schema_migrations"}.Sanitize()).Scan(&n))
	require.Equal(t, len(files), n, "each migration applied once")
}

// installBefore015 makes schema an install at version 14 holding a run, as
// one made before migration 015: the DBA script up to that migration, and a
// finished run.
func installBefore015(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	script, err := durable.MigrationSQL(schema)
	require.NoError(t, err)
	cut := strings.Index(script, "\n-- migration 015 ")
	require.Positive(t, cut)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = conn.Conn().PgConn().Exec(ctx, script[:cut]).ReadAll()
	conn.Release()
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "workflows"}.Sanitize()+
		` (id, name, status, app_version) VALUES ('r1', 'w', 'success', 'v')`)
	require.NoError(t, err)
}
