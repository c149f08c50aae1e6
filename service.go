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
// process only says "look again". Waiters of a run executing here (local)
// are only woken by that run, so a notification never costs them a read.
type hub struct {
	mu    sync.Mutex
	m     map[string]*waiter // woken by notifications and by local finishes
	local map[string]*waiter // woken only by the local run
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

func newHub() *hub { return &hub{m: map[string]*waiter{}, local: map[string]*waiter{}} }

func (h *hub) subscribe(id string) *waiter { return h.sub(false, id) }

// subscribeLocal is for the handle of a run this process is about to
// execute.
func (h *hub) subscribeLocal(id string) *waiter { return h.sub(true, id) }

func (h *hub) sub(local bool, id string) *waiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.m
	if local {
		m = h.local
	}
	w := m[id]
	if w == nil {
		w = &waiter{ch: make(chan struct{})}
		m[id] = w
	}
	w.refs++
	return w
}

func (h *hub) unsubscribe(id string, w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w.refs--
	if w.refs > 0 {
		return
	}
	if h.m[id] == w {
		delete(h.m, id)
	}
	if h.local[id] == w {
		delete(h.local, id)
	}
}

// wake wakes every waiter of id: the run finished (or stopped, out nil)
// in this process.
func (h *hub) wake(id string, out *outcome) {
	h.mu.Lock()
	w, lw := h.m[id], h.local[id]
	delete(h.m, id)
	delete(h.local, id)
	h.mu.Unlock()
	for _, x := range []*waiter{w, lw} {
		if x != nil {
			x.out = out
			close(x.ch)
		}
	}
}

// notified wakes the non-local waiters of id: another process says it
// finished.
func (h *hub) notified(id string) {
	h.mu.Lock()
	w := h.m[id]
	delete(h.m, id)
	h.mu.Unlock()
	if w != nil {
		close(w.ch)
	}
}

// wakeAll wakes every non-local waiter so it looks again (after the
// notification connection was re-established and may have missed some).
func (h *hub) wakeAll() {
	h.mu.Lock()
	old := h.m
	h.m = map[string]*waiter{}
	h.mu.Unlock()
	for _, w := range old {
		close(w.ch)
	}
}
