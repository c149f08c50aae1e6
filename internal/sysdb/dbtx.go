package sysdb

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is what a statement runs on: a pool, a connection or a
// transaction. Every statement of this package is a method taking one, a
// parameter struct and, when it returns rows, a row struct: the order of
// the $N slots and of the scanned columns lives next to the SQL text and
// nowhere else.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}
