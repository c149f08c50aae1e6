package durable_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable"
)

// A step's output is recorded once it succeeds. A failed attempt is
// retried by the step's policy, with the same idempotency key every time,
// so a provider that deduplicates on it acts once.
func ExampleStep() {
	ctx := context.Background()
	eng, _, done := exampleEngine("step")
	defer done()

	var keys []string
	provision := durable.Register(eng, "provision", func(wctx durable.Context, customer string) (string, error) {
		return durable.Step(wctx, "create-workspace", func(ctx context.Context) (string, error) {
			keys = append(keys, durable.IdempotencyKey(ctx)) // hand it to the provider
			if len(keys) < 3 {
				return "", errors.New("provider unavailable") // retried
			}
			return "ws-" + customer, nil
		}, &durable.StepOpts{Retry: &durable.RetryPolicy{MaxAttempts: 5, BaseDelay: time.Millisecond}})
	}, nil)
	if err := eng.Launch(ctx); err != nil {
		panic(err)
	}

	h, err := provision.Start(ctx, "acme", &durable.StartOpts{ID: "provision-acme"})
	if err != nil {
		panic(err)
	}
	ws, err := h.Result(ctx)
	fmt.Println(ws, err)
	fmt.Println(keys)
	// Output:
	// ws-acme <nil>
	// [provision-acme/0 provision-acme/0 provision-acme/0]
}

// A transaction step's writes and its checkpoint commit in one
// transaction: an attempt that fails rolls its rows back with it, and the
// row of the attempt that committed exists once.
func ExampleTxStep() {
	ctx := context.Background()
	eng, pool, done := exampleEngine("txstep")
	defer done()
	invoices := pgx.Identifier{eng.Schema(), "invoices"}.Sanitize() // an app table, here in the engine's schema

	attempts := 0
	invoice := durable.Register(eng, "invoice", func(wctx durable.Context, cents int) (int, error) {
		return durable.TxStep(wctx, "insert-invoice", func(ctx context.Context, tx pgx.Tx) (int, error) {
			attempts++
			if _, err := tx.Exec(ctx, "INSERT INTO "+invoices+" VALUES ($1, $2)", wctx.WorkflowID(), cents); err != nil {
				return 0, err
			}
			if attempts == 1 {
				return 0, errors.New("tax service timed out") // this attempt's row is rolled back
			}
			return attempts, nil
		}, &durable.TxStepOpts{Retry: &durable.RetryPolicy{BaseDelay: time.Millisecond}})
	}, nil)
	if err := eng.Launch(ctx); err != nil { // creates the schema
		panic(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE "+invoices+" (order_id text, cents int)"); err != nil {
		panic(err)
	}

	h, err := invoice.Start(ctx, 4200, &durable.StartOpts{ID: "order-17"})
	if err != nil {
		panic(err)
	}
	n, err := h.Result(ctx)
	fmt.Println("committed attempt:", n, err)
	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+invoices).Scan(&rows); err != nil {
		panic(err)
	}
	fmt.Println("invoice rows:", rows)
	// Output:
	// committed attempt: 2 <nil>
	// invoice rows: 1
}

// IntentStep is for a provider that cannot deduplicate: the intent is
// recorded before the call, and if the process dies during the call, the
// replay asks resolve what happened instead of calling again blindly.
func ExampleIntentStep() {
	ctx := context.Background()
	eng, _, done := exampleEngine("intent")
	defer done()

	wire := durable.Register(eng, "wire", func(wctx durable.Context, cents int) (string, error) {
		return durable.IntentStep(wctx, "send-wire",
			func(ctx context.Context) (string, error) {
				return "wire-7", nil // the bank's API, which has no idempotency key
			},
			func(ctx context.Context) (string, error) {
				// Only after a crash during the call: look the transfer up
				// (by a reference you sent with it), or run it again.
				return "", durable.ErrRunAgain
			}, nil)
	}, nil)
	if err := eng.Launch(ctx); err != nil {
		panic(err)
	}

	h, err := wire.Start(ctx, 100_000, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	// Output: wire-7 <nil>
}

// Go runs steps in parallel. Each takes its position at the call, so a
// replay lines up whatever order the goroutines finished in.
func ExampleGo() {
	ctx := context.Background()
	eng, _, done := exampleEngine("go")
	defer done()

	quote := durable.Register(eng, "quote", func(wctx durable.Context, item string) (int, error) {
		var futures []*durable.Future[int]
		for i, supplier := range []string{"north", "south", "east"} {
			futures = append(futures, durable.Go(wctx, "price-"+supplier, func(ctx context.Context) (int, error) {
				return 100 + 10*i, nil // an HTTP call to the supplier
			}, nil))
		}
		best := 0
		for _, f := range futures {
			price, err := f.Wait()
			if err != nil {
				return 0, err
			}
			if best == 0 || price < best {
				best = price
			}
		}
		return best, nil
	}, nil)
	if err := eng.Launch(ctx); err != nil {
		panic(err)
	}

	h, err := quote.Start(ctx, "bolts", nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	// Output: 100 <nil>
}

// Each step registers its undo; when a later step fails, the undos run as
// steps, the latest first, and the run's error says so.
func ExampleCompensate() {
	ctx := context.Background()
	eng, _, done := exampleEngine("compensate")
	defer done()

	var undone []string
	book := durable.Register(eng, "book", func(wctx durable.Context, trip string) (string, error) {
		for _, part := range []string{"flight", "hotel"} {
			if _, err := durable.Step(wctx, "reserve-"+part, func(ctx context.Context) (string, error) { return part + "-1", nil }, nil); err != nil {
				return "", err
			}
			if err := durable.Compensate(wctx, "cancel-"+part, func(ctx context.Context) error {
				undone = append(undone, part+" with key "+durable.IdempotencyKey(ctx))
				return nil
			}, nil); err != nil {
				return "", err
			}
		}
		return durable.Step(wctx, "pay", func(ctx context.Context) (string, error) {
			return "", durable.Permanent(errors.New("card declined"))
		}, nil)
	}, nil)
	if err := eng.Launch(ctx); err != nil {
		panic(err)
	}

	h, err := book.Start(ctx, "rome", &durable.StartOpts{ID: "trip-rome"})
	if err != nil {
		panic(err)
	}
	_, err = h.Result(ctx)
	fmt.Println(errors.Is(err, durable.ErrPermanent), errors.Is(err, durable.ErrCompensationFailed))
	fmt.Println(undone)
	// Output:
	// true false
	// [hotel with key trip-rome/3 flight with key trip-rome/4]
}
