package clock

import (
	"context"
	"sort"
	"time"
)

// The timers of the fake clock.
//
// A party is a goroutine that acts on its own: a run executing, or a test
// blocked in a call that waits on the clock. Enter and Leave count the
// parties; a party that waits on the clock (Wait) leaves while it waits
// and counts again from the moment its wait ends: the clock's move that
// ends it counts it back at once, before the party's goroutine is even
// scheduled, so a clock moving on its own (SetAuto) never sees a moment
// where the woken party looks idle.

// Waiter is one wait of a party on a fake clock.
type Waiter struct {
	f    *Fake
	when time.Time // zero: no end of its own (Wait with a negative d)
	c    chan time.Time
	// C receives the clock's time once the wait's time came.
	C     <-chan time.Time
	ended bool // the clock ended it (guarded by f.mu)
	done  bool // Done was called (guarded by f.mu)
}

// Timer is a function the fake clock calls when it reaches a time.
type Timer struct {
	f    *Fake
	when time.Time
	fn   func()
}

// Enter counts one more party acting on its own.
func (f *Fake) Enter() {
	f.mu.Lock()
	f.busy++
	f.changedLocked()
	f.mu.Unlock()
}

// Leave counts one party less; with SetAuto, the clock may then move.
func (f *Fake) Leave() {
	f.mu.Lock()
	f.busy--
	f.changedLocked()
	f.autoLocked()
}

// Wait starts a wait of the calling party, which stops counting as acting
// on its own until Done: after d of the clock's time, C receives the time.
// A negative d is a wait with no end of its own (the party waits for
// something else, and counts as idle meanwhile). Call Done when the wait
// is over, whatever ended it.
func (f *Fake) Wait(d time.Duration) *Waiter {
	c := make(chan time.Time, 1)
	w := &Waiter{f: f, c: c, C: c}
	f.mu.Lock()
	f.busy--
	if d >= 0 {
		w.when = f.now.Add(d)
		if d == 0 {
			w.ended = true
			f.busy++
			c <- f.now
		} else {
			f.waits = append(f.waits, w)
		}
	} else {
		f.waits = append(f.waits, w)
	}
	f.changedLocked()
	f.autoLocked()
	return w
}

// Done ends the wait: the party counts as acting again. It reports whether
// the clock had ended the wait.
func (w *Waiter) Done() bool {
	f := w.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if w.done {
		return w.ended
	}
	w.done = true
	if !w.ended {
		f.waits = remove(f.waits, w)
		f.busy++
		f.changedLocked()
	}
	return w.ended
}

// AfterFunc calls fn, in the goroutine that moves the clock, once the
// clock reaches d from now. Its time is not one the clock moves to on
// its own (SetAuto): waits are.
func (f *Fake) AfterFunc(d time.Duration, fn func()) *Timer {
	f.mu.Lock()
	t := &Timer{f: f, when: f.now.Add(d), fn: fn}
	if d <= 0 {
		f.mu.Unlock()
		fn()
		return t
	}
	f.timers = append(f.timers, t)
	f.mu.Unlock()
	return t
}

// Stop cancels the call; it reports whether the call was still to come.
func (t *Timer) Stop() bool {
	f := t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.timers)
	f.timers = remove(f.timers, t)
	return len(f.timers) < n
}

// OnAdvance registers fn, called after every move of the clock, in the
// goroutine that moved it.
func (f *Fake) OnAdvance(fn func()) {
	f.mu.Lock()
	f.moved = append(f.moved, fn)
	f.mu.Unlock()
}

// SetAuto turns on or off the clock's moving on its own: when on, as soon
// as no party acts on its own and some wait on the clock, it moves to the
// earliest end of their waits.
func (f *Fake) SetAuto(on bool) {
	f.mu.Lock()
	f.auto = on
	f.autoLocked()
}

// Next returns the earliest end of the pending waits; ok is false when no
// wait has one.
func (f *Fake) Next() (t time.Time, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nextLocked()
}

// Waiting returns how many waits are pending.
func (f *Fake) Waiting() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waits)
}

// BlockUntil returns once at least n waits are pending, or ctx's error.
func (f *Fake) BlockUntil(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		if len(f.waits) >= n {
			f.mu.Unlock()
			return nil
		}
		ch := f.changedChLocked()
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (f *Fake) nextLocked() (t time.Time, ok bool) {
	for _, w := range f.waits {
		if !w.when.IsZero() && (!ok || w.when.Before(t)) {
			t, ok = w.when, true
		}
	}
	return t, ok
}

// autoLocked moves the clock on its own if SetAuto allows it now, and
// unlocks f.
func (f *Fake) autoLocked() {
	if !f.auto || f.busy > 0 {
		f.mu.Unlock()
		return
	}
	next, ok := f.nextLocked()
	if !ok {
		f.mu.Unlock()
		return
	}
	f.moveLocked(later(next, f.now))
}

// moveLocked sets the clock to now, ends the waits and takes the timers
// whose time came, unlocks f, then calls those timers' functions and the
// OnAdvance functions. A woken wait counts its party as acting before f
// is unlocked.
func (f *Fake) moveLocked(now time.Time) {
	f.now = now
	var keep []*Waiter
	for _, w := range f.waits {
		if w.when.IsZero() || w.when.After(now) {
			keep = append(keep, w)
			continue
		}
		w.ended = true
		f.busy++
		w.c <- now
	}
	f.waits = keep
	var due []*Timer
	var left []*Timer
	for _, t := range f.timers {
		if t.when.After(now) {
			left = append(left, t)
		} else {
			due = append(due, t)
		}
	}
	f.timers = left
	f.changedLocked()
	moved := f.moved
	f.mu.Unlock()
	sort.SliceStable(due, func(i, j int) bool { return due[i].when.Before(due[j].when) })
	for _, t := range due {
		t.fn()
	}
	for _, fn := range moved {
		fn()
	}
}

// changedLocked wakes the callers of BlockUntil.
func (f *Fake) changedLocked() {
	if f.changed != nil {
		close(f.changed)
		f.changed = nil
	}
}

func (f *Fake) changedChLocked() chan struct{} {
	if f.changed == nil {
		f.changed = make(chan struct{})
	}
	return f.changed
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func remove[T comparable](s []T, x T) []T {
	for i, y := range s {
		if y == x {
			return append(s[:i], s[i+1:]...)
		}
	}
	return s
}
