package durable

import (
	"context"
	"fmt"
	"time"

	"github.com/durable-go/durable/internal/clock"
	"github.com/durable-go/durable/internal/hooks"
)

// engineClock is the engine's time: the system clock, or in tests the
// fake clock of hooks.Knobs.Clock (durabletest), which moves only when
// told. It tells the time of sleeps, Recv and GetEvent timeouts, run
// deadlines, retries' backoff and schedules; polling periods, leases and
// the write paths' own retries stay on the system clock. Under the system
// clock each method is a nil check before the time package: nothing is
// allocated on the step path.
//
// Under the fake clock, every run executing counts as a party of the
// clock (enter and leave), idle while it waits on it, and Sleep and Recv
// never park a run: a parked run is woken by the database's time, which
// the fake clock does not move. (Await still parks: the child's finish
// wakes its parent.)
type engineClock struct{ fake *clock.Fake }

func (c engineClock) now() time.Time {
	if c.fake == nil {
		return time.Now()
	}
	return c.fake.Now()
}

func (c engineClock) until(t time.Time) time.Duration {
	if c.fake == nil {
		return time.Until(t)
	}
	return t.Sub(c.fake.Now())
}

// enter counts a run that begins executing as a party of the fake clock;
// leave, one whose execution ended.
func (c engineClock) enter() {
	if c.fake != nil {
		c.fake.Enter()
	}
}

func (c engineClock) leave() {
	if c.fake != nil {
		c.fake.Leave()
	}
}

// withDeadline is context.WithDeadline on the engine's clock.
func (c engineClock) withDeadline(parent context.Context, d time.Time) (context.Context, context.CancelFunc) {
	if c.fake == nil {
		return context.WithDeadline(parent, d)
	}
	ctx, cancel := context.WithCancelCause(parent)
	t := c.fake.AfterFunc(d.Sub(c.fake.Now()), func() { cancel(context.DeadlineExceeded) })
	return &fakeDeadline{Context: ctx, deadline: d}, func() { t.Stop(); cancel(context.Canceled) }
}

// fakeDeadline is a context whose deadline is on the fake clock.
type fakeDeadline struct {
	context.Context
	deadline time.Time
}

func (c *fakeDeadline) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *fakeDeadline) Err() error {
	if err := c.Context.Err(); err == nil || context.Cause(c.Context) != context.DeadlineExceeded {
		return err
	}
	return context.DeadlineExceeded
}

// parks reports whether a wait of remaining parks the run
// (Config.ParkThreshold); never under the fake clock.
func (e *Engine) parks(remaining time.Duration) bool {
	return remaining > e.cfg.ParkThreshold && e.clock.fake == nil
}

// newEngineClock takes the clock of the knobs; schedules are woken when
// the fake clock moves.
func newEngineClock(k hooks.Knobs) engineClock { return engineClock{fake: k.Clock} }

// wait is the wait of run r on the fake clock: until wake (zero: no
// end of its own), capped at the run's deadline, or ch (nil: none), or
// poll of real time (0: none), or the engine stopping or the run's
// context ending. The run counts as idle meanwhile.
func (c engineClock) wait(r *run, ch <-chan struct{}, wake time.Time, poll time.Duration) error {
	f := c.fake
	now := f.Now()
	d := time.Duration(-1)
	if !wake.IsZero() {
		d = max(wake.Sub(now), 0)
	}
	if !r.deadline.IsZero() {
		if dl := max(r.deadline.Sub(now), 0); d < 0 || dl < d {
			d = dl
		}
	}
	w := f.Wait(d)
	defer w.Done()
	var pollC <-chan time.Time
	if poll > 0 {
		t := time.NewTimer(poll)
		defer t.Stop()
		pollC = t.C
	}
	select {
	case <-w.C:
	case <-ch:
	case <-pollC:
	case <-r.e.stopping:
		return r.halt(fmt.Errorf("workflow %q: %w", r.id, ErrShutdown))
	case <-r.ctx.Done():
		return r.interrupted()
	}
	if r.ctx.Err() != nil || r.pastDeadline() { // the deadline came with the wake-up
		return r.interrupted()
	}
	return nil
}

// waitOutside is the wait of a caller outside any run (GetEvent) on the
// fake clock: it counts as a party while it waits for ch, for the clock
// to reach wake, or for poll of real time.
func (c engineClock) waitOutside(ctx context.Context, ch <-chan struct{}, wake time.Time, poll time.Duration) error {
	c.fake.Enter()
	defer c.fake.Leave()
	w := c.fake.Wait(max(wake.Sub(c.fake.Now()), 0))
	defer w.Done()
	t := time.NewTimer(poll)
	defer t.Stop()
	select {
	case <-w.C:
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// sleepReal makes r wait d of real time unless the engine begins to stop: the
// pauses of the engine's own retries (a transaction step's conflicts),
// which a test's clock must not hold up.
func sleepReal(r *run, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-r.e.stopping:
		return r.halt(fmt.Errorf("workflow %q: %w", r.id, ErrShutdown))
	case <-r.ctx.Done():
		return r.interrupted()
	}
}

// boundary calls the Boundary knob, if any, at a step boundary of r; its
// error halts the run.
func boundary(r *run, pos int, name string, p hooks.Point) error {
	if err := r.e.knobs.Boundary(hooks.Boundary{RunID: r.id, Pos: pos, Name: name, Point: p}); err != nil {
		return r.halt(err)
	}
	return nil
}
