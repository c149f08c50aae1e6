// Package service gives the engine's background services one lifecycle:
// each is a type with Start and Stop, started and stopped by the engine in
// an explicit order.
package service

import (
	"context"
	"errors"
	"sync"
)

// Service is a background part of the engine.
type Service interface {
	// Start starts the service. Its context carries values (the logger's,
	// a trace's) but not its end: a service runs until Stop, not until the
	// context of the call that launched the engine ends.
	Start(ctx context.Context) error
	// Stop stops the service and waits for it to end, or for ctx to end
	// first (then it returns ctx's error and the service ends on its own).
	Stop(ctx context.Context) error
}

// ErrStarted is returned by Start on a running service.
var ErrStarted = errors.New("service: already started")

// Loop runs one goroutine between Start and Stop. A service embeds it and
// calls StartLoop from its Start. The zero value is ready to use; a Loop may
// be started again after Stop.
type Loop struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// StartLoop runs run in a new goroutine with a context that Stop cancels.
// ctx's values are kept; its cancellation is not (see Service.Start).
func (l *Loop) StartLoop(ctx context.Context, run func(ctx context.Context)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done != nil {
		return ErrStarted
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	l.cancel, l.done = cancel, done
	go func() {
		defer close(done)
		run(lctx)
	}()
	return nil
}

// Stop cancels the loop's context and waits for run to return, or for ctx
// to end first. Stopping a loop that is not running does nothing.
func (l *Loop) Stop(ctx context.Context) error {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.cancel, l.done = nil, nil
	l.mu.Unlock()
	if done == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Running reports whether the loop was started and not stopped.
func (l *Loop) Running() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done != nil
}
