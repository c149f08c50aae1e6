package dashboard_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/dashboard"
)

// TestSignOutRevokes: signing out ends the session on the server: the
// same cookie replayed afterwards is refused, while another session of
// the same token goes on.
func TestSignOutRevokes(t *testing.T) {
	t.Parallel()
	rg := newRig(t, nil)
	cookies, csrf := rg.session(t)
	other, _ := rg.session(t)
	withCookies := func(cs []*http.Cookie) func(*http.Request) {
		return func(r *http.Request) { addCookies(r, cs) }
	}
	require.Equal(t, http.StatusOK, rg.do("GET", "/", nil, withCookies(cookies)).Code)

	w := rg.do("POST", "/logout", url.Values{"csrf": {csrf}}, func(r *http.Request) {
		addCookies(r, cookies)
		r.Header.Set("Origin", "http://example.com")
	})
	require.Equal(t, http.StatusSeeOther, w.Code, w.Body.String())
	cleared := w.Result().Cookies()
	require.Len(t, cleared, 1)
	require.Equal(t, "durable_session", cleared[0].Name)
	require.Empty(t, cleared[0].Value)

	// The browser dropped it; a copy of it is worthless too.
	require.Equal(t, http.StatusUnauthorized, rg.do("GET", "/", nil, withCookies(cookies)).Code)
	require.Equal(t, http.StatusUnauthorized, rg.do("GET", "/run?id=x", nil, withCookies(cookies)).Code)
	require.Equal(t, http.StatusOK, rg.do("GET", "/", nil, withCookies(other)).Code)
}

// TestSessionExpires: a session ends after Options.SessionTTL, on the
// server, whatever the browser keeps.
func TestSessionExpires(t *testing.T) {
	t.Parallel()
	rg := newRig(t, &dashboard.Options{Token: token, SessionTTL: 50 * time.Millisecond})
	w := rg.do("POST", "/login", url.Values{"token": {token}}, nil)
	require.Equal(t, http.StatusSeeOther, w.Code)
	cookies := w.Result().Cookies()
	require.Eventually(t, func() bool {
		return rg.do("GET", "/", nil, func(r *http.Request) { addCookies(r, cookies) }).Code == http.StatusUnauthorized
	}, 30*time.Second, 10*time.Millisecond)
}
