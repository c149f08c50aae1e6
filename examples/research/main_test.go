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

// TestMain lets the test binary act as a replica: the demo re-executes its
// own binary (here, the test binary) with RESEARCH_REPLICA set.
func TestMain(m *testing.M) { proctest.Main(m, envReplica, replicaMain) }

// TestResearchDemo runs the schedule every second on two replicas for
// three ticks and checks that each tick ran once.
func TestResearchDemo(t *testing.T) {
	if os.Getenv("DATABASE_URL") == "" {
		t.Skip("DATABASE_URL not set; run with scripts/with-postgres")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	err := run(ctx, &out, options{Schema: "research_test", Spec: "* * * * * *", Ticks: 3, Replicas: 2})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatalf("demo failed: %v", err)
	}
	if !strings.Contains(out.String(), "\nOK: ") {
		t.Fatal("no OK verdict")
	}
}
