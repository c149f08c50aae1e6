//go:build unix

package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable/internal/proctest"
)

// TestMain lets the test binary act as a worker: the demo re-executes its
// own binary (here, the test binary) with ONBOARDING_WORKER set.
func TestMain(m *testing.M) { proctest.Main(m, envWorker, workerMain) }

// TestOnboardingDemo runs the whole demo with short steps, killing worker 1
// after the subscription was created and after the second welcome email
// was sent, each time before the step's checkpoint.
func TestOnboardingDemo(t *testing.T) {
	if os.Getenv("DATABASE_URL") == "" {
		t.Skip("DATABASE_URL not set; run with scripts/with-postgres")
	}
	for _, killAt := range []string{"payment", "email"} {
		t.Run(killAt, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var out bytes.Buffer
			err := run(ctx, &out, options{
				AppSchema:    "onboarding_test",
				EngineSchema: "onboarding_test_durable",
				StepDelay:    120 * time.Millisecond,
				Chunks:       3,
				KillAt:       killAt,
			})
			t.Log("\n" + out.String())
			if err != nil {
				t.Fatalf("demo failed: %v", err)
			}
			if !strings.Contains(out.String(), "\nOK: killed after the "+killAt+" effect") {
				t.Fatal("no OK verdict")
			}
		})
	}
}
