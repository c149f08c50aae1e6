// Package demotest runs an example program as its test: the few lines
// every example's test shares.
package demotest

import (
	"bytes"
	"context"
	"io"
	"os"
	"testing"
	"time"
)

// NeedDatabase skips the test when DATABASE_URL is not set.
func NeedDatabase(t testing.TB) {
	t.Helper()
	if os.Getenv("DATABASE_URL") == "" {
		t.Skip("DATABASE_URL not set; run with scripts/with-postgres")
	}
}

// Run runs an example's run function with a context that ends after
// timeout, logs what it printed and fails the test if it fails. It
// returns what it printed, for the test to check the verdict.
func Run(t testing.TB, timeout time.Duration, run func(ctx context.Context, out io.Writer) error) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out bytes.Buffer
	err := run(ctx, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatalf("demo failed: %v", err)
	}
	return out.String()
}
