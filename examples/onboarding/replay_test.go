//go:build unix

package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/durabletest"
)

var update = flag.Bool("update", false, "record testdata/onboard.history.json again from a fresh run")

// historyFile is the history of an onboarding run recorded with an earlier
// build of this example.
var historyFile = filepath.Join("testdata", "onboard.history.json")

// TestReplayRecordedRun replays today's onboarding code against the
// history of a run recorded by an earlier build: a change that runs in
// flight at deploy time could not resume (a step renamed, moved or
// removed, an output that no longer decodes into its type) fails here,
// before the deploy. After an intended change of the workflow (under a new
// AppVersion), record the file again with
//
//	go test ./examples/onboarding -run TestReplayRecordedRun -update
func TestReplayRecordedRun(t *testing.T) {
	if *update {
		recordHistory(t)
	}
	// No database work and no launch: the replay runs no step.
	env := durabletest.New(t, &durabletest.Options{Config: &durable.Config{AppVersion: appVersion}})
	o := testOptions()
	register(env.Engine, &app{out: io.Discard, cfg: workerConfig{StepDelay: o.StepDelay, Chunks: o.Chunks}}, nil)
	durabletest.ReplayFile(t, env.Engine, historyFile)
}

// recordHistory runs the onboarding workflow to its end against the demo's
// fake providers and writes its history to historyFile.
func recordHistory(t *testing.T) {
	env := durabletest.New(t, &durabletest.Options{Config: &durable.Config{AppVersion: appVersion}, RealClock: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, model, _ := newTestApp(ctx, t, env)
	wf := register(env.Engine, a, model)
	env.Launch()
	h, err := wf.Start(ctx, acme, &durable.StartOpts{ID: runID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Result(ctx); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := durable.ExportHistory(ctx, env.Engine, runID, &buf); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(historyFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(historyFile, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
