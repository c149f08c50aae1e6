package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable/examples/internal/demotest"
)

// TestMetricsDemo runs the demo on a free port and checks that its scrape
// of /metrics through the Prometheus exporter saw the engine's series: the
// finished runs by status, the queue depth, the step latency and the
// queue wait.
func TestMetricsDemo(t *testing.T) {
	demotest.NeedDatabase(t)
	out := demotest.Run(t, time.Minute, func(ctx context.Context, w io.Writer) error {
		return run(ctx, w, options{Schema: "metrics_test_durable", Addr: "127.0.0.1:0", Orders: 10})
	})
	for _, want := range []string{
		"10 orders done, 2 declined",
		`durable_workflow_finished_total{durable_workflow_name="order",durable_workflow_status="success"} 8`,
		`durable_workflow_finished_total{durable_workflow_name="order",durable_workflow_status="error"} 2`,
		`durable_queue_depth{durable_queue_name="orders",durable_queue_state="ready"} 0`,
		`durable_step_duration_seconds_count{`,
		`durable_queue_wait_seconds_count{durable_queue_name="orders"} 10`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the scrape lacks %s", want)
		}
	}
}
