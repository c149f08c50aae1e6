package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	neturl "net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// TestUI: durable ui serves the dashboard of the schema on loopback, with a
// token it prints once; a request without it is refused, and so is one
// under a host name it was not given (--allowed-host); --secure-cookies
// makes the login cookie Secure.
func TestUI(t *testing.T) {
	t.Parallel()
	var wf *durable.Workflow[string, string]
	e := newEnv(t, func(eng *durable.Engine) {
		wf = durable.Register(eng, "greet", func(wctx durable.Context, in string) (string, error) { return "hi " + in, nil }, nil)
	})
	ctx := ctxT(t)
	h, err := wf.Start(ctx, "<b>operator</b>", &durable.StartOpts{ID: "ui-run-1"})
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.NoError(t, err)

	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, bin, "ui", "--addr", "127.0.0.1:0", "--schema", e.schema,
		"--allowed-host", "dash.example.com", "--allowed-host", "a.example,b.example:8443", "--secure-cookies")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(out)
	var url, token string
	for (url == "" || token == "") && lines.Scan() {
		line := lines.Text()
		if rest, ok := strings.CutPrefix(line, "durable ui: serving on "); ok {
			url = rest
		}
		if rest, ok := strings.CutPrefix(line, "durable ui: token "); ok {
			token, _, _ = strings.Cut(rest, " ")
		}
	}
	require.NotEmpty(t, url, "no address printed")
	require.NotEmpty(t, token, "no token printed")
	require.True(t, strings.HasPrefix(url, "http://127.0.0.1:"), url)

	get := func(auth string, host ...string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		require.NoError(t, err)
		if len(host) > 0 {
			req.Host = host[0]
		}
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	code, body := get("")
	require.Equal(t, http.StatusUnauthorized, code)
	require.NotContains(t, body, "ui-run-1")
	code, _ = get("wrong-token-wrong-token")
	require.Equal(t, http.StatusUnauthorized, code)
	code, body = get(token)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "ui-run-1")

	for host, want := range map[string]int{"dash.example.com": http.StatusOK, "a.example:1": http.StatusOK,
		"b.example:8443": http.StatusOK, "localhost": http.StatusOK, "evil.example": http.StatusMisdirectedRequest} {
		code, _ = get(token, host)
		require.Equal(t, want, code, host)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.PostForm(url+"login", neturl.Values{"token": {token}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	cookies := resp.Cookies()
	require.Len(t, cookies, 1, "the session cookie")
	require.True(t, cookies[0].Secure)
}
