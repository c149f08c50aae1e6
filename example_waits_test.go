package durable_test

import (
	"context"
	"fmt"
	"time"

	"github.com/durable-go/durable"
)

// Sleep records its wake-up time, so a run restarted in the middle sleeps
// only the remainder. A sleep longer than Config.ParkThreshold parks the
// run: no goroutine waits, and any executor wakes it when it is due.
func ExampleSleep() {
	ctx := context.Background()
	eng, _, done := exampleEngine("sleep")
	defer done()

	reminder := durable.Register(eng, "reminder", func(wctx durable.Context, delay time.Duration) (bool, error) {
		before, err := durable.Now(wctx) // recorded, unlike time.Now
		if err != nil {
			return false, err
		}
		if err := durable.Sleep(wctx, delay); err != nil {
			return false, err
		}
		after, err := durable.Now(wctx)
		return after.Sub(before) >= delay, err
	}, nil)
	if err := eng.Launch(ctx); err != nil {
		panic(err)
	}

	h, err := reminder.Start(ctx, 20*time.Millisecond, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	// Output: true <nil>
}

// Recv waits for a message sent to the run with Send, from any process.
// Each message is received once; a send retried with the same idempotency
// key is delivered once. The wait's deadline is recorded with the run.
func ExampleRecv() {
	type Decision struct{ Approve bool }
	ctx := context.Background()
	eng, _, done := exampleEngine("recv")
	defer done()

	refund := durable.Register(eng, "refund", func(wctx durable.Context, cents int) (string, error) {
		d, ok, err := durable.Recv[Decision](wctx, "decision", time.Minute)
		if err != nil || !ok {
			return "no decision", err
		}
		_, again, err := durable.Recv[Decision](wctx, "decision", 50*time.Millisecond)
		return fmt.Sprintf("approved: %v, a second message: %v", d.Approve, again), err
	}, nil)
	if err := eng.Launch(ctx); err != nil {
		panic(err)
	}

	h, err := refund.Start(ctx, 1999, &durable.StartOpts{ID: "refund-5"})
	if err != nil {
		panic(err)
	}
	for range 2 { // a retried request: one message
		err := durable.Send(ctx, eng, "refund-5", "decision", Decision{Approve: true}, &durable.SendOpts{IdempotencyKey: "req-1"})
		if err != nil {
			panic(err)
		}
	}
	fmt.Println(h.Result(ctx))
	// Output: approved: true, a second message: false <nil>
}

// Select waits for the first of several waits: here an approval, a
// rejection or a timeout. The choice is recorded, so a replay makes the
// same one, and only the chosen case consumes its message.
func ExampleSelect() {
	ctx := context.Background()
	eng, _, done := exampleEngine("select")
	defer done()

	order := durable.Register(eng, "order", func(wctx durable.Context, item string) (string, error) {
		approve, reject := durable.OnMessage[string]("approve"), durable.OnMessage[string]("reject")
		i, err := durable.Select(wctx, approve, reject, durable.After(time.Hour))
		if err != nil {
			return "", err
		}
		switch i {
		case 0:
			by, err := approve.Value()
			return item + " approved by " + by, err
		case 1:
			why, err := reject.Value()
			return item + " rejected: " + why, err
		}
		return item + ": no answer within the hour", nil
	}, nil)
	if err := eng.Launch(ctx); err != nil {
		panic(err)
	}

	h, err := order.Start(ctx, "desk", &durable.StartOpts{ID: "order-7"})
	if err != nil {
		panic(err)
	}
	if err := durable.Send(ctx, eng, "order-7", "reject", "over budget", nil); err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	// Output: desk rejected: over budget <nil>
}

// SetEvent publishes a value of the run under a key; GetEvent reads the
// latest one from any process, waiting for it to be set.
func ExampleGetEvent() {
	ctx := context.Background()
	eng, _, done := exampleEngine("event")
	defer done()

	export := durable.Register(eng, "export", func(wctx durable.Context, rows int) (int, error) {
		if err := durable.SetEvent(wctx, "progress", "half done"); err != nil {
			return 0, err
		}
		// Wait for a message, so the run is still going when the caller
		// reads the event (a finished run's events stay readable too).
		_, _, err := durable.Recv[string](wctx, "go-on", time.Minute)
		return rows, err
	}, nil)
	if err := eng.Launch(ctx); err != nil {
		panic(err)
	}

	h, err := export.Start(ctx, 1000, &durable.StartOpts{ID: "export-3"})
	if err != nil {
		panic(err)
	}
	progress, ok, err := durable.GetEvent[string](ctx, eng, "export-3", "progress", 10*time.Second)
	fmt.Println(progress, ok, err)
	if err := durable.Send(ctx, eng, "export-3", "go-on", "", nil); err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	// Output:
	// half done true <nil>
	// 1000 <nil>
}

// StartChild starts a child workflow from workflow code, with an ID
// derived from the parent's, and Await records its outcome as a step of
// the parent. A long wait parks the parent until the child finishes.
func ExampleWorkflow_StartChild() {
	ctx := context.Background()
	eng, _, done := exampleEngine("child")
	defer done()

	ship := durable.Register(eng, "ship", func(wctx durable.Context, order string) (string, error) {
		return "parcel for " + order, nil
	}, nil)
	fulfil := durable.Register(eng, "fulfil", func(wctx durable.Context, order string) (string, error) {
		child, err := ship.StartChild(wctx, order, nil)
		if err != nil {
			return "", err
		}
		parcel, err := child.Await(wctx)
		return child.ID() + ": " + parcel, err
	}, nil)
	if err := eng.Launch(ctx); err != nil {
		panic(err)
	}

	h, err := fulfil.Start(ctx, "order-9", &durable.StartOpts{ID: "fulfil-9"})
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	// Output: fulfil-9/0: parcel for order-9 <nil>
}
