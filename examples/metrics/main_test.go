package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMetricsDemo runs the demo on a free port and checks that its scrape
// of /metrics through the Prometheus exporter saw the engine's series: the
// finished runs by status, the queue depth, the step latency and the
// queue wait.
func TestMetricsDemo(t *testing.T) {
	if os.Getenv("DATABASE_URL") == "" {
		t.Skip("DATABASE_URL not set; run with scripts/with-postgres")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	err := run(ctx, &out, options{Schema: "metrics_test_durable", Addr: "127.0.0.1:0", Orders: 10})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatalf("demo failed: %v", err)
	}
	for _, want := range []string{
		"10 orders done, 2 declined",
		`durable_workflow_finished_total{durable_workflow_name="order",durable_workflow_status="success"} 8`,
		`durable_workflow_finished_total{durable_workflow_name="order",durable_workflow_status="error"} 2`,
		`durable_queue_depth{durable_queue_name="orders",durable_queue_state="ready"} 0`,
		`durable_step_duration_seconds_count{`,
		`durable_queue_wait_seconds_count{durable_queue_name="orders"} 10`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the scrape lacks %s", want)
		}
	}
}
