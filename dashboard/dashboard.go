// Package dashboard is a web dashboard for durable: an [http.Handler] to
// mount in the application's own server, or to serve alone with
// [ListenAndServe] (as `durable ui` does).
//
// It shows the runs with filters and paging, each run's step timeline,
// recorded input, output, events and streams (live while the run goes on,
// by Server-Sent Events), the agent approvals waiting for a decision with
// approve and deny buttons, and the queues and schedules with their
// controls. It is built on the standard library only; its CSS and script
// are embedded, so it loads nothing from the internet.
//
// # Security
//
// Every page needs authentication: [Options.Token] (sent as
// "Authorization: Bearer <token>", or typed once into the login form,
// which starts a session: an HttpOnly, SameSite=Strict cookie holding a
// random ID the dashboard keeps in memory, so signing out ends it for
// good, and a restart ends them all), or the application's own middleware
// in [Options.Auth]. [New] refuses options
// without either, unless [Options.AllowUnauthenticated] says so
// explicitly, and [ListenAndServe] refuses a non-loopback address without
// a token. Actions (approve, deny, cancel, resume, send, pause, trigger)
// are POST requests checked against cross-site forgery: the request's
// Origin must be the dashboard's own and the form must carry the token of
// the browser's CSRF cookie. Everything is rendered through html/template,
// and a strict Content-Security-Policy forbids inline scripts.
package dashboard

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
)

// Defaults of Options.
const (
	TokenMinLen            = 16
	SessionTTLDefault      = 12 * time.Hour
	RefreshIntervalDefault = time.Second
	PageSizeDefault        = 50
	DefaultAddr            = "127.0.0.1:8089"
)

// ErrInsecure is returned by [New] and [ListenAndServe] for options that
// would serve the dashboard without authentication.
var ErrInsecure = errors.New("dashboard: refusing to serve without authentication")

// Options configure a dashboard. Set Token, Auth, or (explicitly)
// AllowUnauthenticated.
type Options struct {
	// Token is the secret a client must present: the header
	// "Authorization: Bearer <token>", or the login form, which sets a
	// session cookie. At least TokenMinLen bytes. Defaults to none.
	Token string

	// Auth wraps the dashboard in the application's own authentication
	// middleware, which must refuse the requests it does not accept. With
	// Auth and no Token, the dashboard trusts every request Auth lets
	// through. Defaults to nil.
	Auth func(http.Handler) http.Handler

	// AllowUnauthenticated serves the dashboard to anyone who can reach
	// it, for a process bound to a loopback address on a single-user
	// machine. Defaults to false.
	AllowUnauthenticated bool

	// Prefix is the path the handler is mounted at, without a trailing
	// slash, e.g. "/durable" for mux.Handle("/durable/", h). Defaults to ""
	// (the root).
	Prefix string

	// ReadOnly hides the action buttons and refuses every action.
	// Defaults to false.
	ReadOnly bool

	// TraceURL links a run's trace ID (shown when the run was started
	// with tracing) to a tracing UI: "{trace}" in it is replaced by the ID,
	// e.g. "https://jaeger.example.com/trace/{trace}". Empty: no link.
	TraceURL string
	// Streams are the stream keys shown on a run's page, followed live.
	// Defaults to agentkit's event stream (agentkit.EventsKey).
	Streams []string

	// SessionTTL is how long a login lasts. Defaults to SessionTTLDefault.
	SessionTTL time.Duration

	// RefreshInterval is how often the page of a running run checks for
	// changes. Defaults to RefreshIntervalDefault.
	RefreshInterval time.Duration

	// PageSize is the number of runs per page. Defaults to
	// PageSizeDefault; at most durable.ListLimitMax.
	PageSize int

	// Logger receives errors of the dashboard. Defaults to slog.Default().
	Logger *slog.Logger
}

type dash struct {
	eng      *durable.Engine
	opts     Options
	key      []byte // signs CSRF tokens
	sessions *sessions
	pages    *pages
	log      *slog.Logger
	mux      *http.ServeMux
}

// New returns the dashboard of eng as an http.Handler. It fails with
// ErrInsecure when opts sets neither Token, Auth nor AllowUnauthenticated,
// and with a descriptive error for a bad option.
func New(eng *durable.Engine, opts *Options) (http.Handler, error) {
	if eng == nil {
		return nil, errors.New("dashboard: New needs an engine")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	switch {
	case o.Token == "" && o.Auth == nil && !o.AllowUnauthenticated:
		return nil, fmt.Errorf("%w: set Options.Token, Options.Auth or Options.AllowUnauthenticated", ErrInsecure)
	case o.Token != "" && len(o.Token) < TokenMinLen:
		return nil, fmt.Errorf("dashboard: Options.Token is %d bytes, shorter than %d", len(o.Token), TokenMinLen)
	case o.Prefix != "" && (!strings.HasPrefix(o.Prefix, "/") || strings.HasSuffix(o.Prefix, "/")):
		return nil, fmt.Errorf("dashboard: Options.Prefix %q must start with / and not end with one", o.Prefix)
	case o.SessionTTL < 0, o.RefreshInterval < 0:
		return nil, errors.New("dashboard: Options.SessionTTL and Options.RefreshInterval must not be negative")
	case o.PageSize < 0 || o.PageSize > durable.ListLimitMax:
		return nil, fmt.Errorf("dashboard: Options.PageSize %d is outside 0..%d", o.PageSize, durable.ListLimitMax)
	}
	o.SessionTTL = cmp.Or(o.SessionTTL, SessionTTLDefault)
	o.RefreshInterval = cmp.Or(o.RefreshInterval, RefreshIntervalDefault)
	o.PageSize = cmp.Or(o.PageSize, PageSizeDefault)
	if o.Streams == nil {
		o.Streams = []string{agentkit.EventsKey}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	p, err := parsePages()
	if err != nil {
		return nil, err
	}
	d := &dash{eng: eng, opts: o, key: make([]byte, 32), sessions: newSessions(o.SessionTTL),
		pages: p, log: o.Logger, mux: http.NewServeMux()}
	if _, err := rand.Read(d.key); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	d.routes()
	var h http.Handler = d
	if o.Auth != nil {
		h = o.Auth(h)
	}
	return h, nil
}

func (d *dash) routes() {
	d.mux.HandleFunc("GET /static/", d.static)
	d.mux.HandleFunc("GET /login", d.loginPage)
	d.mux.HandleFunc("POST /login", d.login)
	d.mux.HandleFunc("POST /logout", d.authed(d.logout))
	d.mux.HandleFunc("GET /{$}", d.authed(d.runsPage))
	d.mux.HandleFunc("GET /run", d.authed(d.runPage))
	d.mux.HandleFunc("GET /live", d.authed(d.live))
	d.mux.HandleFunc("GET /approvals", d.authed(d.approvalsPage))
	d.mux.HandleFunc("GET /queues", d.authed(d.queuesPage))
	d.mux.HandleFunc("GET /schedules", d.authed(d.schedulesPage))
	d.mux.HandleFunc("POST /action", d.authed(d.action))
	d.mux.HandleFunc("/", d.authed(func(w http.ResponseWriter, r *http.Request) {
		d.fail(w, r, http.StatusNotFound, "No such page.")
	}))
}

func (d *dash) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	path := r.URL.Path
	if d.opts.Prefix != "" {
		rest, ok := strings.CutPrefix(path, d.opts.Prefix)
		if !ok || (rest != "" && !strings.HasPrefix(rest, "/")) {
			http.NotFound(w, r)
			return
		}
		if rest == "" {
			http.Redirect(w, r, d.opts.Prefix+"/", http.StatusFound)
			return
		}
		r2 := new(http.Request)
		*r2 = *r
		r2.URL = new(url.URL)
		*r2.URL = *r.URL
		r2.URL.Path = rest
		r2.URL.RawPath = ""
		r = r2
	}
	d.mux.ServeHTTP(w, r)
}

// authed refuses requests without the token or a valid session, and checks
// the origin and CSRF token of POST requests.
func (d *dash) authed(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !d.authenticated(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="durable"`)
			d.render(w, r, http.StatusUnauthorized, "login", loginView{Message: "Sign in with the dashboard token."})
			return
		}
		if r.Method == http.MethodPost && !d.csrfOK(r) {
			d.fail(w, r, http.StatusForbidden, "Refused: the request did not come from this dashboard's own page (cross-site request check failed). Reload the page and try again.")
			return
		}
		next(w, r)
	}
}

const (
	sessionCookie = "durable_session"
	csrfCookie    = "durable_csrf"
)

func (d *dash) authenticated(r *http.Request) bool {
	if d.opts.Token == "" {
		return true // Auth or AllowUnauthenticated
	}
	if d.bearer(r) {
		return true
	}
	c, err := r.Cookie(sessionCookie)
	return err == nil && d.sessions.valid(c.Value)
}

func (d *dash) bearer(r *http.Request) bool {
	if d.opts.Token == "" {
		return false
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && d.tokenOK(tok)
}

// tokenOK compares in constant time, lengths included.
func (d *dash) tokenOK(tok string) bool {
	a, b := sha256.Sum256([]byte(tok)), sha256.Sum256([]byte(d.opts.Token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// NewToken returns a random token for Options.Token (32 bytes, base64url),
// for a command that serves the dashboard and prints how to sign in.
func NewToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (d *dash) sign(s string) string {
	m := hmac.New(sha256.New, d.key)
	m.Write([]byte(s))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (d *dash) cookiePath() string { return d.opts.Prefix + "/" }

func (d *dash) setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: d.cookiePath(), MaxAge: maxAge,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
}

// csrfToken returns the form token of the browser's CSRF cookie, setting
// the cookie when it has none.
func (d *dash) csrfToken(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(csrfCookie)
	if err != nil || len(c.Value) != 32 {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		v := hex.EncodeToString(b)
		d.setCookie(w, r, csrfCookie, v, 0)
		r.AddCookie(&http.Cookie{Name: csrfCookie, Value: v}) // for the rest of this request
		return d.sign("csrf." + v)
	}
	return d.sign("csrf." + c.Value)
}

// csrfOK checks a POST: its Origin (or Referer) must be this host, and its
// form must carry the token of its CSRF cookie. A client authenticated by
// the Authorization header sends no ambient credentials, so only the
// origin check applies to it.
func (d *dash) csrfOK(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		origin = r.Header.Get("Referer")
	}
	if origin != "" {
		u, err := url.Parse(origin)
		if err != nil || u.Host != r.Host {
			return false
		}
	} else if !d.bearer(r) {
		return false
	}
	if d.bearer(r) {
		return true
	}
	c, err := r.Cookie(csrfCookie)
	if err != nil || c.Value == "" {
		return false
	}
	return hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(d.sign("csrf."+c.Value)))
}

func (d *dash) loginPage(w http.ResponseWriter, r *http.Request) {
	if d.opts.Token == "" {
		http.Redirect(w, r, d.opts.Prefix+"/", http.StatusSeeOther)
		return
	}
	d.render(w, r, http.StatusOK, "login", loginView{})
}

func (d *dash) login(w http.ResponseWriter, r *http.Request) {
	if d.opts.Token == "" {
		http.Redirect(w, r, d.opts.Prefix+"/", http.StatusSeeOther)
		return
	}
	if o := r.Header.Get("Origin"); o != "" {
		if u, err := url.Parse(o); err != nil || u.Host != r.Host {
			d.fail(w, r, http.StatusForbidden, "Refused: cross-site login.")
			return
		}
	}
	if !d.tokenOK(r.PostFormValue("token")) {
		time.Sleep(200 * time.Millisecond) // slows guessing down a little; the token's length does the rest
		d.render(w, r, http.StatusUnauthorized, "login", loginView{Message: "Wrong token."})
		return
	}
	d.setCookie(w, r, sessionCookie, d.sessions.create(), int(d.opts.SessionTTL/time.Second))
	http.Redirect(w, r, d.opts.Prefix+"/", http.StatusSeeOther)
}

// logout ends the session server-side, not only in this browser: the
// cookie is worthless afterwards, wherever a copy of it is.
func (d *dash) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		d.sessions.revoke(c.Value)
	}
	d.setCookie(w, r, sessionCookie, "", -1)
	http.Redirect(w, r, d.opts.Prefix+"/login", http.StatusSeeOther)
}

// ListenAndServe serves the dashboard of eng on addr until ctx ends, then
// shuts the server down. addr defaults to DefaultAddr (loopback only).
// It refuses (ErrInsecure) an address that is not loopback unless
// opts.Token is set: on a network the dashboard always asks for a token,
// even with opts.Auth. ready, if not nil, is called with the bound address
// once the server listens.
func ListenAndServe(ctx context.Context, eng *durable.Engine, addr string, opts *Options, ready func(net.Addr)) error {
	if addr == "" {
		addr = DefaultAddr
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("dashboard: address %q: %w", addr, err)
	}
	if !isLoopback(host) && (opts == nil || opts.Token == "") {
		return fmt.Errorf("%w: %q is not a loopback address, so Options.Token is required", ErrInsecure, addr)
	}
	h, err := New(eng, opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	if ready != nil {
		ready(ln.Addr())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("dashboard: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx) // live streams end with ctx (BaseContext)
	<-errc
	return nil
}

// isLoopback reports whether host names only loopback addresses: an IP in
// 127.0.0.0/8 or ::1, or "localhost". An empty host (all interfaces) is
// not.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
