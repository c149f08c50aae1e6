package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable/examples/internal/demotest"
)

// TestQueueDemo sends 40 agent runs through the queue and checks, from
// the runs' recorded steps, that the concurrency and rate limits held.
func TestQueueDemo(t *testing.T) {
	demotest.NeedDatabase(t)
	out := demotest.Run(t, time.Minute, func(ctx context.Context, w io.Writer) error {
		return run(ctx, w, options{Schema: "queue_test_durable", Runs: 40, Concurrency: 5, Rate: 10,
			ModelDelay: 100 * time.Millisecond, ToolDelay: 50 * time.Millisecond})
	})
	if !strings.Contains(out, "\nOK: 40 runs") {
		t.Fatal("no OK verdict")
	}
}
