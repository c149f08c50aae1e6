package dashboard_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/dashboard"
	"github.com/durable-go/durable/internal/pgtest"
)

// arrivedAt makes a request look as if its connection came to ip, as a
// server's connection does (http.LocalAddrContextKey).
func arrivedAt(ip string) func(*http.Request) {
	return func(r *http.Request) {
		*r = *r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.ParseIP(ip), Port: 8089}))
	}
}

// TestHostChecked: against DNS rebinding, the dashboard answers only to
// the names it is known by: an IP address, loopback names on a loopback
// connection, and Options.AllowedHosts ("name" for any port, "name:port"
// for one). Another Host gets 421 and none of the dashboard.
func TestHostChecked(t *testing.T) {
	t.Parallel()
	rg := newRig(t, &dashboard.Options{Token: token, AllowedHosts: []string{"Dash.Example.com", "proxy.example.com:8443"}})
	_, err := rg.wf.Start(ctxT(t), "x", &durable.StartOpts{ID: "host-run"})
	require.NoError(t, err)
	srv := httptest.NewServer(rg.h) // a loopback listener
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	get := func(host string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctxT(t), http.MethodGet, srv.URL+"/", nil)
		require.NoError(t, err)
		req.Host = host
		withBearer(req)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	for _, host := range []string{"127.0.0.1:" + port, "[::1]:" + port, "localhost:" + port, "LocalHost", "localhost.:" + port,
		"dash.example.com", "DASH.example.com:1234", "proxy.example.com:8443", "192.0.2.1:80"} {
		code, body := get(host)
		require.Equal(t, http.StatusOK, code, host)
		require.Contains(t, body, "host-run", host)
	}
	for _, host := range []string{"evil.example:" + port, "evil.example", "localhost.evil.example:" + port, "proxy.example.com:9999",
		"proxy.example.com", "127.0.0.1.nip.io:" + port} {
		code, body := get(host)
		require.Equal(t, http.StatusMisdirectedRequest, code, host)
		require.Contains(t, body, "DNS rebinding", host)
		require.Contains(t, body, "AllowedHosts", host)
		require.NotContains(t, body, "host-run", host)
	}

	// Loopback names match a loopback connection only: on another
	// interface, "localhost" is a name an attacker could point anywhere.
	for ip, want := range map[string]int{"192.0.2.7": http.StatusMisdirectedRequest, "127.0.0.1": http.StatusOK, "::1": http.StatusOK} {
		w := rg.do("GET", "/", nil, func(r *http.Request) {
			r.Host = "localhost:8089"
			withBearer(r)
			arrivedAt(ip)(r)
		})
		require.Equal(t, want, w.Code, ip)
	}
	// The login form and the static files are behind the check too.
	require.Equal(t, http.StatusMisdirectedRequest, rg.do("GET", "/login", nil, func(r *http.Request) { r.Host = "evil.example" }).Code)
	require.Equal(t, http.StatusMisdirectedRequest, rg.do("GET", "/static/app.js", nil, func(r *http.Request) { r.Host = "evil.example" }).Code)

	e, err := durable.New(pgtest.Pool(t), &durable.Config{Schema: pgtest.Schema(t)})
	require.NoError(t, err)
	_, err = dashboard.New(e, &dashboard.Options{Token: token, AllowedHosts: []string{"http://x/"}})
	require.ErrorContains(t, err, "AllowedHosts")
}

// TestAllowUnauthenticatedLoopbackOnly: an unauthenticated dashboard is
// refused on a network address (ListenAndServe, New with a public name in
// AllowedHosts) with an error naming the option, and when mounted in the
// application's own server it answers only requests that came to a
// loopback address under a loopback name.
func TestAllowUnauthenticatedLoopbackOnly(t *testing.T) {
	t.Parallel()
	e, err := durable.New(pgtest.Pool(t), &durable.Config{Schema: pgtest.Schema(t)})
	require.NoError(t, err)
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		// Even with a token: the option asks for no authentication.
		ctx, cancel := context.WithCancel(ctxT(t))
		err := dashboard.ListenAndServe(ctx, e, addr, &dashboard.Options{Token: token, AllowUnauthenticated: true},
			func(net.Addr) { cancel() }) // served: ends at once, and the check below fails
		cancel()
		require.ErrorIs(t, err, dashboard.ErrInsecure, addr)
		require.ErrorContains(t, err, "Options.AllowUnauthenticated", addr)
	}
	_, err = dashboard.New(e, &dashboard.Options{AllowUnauthenticated: true, AllowedHosts: []string{"dash.example.com"}})
	require.ErrorIs(t, err, dashboard.ErrInsecure)
	require.ErrorContains(t, err, "Options.AllowUnauthenticated")
	_, err = dashboard.New(e, &dashboard.Options{AllowUnauthenticated: true, AllowedHosts: []string{"localhost:8089"}})
	require.NoError(t, err)

	rg := newRig(t, &dashboard.Options{AllowUnauthenticated: true})
	for _, tc := range []struct {
		local, host string
		want        int
	}{
		{"127.0.0.1", "127.0.0.1:8089", http.StatusOK},
		{"::1", "localhost", http.StatusOK},
		{"192.0.2.7", "192.0.2.7:8089", http.StatusForbidden}, // bound beyond loopback
		{"127.0.0.1", "10.1.2.3", http.StatusForbidden},       // a proxy's client asked for another address
		{"", "127.0.0.1", http.StatusForbidden},               // the server did not say where it came
	} {
		w := rg.do("GET", "/", nil, func(r *http.Request) {
			r.Host = tc.host
			if tc.local != "" {
				arrivedAt(tc.local)(r)
			}
		})
		require.Equal(t, tc.want, w.Code, "%+v", tc)
		if tc.want == http.StatusForbidden {
			require.Contains(t, w.Body.String(), "Options.AllowUnauthenticated", "%+v", tc)
		}
	}
}

// TestSecureCookies: the session and CSRF cookies are Secure with
// Options.SecureCookies (TLS ends at a proxy, the dashboard sees plain
// HTTP) and whenever the request came over TLS; not otherwise, or a plain
// HTTP dashboard could not keep a login.
func TestSecureCookies(t *testing.T) {
	t.Parallel()
	cookies := func(rg *rig, scheme string) []*http.Cookie {
		t.Helper()
		w := rg.do("POST", scheme+"://example.com/login", url.Values{"token": {token}}, nil)
		require.Equal(t, http.StatusSeeOther, w.Code)
		out := w.Result().Cookies()
		w = rg.do("GET", scheme+"://example.com/", nil, func(r *http.Request) { addCookies(r, out) })
		require.Equal(t, http.StatusOK, w.Code)
		out = append(out, w.Result().Cookies()...)
		require.Len(t, out, 2, "session and CSRF cookies")
		return out
	}
	secure := newRig(t, &dashboard.Options{Token: token, SecureCookies: true})
	plain := newRig(t, nil)
	for _, tc := range []struct {
		rg     *rig
		scheme string
		want   bool
	}{{secure, "http", true}, {secure, "https", true}, {plain, "https", true}, {plain, "http", false}} {
		for _, c := range cookies(tc.rg, tc.scheme) {
			require.Equal(t, tc.want, c.Secure, "%s over %s", c.Name, tc.scheme)
			require.True(t, c.HttpOnly)
		}
	}
}

// TestListenAndServeAcceptsItsName: the host name ListenAndServe listens
// on is a name the dashboard answers to, without AllowedHosts.
func TestListenAndServeAcceptsItsName(t *testing.T) {
	t.Parallel()
	name, err := os.Hostname()
	require.NoError(t, err)
	if _, err := net.LookupHost(name); err != nil {
		t.Skipf("the machine's name %q does not resolve: %v", name, err)
	}
	e, err := durable.New(pgtest.Pool(t), &durable.Config{Schema: pgtest.Schema(t)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	addrc := make(chan net.Addr, 1)
	go func() {
		done <- dashboard.ListenAndServe(ctx, e, net.JoinHostPort(name, "0"), &dashboard.Options{Token: token}, func(a net.Addr) { addrc <- a })
	}()
	var addr net.Addr
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Skipf("cannot listen on %q: %v", name, err)
	}
	_, port, err := net.SplitHostPort(addr.String())
	require.NoError(t, err)
	// Past the host check, a request without the token meets the login.
	for host, want := range map[string]int{name + ":" + port: http.StatusUnauthorized, "other." + name + ":" + port: http.StatusMisdirectedRequest} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr.String()+"/", nil)
		require.NoError(t, err)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, host)
	}
	cancel()
	require.NoError(t, <-done)
}
