// Command checkapp stands for an application whose main lets
// `durable check` check its build: it registers the workflows of the build
// named by $CHECKAPP_BUILD on the schema $CHECKAPP_SCHEMA of $DATABASE_URL,
// and calls durable.CheckFromEnv before it would launch. The tests of the
// check command build and run it.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable"
)

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer pool.Close()
	eng, err := durable.New(pool, &durable.Config{Schema: os.Getenv("CHECKAPP_SCHEMA"), AppVersion: "v1",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	charge := "charge"
	if os.Getenv("CHECKAPP_BUILD") == "renamed" {
		charge = "charge-card"
	}
	durable.Register(eng, "order", func(wctx durable.Context, n int) (int, error) {
		for _, name := range []string{"reserve", charge} {
			if _, err := durable.Step(wctx, name, func(context.Context) (int, error) { return n, nil }, nil); err != nil {
				return 0, err
			}
		}
		return 0, durable.Sleep(wctx, time.Hour)
	}, nil)
	fmt.Println("checkapp: starting") // a program's own output, around the report
	if ran, code := durable.CheckFromEnv(ctx, eng, os.Stdout); ran {
		pool.Close()
		os.Exit(code)
	}
	fmt.Println("checkapp: would launch now")
}
