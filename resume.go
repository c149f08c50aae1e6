package durable

import (
	"context"
	"fmt"

	"github.com/durable-go/durable/internal/sysdb"
)

// Bounded resume. A run claimed by recovery replays its recorded steps, so
// it holds them in memory while it executes: one window of them at a time
// (resumeWindow steps, within resumeLoadBytes of outputs and errors; the
// next window is read as the replay reaches it, recorded.go). Two more
// bounds keep a large backlog from loading everything at once: the
// recovery slots (Config.RecoveryConcurrency, internal/recovery), each run
// claimed by recovery holding one until its execution here ends; and the
// first windows of claimed runs are loaded in chunks of at most
// resumeLoadBytes per query (one run over the budget is loaded alone),
// each chunk's runs started before the next is loaded.

// resumeLoadBytes is the budget of recorded step outputs and errors read
// by one query when claimed runs are resumed.
const resumeLoadBytes = 16 << 20

// startClaimed loads the recorded steps of runs this executor just claimed
// and executes them (or dead-letters those over their recovery limit). q is
// the queue whose slots they take, if any; without one, each run holds a
// recovery slot taken before the claim, given back when its execution ends
// (or at once if it does not start).
func (rn *runner) startClaimed(ctx context.Context, got []claimed, q *Queue) error {
	release := func(n int) {
		if q != nil {
			q.releaseN(n)
		} else {
			rn.e.recov.GiveSlots(n)
		}
	}
	// A queued run at epoch 1 was just claimed for the first time (it
	// was enqueued at epoch 0, and every later hand-back bumps the epoch):
	// it has no recorded steps to load. (Not so for other claims: a fork
	// is made at epoch 0 with the steps it copied.)
	var load []claimed
	for _, c := range got {
		def := rn.e.defs[c.Name]
		switch {
		case c.Attempts > def.maxRecovery:
			rn.deadLetter(ctx, c, def.maxRecovery)
			release(1)
		case q != nil && c.Epoch == 1:
			rn.resumeOne(c, window{}, nil, q)
		default:
			load = append(load, c)
		}
	}
	for len(load) > 0 {
		ids := make([]string, len(load))
		for i, c := range load {
			ids[i] = c.ID
		}
		var steps map[string]window
		var failed map[string]priorAttempts
		var n int
		err := rn.retryBG(ctx, "load steps of claimed runs", func(ctx context.Context) error {
			var err error
			steps, n, err = rn.loadSteps(ctx, ids)
			if err == nil {
				failed, err = rn.loadAttempts(ctx, ids[:n]) // attempts.go
			}
			return err
		})
		if err != nil {
			// Claimed but not started (a database error that is not a lost
			// connection, or shutdown): the runs stay owned by us and pending;
			// the sweeper resumes them as strays, or the next boot does.
			rn.e.lease.NoteTrouble()
			release(len(load))
			return fmt.Errorf("load steps of %d claimed runs: %w", len(ids), err)
		}
		for _, c := range load[:n] {
			rn.resumeOne(c, steps[c.ID], failed[c.ID], q)
		}
		load = load[n:]
	}
	return nil
}

// resumeOne executes claimed run c with the first window of its recorded
// steps and the failed attempts of its unrecorded ones.
func (rn *runner) resumeOne(c claimed, first window, failed priorAttempts, q *Queue) {
	if c.Attempts > 0 {
		rn.e.log.Info("durable: resuming run", "workflow_id", c.ID, "workflow", c.Name, "recovery_attempt", c.Attempts, "recorded_steps", first.count)
	}
	r := rn.newRun(c.ID, c.Name, c.Epoch, c.Deadline)
	if c.CancelRequested {
		// Cancelled with compensations: it replays what it recorded (so
		// registers its compensations again), halts at its first new
		// step and compensates (compensate.go).
		r.cancelComp.Store(true)
		r.cancelCause(ErrCancelled)
	}
	r.hist = rn.resumedHistory(r, first)
	r.failed = failed
	r.queue = q
	rn.e.tr.claimed(r, &c)
	rn.e.met.claimedRun(r, &c)
	var done func()
	if q == nil {
		done = func() { rn.e.recov.GiveSlots(1) }
	}
	rn.launchThen(r, rn.e.defs[c.Name], c.Input, done)
}

// loadSteps reads the first window of recorded steps of the first runs
// of ids, in order, whose windows fit the load budget (at least the first
// run): n is how many runs it read.
func (rn *runner) loadSteps(ctx context.Context, ids []string) (out map[string]window, n int, err error) {
	out, n, bytes, err := readWindows(ctx, rn.e, rn.e.pool, ids, 0)
	if err != nil {
		return nil, 0, err
	}
	if rn.e.knobs.OnResumeLoad != nil {
		rn.e.knobs.OnResumeLoad(n, bytes)
	}
	return out, n, nil
}

// deadLetter moves claimed run c, over its recovery limit, to the dead
// status instead of running it.
func (rn *runner) deadLetter(ctx context.Context, c claimed, limit int) {
	dle := &DeadLetterError{WorkflowID: c.ID, Attempts: c.Attempts - 1, Limit: limit}
	errb := encodeError(dle)
	if _, err := rn.e.rcq.DeadLetter(ctx, rn.e.pool, sysdb.DeadLetterParams{ID: c.ID, Epoch: c.Epoch, Error: errb}); err != nil {
		rn.e.log.Warn("durable: dead-letter run", "workflow_id", c.ID, "err", err)
		return
	}
	rn.e.log.Error("durable: run dead-lettered: its executor kept dying while running it", "workflow_id", c.ID,
		"workflow", c.Name, "recovery_attempts", c.Attempts-1, "limit", limit)
	rn.e.tr.deadLetter(&c, limit, dle)
	rn.e.met.deadLettered(&c)
	rn.e.hub.Wake(c.ID, &outcome{status: StatusDead, err: errb})
}
