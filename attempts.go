package durable

import (
	"context"
	"fmt"

	"github.com/durable-go/durable/internal/sysdb"
)

// Durable step attempts. A step attempt that fails and will be retried
// counts itself in the database (step_attempts) before the retry's
// backoff, and an execution that resumes the run reads those counts with
// the recorded steps: a step that failed twice before a crash goes on at
// its third attempt, with what is left of its retry budget. A step that
// succeeds at its first attempt writes nothing more than its checkpoint,
// the one statement of the live path; only a failed attempt costs a write.
// An attempt cut short by a crash is not counted (nothing says it
// failed): the resumed execution makes it again, with the same number.

// loadAttempts reads the failed attempts of the unrecorded steps of the
// runs ids: by run, then by position.
func (rn *runner) loadAttempts(ctx context.Context, ids []string) (map[string]priorAttempts, error) {
	rows, err := rn.e.aq.LoadAttempts(ctx, rn.e.pool, ids)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	out := make(map[string]priorAttempts)
	for _, a := range rows {
		if out[a.WorkflowID] == nil {
			out[a.WorkflowID] = priorAttempts{}
		}
		out[a.WorkflowID][a.Pos] = a.Attempts
	}
	return out, nil
}

// priorAttempts are the failed attempts of a run's unrecorded steps, by
// position, that earlier executions recorded; read-only.
type priorAttempts map[int]int

// first is the number of the first attempt this execution makes of the
// step at pos: one more than the attempts recorded as failed.
func (p priorAttempts) first(pos int) int { return p[pos] + 1 }

// resumed reports whether attempt n of the step at pos (intent: recorded
// as an intent) is the first this execution makes of a step an earlier
// one began: its failed attempts were recorded, or its intent
// (IntentStep). n is 0 for an intent's resolve call, which only runs then.
func (p priorAttempts) resumed(pos, n int, intent bool) bool {
	failed := p[pos]
	if n != 0 && n != failed+1 {
		return false
	}
	return failed > 0 || intent
}

// recordAttempt records that attempt n of run r's step at pos failed with
// cause and will be retried. It rides out an outage like a checkpoint; a
// write the run's epoch fences halts the run. An attempt the engine cut
// short (the run halted: shutdown, deadline, cancel) did not fail and is
// not recorded.
func recordAttempt(r *run, pos int, name string, n int, cause error) error {
	if h := r.halted(); h != nil {
		return h
	}
	p := sysdb.RecordAttemptParams{WorkflowID: r.id, Pos: pos, Name: name, Attempts: n, Error: encodeError(cause), Epoch: r.epoch}
	var written bool
	err := r.retryDB("record step attempt", func(ctx context.Context) error {
		var err error
		written, err = r.e.aq.RecordAttempt(ctx, r.e.pool, p)
		return err
	})
	if err != nil {
		if h := r.halted(); h != nil {
			return h
		}
		return r.halt(fmt.Errorf("durable: workflow %q: record attempt %d of step %d %q: %w", r.id, n, pos, name, err))
	}
	if written {
		return nil
	}
	return r.diagnose(pos, name, false)
}
