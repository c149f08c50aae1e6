package durable_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
)

// post makes a POST to url through client and returns the body.
func post(ctx context.Context, client *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, b)
	}
	return string(b), err
}

// runHTTPChild runs the workflow of TestIdempotentTransportThroughSIGKILL:
// step "charge" makes two requests (charge, receipt), step "notify" one,
// all through an IdempotentTransport to DURABLE_HTTP_URL.
func runHTTPChild(ctx context.Context, e *durable.Engine) error {
	url := os.Getenv("DURABLE_HTTP_URL")
	client := &http.Client{Transport: &durable.IdempotentTransport{}}
	wf := durable.Register(e, "pay", func(wctx durable.Context, _ int) (string, error) {
		charged, err := durable.Step(wctx, "charge", func(ctx context.Context) (string, error) {
			c, err := post(ctx, client, url+"/charge")
			if err != nil {
				return "", err
			}
			r, err := post(ctx, client, url+"/receipt")
			return c + "+" + r, err
		}, nil)
		if err != nil {
			return "", err
		}
		notified, err := durable.Step(wctx, "notify", func(ctx context.Context) (string, error) {
			return post(ctx, client, url+"/notify")
		}, nil)
		return charged + "+" + notified, err
	}, nil)
	if err := e.Launch(ctx); err != nil {
		return err
	}
	h, err := wf.Start(ctx, 0, &durable.StartOpts{ID: "http-run"})
	if err != nil {
		return err
	}
	v, err := h.Result(ctx)
	fmt.Println("result", v, err)
	return e.Shutdown(ctx)
}

// dedupServer is a payment service that deduplicates by Idempotency-Key:
// a key seen before gets the first response again and no effect.
type dedupServer struct {
	mu       sync.Mutex
	keys     []string          // of every request, in order
	effects  map[string]int    // by path
	byKey    map[string]string // the response to each key
	hold     string            // a path whose first request, once done, waits for its client to go
	held     chan struct{}     // closed when that request waits
	heldOnce sync.Once
	last     chan struct{} // closed at the first request of the last step
	lastOnce sync.Once
}

func newDedupServer(hold string) *dedupServer {
	return &dedupServer{effects: map[string]int{}, byKey: map[string]string{}, hold: hold, held: make(chan struct{}),
		last: make(chan struct{})}
}

func (s *dedupServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(durable.DefaultIdempotencyHeader)
	s.mu.Lock()
	s.keys = append(s.keys, r.URL.Path+" "+key)
	body, seen := s.byKey[key]
	if !seen || key == "" {
		s.effects[r.URL.Path]++
		body = fmt.Sprintf("%s#%d", strings.TrimPrefix(r.URL.Path, "/"), s.effects[r.URL.Path])
		if key != "" {
			s.byKey[key] = body
		}
	}
	first := !seen && r.URL.Path == s.hold && s.effects[r.URL.Path] == 1
	s.mu.Unlock()
	if r.URL.Path == "/notify" {
		s.lastOnce.Do(func() { close(s.last) })
	}
	if first {
		// The effect is done and remembered; the client dies before it
		// reads the answer (the test SIGKILLs it now).
		s.heldOnce.Do(func() { close(s.held) })
		<-r.Context().Done()
		return
	}
	_, _ = io.WriteString(w, body)
}

// TestIdempotentTransportThroughSIGKILL: a step makes two requests through
// an IdempotentTransport, and its process is SIGKILLed after the service
// performed the second one, before the step's checkpoint. The restarted
// process runs the step again: both requests carry the keys they carried
// before, so the service performs each effect once and answers the
// replayed requests with its first answers; the next step gets a key of
// its own.
func TestIdempotentTransportThroughSIGKILL(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	srv := newDedupServer("/receipt")
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)

	first := startChild(t, "http", schema, "http-exec", "DURABLE_LEASE=30s", "DURABLE_HTTP_URL="+hs.URL)
	select {
	case <-srv.held:
	case <-srv.last:
		srv.mu.Lock()
		defer srv.mu.Unlock()
		t.Fatalf("the first step ended without a receipt: requests %v, effects %v", srv.keys, srv.effects)
	case <-ctxT(t).Done():
		t.Fatalf("the receipt was never requested; child stderr:\n%s", first.Stderr.String())
	}
	first.Kill(t)

	second := startChild(t, "http", schema, "http-exec", "DURABLE_LEASE=30s", "DURABLE_HTTP_URL="+hs.URL)
	require.Equal(t, "result charge#1+receipt#1+notify#1 <nil>", second.WaitLine(t, "result"))
	require.NoError(t, second.Wait(t))

	srv.mu.Lock()
	defer srv.mu.Unlock()
	require.Equal(t, map[string]int{"/charge": 1, "/receipt": 1, "/notify": 1}, srv.effects, "each effect once")
	require.Equal(t, []string{
		"/charge http-run/0", "/receipt http-run/0/2", // the first process
		"/charge http-run/0", "/receipt http-run/0/2", // the step again, after the SIGKILL
		"/notify http-run/1",
	}, srv.keys)
}
