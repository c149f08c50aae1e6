package notify

import "sync"

// Hub wakes callers waiting on a key: the ID of a run whose finish they
// wait for, or a key of the notifications about one ("m:<id>" a message,
// "e:<id>" an event, "s:<id>" stream entries). A run finishing in this
// process hands its outcome (O, e.g. a pointer) over directly; a
// notification from another process only says "look again". Waiters of a
// run executing here (local) are only woken by that run, so a notification
// never costs them a read.
type Hub[O any] struct {
	mu    sync.Mutex
	m     map[string]*Waiter[O] // woken by notifications and by local finishes
	local map[string]*Waiter[O] // woken only by the local run
}

// Waiter is one subscription, shared by the callers waiting on its key.
type Waiter[O any] struct {
	ch   chan struct{}
	out  O // set before ch closes when the run finished in this process
	refs int
}

// Done is closed when the waiter is woken.
func (w *Waiter[O]) Done() <-chan struct{} { return w.ch }

// Outcome is the outcome a local finish handed over, or the zero O (a
// notification, or a run that stopped without finishing). Read it only
// after Done is closed: it is written just before.
func (w *Waiter[O]) Outcome() O { return w.out }

// NewHub returns an empty Hub.
func NewHub[O any]() *Hub[O] {
	return &Hub[O]{m: map[string]*Waiter[O]{}, local: map[string]*Waiter[O]{}}
}

// Subscribe returns the waiter of key, woken by notifications and by a
// local finish. Every Subscribe needs an Unsubscribe.
func (h *Hub[O]) Subscribe(key string) *Waiter[O] { return h.sub(false, key) }

// SubscribeLocal is Subscribe for the handle of a run this process is
// about to execute: only that run's Wake wakes it.
func (h *Hub[O]) SubscribeLocal(key string) *Waiter[O] { return h.sub(true, key) }

func (h *Hub[O]) sub(local bool, key string) *Waiter[O] {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.m
	if local {
		m = h.local
	}
	w := m[key]
	if w == nil {
		w = &Waiter[O]{ch: make(chan struct{})}
		m[key] = w
	}
	w.refs++
	return w
}

// Unsubscribe drops one subscription to w; the last one forgets it.
func (h *Hub[O]) Unsubscribe(key string, w *Waiter[O]) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w.refs--
	if w.refs > 0 {
		return
	}
	if h.m[key] == w {
		delete(h.m, key)
	}
	if h.local[key] == w {
		delete(h.local, key)
	}
}

// Wake wakes every waiter of key, local ones included, handing them out:
// the run finished (or stopped, with the zero O) in this process.
func (h *Hub[O]) Wake(key string, out O) {
	h.mu.Lock()
	w, lw := h.m[key], h.local[key]
	delete(h.m, key)
	delete(h.local, key)
	h.mu.Unlock()
	for _, x := range []*Waiter[O]{w, lw} {
		if x != nil {
			x.out = out
			close(x.ch)
		}
	}
}

// Notified wakes the non-local waiters of key: another process says the
// run finished (or wrote what key names).
func (h *Hub[O]) Notified(key string) {
	h.mu.Lock()
	w := h.m[key]
	delete(h.m, key)
	h.mu.Unlock()
	if w != nil {
		close(w.ch)
	}
}

// WakeAll wakes every non-local waiter so it looks again (after the
// notification connection was re-established and may have missed some).
func (h *Hub[O]) WakeAll() {
	h.mu.Lock()
	old := h.m
	h.m = map[string]*Waiter[O]{}
	h.mu.Unlock()
	for _, w := range old {
		close(w.ch)
	}
}
