package durable

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/notify"
	"github.com/durable-go/durable/internal/service"
)

// listener is the engine's side of notifications: the LISTEN loop on a
// connection of its own, the probe Launch sends through it, what each
// notification wakes, and the polling period of the waits notifications
// normally end, shortened when LISTEN turns out deaf.
type listener struct {
	e         *Engine
	loop      service.Loop
	probe     chan struct{} // Launch's probe notification came back (check)
	pollEvery atomic.Int64  // Config.PollInterval, or less when LISTEN is deaf (pollInstead)
}

func newListener(e *Engine) *listener {
	l := &listener{e: e}
	l.pollEvery.Store(int64(e.cfg.PollInterval))
	return l
}

// start starts the LISTEN loop; the channel reports when its
// first LISTEN is in place, or ctx's end before that.
func (l *listener) start(ctx context.Context) <-chan error {
	ready := make(chan error, 1)
	if l.e.cfg.PollOnly {
		ready <- nil
		return ready
	}
	nl := notify.New()
	nl.Connect = func(ctx context.Context) (*pgx.Conn, error) {
		// An idle connection of the pool is taken over (opening one costs
		// a new server process: ~15 ms of a launch on the bench's
		// machine); the pool opens another when it needs one.
		if l.e.pool.Stat().IdleConns() > 0 {
			if c, err := l.e.pool.Acquire(ctx); err == nil {
				return c.Hijack(), nil
			}
		}
		return pgx.ConnectConfig(ctx, l.e.pool.Config().ConnConfig.Copy())
	}
	nl.ListenSQL = l.e.q.ListenSQL()
	nl.OnNotify = l.onNotify
	connected := false // called from the listener's goroutine only
	nl.OnConnected = func() {
		// The connection came back: a claim or a start may have committed
		// without its answer arriving, and notifications may have been
		// missed while disconnected. The next sweep looks for stray runs. (Not after
		// the first connect: Launch waits for it, then its recovery claims
		// and starts this executor's runs, so a check would only read them
		// again.)
		if connected {
			l.e.lease.NoteTrouble()
		}
		connected = true
		l.e.hub.WakeAll()
		l.e.recov.Wake()
		for _, q := range l.e.queues.byName {
			q.wake()
		}
	}
	nl.Logger = l.e.log
	l.probe = make(chan struct{}, 1)
	_ = l.loop.StartLoop(context.Background(), nl.Run) // once per Launch: never ErrStarted
	go func() {
		select {
		case <-nl.Ready():
			ready <- l.check(ctx)
		case <-ctx.Done():
			ready <- fmt.Errorf("durable: launch: listen for notifications: %w", ctx.Err())
		}
	}()
	return ready
}

// listenProbeTimeout bounds Launch's wait for its probe notification; on
// a direct connection it comes back within milliseconds.
const listenProbeTimeout = 2 * time.Second

// fallbackPollInterval is the poll period of an engine whose LISTEN turned
// out deaf at Launch, as the poolers guide recommends with PollOnly
// (unless Config.PollInterval is shorter).
const fallbackPollInterval = 100 * time.Millisecond

// errDeafListen: Launch's probe notification did not come back.
var errDeafListen = errors.New("durable: LISTEN delivers nothing")

// check, once the LISTEN is in place, sends a probe notification on
// the channel and waits for it to come back; errDeafListen if it does not.
// A pooler in transaction mode (PgBouncer's) accepts LISTEN and then never
// delivers anything: rather than waiting on notifications that never come,
// the engine then polls instead (see pollInstead).
func (l *listener) check(ctx context.Context) error {
	if err := l.e.q.Notify(ctx, l.e.pool, "p:"+l.e.incarnation); err != nil {
		return fmt.Errorf("durable: launch: listen self-check: %w", err)
	}
	t := time.NewTimer(listenProbeTimeout)
	defer t.Stop()
	select {
	case <-l.probe:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("durable: launch: listen self-check: %w", ctx.Err())
	case <-t.C:
		return errDeafListen
	}
}

// pollInstead, in Launch before it starts the services, stops the deaf
// listener, lowers PollInterval to fallbackPollInterval and says so. The
// engine still sends notifications, for peers that listen on a direct
// connection.
func (l *listener) pollInstead() {
	_ = l.loop.Stop(context.Background())
	l.pollEvery.Store(int64(min(l.interval(), fallbackPollInterval)))
	l.e.log.Warn("durable: LISTEN delivers no notifications through this pool's connections, "+
		"as behind PgBouncer (or another pooler) in transaction mode: polling every "+l.interval().String()+" instead; "+
		"set Config.PollOnly (with a short Config.PollInterval) to skip this check and stop sending notifications, "+
		"or give the engine a direct or session-mode connection",
		"probe_timeout", listenProbeTimeout)
}

// interval is the period of the waits that notifications normally
// wake: Config.PollInterval, shortened when LISTEN turns out deaf.
func (l *listener) interval() time.Duration { return time.Duration(l.pollEvery.Load()) }

// onNotify acts on a notification of the engine's channel.
func (l *listener) onNotify(payload string) {
	if len(payload) < 2 || payload[1] != ':' {
		return
	}
	switch payload[0] {
	case 'd': // a run finished
		l.e.hub.Notified(payload[2:])
	case 'n': // an unowned run was committed
		l.e.recov.Wake()
	case 'm', 'e', 's': // a message, an event or stream entries for a workflow
		l.e.hub.Notified(payload)
	case 'c': // "c:<epoch>:<id>": a run was cancelled; stop it if it runs here
		epochStr, id, ok := strings.Cut(payload[2:], ":")
		epoch, err := strconv.ParseInt(epochStr, 10, 64)
		if !ok || err != nil {
			return
		}
		// A resumed run has a higher epoch: a late notification of an
		// earlier cancel must not stop it.
		if r := l.e.runner.active.load(id); r != nil && r.epoch <= epoch {
			r.cancelCause(ErrCancelled)
		}
	case 'p': // "p:<incarnation>": a Launch's probe (check)
		if payload[2:] == l.e.incarnation {
			select {
			case l.probe <- struct{}{}:
			default:
			}
		}
	case 'k': // a manual tick of a schedule was asked for
		l.e.sched.Wake()
	case 'q': // work for a queue
		l.e.queues.wake(payload[2:])
	}
}
