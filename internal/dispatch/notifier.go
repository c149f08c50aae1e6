package dispatch

import (
	"sync"

	"github.com/durable-go/durable/internal/testsignal"
)

// Notifier tells the dispatchers of every process that a queue has new
// work, after an enqueue committed. A NOTIFY takes a server-wide lock
// until its commit, so one per enqueue would make concurrent enqueues
// commit one at a time: at most one notification per queue is in flight
// from a Notifier, and the enqueues that arrive meanwhile share the next
// one (no delay added when idle).
type Notifier struct {
	send func(queue string)

	mu       sync.Mutex
	inflight map[string]bool // queue -> a notification is being sent
	pending  map[string]bool // queue -> another one is wanted after it
	signals  notifierSignals
}

// notifierSignals tell tests what a Notifier did.
type notifierSignals struct {
	Idle testsignal.Signal[string] // the notifications of a queue are all sent
}

// NewNotifier returns a Notifier whose notifications send calls: send
// sends one notification for queue and returns when it is done; it logs
// its own errors.
func NewNotifier(send func(queue string)) *Notifier {
	return &Notifier{send: send, inflight: map[string]bool{}, pending: map[string]bool{}}
}

// Notify asks for a notification of queue, sent in the background: now if
// none is in flight, else once the one in flight is done.
func (n *Notifier) Notify(queue string) {
	n.mu.Lock()
	if n.inflight[queue] {
		n.pending[queue] = true
		n.mu.Unlock()
		return
	}
	n.inflight[queue] = true
	n.mu.Unlock()
	go func() {
		for {
			n.send(queue)
			n.mu.Lock()
			if !n.pending[queue] {
				n.inflight[queue] = false
				n.mu.Unlock()
				n.signals.Idle.Signal(queue)
				return
			}
			n.pending[queue] = false
			n.mu.Unlock()
		}
	}()
}
