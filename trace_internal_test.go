package durable

import (
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// FuzzTraceparent: a stored trace context never panics the parser, and
// what it accepts is stored again as text that reads back the same.
func FuzzTraceparent(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
	f.Add("00-00000000000000000000000000000000-00f067aa0ba902b7-01")
	f.Add("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		sc := parseTraceparent(&s)
		if !sc.IsValid() {
			return
		}
		if !sc.IsRemote() {
			t.Fatalf("%q: a stored context must be remote", s)
		}
		again := formatTraceparent(sc)
		if sc2 := parseTraceparent(&again); !sc2.Equal(sc) {
			t.Fatalf("%q: stored as %q, which reads back as %v, not %v", s, again, sc2, sc)
		}
	})
}

func TestTraceparentRoundTrip(t *testing.T) {
	if sc := parseTraceparent(nil); sc.IsValid() {
		t.Fatal("NULL must give no parent")
	}
	for _, s := range []string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
	} {
		sc := parseTraceparent(&s)
		if !sc.IsValid() || formatTraceparent(sc) != s {
			t.Fatalf("%q read back as %q", s, formatTraceparent(sc))
		}
	}
	for _, s := range []string{
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // unknown version
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace ID
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // zero span ID
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
		"not a traceparent",
	} {
		if sc := parseTraceparent(&s); sc.IsValid() {
			t.Fatalf("%q must be rejected", s)
		}
	}
	if formatTraceparent(trace.SpanContext{}) != "" {
		t.Fatal("an invalid span context must be stored as NULL")
	}
}
