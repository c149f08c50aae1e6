package durable_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
)

func TestConcurrentMigrations(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = durable.Migrate(ctx, pool, schema)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	var n, v int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*), max(version) FROM "+pgx.Identifier{schema, "schema_migrations"}.Sanitize()).Scan(&n, &v))
	require.Equal(t, durable.SchemaVersion(), v)
	files, err := filepath.Glob("migrations/*.sql")
	require.NoError(t, err)
	require.Equal(t, 1+len(files), n, "each migration (schema.sql and the numbered files) applied once")
}

func TestMigrationSQLForDBAs(t *testing.T) {
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
}
