package dispatch

import (
	"sync"
	"sync/atomic"
)

// Queue is the state of one queue that this executor works: how many of
// its runs execute here, and the wake-up of its dispatcher. A Queue is
// made when the queue is registered, before the Dispatcher that works it.
type Queue struct {
	name string

	mu      sync.Mutex
	running int // runs of the queue claimed here and not ended
	// handedOn counts the slots that finishes handed on here
	// (Dispatcher.HandOn) and whose runs have not yet released them:
	// such a release leaves no free slot, so it wakes nothing.
	handedOn int
	kick     chan struct{}

	// handsOn: the last pass found the queue's limits to be concurrency
	// limits only, so a finish may hand its slot to the next run
	// (Dispatcher.HandOn).
	handsOn atomic.Bool
}

// NewQueue returns the state of queue name, with no run executing.
func NewQueue(name string) *Queue {
	return &Queue{name: name, kick: make(chan struct{}, 1)}
}

// Name returns the queue's name.
func (q *Queue) Name() string { return q.name }

// Wake makes the queue's dispatcher look for work now. Wake-ups that
// arrive while one is pending merge into it.
func (q *Queue) Wake() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// Release gives back the slots of n runs of the queue claimed here: they
// ended, or were not started. It wakes the dispatcher, which may claim
// more under the queue's per-executor limit.
func (q *Queue) Release(n int) {
	q.mu.Lock()
	q.running -= n
	covered := min(n, q.handedOn)
	q.handedOn -= covered
	q.mu.Unlock()
	if covered < n {
		q.Wake()
	}
}

// Running returns how many runs of the queue claimed here have not ended.
func (q *Queue) Running() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.running
}

// HandsOn reports whether a finish of one of the queue's runs may hand its
// slot to the next run (see Dispatcher.HandOn), as the last pass found
// the queue's settings.
func (q *Queue) HandsOn() bool { return q.handsOn.Load() }

// take counts n runs just claimed here.
func (q *Queue) take(n int) {
	q.mu.Lock()
	q.running += n
	q.mu.Unlock()
}

// handOn counts n runs claimed here with the slots of runs that finished
// here and have not released them yet.
func (q *Queue) handOn(n int) {
	q.mu.Lock()
	q.running += n
	q.handedOn += n
	q.mu.Unlock()
}
