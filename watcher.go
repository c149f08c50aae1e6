package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/notify"
	"github.com/durable-go/durable/internal/sysdb"
)

// watcher waits for what other processes write about a run: its finish
// (Result) or an event (GetEvent). Notifications wake it through hub;
// polling every poll() is the safety net. An engine's waits and a
// [Client]'s share it.
type watcher struct {
	pool   sysdb.DBTX
	q      *sysdb.Queries
	wq     *sysdb.WaitQueries
	hub    *notify.Hub[*outcome]
	poll   func() time.Duration
	notify bool          // ask the finishing executor for a notification (WatchWorkflow); false with PollOnly
	listen func() func() // holds a LISTEN connection for one wait and returns its release; nil: one is always open
	clock  engineClock   // the time of GetEvent's timeout; zero: the system clock
}

// engineWatcher is the watcher of e's waits, woken by its listener.
func engineWatcher(e *Engine) watcher {
	return watcher{pool: e.pool, q: e.q, wq: e.wq, hub: e.hub, poll: e.listener.interval, notify: !e.cfg.PollOnly, clock: e.clock}
}

// outcome waits until run id finishes and returns its outcome; ctx bounds
// the wait.
func (w watcher) outcome(ctx context.Context, id string) (*outcome, error) {
	listening := w.hold()
	defer listening.done()
	for {
		sub := w.hub.Subscribe(id)
		info, err := readRun(ctx, w.q, w.pool, id)
		if err != nil {
			w.hub.Unsubscribe(id, sub)
			return nil, err
		}
		if info.status.Finished() {
			w.hub.Unsubscribe(id, sub)
			return info.outcome(), nil
		}
		if !info.notify && w.notify {
			// Ask whoever runs it to notify on finish; no row means it
			// finished in between.
			watched, err := w.q.WatchWorkflow(ctx, w.pool, id)
			if err != nil {
				w.hub.Unsubscribe(id, sub)
				return nil, fmt.Errorf("durable: watch workflow %q: %w", id, err)
			}
			if !watched {
				w.hub.Unsubscribe(id, sub)
				continue
			}
		}
		listening.need()
		woken, err := sleepOn(ctx, sub.Done(), w.poll())
		w.hub.Unsubscribe(id, sub)
		if err != nil {
			return nil, err
		}
		// The outcome is written before Done is closed: read it only after
		// the close was seen, or it races with a wake that comes meanwhile.
		if woken && sub.Outcome() != nil {
			return sub.Outcome(), nil
		}
	}
}

// event returns the latest value of run id's event key, waiting up to
// timeout for it to be set. ok is false when the timeout passed, or the
// run finished, without the key set; a key set to nothing is ok with a nil
// value.
func (w watcher) event(ctx context.Context, id, key string, timeout time.Duration) (value json.RawMessage, ok bool, err error) {
	if err := checkName("workflow ID", id); err != nil {
		return nil, false, err
	}
	if err := checkName("event key", key); err != nil {
		return nil, false, err
	}
	if timeout < 0 {
		return nil, false, fmt.Errorf("%w: GetEvent with a negative timeout %v", ErrInvalidArgument, timeout)
	}
	listening := w.hold()
	defer listening.done()
	deadline := w.clock.now().Add(timeout)
	for {
		sub := w.hub.Subscribe("e:" + id)
		ev, err := w.wq.GetEvent(ctx, w.pool, sysdb.GetEventParams{WorkflowID: id, Key: key})
		if errors.Is(err, pgx.ErrNoRows) {
			w.hub.Unsubscribe("e:"+id, sub)
			return nil, false, fmt.Errorf("%w: %q", ErrWorkflowNotFound, id)
		}
		if err != nil {
			w.hub.Unsubscribe("e:"+id, sub)
			return nil, false, fmt.Errorf("durable: get event %q of %q: %w", key, id, err)
		}
		if ev.Found {
			w.hub.Unsubscribe("e:"+id, sub)
			return ev.Value, true, nil
		}
		remaining := w.clock.until(deadline)
		if remaining <= 0 || Status(ev.Status).Finished() {
			w.hub.Unsubscribe("e:"+id, sub)
			return nil, false, nil
		}
		listening.need()
		if w.clock.fake != nil {
			err := w.clock.waitOutside(ctx, sub.Done(), deadline, w.poll())
			w.hub.Unsubscribe("e:"+id, sub)
			if err != nil {
				return nil, false, err
			}
			continue
		}
		_, err = sleepOn(ctx, sub.Done(), min(remaining, w.poll()))
		w.hub.Unsubscribe("e:"+id, sub)
		if err != nil {
			return nil, false, err
		}
	}
}

// listenHold is one wait's hold on a LISTEN connection (see
// watcher.listen), taken when the wait first needs it: a wait that finds
// what it waits for at once opens no connection. A notification sent
// between the wait's read and the LISTEN is not lost: once the LISTEN is
// in place, every wait looks again.
type listenHold struct {
	listen  func() func()
	release func()
}

func (w watcher) hold() *listenHold { return &listenHold{listen: w.listen} }

// need takes the hold, once, before the wait sleeps.
func (h *listenHold) need() {
	if h.listen != nil {
		h.release = h.listen()
		h.listen = nil
	}
}

// done releases the hold, if taken.
func (h *listenHold) done() {
	if h.release != nil {
		h.release()
	}
}

// sleepOn waits for ch (woken), d or the end of ctx (its error).
func sleepOn(ctx context.Context, ch <-chan struct{}, d time.Duration) (woken bool, err error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true, nil
	case <-t.C:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}
