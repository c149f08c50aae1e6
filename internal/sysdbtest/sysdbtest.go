// Package sysdbtest gives the tests of the engine's services a fresh
// schema with every migration of the repository applied. It is test-only.
package sysdbtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/sysdb"
)

// Migrated returns the test pool and a schema with the migrations in the
// repository's migrations/ folder applied and every table empty. The
// schema is reused by a later test of the process once this one ends
// (pgtest.Reused): migrating a schema costs the server far more than
// emptying one.
func Migrated(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	return pgtest.Pool(tb), pgtest.Reused(tb, "migrated", Migrate)
}

// Migrate applies the migrations in the repository's migrations/ folder
// to schema (a pgtest.Prepare).
func Migrate(ctx context.Context, conn *pgx.Conn, schema string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	migs, err := sysdb.LoadMigrations(os.DirFS(root), "migrations")
	if err != nil {
		return err
	}
	_, err = sysdb.Migrate(ctx, conn, migs, schema)
	return err
}

// Exec runs sql, its schema marker rendered for schema, with args on pool,
// failing tb on an error.
func Exec(tb testing.TB, pool *pgxpool.Pool, schema, sql string, args ...any) {
	tb.Helper()
	if _, err := pool.Exec(context.Background(), sysdb.Render(sql, schema), args...); err != nil {
		tb.Fatalf("sysdbtest: %v\n%s", err, sql)
	}
}

// RecordedSteps returns the names of the steps recorded for run id in
// schema, in position order, each marked "+" when its row was written by
// the transaction that finished the run (same xmin as the run's row): a
// checkpoint that rode the finish.
func RecordedSteps(ctx context.Context, tb testing.TB, db sysdb.DBTX, schema, id string) []string {
	tb.Helper()
	rows, err := db.Query(ctx, sysdb.Render(`SELECT s.name || CASE WHEN s.xmin = w.xmin THEN '+' ELSE '' END
		FROM {{schema}}.steps s JOIN {{schema}}.workflows w ON w.id = s.workflow_id
		WHERE s.workflow_id = $1 ORDER BY s.pos`, schema), id)
	if err != nil {
		tb.Fatalf("sysdbtest: %v", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		tb.Fatalf("sysdbtest: %v", err)
	}
	return names
}

// moduleRoot is the repository's root: the nearest directory above the
// working directory (a test's package directory) with a go.mod and a
// migrations folder. It does not use the source file's path, which
// -trimpath (the mutation suite's builds) makes relative.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if isFile(filepath.Join(d, "go.mod")) && isDir(filepath.Join(d, "migrations")) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod with a migrations folder above %s", wd)
		}
	}
}

func isFile(p string) bool { st, err := os.Stat(p); return err == nil && st.Mode().IsRegular() }

func isDir(p string) bool { st, err := os.Stat(p); return err == nil && st.IsDir() }
