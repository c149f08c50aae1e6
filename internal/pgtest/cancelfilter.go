package pgtest

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// cancelRequestCode is the code of a CancelRequest startup packet.
const cancelRequestCode = 80877102

// cancelFilter is a TCP proxy in front of a PgBouncer that drops cancel
// requests instead of forwarding them. PgBouncer 1.18 to 1.20 (1.18 is
// Debian 12's) can crash on cancel requests under load (FATAL "bad client
// state" or "server in bad state"; fixed in 1.20 and 1.21), and pgx sends
// one whenever a context ends while a query runs: tests end contexts all the
// time, and one crash fails every test after it. A dropped cancel only lets
// the query run to its end on the server.
type cancelFilter struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool

	dropped atomic.Int64 // cancel requests dropped
}

// filterCancels starts a cancelFilter in front of the server of rawURL and
// returns rawURL pointing at it, and the func that stops it.
func filterCancels(rawURL string) (string, func(), error) {
	url, f, err := newCancelFilter(rawURL)
	if err != nil {
		return "", nil, err
	}
	return url, f.stop, nil
}

func newCancelFilter(rawURL string) (string, *cancelFilter, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", nil, fmt.Errorf("parsing the database URL: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	f := &cancelFilter{ln: ln, target: u.Host, conns: map[net.Conn]struct{}{}}
	go f.serve()
	u.Host = ln.Addr().String()
	return u.String(), f, nil
}

func (f *cancelFilter) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		go f.handle(c)
	}
}

func (f *cancelFilter) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		c.Close()
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *cancelFilter) untrack(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
	c.Close()
}

func (f *cancelFilter) handle(client net.Conn) {
	if !f.track(client) {
		return
	}
	defer f.untrack(client)
	// Every connection starts with a packet of a length (itself included)
	// and a code. PgBouncer wants it whole: it is forwarded in one write.
	var head [8]byte
	client.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.ReadFull(client, head[:]); err != nil {
		return
	}
	if binary.BigEndian.Uint32(head[4:]) == cancelRequestCode {
		f.dropped.Add(1)
		return // dropped: closing tells the client it was handled
	}
	n := binary.BigEndian.Uint32(head[:4])
	if n < 8 || n > 10000 {
		return
	}
	first := make([]byte, n)
	copy(first, head[:])
	if _, err := io.ReadFull(client, first[8:]); err != nil {
		return
	}
	client.SetReadDeadline(time.Time{})
	server, err := net.Dial("tcp", f.target)
	if err != nil {
		return
	}
	if !f.track(server) {
		return
	}
	defer f.untrack(server)
	if _, err := server.Write(first); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { io.Copy(server, client); done <- struct{}{} }()
	go func() { io.Copy(client, server); done <- struct{}{} }()
	<-done // either side ended: end both (the deferred closes)
}

func (f *cancelFilter) stop() {
	f.mu.Lock()
	f.closed = true
	conns := f.conns
	f.conns = map[net.Conn]struct{}{}
	f.mu.Unlock()
	f.ln.Close()
	for c := range conns {
		c.Close()
	}
}
