package dispatch

import "sync"

// Queue is the state of one queue that this executor works: how many of
// its runs execute here, and the wake-up of its dispatcher. A Queue is
// made when the queue is registered, before the Dispatcher that works it.
type Queue struct {
	name string

	mu      sync.Mutex
	running int // runs of the queue claimed here and not ended
	kick    chan struct{}
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
	q.mu.Unlock()
	q.Wake()
}

// Running returns how many runs of the queue claimed here have not ended.
func (q *Queue) Running() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.running
}

// take counts n runs just claimed here.
func (q *Queue) take(n int) {
	q.mu.Lock()
	q.running += n
	q.mu.Unlock()
}
