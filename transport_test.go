package durable_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// headerLog is a server that records one header of every request.
type headerLog struct {
	name string
	mu   sync.Mutex
	got  []string
}

func (h *headerLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.got = append(h.got, r.URL.Path+" "+r.Header.Get(h.name))
	h.mu.Unlock()
}

func (h *headerLog) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	got := h.got
	h.got = nil
	return got
}

// TestIdempotentTransport: inside a step the transport stamps the step's
// key on its first request and numbered keys on the next ones, the same
// on every attempt; a request outside a step, or with the header set,
// goes out as it is; the header name and the key are configurable, and
// the caller's request is not changed.
func TestIdempotentTransport(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logged := &headerLog{name: durable.DefaultIdempotencyHeader}
	srv := httptest.NewServer(logged)
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: &durable.IdempotentTransport{}}
	custom := &headerLog{name: "X-Request-Key"}
	csrv := httptest.NewServer(custom)
	t.Cleanup(csrv.Close)
	tr := &durable.IdempotentTransport{Header: "X-Request-Key", Key: func(ctx context.Context) string {
		if k := durable.IdempotencyKey(ctx); k != "" {
			return "tool:" + k
		}
		return ""
	}}
	var wf, wf2 *durable.Workflow[int, string]
	b.engine(t, nil, func(e *durable.Engine) {
		wf2 = durable.Register(e, "custom", func(wctx durable.Context, _ int) (string, error) {
			return durable.Step(wctx, "one", func(ctx context.Context) (string, error) {
				c := &http.Client{Transport: tr}
				if _, err := post(ctx, c, csrv.URL+"/x"); err != nil {
					return "", err
				}
				return post(ctx, c, csrv.URL+"/y")
			}, nil)
		}, nil)
		wf = durable.Register(e, "calls", func(wctx durable.Context, _ int) (string, error) {
			return durable.Step(wctx, "three", func(ctx context.Context) (string, error) {
				for _, p := range []string{"/a", "/b", "/c"} {
					if _, err := post(ctx, client, srv.URL+p); err != nil {
						return "", err
					}
				}
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/own", nil)
				if err != nil {
					return "", err
				}
				req.Header.Set(durable.DefaultIdempotencyHeader, "mine")
				resp, err := client.Do(req)
				if err != nil {
					return "", err
				}
				_ = resp.Body.Close()
				if req.Header.Get(durable.DefaultIdempotencyHeader) != "mine" {
					return "", errors.New("the request was changed")
				}
				if durable.StepInfoMust(ctx).Attempt == 1 {
					return "", errors.New("fail the first attempt")
				}
				return "ok", nil
			}, &durable.StepOpts{Retry: &durable.RetryPolicy{MaxAttempts: 2, BaseDelay: time.Millisecond}})
		}, nil)
	})
	ctx := ctxT(t)
	h, err := wf.Start(ctx, 0, &durable.StartOpts{ID: "calls-run"})
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.NoError(t, err)
	attempt := []string{"/a calls-run/0", "/b calls-run/0/2", "/c calls-run/0/3", "/own mine"}
	require.Equal(t, append(attempt, attempt...), logged.take(), "the same keys on the retry")

	// Outside a step: nothing to stamp; a plain request is not changed.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/out", nil)
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, []string{"/out "}, logged.take())

	// Another header, another key.
	h2, err := wf2.Start(ctx, 0, &durable.StartOpts{ID: "custom-run"})
	require.NoError(t, err)
	_, err = h2.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"/x tool:custom-run/0", "/y tool:custom-run/0/2"}, custom.take())
	require.Empty(t, logged.take(), "nothing went to the default header")
}
