package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestQueueDemo sends 40 agent runs through the queue and checks, from
// the runs' recorded steps, that the concurrency and rate limits held.
func TestQueueDemo(t *testing.T) {
	if os.Getenv("DATABASE_URL") == "" {
		t.Skip("DATABASE_URL not set; run with scripts/with-postgres")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	err := run(ctx, &out, options{Schema: "queue_test_durable", Runs: 40, Concurrency: 5, Rate: 10,
		ModelDelay: 100 * time.Millisecond, ToolDelay: 50 * time.Millisecond})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatalf("demo failed: %v", err)
	}
	if !strings.Contains(out.String(), "\nOK: 40 runs") {
		t.Fatal("no OK verdict")
	}
}
