package durable_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable"
)

// A workflow on a cron schedule: every second here (the six-field form
// has a leading seconds field). Each tick runs once across all replicas,
// under a workflow ID that names the tick.
func ExampleSchedule() {
	ctx := context.Background()
	pool, _ := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	defer pool.Close()
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS example_sched CASCADE")
	eng, _ := durable.New(pool, &durable.Config{Schema: "example_sched", Logger: slog.New(slog.DiscardHandler)})

	ticks := make(chan string, 10)
	report := durable.Register(eng, "report", func(wctx durable.Context, in string) (string, error) {
		tick, _ := durable.ScheduledTime(wctx)
		// The input was made from the tick the ID names.
		select {
		case ticks <- fmt.Sprintf("scheduled run: %t, input from its tick: %t",
			strings.HasPrefix(wctx.WorkflowID(), "sched:report:"), in == "tick at "+tick.Format(time.TimeOnly)):
		default:
		}
		return in, nil
	}, nil)
	durable.Schedule(report, "report", "* * * * * *", &durable.ScheduleOpts[string]{
		InputFunc: func(tick time.Time) string { return "tick at " + tick.Format(time.TimeOnly) },
	})
	_ = eng.Launch(ctx)
	defer func() { _ = eng.Shutdown(ctx) }()

	fmt.Println(<-ticks)
	_ = eng.PauseSchedule(ctx, "report")
	list, _ := eng.ListSchedules(ctx)
	fmt.Println(list[0].Name, list[0].Spec, list[0].Paused)
	// Output:
	// scheduled run: true, input from its tick: true
	// report * * * * * * true
}
