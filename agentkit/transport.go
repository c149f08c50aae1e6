package agentkit

import (
	"context"
	"net/http"

	"github.com/durable-go/durable"
)

// RequestKey is the idempotency key of agent code whose context ctx is:
// the tool call's ([ToolIdempotencyKey]) inside a tool, else the step's
// ([durable.IdempotencyKey]); "" elsewhere.
func RequestKey(ctx context.Context) string {
	if k := ToolIdempotencyKey(ctx); k != "" {
		return k
	}
	return durable.IdempotencyKey(ctx)
}

// NewTransport returns a [durable.IdempotentTransport] over base (nil:
// [http.DefaultTransport]) that stamps [RequestKey] in the
// Idempotency-Key header: an HTTP tool whose client uses it sends its
// tool call's key with its first request ("<call key>/<n>" with the n-th
// after it), the same on every retry and after a crash, so a service that
// deduplicates by key acts on the call once.
func NewTransport(base http.RoundTripper) *durable.IdempotentTransport {
	return &durable.IdempotentTransport{Base: base, Key: RequestKey}
}
