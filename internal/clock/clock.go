// Package clock gives services a clock that tests can move.
package clock

import (
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// Clock tells the time.
type Clock interface {
	Now() time.Time
}

// Real is the system clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Or returns c, or Real when c is nil.
func Or(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}

// Fake is a clock that only moves when told. It is safe for concurrent
// use. Besides telling the time it has timers (timers.go): waits of the
// parties that use it, which a move of the clock ends, and functions it
// calls when the clock reaches their time.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waits   []*Waiter // pending, in no order
	timers  []*Timer  // pending AfterFuncs, in no order
	busy    int       // parties not waiting on this clock (Enter, Leave)
	auto    bool      // SetAuto
	moved   []func()  // OnAdvance
	changed chan struct{}
}

// NewFake returns a fake clock showing t.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Set moves the clock to t and ends the waits and calls the functions
// whose time came.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	f.moveLocked(t)
}

// Advance moves the clock forward by d (a negative d is ignored), ends
// the waits and calls the functions whose time came, and returns the new
// time.
func (f *Fake) Advance(d time.Duration) time.Time {
	f.mu.Lock()
	now := f.now.Add(max(d, 0))
	f.moveLocked(now)
	return now
}

// Jitter returns d moved at random by up to frac of it either way, so that
// retries and renewals of many processes do not fall in step.
func Jitter(d time.Duration, frac float64) time.Duration {
	if frac <= 0 || d <= 0 {
		return d
	}
	j := float64(d) * (1 + frac*(2*rand.Float64()-1))
	if j >= math.MaxInt64 { // a conversion would overflow
		return math.MaxInt64
	}
	return time.Duration(j)
}
