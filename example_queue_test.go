package durable_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/durable-go/durable"
)

// A queue starts its runs within its limits, across every executor that
// declares it. A dedup ID admits one queued or running run at a time.
func ExampleRegisterQueue() {
	ctx := context.Background()
	eng, _, done := exampleEngine("queue")
	defer done()

	summarize := durable.Register(eng, "summarize", func(wctx durable.Context, ticket string) (string, error) {
		return durable.Step(wctx, "model-call", func(ctx context.Context) (string, error) {
			return "summary of " + ticket, nil
		}, nil)
	}, nil)
	models := durable.RegisterQueue(eng, "model-calls", &durable.QueueOpts{
		GlobalConcurrency: 5,                           // across all executors
		RateLimit:         10, RatePeriod: time.Second, // starts per second, across all executors
	})
	if err := eng.Launch(ctx); err != nil {
		panic(err)
	}

	// Paused, the queue holds what is enqueued: the second enqueue meets
	// the first run still queued.
	if err := models.Pause(ctx); err != nil {
		panic(err)
	}
	h, err := summarize.Enqueue(ctx, models, "ticket-981", &durable.EnqueueOpts{DedupID: "ticket-981"})
	if err != nil {
		panic(err)
	}
	_, err = summarize.Enqueue(ctx, models, "ticket-981", &durable.EnqueueOpts{DedupID: "ticket-981"})
	fmt.Println("second enqueue:", errors.Is(err, durable.ErrDuplicate))

	if err := models.Resume(ctx); err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	// Output:
	// second enqueue: true
	// summary of ticket-981 <nil>
}

// TriggerSchedule starts a run of a schedule by hand, for a tick of your
// choosing, under the workflow ID "sched:<name>:manual:<tick>"; the run
// gets its input and ScheduledTime from that tick, as a scheduled one does.
func ExampleEngine_TriggerSchedule() {
	ctx := context.Background()
	eng, _, done := exampleEngine("trigger")
	defer done()

	report := durable.Register(eng, "report", func(wctx durable.Context, day string) (string, error) {
		tick, _ := durable.ScheduledTime(wctx)
		return "report of " + day + " at " + tick.Format(time.TimeOnly), nil
	}, nil)
	durable.Schedule(report, "nightly-report", "CRON_TZ=Europe/Paris 0 3 * * *", &durable.ScheduleOpts[string]{
		InputFunc: func(tick time.Time) string { return tick.AddDate(0, 0, -1).Format(time.DateOnly) },
	})
	if err := eng.Launch(ctx); err != nil {
		panic(err)
	}

	schedules, err := eng.ListSchedules(ctx)
	if err != nil {
		panic(err)
	}
	for _, s := range schedules {
		fmt.Println(s.Name, s.Spec)
	}

	tick := time.Date(2026, 5, 2, 1, 0, 0, 0, time.UTC) // 3:00 in Paris
	id, err := eng.TriggerSchedule(ctx, "nightly-report", tick)
	if err != nil {
		panic(err)
	}
	h, err := report.Handle(ctx, id)
	if err != nil {
		panic(err)
	}
	fmt.Println(id)
	fmt.Println(h.Result(ctx))
	// Output:
	// nightly-report CRON_TZ=Europe/Paris 0 3 * * *
	// sched:nightly-report:manual:2026-05-02T01:00:00Z
	// report of 2026-05-01 at 01:00:00 <nil>
}
