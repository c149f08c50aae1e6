// Package testsignal lets a service tell its tests that something happened
// (a pass ended, a batch was written) without sleeps. A Signal that was
// never initialised costs one nil check: services signal unconditionally.
package testsignal

import (
	"testing"
	"time"
)

// capacity bounds the signals a test may leave unread before the service
// drops further ones.
const capacity = 1000

// Signal carries values of T from a service to its test.
type Signal[T any] struct {
	ch chan T
}

// Init makes the signal deliver; tests call it before starting the
// service.
func (s *Signal[T]) Init() { s.ch = make(chan T, capacity) }

// Signal sends v to the test, if Init was called. It never blocks.
func (s *Signal[T]) Signal(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
	}
}

// Wait returns the next value, failing tb if none comes within timeout.
// The timeout only catches a broken mechanism: keep it long.
func (s *Signal[T]) Wait(tb testing.TB, timeout time.Duration) T {
	tb.Helper()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case v := <-s.ch:
		return v
	case <-t.C:
		tb.Fatalf("testsignal: no signal within %v", timeout)
		panic("unreachable")
	}
}

// Chan returns the channel of values, for a test's select.
func (s *Signal[T]) Chan() <-chan T { return s.ch }
