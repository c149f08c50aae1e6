package agentkittest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
)

// Provider is an external service that deduplicates by idempotency key,
// like a payment API: the first POST with a given Idempotency-Key header
// performs the effect, later ones get the first answer back. It records
// how many calls each key got, so a test can prove an effect happened
// once although its step ran twice.
type Provider struct {
	// URL is the service's base URL; POST to any path.
	URL string

	srv     *httptest.Server
	mu      sync.Mutex
	calls   map[string]int
	answers map[string][]byte
	effects []string
}

// NewProvider starts a provider. Close it when done.
func NewProvider() *Provider {
	p := &Provider{calls: map[string]int{}, answers: map[string][]byte{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.handle))
	p.URL = p.srv.URL
	return p
}

// Close shuts the provider down.
func (p *Provider) Close() { p.srv.Close() }

func (p *Provider) handle(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if r.Method != http.MethodPost || key == "" {
		http.Error(w, `{"error":"POST with an Idempotency-Key header"}`, http.StatusBadRequest)
		return
	}
	body, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	p.calls[key]++
	ans, ok := p.answers[key]
	if !ok {
		sum := sha256.Sum256([]byte(key))
		ans, _ = json.Marshal(map[string]any{"id": "eff_" + hex.EncodeToString(sum[:4]), "request": json.RawMessage(orNull(body))})
		p.answers[key] = ans
		p.effects = append(p.effects, key)
	}
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Write(ans)
}

func orNull(b []byte) []byte {
	if !json.Valid(b) {
		return []byte("null")
	}
	return b
}

// Calls returns how many requests each key got.
func (p *Provider) Calls() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.calls))
	for k, v := range p.calls {
		out[k] = v
	}
	return out
}

// Effects returns the keys whose effect happened, in order (each once).
func (p *Provider) Effects() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.effects...)
}

// Keys returns the keys seen, sorted.
func (p *Provider) Keys() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	keys := make([]string, 0, len(p.calls))
	for k := range p.calls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
