package sysdb

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/pgtest"
)

// migrated returns a pool and a fresh schema with every migration of the
// repository applied, for the statement tests: each test gets its own
// schema, so tests run in parallel and leave nothing behind.
func migrated(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	pool, schema := pgtest.Pool(tb), pgtest.Schema(tb)
	migs, err := LoadMigrations(os.DirFS("../.."), "migrations")
	require.NoError(tb, err)
	conn, err := pool.Acquire(context.Background())
	require.NoError(tb, err)
	defer conn.Release()
	_, err = Migrate(context.Background(), conn.Conn(), migs, schema)
	require.NoError(tb, err)
	return pool, schema
}

func TestMigratedHarness(t *testing.T) {
	pool, schema := migrated(t)
	var n int
	require.NoError(t, pool.QueryRow(context.Background(),
		Render(`SELECT count(*) FROM {{schema}}.workflows`, schema)).Scan(&n))
	require.Zero(t, n)
}
