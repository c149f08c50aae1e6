package durable_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable"
)

// A workflow with a plain step and a transaction step, started with a
// caller-chosen ID. Starting the same ID again returns the same run.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS example_app CASCADE; DROP SCHEMA IF EXISTS example_durable CASCADE; CREATE SCHEMA example_app; CREATE TABLE example_app.seats (workspace text, n int)")

	eng, err := durable.New(pool, &durable.Config{
		Schema:     "example_durable",
		AppVersion: "2026-11-29",
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		panic(err)
	}
	type Signup struct{ Email string }
	onboard := durable.Register(eng, "onboard", func(wctx durable.Context, in Signup) (string, error) {
		ws, err := durable.Step(wctx, "provision", func(ctx context.Context) (string, error) {
			// Hand durable.IdempotencyKey(ctx) to the provider.
			return "ws-" + in.Email, nil
		}, nil)
		if err != nil {
			return "", err
		}
		_, err = durable.TxStep(wctx, "record-seat", func(ctx context.Context, tx pgx.Tx) (int, error) {
			_, err := tx.Exec(ctx, "INSERT INTO example_app.seats VALUES ($1, 1)", ws)
			return 1, err
		}, nil)
		return ws, err
	}, nil)
	if err := eng.Launch(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = eng.Shutdown(ctx) }()

	for range 2 {
		h, err := onboard.Start(ctx, Signup{Email: "ada@example.com"}, &durable.StartOpts{ID: "signup-42"})
		if err != nil {
			panic(err)
		}
		ws, err := h.Result(ctx)
		fmt.Println(ws, err)
	}
	var seats int
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM example_app.seats").Scan(&seats)
	fmt.Println("seat rows:", seats)
	// Output:
	// ws-ada@example.com <nil>
	// ws-ada@example.com <nil>
	// seat rows: 1
}

// Permanent stops retries at once; the error read back matches
// ErrPermanent.
func ExamplePermanent() {
	ctx := context.Background()
	pool, _ := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	defer pool.Close()
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS example_perm CASCADE")
	eng, _ := durable.New(pool, &durable.Config{Schema: "example_perm", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	attempts := 0
	charge := durable.Register(eng, "charge", func(wctx durable.Context, cents int) (string, error) {
		return durable.Step(wctx, "charge-card", func(ctx context.Context) (string, error) {
			attempts++
			return "", durable.Permanent(errors.New("card declined"))
		}, &durable.StepOpts{Retry: &durable.RetryPolicy{MaxAttempts: 5}})
	}, nil)
	_ = eng.Launch(ctx)
	defer func() { _ = eng.Shutdown(ctx) }()
	h, _ := charge.Start(ctx, 1999, nil)
	_, err := h.Result(ctx)
	fmt.Println(errors.Is(err, durable.ErrPermanent), attempts)
	// Output: true 1
}
