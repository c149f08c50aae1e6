package durabletest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable"
)

// ReplayTimeout bounds one replay of [Replay] and [ReplayFile]. A replay
// runs no step and waits for nothing, so only workflow code that blocks
// outside durable calls comes near it.
const ReplayTimeout = time.Minute

// Replay replays today's code, the workflows registered on e, against the
// recorded history h, as a resume of that run would, and fails t when the
// code would stop the run: it calls another step than the one recorded at
// some position (the message names the position, the recorded step and
// the step the code calls), a recorded value no longer decodes into the
// code's type, the code fails or panics while replaying, or the workflow
// is not registered. No step runs and nothing is written; e need not be
// launched, and its database is not used.
func Replay(t testing.TB, e *durable.Engine, h *durable.History) {
	t.Helper()
	if err := replay(e, h); err != nil {
		t.Fatalf("durabletest: %s", describeReplay(err))
	}
}

// ReplayFile is [Replay] of the history in the file at path, as written by
// durable.ExportHistory or `durable history export ID`: export runs of the
// current release into testdata and replay them in a test, so that a
// change of the code that the runs in flight at deploy time could not
// resume fails the build.
func ReplayFile(t testing.TB, e *durable.Engine, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("durabletest: %v", err)
		return
	}
	defer f.Close()
	h, err := durable.ReadHistory(f)
	if err != nil {
		t.Fatalf("durabletest: %s: %v", path, err)
		return
	}
	if err := replay(e, h); err != nil {
		t.Fatalf("durabletest: %s: %s", path, describeReplay(err))
	}
}

func replay(e *durable.Engine, h *durable.History) error {
	ctx, cancel := context.WithTimeout(context.Background(), ReplayTimeout)
	defer cancel()
	return durable.ReplayHistory(ctx, e, h)
}

// describeReplay says what stops the run, naming the position and the
// steps of a divergence.
func describeReplay(err error) string {
	var re *durable.ReplayError
	if !errors.As(err, &re) {
		return err.Error()
	}
	var nd *durable.NonDeterminismError
	if errors.As(err, &nd) {
		return fmt.Sprintf("run %q of workflow %q diverges at step %d: the history records %q, the code calls %q",
			re.WorkflowID, re.Workflow, nd.Pos, nd.Recorded, nd.Called)
	}
	at := "before its first step"
	if re.Pos >= 0 {
		at = fmt.Sprintf("at step %d", re.Pos)
	}
	return fmt.Sprintf("run %q of workflow %q fails %s: %v", re.WorkflowID, re.Workflow, at, re.Err)
}

// Check runs durable.Check of the workflows registered on e against the
// in-flight runs of e's database, read-only, and fails t listing every run
// the build would stop. It returns the report. Point e's pool at a copy or
// a read replica of production, with a role that may only read, to check
// a deploy from a test (docs/upgrades.md).
func Check(t testing.TB, e *durable.Engine, opts *durable.CheckOpts) *durable.CheckReport {
	t.Helper()
	rep, err := durable.Check(t.Context(), e, opts)
	if err != nil {
		t.Fatalf("durabletest: %v", err)
		return nil
	}
	if !rep.OK() {
		var b strings.Builder
		fmt.Fprintf(&b, "durabletest: the build would stop %d of %d in-flight runs:", len(rep.Problems), rep.Checked)
		for _, p := range rep.Problems {
			fmt.Fprintf(&b, "\n  run %q of workflow %q (app version %s): %s", p.WorkflowID, p.Workflow, p.AppVersion, p.Message)
		}
		t.Fatalf("%s", b.String())
	}
	return rep
}
