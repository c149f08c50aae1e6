package durable

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
)

// A replay-only execution runs a registered workflow's code against a
// recorded history, as a resume would, with nothing executed and nothing
// written: a recorded step returns its recorded output or error without
// calling its function, and the first durable call with no record at its
// position ends the replay, as that is where a live execution would go on
// (run a step, wait, publish). It goes through the engine's own path
// (run.begin compares each call with the record at its position, replay
// decodes the record), so its verdict is the one a resume would reach.
// The hooks are the run's replaying field: begin (run.go), IntentStep
// (step.go), Sleep (wait.go) and the stream writes (stream.go).

// errReplayEnd halts a replay at the end of its recorded history.
var errReplayEnd = errors.New("durable: replay reached the end of the recorded history")

// replayMode marks a replay-only run.
type replayMode struct {
	// finished: the history is of a run that finished, so every wait in it
	// ended; otherwise a wait with no record after it is where the run
	// waits now.
	finished bool
}

// replayWait is what Sleep does in a replay once its wake-up time is
// replayed: wait for nothing. When no record follows, the run is waiting
// there (or woke and has not recorded anything since): the replay ends.
func replayWait(r *run) error {
	rec, err := r.hist.at(int(r.next.Load()))
	if err != nil {
		return err
	}
	if rec != nil || r.replaying.finished {
		return nil
	}
	return r.halt(errReplayEnd)
}

// replayOutcome is how the replay of a history ended.
type replayOutcome struct {
	finished bool  // the workflow returned within the history
	err      error // nil: the code replays the history; else why not
	byCode   bool  // err is what the code returned (or panicked with), not the engine's verdict
	pos      int   // the position of the last durable call made, -1 if none
}

// replayHistory executes def's code as run id with input against steps in
// replay-only mode. finished says the recorded run finished (see
// replayMode). The error is ctx's when ctx ended first; the verdict is in
// the outcome. The code runs on a goroutine of its own, so that ctx bounds
// the wait for it: a replay does not wait for anything, and once ctx ends
// every durable call returns at once, so only code that blocks outside
// durable calls can outlive the replay.
func replayHistory(ctx context.Context, e *Engine, def *wfDef, id string, input []byte, hist *recorded, finished bool) (replayOutcome, error) {
	if err := ctx.Err(); err != nil {
		return replayOutcome{}, err
	}
	r := &run{e: e, id: id, name: def.name, hist: hist, replaying: &replayMode{finished: finished}}
	r.deferred.r = r
	r.logger.Store(slog.New(slog.DiscardHandler)) // the code's logs would repeat a past execution's
	base, cancel := context.WithCancelCause(context.WithValue(ctx, runKey{}, r))
	defer cancel(nil)
	r.ctx, r.cancelCause = base, cancel
	r.cancel = func() { cancel(nil) }
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := callWorkflow(def, &wfContext{Context: r.ctx, r: r}, input)
		if continuedAs(r) != "" {
			out, err = []byte("null"), nil // the run ends here, continued as new
		}
		if err != nil && r.halted() == nil {
			err = compensate(r, err) // their steps replay as well
		}
		done <- result{out, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		r.halt(fmt.Errorf("durable: replay of workflow %q: %w", id, ctx.Err()))
		return replayOutcome{}, ctx.Err()
	}
	if res.err != nil && ctx.Err() != nil {
		return replayOutcome{}, ctx.Err() // the code gave up on its context: no verdict
	}
	o := replayOutcome{pos: int(r.next.Load()) - 1}
	switch h := r.halted(); {
	case errors.Is(h, errReplayEnd):
	case h != nil:
		// Non-determinism or an undecodable record: a resume would fail
		// the run with it (runner.execute).
		o.err = h
	case res.err != nil:
		o.err, o.byCode = res.err, true // the code's own error or panic, or an undecodable input
	default:
		o.finished = true
	}
	return o, nil
}
