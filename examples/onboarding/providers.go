//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// provider is a small external service (payments, mail, chat) run by the
// parent process, so its counters survive the worker's death. It dedupes
// POSTs by their Idempotency-Key header: the first request with a key
// performs the effect and gets a new resource ID; a repeated one gets the
// same answer back and changes nothing. It counts every request.
type provider struct {
	name   string // "payments", "mail", "chat"
	prefix string // resource IDs are prefix_n
	URL    string

	srv *http.Server
	ln  net.Listener

	mu      sync.Mutex
	calls   map[string]int    // requests per key
	answers map[string]string // resource ID per key
	effects []effect          // in order, one per key
	// onEffect, when set, is called with the lock released after a new
	// effect is performed and before the answer is sent.
	onEffect func(e effect)
}

// effect is one thing a provider did.
type effect struct {
	Key  string
	ID   string
	Body map[string]any
	At   time.Time
}

func newProvider(name, prefix string) (*provider, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("%s provider: %w", name, err)
	}
	p := &provider{name: name, prefix: prefix, URL: "http://" + ln.Addr().String(), ln: ln,
		calls: map[string]int{}, answers: map[string]string{}}
	p.srv = &http.Server{Handler: http.HandlerFunc(p.handle), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *provider) close() { _ = p.srv.Close() }

func (p *provider) handle(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if r.Method != http.MethodPost || key == "" {
		http.Error(w, `{"error":"POST with an Idempotency-Key header"}`, http.StatusBadRequest)
		return
	}
	var body map[string]any
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body); err != nil {
		http.Error(w, `{"error":"body is not a JSON object"}`, http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.calls[key]++
	id, seen := p.answers[key]
	var e effect
	if !seen {
		id = fmt.Sprintf("%s_%d", p.prefix, len(p.effects)+1)
		p.answers[key] = id
		e = effect{Key: key, ID: id, Body: body, At: time.Now()}
		p.effects = append(p.effects, e)
	}
	hook := p.onEffect
	p.mu.Unlock()
	if !seen && hook != nil {
		hook(e)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "replayed": seen})
}

// snapshot returns the effects and the request count per key.
func (p *provider) snapshot() ([]effect, map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	calls := make(map[string]int, len(p.calls))
	for k, v := range p.calls {
		calls[k] = v
	}
	return append([]effect(nil), p.effects...), calls
}

// modelGateway forwards the workers' Chat Completions requests to the model
// (the scripted offline server, or the endpoint of OPENAI_BASE_URL) and
// counts them. It runs in the parent, so its count covers both workers: it
// is the proof that a recorded answer was not asked for again. It adds the
// API key, so the workers never see it.
type modelGateway struct {
	upstream string // base URL, without /chat/completions
	apiKey   string
	URL      string // base URL to give the workers

	srv    *http.Server
	client *http.Client

	mu       sync.Mutex
	requests []time.Time
}

func newModelGateway(upstream, apiKey string) (*modelGateway, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("model gateway: %w", err)
	}
	g := &modelGateway{upstream: strings.TrimRight(upstream, "/"), apiKey: apiKey, URL: "http://" + ln.Addr().String() + "/v1",
		client: &http.Client{Timeout: 5 * time.Minute}}
	g.srv = &http.Server{Handler: http.HandlerFunc(g.handle), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = g.srv.Serve(ln) }()
	return g, nil
}

func (g *modelGateway) close() { _ = g.srv.Close() }

func (g *modelGateway) handle(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		return
	}
	g.mu.Lock()
	g.requests = append(g.requests, time.Now())
	g.mu.Unlock()
	req, err := http.NewRequestWithContext(r.Context(), r.Method, g.upstream+strings.TrimPrefix(r.URL.Path, "/v1"), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	if g.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+g.apiKey)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		http.Error(w, `{"error":{"message":"model gateway: upstream unreachable"}}`, http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func (g *modelGateway) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.requests)
}
