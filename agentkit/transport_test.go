package agentkit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/agentkit/agentkittest"
)

// TestTransportStampsToolKeys: an HTTP tool whose client uses
// agentkit.NewTransport sends its call's key on its first request and
// numbered keys on the next ones; two calls of one turn get their own.
func TestTransportStampsToolKeys(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	var mu sync.Mutex
	var got []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.URL.Path+" "+r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	defer api.Close()
	client := &http.Client{Transport: agentkit.NewTransport(nil)}

	srv := agentkittest.NewServer(agentkittest.Turns(
		agentkittest.Reply{ToolCalls: []agentkit.ToolCall{call("ship", `{"key":"a"}`), call("ship", `{"key":"b"}`)}},
		agentkittest.Reply{Text: "Shipped."},
	))
	defer srv.Close()
	var keys []string
	var a *agentkit.Agent
	v.engine(t, nil, func(e *durable.Engine) {
		a = agentkit.Define(e, "shipper", agentkit.AgentConfig{
			Model: openAI(t, srv),
			Tools: []*agentkit.Tool{
				agentkit.StepTool("ship", "Ship an order.", nil, func(ctx context.Context, a keyArgs) (string, error) {
					mu.Lock()
					keys = append(keys, agentkit.ToolIdempotencyKey(ctx))
					mu.Unlock()
					for _, p := range []string{"/reserve/" + a.Key, "/ship/" + a.Key} {
						req, err := http.NewRequestWithContext(ctx, http.MethodPost, api.URL+p, nil)
						if err != nil {
							return "", err
						}
						resp, err := client.Do(req)
						if err != nil {
							return "", err
						}
						_ = resp.Body.Close()
					}
					return "shipped " + a.Key, nil
				}, nil),
			},
		})
	})
	h, err := a.Start(ctx, agentkit.Input{Prompt: "Ship a and b."}, &durable.StartOpts{ID: "ship-1"})
	require.NoError(t, err)
	res, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "Shipped.", res.Final)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, keys, 2)
	byPath := map[string]string{}
	for _, g := range got {
		path, key, _ := strings.Cut(g, " ")
		byPath[path] = key
	}
	require.Equal(t, map[string]string{
		"/reserve/a": keys[0], "/ship/a": keys[0] + "/2",
		"/reserve/b": keys[1], "/ship/b": keys[1] + "/2",
	}, byPath, "each call's own key, numbered within the call")
	require.NotEqual(t, keys[0], keys[1])
	require.Equal(t, "ship-1", keys[0][:len("ship-1")], "a tool call's key is based on its run")
}
