package durable

import (
	"context"
	"sync"
)

// services runs the engine's background loops, each with its own context so
// they can be stopped in an explicit order.
type services struct {
	mu    sync.Mutex
	loops map[string]*loop
}

type loop struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func newServices() *services { return &services{loops: map[string]*loop{}} }

func (s *services) start(name string, run func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	l := &loop{cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	s.loops[name] = l
	s.mu.Unlock()
	go func() {
		defer close(l.done)
		run(ctx)
	}()
}

// stop cancels one loop and waits for it to return.
func (s *services) stop(name string) {
	s.mu.Lock()
	l := s.loops[name]
	delete(s.loops, name)
	s.mu.Unlock()
	if l != nil {
		l.cancel()
		<-l.done
	}
}

func (s *services) stopAll() {
	s.mu.Lock()
	names := make([]string, 0, len(s.loops))
	for n := range s.loops {
		names = append(names, n)
	}
	s.mu.Unlock()
	for _, n := range names {
		s.stop(n)
	}
}

// hub wakes callers waiting for a run to finish. A run finishing in this
// process hands over its outcome directly; a notification from another
// process only says "look again".
type hub struct {
	mu sync.Mutex
	m  map[string]*waiter
}

type waiter struct {
	ch   chan struct{}
	out  *outcome // set before ch closes when the run finished in-process
	refs int
}

// outcome is a finished run as stored.
type outcome struct {
	status Status
	output []byte
	err    []byte
}

func newHub() *hub { return &hub{m: map[string]*waiter{}} }

func (h *hub) subscribe(id string) *waiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.m[id]
	if w == nil {
		w = &waiter{ch: make(chan struct{})}
		h.m[id] = w
	}
	w.refs++
	return w
}

func (h *hub) unsubscribe(id string, w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w.refs--
	if w.refs <= 0 && h.m[id] == w {
		delete(h.m, id)
	}
}

// wake wakes the waiters of id; out may be nil.
func (h *hub) wake(id string, out *outcome) {
	h.mu.Lock()
	w := h.m[id]
	delete(h.m, id)
	h.mu.Unlock()
	if w != nil {
		w.out = out
		close(w.ch)
	}
}

func (h *hub) wakeAll() {
	h.mu.Lock()
	old := h.m
	h.m = map[string]*waiter{}
	h.mu.Unlock()
	for _, w := range old {
		close(w.ch)
	}
}
