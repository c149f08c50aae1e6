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

// TestMain lets the test binary act as a replica: the demo re-executes its
// own binary (here, the test binary) with RESEARCH_REPLICA set.
func TestMain(m *testing.M) { proctest.Main(m, envReplica, replicaMain) }

// TestResearchDemo runs the schedule every second on two replicas for
// three ticks and checks that each tick ran once.
func TestResearchDemo(t *testing.T) {
	demotest.NeedDatabase(t)
	out := demotest.Run(t, time.Minute, func(ctx context.Context, w io.Writer) error {
		return run(ctx, w, options{Schema: "research_test", Spec: "* * * * * *", Ticks: 3, Replicas: 2})
	})
	if !strings.Contains(out, "\nOK: ") {
		t.Fatal("no OK verdict")
	}
}
