// Package sysdbtest gives the tests of the engine's services a fresh
// schema with every migration of the repository applied. It is test-only.
package sysdbtest

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/sysdb"
)

// Migrated returns the test pool and a new schema, dropped when the test
// ends, with the migrations in the repository's migrations/ folder
// applied.
func Migrated(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	pool, schema := pgtest.Pool(tb), pgtest.Schema(tb)
	_, here, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(here), "..", "..")
	migs, err := sysdb.LoadMigrations(os.DirFS(root), "migrations")
	if err != nil {
		tb.Fatalf("sysdbtest: %v", err)
	}
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		tb.Fatalf("sysdbtest: %v", err)
	}
	defer conn.Release()
	if _, err := sysdb.Migrate(ctx, conn.Conn(), migs, schema); err != nil {
		tb.Fatalf("sysdbtest: migrate %s: %v", schema, err)
	}
	return pool, schema
}

// Exec runs sql, its schema marker rendered for schema, with args on pool,
// failing tb on an error.
func Exec(tb testing.TB, pool *pgxpool.Pool, schema, sql string, args ...any) {
	tb.Helper()
	if _, err := pool.Exec(context.Background(), sysdb.Render(sql, schema), args...); err != nil {
		tb.Fatalf("sysdbtest: %v\n%s", err, sql)
	}
}
