package durable_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable"
)

// exampleEngine is the set-up the examples share (Example shows it in
// full): a pool on DATABASE_URL, which the test binary points at a
// throwaway cluster when it is unset, and an engine on a schema of the
// example's own, named after the process too so that test runs sharing one
// server never meet. Register workflows on eng, then Launch it. done shuts
// the engine down, drops the schema and closes the pool.
func exampleEngine(name string) (eng *durable.Engine, pool *pgxpool.Pool, done func()) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	schema := fmt.Sprintf("example_%s_%d", name, os.Getpid())
	drop := "DROP SCHEMA IF EXISTS " + pgx.Identifier{schema}.Sanitize() + " CASCADE"
	if _, err := pool.Exec(ctx, drop); err != nil {
		panic(err)
	}
	eng, err = durable.New(pool, forPooler(&durable.Config{
		Schema: schema,
		Logger: slog.New(slog.DiscardHandler),
	}))
	if err != nil {
		panic(err)
	}
	return eng, pool, func() {
		_ = eng.Shutdown(ctx)
		_, _ = pool.Exec(ctx, drop)
		pool.Close()
	}
}
