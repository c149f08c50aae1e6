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
