//go:build unix

package main

import (
	"context"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable/examples/internal/demotest"
	"github.com/durable-go/durable/internal/proctest"
)

// TestMain lets the test binary act as a worker: the demo re-executes its
// own binary (here, the test binary) with CRASHDEMO_WORKER set.
func TestMain(m *testing.M) { proctest.Main(m, envWorker, workerMain) }

// TestCrashDemo runs the whole demo, with faster steps, in schemas of its
// own: once killing worker 1 inside charge-card after the charge and before
// its checkpoint (the step runs again, the provider dedupes it), once after
// the write-order transaction committed (the run resumes at send-email).
func TestCrashDemo(t *testing.T) {
	demotest.NeedDatabase(t)
	for _, tc := range []struct {
		killAfter int
		want      string
	}{
		{3, "OK: resumed at step 3 (charge-card)"},
		{4, "OK: resumed at step 5 (send-email)"},
	} {
		t.Run("kill-after-"+strconv.Itoa(tc.killAfter), func(t *testing.T) {
			out := demotest.Run(t, 30*time.Second, func(ctx context.Context, w io.Writer) error {
				return run(ctx, w, options{
					AppSchema:    "crashdemo_test",
					EngineSchema: "crashdemo_test_durable",
					StepDelay:    150 * time.Millisecond,
					KillAfter:    tc.killAfter,
				})
			})
			if !strings.Contains(out, "\n"+tc.want) {
				t.Fatalf("verdict: want a line starting with %q", tc.want)
			}
		})
	}
}
