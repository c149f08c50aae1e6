// Package notify keeps one dedicated LISTEN connection and hands every
// notification to a callback. It reconnects with backoff after any failure
// and reports each (re)connection, so callers can re-check state they may
// have missed while the connection was down.
//
// It may not import the root durable package.
package notify

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// Listener is a LISTEN loop on one channel.
type Listener struct {
	Connect     func(ctx context.Context) (*pgx.Conn, error)
	ListenSQL   string
	OnNotify    func(payload string)
	OnConnected func() // called after every successful (re)connect
	Logger      *slog.Logger
	MaxBackoff  time.Duration

	ready chan struct{}
}

// Run listens until ctx ends. The first successful LISTEN closes the channel
// returned by Ready.
func (l *Listener) Run(ctx context.Context) {
	backoff := 50 * time.Millisecond
	first := true
	for ctx.Err() == nil {
		listened, err := l.session(ctx, &first)
		if ctx.Err() != nil {
			return
		}
		if listened {
			// The connection worked until now: a new outage starts the
			// backoff over instead of inheriting the last one's.
			backoff = 50 * time.Millisecond
		}
		l.Logger.Warn("durable: listen connection lost, reconnecting", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, l.MaxBackoff)
	}
}

// Ready is closed once the first LISTEN succeeded. Listeners must be made
// with [New].
func (l *Listener) Ready() <-chan struct{} { return l.ready }

// New returns a Listener; fill its exported fields before Run.
func New() *Listener { return &Listener{ready: make(chan struct{}), MaxBackoff: 5 * time.Second} }

// session runs one connection; listened reports that its LISTEN succeeded.
func (l *Listener) session(ctx context.Context, first *bool) (listened bool, err error) {
	conn, err := l.Connect(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, l.ListenSQL); err != nil {
		return false, err
	}
	if *first {
		*first = false
		close(l.ready)
	}
	if l.OnConnected != nil {
		l.OnConnected()
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) && ctx.Err() != nil {
				return true, nil
			}
			return true, err
		}
		l.OnNotify(n.Payload)
	}
}
