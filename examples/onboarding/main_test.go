//go:build unix

package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable/examples/internal/demotest"
	"github.com/durable-go/durable/internal/proctest"
)

// TestMain lets the test binary act as a worker: the demo re-executes its
// own binary (here, the test binary) with ONBOARDING_WORKER set.
func TestMain(m *testing.M) { proctest.Main(m, envWorker, workerMain) }

// TestOnboardingDemo runs the whole demo with short steps, killing worker 1
// after the subscription was created and after the second welcome email
// was sent, each time before the step's checkpoint.
func TestOnboardingDemo(t *testing.T) {
	demotest.NeedDatabase(t)
	for _, killAt := range []string{"payment", "email"} {
		t.Run(killAt, func(t *testing.T) {
			out := demotest.Run(t, time.Minute, func(ctx context.Context, w io.Writer) error {
				return run(ctx, w, options{
					AppSchema:    "onboarding_test",
					EngineSchema: "onboarding_test_durable",
					StepDelay:    120 * time.Millisecond,
					Chunks:       3,
					KillAt:       killAt,
				})
			})
			if !strings.Contains(out, "\nOK: killed after the "+killAt+" effect") {
				t.Fatal("no OK verdict")
			}
		})
	}
}
