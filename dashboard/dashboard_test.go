package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/dashboard"
	"github.com/durable-go/durable/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const token = "test-token-0123456789abcdef"

const hostile = `<script>alert(1)</script><b>x</b>`

// rig is an engine with a workflow that waits for a message, and its
// dashboard.
type rig struct {
	cfg  *durable.Config
	e    *durable.Engine
	wf   *durable.Workflow[string, string]
	many *durable.Workflow[int, int] // a run of n steps
	h    http.Handler
}

func newRig(t *testing.T, opts *dashboard.Options) *rig {
	t.Helper()
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	cfg := &durable.Config{Schema: schema, AppVersion: "test", LeaseTTL: time.Second,
		PollInterval: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	e, err := durable.New(pool, cfg)
	require.NoError(t, err)
	rg := &rig{e: e, cfg: cfg}
	rg.wf = durable.Register(e, "greet", func(wctx durable.Context, in string) (string, error) {
		if _, err := durable.Step(wctx, "echo", func(context.Context) (string, error) { return in, nil }, nil); err != nil {
			return "", err
		}
		if err := durable.SetEvent(wctx, "note", in); err != nil {
			return "", err
		}
		msg, _, err := durable.Recv[string](wctx, "go", time.Minute)
		return in + msg, err
	}, nil)
	rg.many = durable.Register(e, "many", func(wctx durable.Context, n int) (int, error) {
		for i := range n {
			if _, err := durable.Step(wctx, fmt.Sprintf("s%03d", i), func(context.Context) (int, error) { return i, nil }, nil); err != nil {
				return 0, err
			}
		}
		return n, nil
	}, nil)
	durable.RegisterQueue(e, "fair", &durable.QueueOpts{FairShare: true, PartitionRateLimit: 5, PartitionRatePeriod: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, e.Launch(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
	})
	if opts == nil {
		opts = &dashboard.Options{Token: token}
	}
	rg.h, err = dashboard.New(e, allowTestHost(opts))
	require.NoError(t, err)
	return rg
}

// testHost is the Host of httptest.NewRequest's requests.
const testHost = "example.com"

// allowTestHost lets a dashboard that authenticates answer to testHost
// (an unauthenticated one answers loopback only).
func allowTestHost(o *dashboard.Options) *dashboard.Options {
	if o.Token != "" || o.Auth != nil {
		o.AllowedHosts = append(o.AllowedHosts, testHost)
	}
	return o
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// do serves one request; mutate may add headers and cookies.
func (rg *rig) do(method, target string, form url.Values, mutate func(*http.Request)) *httptest.ResponseRecorder {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	r := httptest.NewRequest(method, target, body)
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if mutate != nil {
		mutate(r)
	}
	w := httptest.NewRecorder()
	rg.h.ServeHTTP(w, r)
	return w
}

func withBearer(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }

// session logs in through the form and returns the session and CSRF
// cookies with the CSRF form token of a page.
func (rg *rig) session(t *testing.T) (cookies []*http.Cookie, csrf string) {
	t.Helper()
	w := rg.do("POST", "/login", url.Values{"token": {token}}, func(r *http.Request) { r.Header.Set("Origin", "http://example.com") })
	require.Equal(t, http.StatusSeeOther, w.Code, w.Body.String())
	cookies = w.Result().Cookies()
	require.Len(t, cookies, 1)
	require.True(t, cookies[0].HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, cookies[0].SameSite)
	w = rg.do("GET", "/", nil, func(r *http.Request) { addCookies(r, cookies) })
	require.Equal(t, http.StatusOK, w.Code)
	cookies = append(cookies, w.Result().Cookies()...)
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(w.Body.String())
	require.NotNil(t, m, "no CSRF token in the page")
	return cookies, m[1]
}

func addCookies(r *http.Request, cs []*http.Cookie) {
	for _, c := range cs {
		r.AddCookie(c)
	}
}

func TestNewRefusesNoAuth(t *testing.T) {
	t.Parallel()
	e, err := durable.New(pgtest.Pool(t), &durable.Config{Schema: pgtest.Schema(t)})
	require.NoError(t, err)
	_, err = dashboard.New(e, nil)
	require.ErrorIs(t, err, dashboard.ErrInsecure)
	_, err = dashboard.New(e, &dashboard.Options{Token: "short"})
	require.ErrorContains(t, err, "shorter")
	_, err = dashboard.New(e, &dashboard.Options{Token: token, Prefix: "ops/"})
	require.ErrorContains(t, err, "Prefix")
	_, err = dashboard.New(e, &dashboard.Options{AllowUnauthenticated: true})
	require.NoError(t, err)
	_, err = dashboard.New(e, &dashboard.Options{Auth: func(h http.Handler) http.Handler { return h }})
	require.NoError(t, err)

	// ListenAndServe: no network address without a token, whatever else.
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:8089", "[::]:0", "example.com:80"} {
		err := dashboard.ListenAndServe(ctxT(t), e, addr, &dashboard.Options{AllowUnauthenticated: true,
			Auth: func(h http.Handler) http.Handler { return h }}, nil)
		require.ErrorIs(t, err, dashboard.ErrInsecure, addr)
	}
	err = dashboard.ListenAndServe(ctxT(t), e, "127.0.0.1:0", nil, nil)
	require.ErrorIs(t, err, dashboard.ErrInsecure)

	// On loopback it serves until ctx ends.
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	addrc := make(chan net.Addr, 1)
	go func() {
		done <- dashboard.ListenAndServe(ctx, e, "127.0.0.1:0", &dashboard.Options{Token: token}, func(a net.Addr) { addrc <- a })
	}()
	addr := <-addrc
	resp, err := http.Get("http://" + addr.String() + "/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	cancel()
	require.NoError(t, <-done)
}

func TestAuthRefused(t *testing.T) {
	t.Parallel()
	rg := newRig(t, nil)
	h, err := rg.wf.Start(ctxT(t), "hi", &durable.StartOpts{ID: "auth-1"})
	require.NoError(t, err)
	for _, target := range []string{"/", "/run?id=" + h.ID(), "/live?id=" + h.ID(), "/approvals", "/queues", "/schedules", "/nope"} {
		w := rg.do("GET", target, nil, nil)
		require.Equal(t, http.StatusUnauthorized, w.Code, target)
		require.NotContains(t, w.Body.String(), "auth-1", target)
		w = rg.do("GET", target, nil, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token+"x") })
		require.Equal(t, http.StatusUnauthorized, w.Code, target)
	}
	w := rg.do("POST", "/action", url.Values{"op": {"cancel"}, "id": {h.ID()}}, nil)
	require.Equal(t, http.StatusUnauthorized, w.Code)
	w = rg.do("GET", "/", nil, func(r *http.Request) { r.AddCookie(&http.Cookie{Name: "durable_session", Value: "9999999999.forged"}) })
	require.Equal(t, http.StatusUnauthorized, w.Code)
	w = rg.do("POST", "/login", url.Values{"token": {"wrong-token-wrong-token"}}, nil)
	require.Equal(t, http.StatusUnauthorized, w.Code)
	require.Empty(t, w.Result().Cookies())

	w = rg.do("GET", "/", nil, withBearer)
	require.Equal(t, http.StatusOK, w.Code)
	require.Contains(t, w.Body.String(), "auth-1")
	require.NotEmpty(t, w.Header().Get("Content-Security-Policy"))
	cookies, _ := rg.session(t)
	w = rg.do("GET", "/run?id=auth-1", nil, func(r *http.Request) { addCookies(r, cookies) })
	require.Equal(t, http.StatusOK, w.Code)

	// The user's own middleware decides alone when there is no token.
	mw := newRig(t, &dashboard.Options{Auth: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-User") != "ann" {
				http.Error(w, "forbidden", http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, r)
		})
	}})
	require.Equal(t, http.StatusForbidden, mw.do("GET", "/", nil, nil).Code)
	require.Equal(t, http.StatusOK, mw.do("GET", "/", nil, func(r *http.Request) { r.Header.Set("X-User", "ann") }).Code)
}

func TestCSRFRefused(t *testing.T) {
	t.Parallel()
	rg := newRig(t, nil)
	ctx := ctxT(t)
	h, err := rg.wf.Start(ctx, "hi", &durable.StartOpts{ID: "csrf-1"})
	require.NoError(t, err)
	cookies, csrf := rg.session(t)
	form := func(tok string) url.Values {
		return url.Values{"op": {"cancel"}, "id": {h.ID()}, "csrf": {tok}}
	}
	for name, tc := range map[string]struct {
		form   url.Values
		origin string
	}{
		"no token":       {form(""), "http://example.com"},
		"wrong token":    {form(csrf + "x"), "http://example.com"},
		"foreign origin": {form(csrf), "http://evil.example"},
		"no origin":      {form(csrf), ""},
	} {
		w := rg.do("POST", "/action", tc.form, func(r *http.Request) {
			addCookies(r, cookies)
			if tc.origin != "" {
				r.Header.Set("Origin", tc.origin)
			}
		})
		require.Equal(t, http.StatusForbidden, w.Code, name)
	}
	st, err := h.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, durable.StatusPending, st)

	// A read-only dashboard refuses actions even when they are well formed.
	ro, err := dashboard.New(rg.e, allowTestHost(&dashboard.Options{Token: token, ReadOnly: true}))
	require.NoError(t, err)
	r := httptest.NewRequest("POST", "/action", strings.NewReader(form("").Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	withBearer(r)
	w := httptest.NewRecorder()
	ro.ServeHTTP(w, r)
	require.Equal(t, http.StatusForbidden, w.Code)

	// The real thing: same origin, token of the cookie.
	w = rg.do("POST", "/action", form(csrf), func(r *http.Request) {
		addCookies(r, cookies)
		r.Header.Set("Origin", "http://example.com")
	})
	require.Equal(t, http.StatusSeeOther, w.Code, w.Body.String())
	require.Equal(t, "/run?id=csrf-1", w.Header().Get("Location"))
	_, err = h.Result(ctx)
	require.ErrorIs(t, err, durable.ErrCancelled)
}

func TestEscaping(t *testing.T) {
	t.Parallel()
	rg := newRig(t, nil)
	ctx := ctxT(t)
	id := `run-"><img src=x>` + hostile
	h, err := rg.wf.Start(ctx, hostile, &durable.StartOpts{ID: id})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := rg.e.Inspect(ctx, id)
		return err == nil && info.WaitTopic == "go"
	}, 30*time.Second, 10*time.Millisecond)
	for _, target := range []string{"/", "/run?id=" + url.QueryEscape(id), "/?id=" + url.QueryEscape(hostile)} {
		w := rg.do("GET", target, nil, withBearer)
		require.Equal(t, http.StatusOK, w.Code, target)
		body := w.Body.String()
		require.NotContains(t, body, "<script>alert", target)
		require.NotContains(t, body, "<b>x", target)
		require.NotContains(t, body, "<img src=x", target)
		if target != "/?id="+url.QueryEscape(hostile) {
			require.Contains(t, body, "&lt;script&gt;alert(1)&lt;/script&gt;&lt;b&gt;x&lt;/b&gt;", target)
		}
	}
	// The generic message form delivers JSON to a plain Recv.
	w := rg.do("POST", "/action", url.Values{"op": {"send"}, "id": {id}, "topic": {"go"}, "message": {`"!"`}}, func(r *http.Request) {
		withBearer(r)
		r.Header.Set("Origin", "http://example.com")
	})
	require.Equal(t, http.StatusSeeOther, w.Code, w.Body.String())
	out, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, hostile+"!", out)
	w = rg.do("GET", "/run?id="+url.QueryEscape(id), nil, withBearer)
	require.NotContains(t, w.Body.String(), "<b>x")
	require.Contains(t, w.Body.String(), `id="run-status">success<`)
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	rg := newRig(t, &dashboard.Options{Token: token, Prefix: "/ops"})
	post := func(r *http.Request) {
		withBearer(r)
		r.Header.Set("Origin", "http://example.com")
	}
	for _, target := range []string{"/ops/run?id=nope", "/ops/live?id=nope", "/ops/nope", "/elsewhere", "/ops/run?id="} {
		w := rg.do("GET", target, nil, withBearer)
		require.Contains(t, []int{http.StatusNotFound, http.StatusBadRequest}, w.Code, target)
		if target != "/ops/run?id=" {
			require.Equal(t, http.StatusNotFound, w.Code, target)
		}
	}
	for _, f := range []url.Values{
		{"op": {"approve"}, "id": {"nope"}, "call": {"c"}},
		{"op": {"send"}, "id": {"nope"}, "topic": {"t"}, "message": {"1"}},
		{"op": {"pause-schedule"}, "name": {"nope"}},
		{"op": {"pause-queue"}, "name": {"nope"}},
	} {
		w := rg.do("POST", "/ops/action", f, post)
		require.Contains(t, []int{http.StatusNotFound, http.StatusConflict}, w.Code, f.Encode())
	}
	w := rg.do("POST", "/ops/action", url.Values{"op": {"explode"}}, post)
	require.Equal(t, http.StatusBadRequest, w.Code)
	w = rg.do("POST", "/ops/action", url.Values{"op": {"send"}, "id": {"x"}, "topic": {"t"}, "message": {"{"}}, post)
	require.Equal(t, http.StatusBadRequest, w.Code)
	w = rg.do("GET", "/ops/", nil, withBearer)
	require.Equal(t, http.StatusOK, w.Code)
	require.Contains(t, w.Body.String(), `href="/ops/static/style.css"`)
	w = rg.do("GET", "/ops/static/app.js", nil, nil)
	require.Equal(t, http.StatusOK, w.Code)
}

func TestLiveEvents(t *testing.T) {
	t.Parallel()
	rg := newRig(t, &dashboard.Options{Token: dashboard.NewToken(), AllowUnauthenticated: true, Streams: []string{"log"}})
	ctx := ctxT(t)
	// The user's middleware alone admits nobody without a token here: the
	// token is set, so it is required.
	require.Equal(t, http.StatusUnauthorized, rg.do("GET", "/", nil, nil).Code)

	rg = newRig(t, &dashboard.Options{AllowUnauthenticated: true, RefreshInterval: 50 * time.Millisecond})
	h, err := rg.wf.Start(ctx, "<i>live</i>", &durable.StartOpts{ID: "live-1"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := rg.e.Inspect(ctx, "live-1")
		return err == nil && info.WaitTopic == "go"
	}, 30*time.Second, 10*time.Millisecond)
	srv := httptest.NewServer(rg.h)
	defer func() {
		srv.CloseClientConnections()
		srv.Close()
	}()
	resp, err := http.Get(srv.URL + "/live?id=live-1")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	require.NoError(t, durable.Send(ctx, rg.e, "live-1", "go", "!", nil))
	_, err = h.Result(ctx)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body) // the server ends the stream after "finished"
	require.NoError(t, err)
	require.Contains(t, string(body), "event: finished\ndata: \"live-1\"\n\n")
}

// TestUnlaunchedEngine: `durable ui` serves the dashboard of an engine it
// never launches (it runs no workflow): pages and actions work all the same.
func TestUnlaunchedEngine(t *testing.T) {
	t.Parallel()
	rg := newRig(t, nil)
	ctx := ctxT(t)
	h, err := rg.wf.Start(ctx, "x", &durable.StartOpts{ID: "far-1"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := rg.e.Inspect(ctx, "far-1")
		return err == nil && info.WaitTopic == "go"
	}, 30*time.Second, 10*time.Millisecond)
	ui, err := durable.New(pgtest.Pool(t), &durable.Config{Schema: rg.cfg.Schema, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	far := &rig{e: ui}
	far.h, err = dashboard.New(ui, allowTestHost(&dashboard.Options{Token: token}))
	require.NoError(t, err)
	for _, target := range []string{"/", "/run?id=far-1", "/approvals", "/queues", "/schedules"} {
		w := far.do("GET", target, nil, withBearer)
		require.Equal(t, http.StatusOK, w.Code, target)
	}
	require.Contains(t, far.do("GET", "/run?id=far-1", nil, withBearer).Body.String(), `name="topic" value="go"`)
	w := far.do("POST", "/action", url.Values{"op": {"send"}, "id": {"far-1"}, "topic": {"go"}, "message": {`"y"`}}, func(r *http.Request) {
		withBearer(r)
		r.Header.Set("Origin", "http://example.com")
	})
	require.Equal(t, http.StatusSeeOther, w.Code, w.Body.String())
	out, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "xy", out)
}

// TestLongRunPages: a run of 250 steps shows its last 200 with a link to
// the earlier ones; a window from a position links to the later ones and
// back to the latest.
func TestLongRunPages(t *testing.T) {
	t.Parallel()
	rg := newRig(t, nil)
	ctx := ctxT(t)
	h, err := rg.many.Start(ctx, 250, &durable.StartOpts{ID: "long-run"})
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.NoError(t, err)

	for _, pg := range []struct {
		target           string
		present, missing []string
	}{
		{"/run?id=long-run",
			[]string{"200 of 250, from #50", `href="/run?id=long-run&amp;from=0" id="steps-earlier"`, "s249"},
			[]string{"steps-later", "s049"}},
		{"/run?id=long-run&from=0",
			[]string{"200 of 250, from #0", `href="/run?id=long-run&amp;from=200" id="steps-later"`, `href="/run?id=long-run" id="steps-latest"`, "s000"},
			[]string{"steps-earlier", "s200"}},
		{"/run?id=long-run&from=200", []string{"50 of 250, from #200"}, nil},
	} {
		w := rg.do("GET", pg.target, nil, withBearer)
		require.Equal(t, http.StatusOK, w.Code, pg.target)
		for _, s := range pg.present {
			has(t, w.Body.String(), true, s)
		}
		for _, s := range pg.missing {
			has(t, w.Body.String(), false, s)
		}
	}
	for _, from := range []string{"x", "-1", "99999999999"} {
		w := rg.do("GET", "/run?id=long-run&from="+from, nil, withBearer)
		require.Equal(t, http.StatusBadRequest, w.Code, from)
	}
}

// has checks whether page contains s, without printing the whole page.
func has(t *testing.T, page string, want bool, s string) {
	t.Helper()
	if strings.Contains(page, s) != want {
		t.Fatalf("page contains %q: %v, want %v", s, !want, want)
	}
}

// TestRunTraceLink: a run started with tracing shows its trace ID, linked
// to the tracing UI of Options.TraceURL.
func TestRunTraceLink(t *testing.T) {
	t.Parallel()
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cfg := &durable.Config{Schema: pgtest.Schema(t), AppVersion: "test", Logger: slog.New(slog.DiscardHandler), TracerProvider: tp}
	e, err := durable.New(pgtest.Pool(t), cfg)
	require.NoError(t, err)
	wf := durable.Register(e, "traced", func(wctx durable.Context, in int) (int, error) { return in, nil }, nil)
	ctx := ctxT(t)
	require.NoError(t, e.Launch(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
	})
	h, err := wf.Start(ctx, 1, &durable.StartOpts{ID: "traced-run"})
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.NoError(t, err)
	info, err := e.Inspect(ctx, "traced-run")
	require.NoError(t, err)
	require.Len(t, info.TraceID, 32)

	hd, err := dashboard.New(e, allowTestHost(&dashboard.Options{Token: token, TraceURL: "https://traces.example.com/trace/{trace}"}))
	require.NoError(t, err)
	r := httptest.NewRequest("GET", "/run?id=traced-run", nil)
	withBearer(r)
	w := httptest.NewRecorder()
	hd.ServeHTTP(w, r)
	require.Equal(t, http.StatusOK, w.Code)
	has(t, w.Body.String(), true, `<a href="https://traces.example.com/trace/`+info.TraceID+`">`+info.TraceID+`</a>`)

	// Untraced runs show none.
	rg := newRig(t, nil)
	h2, err := rg.wf.Start(ctx, "x", nil)
	require.NoError(t, err)
	w2 := rg.do("GET", "/run?id="+h2.ID(), nil, withBearer)
	require.Equal(t, http.StatusOK, w2.Code)
	has(t, w2.Body.String(), false, `id="run-trace"`)
}

// TestQueuesPage: the queues page shows the flow-control settings and, for
// a queue whose keys matter, its busiest partition keys with their own
// limits.
func TestQueuesPage(t *testing.T) {
	t.Parallel()
	rg := newRig(t, nil)
	ctx := ctxT(t)
	q := rg.e.QueueRef("fair")
	require.NoError(t, q.Pause(ctx))
	require.NoError(t, q.SetPartitionLimits(ctx, "vip", &durable.PartitionLimits{Concurrency: 3, Weight: 2}))
	for _, key := range []string{"acme", "acme", "tiny-co"} {
		_, err := rg.wf.Enqueue(ctx, q, "x", &durable.EnqueueOpts{PartitionKey: key})
		require.NoError(t, err)
	}
	w := rg.do("GET", "/queues", nil, withBearer)
	require.Equal(t, http.StatusOK, w.Code)
	body := w.Body.String()
	require.Contains(t, body, "<td>5 / 1m0s</td>")
	require.Contains(t, body, "<td>fair</td>")
	require.Regexp(t, `<td>acme</td><td>2</td><td>0</td><td>0</td>\s*<td>-</td><td>1</td>`, body)
	require.Regexp(t, `<td>vip</td><td>0</td><td>0</td><td>0</td>\s*<td>3</td><td>2</td>`, body)
}

// TestRunTags: the runs page shows each run's tags, linked to the listing
// of the runs with that tag, and filters by tags (key=value, repeatable,
// kept across pages); the run page shows them too. Tags are escaped.
func TestRunTags(t *testing.T) {
	t.Parallel()
	rg := newRig(t, &dashboard.Options{Token: token, PageSize: 1})
	ctx := ctxT(t)
	for _, r := range []struct {
		id   string
		tags map[string]string
	}{
		{"tag-1", map[string]string{"customer": "acme", "tier": "gold"}},
		{"tag-2", map[string]string{"customer": "acme", "note": hostile}},
		{"tag-3", map[string]string{"customer": "globex"}},
		{"tag-4", nil},
	} {
		h, err := rg.many.Start(ctx, 0, &durable.StartOpts{ID: r.id, Tags: r.tags})
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.NoError(t, err)
	}
	list := func(query string) string {
		t.Helper()
		w := rg.do("GET", "/?"+query, nil, withBearer)
		require.Equal(t, http.StatusOK, w.Code, query)
		body := w.Body.String()
		require.NotContains(t, body, "<script>alert", query)
		return body
	}
	body := list("tag=" + url.QueryEscape("customer=acme"))
	has(t, body, true, `href="/run?id=tag-2"`)
	has(t, body, false, `href="/run?id=tag-1"`) // the next page
	has(t, body, true, `<a class="tag" href="/?tag=customer=acme">customer=acme</a>`)
	has(t, body, true, `note=&lt;script&gt;alert(1)&lt;/script&gt;`)
	has(t, body, true, `<input name="tag" value="customer=acme">`)
	next := regexp.MustCompile(`id="next-page" href="([^"]+)"`).FindStringSubmatch(body)
	require.NotNil(t, next, "a link to the next page")
	require.Contains(t, strings.ToLower(next[1]), "&amp;tag=customer%3dacme&amp;cursor=")
	page2, err := url.Parse(strings.ReplaceAll(next[1], "&amp;", "&"))
	require.NoError(t, err)
	body = list(page2.RawQuery)
	has(t, body, true, `href="/run?id=tag-1"`)
	has(t, body, true, `>tier=gold</a>`)
	has(t, body, false, "next-page")

	body = list("tag=" + url.QueryEscape("customer=acme") + "&tag=" + url.QueryEscape("tier=gold") + "&tag=")
	has(t, body, true, `href="/run?id=tag-1"`)
	has(t, body, false, "next-page")
	has(t, list("tag="+url.QueryEscape("customer=nobody")), true, "No runs match.")
	for _, bad := range []string{"customer", "a=1&tag=a=2", "=x"} {
		w := rg.do("GET", "/?tag="+bad, nil, withBearer)
		require.Equal(t, http.StatusBadRequest, w.Code, bad)
	}

	w := rg.do("GET", "/run?id=tag-1", nil, withBearer)
	require.Equal(t, http.StatusOK, w.Code)
	has(t, w.Body.String(), true, `id="run-tags"><a class="tag" href="/?tag=customer=acme">customer=acme</a> <a class="tag" href="/?tag=tier=gold">tier=gold</a>`)
	w = rg.do("GET", "/run?id=tag-4", nil, withBearer)
	has(t, w.Body.String(), false, `id="run-tags"`)
}
