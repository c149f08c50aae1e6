package durable

import (
	"context"
	"sync"

	"github.com/durable-go/durable/internal/service"
)

// services runs the engine's background loops, each a service.Loop of its
// own, so they can be stopped in an explicit order.
type services struct {
	mu    sync.Mutex
	loops map[string]*service.Loop
}

func newServices() *services { return &services{loops: map[string]*service.Loop{}} }

func (s *services) start(name string, run func(ctx context.Context)) {
	l := &service.Loop{}
	s.mu.Lock()
	s.loops[name] = l
	s.mu.Unlock()
	_ = l.StartLoop(context.Background(), run) // a new Loop: never ErrStarted
}

// stop stops one loop and waits for it to return.
func (s *services) stop(name string) {
	s.mu.Lock()
	l := s.loops[name]
	delete(s.loops, name)
	s.mu.Unlock()
	if l != nil {
		_ = l.Stop(context.Background()) // waits: the context never ends
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
