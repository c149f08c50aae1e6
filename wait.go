package durable

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/durable-go/durable/internal/sysdb"
)

// errParked halts a run that parked: it stays as rows until woken.
var errParked = errors.New("durable: run parked")

// Sleep pauses the workflow for d. The wake-up time is recorded, so after a
// restart only the remainder is slept. A sleep longer than
// Config.ParkThreshold parks the run: no goroutine waits, and any executor
// resumes it by replay when the time comes.
func Sleep(wctx Context, d time.Duration) (err error) {
	if d < 0 {
		return fmt.Errorf("%w: Sleep of a negative duration %v", ErrInvalidArgument, d)
	}
	r := wctx.workflowRun()
	wake, err := Step(wctx, "durable.sleep", func(context.Context) (time.Time, error) { return r.e.clock.now().Add(d), nil }, &StepOpts{Retry: noRetry})
	if err != nil {
		return err
	}
	if rp := wctx.workflowRun(); rp.replaying != nil {
		return replayWait(rp) // a replay waits for nothing (replay.go)
	}
	if r.e.clock.until(wake) > 0 {
		ws := r.trace().sleep(wake)
		defer func() { ws.end(err) }()
	}
	for {
		remaining := r.e.clock.until(wake)
		if remaining <= 0 {
			return nil
		}
		if r.e.parks(remaining) {
			return r.park(wake, waitOn{})
		}
		if err := r.sleep(remaining); err != nil {
			return err
		}
	}
}

// waitOn is what wakes a parked run early, besides its wake-up time.
type waitOn struct {
	topic string   // a message topic (a Recv) or "child:" ID (an Await)
	any   []string // a Select's waits (sysdb.WaitKeys)
	// ready reports whether what it waits for came already; nil: a
	// message on topic.
	ready func(ctx context.Context) (bool, error)
}

// park hands the run back to the database until wake (or what w names)
// and halts this execution.
func (r *run) park(wake time.Time, w waitOn) error {
	var parked bool
	err := r.retryDB("park", func(ctx context.Context) error {
		var err error
		parked, err = r.e.wq.Park(ctx, r.e.pool, sysdb.ParkParams{ID: r.id, Epoch: r.epoch, WakeAt: wake, Topic: w.topic, Any: w.any})
		return err
	})
	if err != nil {
		return r.halt(err)
	}
	if !parked {
		return r.diagnose(-1, "park", false)
	}
	ready := w.ready
	if ready == nil && w.topic != "" {
		ready = func(ctx context.Context) (bool, error) {
			return r.e.wq.HasMessage(ctx, r.e.pool, sysdb.HasMessageParams{WorkflowID: r.id, Topics: []string{w.topic}})
		}
	}
	if ready != nil {
		// What it waits for may have come before the park committed: look
		// once more now that the park is committed.
		// Ride out an outage here: a lost wake-up would leave the run
		// parked until its timeout with a message waiting.
		_ = r.retryDB("look for a wake-up after parking", func(ctx context.Context) error {
			has, err := ready(ctx)
			if err != nil || !has {
				return err
			}
			_, err = r.e.wq.Unpark(ctx, r.e.pool, r.id)
			return err
		})
	}
	r.e.recov.Wake() // it computes the next wake-up time
	if r.debugEnabled() {
		r.log().Debug("durable: run parked", "wake_at", wake, "topic", w.topic, "any", w.any)
	}
	return r.halt(fmt.Errorf("workflow %q parked until %s: %w", r.id, wake.Format(time.RFC3339Nano), errParked))
}
