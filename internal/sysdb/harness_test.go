package sysdb

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/pgtest"
)

// migrated returns a pool and a schema with every migration of the
// repository applied and empty tables, for the statement tests: each test
// has the schema to itself, and it is reused by a later test once this one
// ends (pgtest.Reused).
func migrated(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	return pgtest.Pool(tb), pgtest.Reused(tb, "migrated", migrateAll)
}

// migratedFresh is migrated on a new schema, for the tests of what a new
// schema looks like (vacuum statistics of tables never vacuumed).
func migratedFresh(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	pool, schema := pgtest.Pool(tb), pgtest.Schema(tb)
	conn, err := pool.Acquire(context.Background())
	require.NoError(tb, err)
	defer conn.Release()
	require.NoError(tb, migrateAll(context.Background(), conn.Conn(), schema))
	return pool, schema
}

// migrateAll applies every migration of the repository to schema.
func migrateAll(ctx context.Context, conn *pgx.Conn, schema string) error {
	migs, err := LoadMigrations(os.DirFS("../.."), "migrations")
	if err != nil {
		return err
	}
	_, err = Migrate(ctx, conn, migs, schema)
	return err
}

func TestMigratedHarness(t *testing.T) {
	pool, schema := migrated(t)
	var n int
	require.NoError(t, pool.QueryRow(context.Background(),
		Render(`SELECT count(*) FROM {{schema}}.workflows`, schema)).Scan(&n))
	require.Zero(t, n)
}
