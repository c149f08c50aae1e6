// Package sysdbtest gives the tests of the engine's services a freshly
// migrated schema of their own on the test server.
package sysdbtest

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/sysdb"
)

// Migrated returns the test pool and a fresh schema with every migration
// of the repository applied; the schema is dropped when tb ends.
func Migrated(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	pool, schema := pgtest.Pool(tb), pgtest.Schema(tb)
	_, file, _, ok := runtime.Caller(0)
	require.True(tb, ok)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	baseline, err := os.ReadFile(filepath.Join(root, "schema.sql"))
	require.NoError(tb, err)
	migs, err := sysdb.LoadMigrations(string(baseline), os.DirFS(root), "migrations")
	require.NoError(tb, err)
	conn, err := pool.Acquire(context.Background())
	require.NoError(tb, err)
	defer conn.Release()
	_, err = sysdb.Migrate(context.Background(), conn.Conn(), migs, schema)
	require.NoError(tb, err)
	return pool, schema
}

// Exec runs sql, its schema marker rendered for schema, with args on pool,
// failing tb on an error.
func Exec(tb testing.TB, pool *pgxpool.Pool, schema, sql string, args ...any) {
	tb.Helper()
	_, err := pool.Exec(context.Background(), sysdb.Render(sql, schema), args...)
	require.NoError(tb, err, sql)
}
