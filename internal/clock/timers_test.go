package clock

import (
	"context"
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func fired(w *Waiter) bool {
	select {
	case <-w.C:
		return true
	default:
		return false
	}
}

// TestWaitEndsWhenClockReachesIt: a wait ends when the clock reaches its
// time, not before, and its party counts as acting from that moment.
func TestWaitEndsWhenClockReachesIt(t *testing.T) {
	f := NewFake(t0)
	f.Enter()
	w := f.Wait(time.Hour)
	if f.busy != 0 || f.Waiting() != 1 {
		t.Fatalf("busy %d waiting %d, want 0 and 1", f.busy, f.Waiting())
	}
	f.Advance(59 * time.Minute)
	if fired(w) {
		t.Fatal("the wait ended a minute early")
	}
	f.Advance(time.Minute)
	if !fired(w) {
		t.Fatal("the wait did not end at its time")
	}
	if f.busy != 1 || f.Waiting() != 0 {
		t.Fatalf("busy %d waiting %d after the wait ended, want 1 and 0", f.busy, f.Waiting())
	}
	if !w.Done() || f.busy != 1 {
		t.Fatalf("Done after the end: busy %d, want 1", f.busy)
	}
}

// TestWaitDoneBeforeEnd: a wait ended by something else counts its party
// again and leaves the clock's waits.
func TestWaitDoneBeforeEnd(t *testing.T) {
	f := NewFake(t0)
	f.Enter()
	w := f.Wait(time.Hour)
	if w.Done() {
		t.Fatal("Done says the clock ended the wait")
	}
	if f.busy != 1 || f.Waiting() != 0 {
		t.Fatalf("busy %d waiting %d, want 1 and 0", f.busy, f.Waiting())
	}
	f.Advance(2 * time.Hour)
	if fired(w) {
		t.Fatal("a wait that was done ended")
	}
}

// TestAutoMovesToEarliestWait: with SetAuto, the clock moves when the
// last party waits, to the earliest end, one wait at a time.
func TestAutoMovesToEarliestWait(t *testing.T) {
	f := NewFake(t0)
	f.SetAuto(true)
	f.Enter()
	f.Enter()
	long := f.Wait(48 * time.Hour)
	if f.Now() != t0 {
		t.Fatal("the clock moved while a party acts")
	}
	short := f.Wait(time.Hour)
	if got := f.Now(); got != t0.Add(time.Hour) {
		t.Fatalf("clock at %v, want the earliest end %v", got, t0.Add(time.Hour))
	}
	if !fired(short) || fired(long) {
		t.Fatal("the wrong wait ended")
	}
	short.Done()
	f.Leave() // the woken party ends
	if got := f.Now(); got != t0.Add(48*time.Hour) || !fired(long) {
		t.Fatalf("clock at %v, want %v with the long wait over", got, t0.Add(48*time.Hour))
	}
}

// TestAfterFuncAndBlockUntil: a function is called when the clock passes
// its time; BlockUntil returns once enough waits are pending.
func TestAfterFuncAndBlockUntil(t *testing.T) {
	f := NewFake(t0)
	called := 0
	f.AfterFunc(time.Minute, func() { called++ })
	stopped := f.AfterFunc(time.Minute, func() { t.Error("a stopped function was called") })
	if !stopped.Stop() {
		t.Fatal("Stop of a pending function")
	}
	f.Advance(2 * time.Minute)
	if called != 1 {
		t.Fatalf("called %d times", called)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() { f.Enter(); f.Wait(time.Hour) }()
	if err := f.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if next, ok := f.Next(); !ok || next != t0.Add(2*time.Minute+time.Hour) {
		t.Fatalf("Next = %v %v", next, ok)
	}
}
