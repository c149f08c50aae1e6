package sysdb

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// on runs sql (its {{schema}} rendered) with args on pool, failing tb on
// an error.
func on(tb testing.TB, pool *pgxpool.Pool, schema, sql string, args ...any) {
	tb.Helper()
	_, err := pool.Exec(context.Background(), Render(sql, schema), args...)
	require.NoError(tb, err, sql)
}

// runState returns run id as "status owner epoch attempts" ("-": no
// owner), or "none".
func runState(tb testing.TB, pool *pgxpool.Pool, schema, id string) string {
	tb.Helper()
	var s string
	err := pool.QueryRow(context.Background(), Render(`SELECT status || ' ' || coalesce(executor_id, '-') || ' ' || epoch || ' ' || recovery_attempts
FROM {{schema}}.workflows WHERE id = $1`, schema), id).Scan(&s)
	if errors.Is(err, pgx.ErrNoRows) {
		return "none"
	}
	require.NoError(tb, err)
	return s
}
