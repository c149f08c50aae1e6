package durable

import (
	"context"
	"net/http"
	"strconv"
)

// DefaultIdempotencyHeader is the header [IdempotentTransport] sets when
// its Header is empty: the name Stripe, Adyen, PayPal and the IETF draft
// "The Idempotency-Key HTTP Header Field" use.
const DefaultIdempotencyHeader = "Idempotency-Key"

// IdempotentTransport is an [http.RoundTripper] that stamps the
// idempotency key of the step making a request on the request, so that an
// HTTP service that deduplicates by key performs the request's effect
// once however often the step runs again (a retry, a crash before its
// checkpoint, a takeover by another executor).
//
// A step's requests are numbered in the order the step makes them, from 1
// on every attempt: the first carries the step's key
// ([StepInfo.IdempotencyKey], "<run ID>/<step position>"), the n-th after
// it "<step key>/<n>". A step that makes the same requests in the same
// order on every attempt (the usual case: a fixed call, a loop over
// recorded inputs) so sends the same key with the same request each time;
// requests made concurrently within one step get numbers in the order
// they reach the transport, so give those keys by hand
// (req.Header.Set) where the order can change. A request that already has
// the header, and one made outside any step, goes out unchanged.
//
// Use it as an http.Client's Transport:
//
//	client := &http.Client{Transport: &durable.IdempotentTransport{}}
type IdempotentTransport struct {
	// Base makes the requests; nil: [http.DefaultTransport].
	Base http.RoundTripper
	// Header is the header the key goes in; "": DefaultIdempotencyHeader.
	Header string
	// Key returns the key of the step whose context ctx is, "" for none;
	// nil: [IdempotencyKey]. agentkit sets it to the tool call's key.
	Key func(ctx context.Context) string
}

// RoundTrip stamps req's step key (see [IdempotentTransport]) and hands
// it to Base. req is not modified: a stamped request is a clone.
func (t *IdempotentTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	header := t.Header
	if header == "" {
		header = DefaultIdempotencyHeader
	}
	if req.Header.Get(header) != "" {
		return base.RoundTrip(req)
	}
	keyOf := t.Key
	if keyOf == nil {
		keyOf = IdempotencyKey
	}
	ctx := req.Context()
	key := keyOf(ctx)
	sc, _ := ctx.Value(stepInfoKey{}).(*stepScope)
	if key == "" || sc == nil {
		return base.RoundTrip(req)
	}
	if n := sc.requests.Add(1); n > 1 {
		key += "/" + strconv.FormatInt(n, 10)
	}
	out := req.Clone(ctx)
	out.Header.Set(header, key)
	return base.RoundTrip(out)
}
