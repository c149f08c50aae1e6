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
// in [Options.Auth]. [New] refuses options without either, unless
// [Options.AllowUnauthenticated] says so explicitly; an unauthenticated
// dashboard answers only requests to a loopback address, and
// [ListenAndServe] refuses a non-loopback address without a token or with
// AllowUnauthenticated. Cookies are Secure over TLS, and always with
// [Options.SecureCookies] (behind a proxy that terminates TLS).
//
// Against DNS rebinding (a hostile page whose name resolves to the
// dashboard's address), a request is served only when its Host header is
// an IP address, "localhost" on a loopback connection, the name
// [ListenAndServe] listens on, or one of [Options.AllowedHosts] (the
// public name behind a proxy, or the application's own); others get 421
// Misdirected Request.
//
// Actions (approve, deny, cancel, resume, send, pause, trigger) are POST
// requests checked against cross-site forgery: the request's Origin must
// be the dashboard's own and the form must carry the token of the
// browser's CSRF cookie. Everything is rendered through html/template,
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
	"slices"
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
// would serve the dashboard without authentication, or without it beyond
// loopback; the message names the option.
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
	// machine: without Token and Auth, it answers only requests that came
	// to a loopback address under a loopback Host, and [ListenAndServe]
	// refuses it on any other address. Defaults to false.
	AllowUnauthenticated bool

	// AllowedHosts are further names the dashboard answers to in the Host
	// header, e.g. its public name behind a reverse proxy, or the
	// application's own name when it is mounted there ("name" for any
	// port, "name:port" for one). Requests under another name are refused
	// with 421 (DNS rebinding); an IP address, and "localhost" on a
	// loopback connection, are always accepted. Defaults to none.
	AllowedHosts []string

	// SecureCookies marks the session and CSRF cookies Secure (sent over
	// HTTPS only), for a dashboard behind a proxy that terminates TLS. A
	// request that came over TLS gets Secure cookies anyway. Defaults to
	// false.
	SecureCookies bool

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
	hosts    map[string]bool // AllowedHosts, lowercased
	pages    *pages
	log      *slog.Logger
	mux      *http.ServeMux
}

// New returns the dashboard of eng as an http.Handler. It fails with
// ErrInsecure when opts sets neither Token, Auth nor AllowUnauthenticated,
// or AllowUnauthenticated with a non-loopback name in AllowedHosts, and
// with a descriptive error for a bad option.
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
	hosts := map[string]bool{}
	for _, h := range o.AllowedHosts {
		name := strings.ToLower(strings.TrimSuffix(h, "."))
		if name == "" || strings.ContainsAny(name, "/ ") {
			return nil, fmt.Errorf("dashboard: Options.AllowedHosts: %q is not a host name (want \"name\" or \"name:port\")", h)
		}
		if o.unauthenticated() && !isLoopback(hostName(name)) {
			return nil, fmt.Errorf("%w: Options.AllowUnauthenticated serves loopback only, but Options.AllowedHosts has %q: set Options.Token or Options.Auth", ErrInsecure, h)
		}
		hosts[name] = true
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
	d := &dash{eng: eng, opts: o, key: make([]byte, 32), sessions: newSessions(o.SessionTTL), hosts: hosts,
		pages: p, log: o.Logger, mux: http.NewServeMux()}
	if _, err := rand.Read(d.key); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	d.routes()
	var h http.Handler = d
	if o.Auth != nil {
		h = o.Auth(h)
	}
	return &guard{d: d, next: h}, nil
}

// unauthenticated reports whether the options serve without any check.
func (o *Options) unauthenticated() bool {
	return o.Token == "" && o.Auth == nil && o.AllowUnauthenticated
}

// guard checks the Host header (and the loopback rule of an
// unauthenticated dashboard) before anything else, the application's
// Auth middleware included.
type guard struct {
	d    *dash
	next http.Handler
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host, local := hostName(r.Host), localIP(r)
	switch {
	case !g.d.hostOK(r.Host, host, local):
		refuse(w, http.StatusMisdirectedRequest, fmt.Sprintf("dashboard: refused: this dashboard does not answer to the host name %q "+
			"(a protection against DNS rebinding). Open it by its address, or add the name to Options.AllowedHosts "+
			"(durable ui --allowed-host).", host))
	case g.d.opts.unauthenticated() && !(local != nil && local.IsLoopback() && isLoopback(host)):
		refuse(w, http.StatusForbidden, "dashboard: refused: Options.AllowUnauthenticated serves only requests to a loopback "+
			"address (localhost, 127.0.0.1, [::1]); set Options.Token to serve it on a network.")
	default:
		g.next.ServeHTTP(w, r)
	}
}

// hostOK reports whether the Host header hostport (host without its port)
// names this dashboard. An IP address cannot be rebound, so any is
// accepted; "localhost" only on a loopback connection (local is the
// address the request came to, nil when unknown).
func (d *dash) hostOK(hostport, host string, local net.IP) bool {
	if d.hosts[strings.ToLower(strings.TrimSuffix(hostport, "."))] || d.hosts[host] {
		return true
	}
	if net.ParseIP(host) != nil {
		return true
	}
	return host == "localhost" && local != nil && local.IsLoopback()
}

// hostName returns the lowercased host of a Host header or of an
// AllowedHosts entry, without port, brackets or trailing dot.
func hostName(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// localIP is the address the request's connection came to, nil when the
// server did not record it.
func localIP(r *http.Request) net.IP {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return nil
	}
	if tcp, ok := a.(*net.TCPAddr); ok {
		return tcp.IP
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return nil
	}
	return net.ParseIP(host)
}

// refuse answers a request the dashboard will not serve, in plain text.
func refuse(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, msg, status)
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
	d.mux.HandleFunc("GET /activity", d.authed(d.activityPage))
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
		HttpOnly: true, Secure: d.opts.SecureCookies || r.TLS != nil, SameSite: http.SameSiteStrictMode})
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
// opts.Token is set, and with opts.AllowUnauthenticated: on a network the
// dashboard always asks for a token, even with opts.Auth. The host name of
// addr, if it is a name, is accepted in the Host header besides
// opts.AllowedHosts. ready, if not nil, is called with the bound address
// once the server listens.
func ListenAndServe(ctx context.Context, eng *durable.Engine, addr string, opts *Options, ready func(net.Addr)) error {
	if addr == "" {
		addr = DefaultAddr
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("dashboard: address %q: %w", addr, err)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	switch {
	case !isLoopback(host) && o.AllowUnauthenticated:
		return fmt.Errorf("%w: Options.AllowUnauthenticated is only for a loopback address, and %q is not one: set Options.Token instead", ErrInsecure, addr)
	case !isLoopback(host) && o.Token == "":
		return fmt.Errorf("%w: %q is not a loopback address, so Options.Token is required", ErrInsecure, addr)
	}
	if host != "" && net.ParseIP(host) == nil && !isLoopback(host) {
		o.AllowedHosts = append(slices.Clone(o.AllowedHosts), host) // the name it listens on
	}
	h, err := New(eng, &o)
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
