package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/durable-go/durable/internal/hooks"
	"github.com/durable-go/durable/internal/sysdb"
)

// ContinueAsNew ends the calling run and starts a fresh run of w, the
// same workflow, with input in: for a loop that would otherwise record
// an ever longer history (a poller, an agent's long conversation). Return
// its error from the workflow function: `return zero, w.ContinueAsNew(wctx,
// next, nil)`. The new run starts with an empty history; the old one
// finishes successfully with a null output and names its successor
// (WorkflowInfo.ContinuedAs), so the chain stays visible, and
// [Handle.Result] of any run of the chain waits for the chain's last run
// and returns its result.
//
// The new run's ID defaults to the chain's first ID with "#" and its
// number: "poll-7" continues as "poll-7#2", then "poll-7#3"; opts.ID sets
// another, and opts.Timeout a deadline of its own (the old run's deadline
// does not carry over). It keeps the old run's tags, those its code set
// ([SetTag]) included, unless opts.Tags is not nil: then it has those
// instead. A child's continuation is its parent's child, and
// the parent's [Handle.Await] waits for the chain's end. A queued run's
// continuation is enqueued on its queue, with its partition key and
// priority: it starts when the queue's limits allow. The start is
// recorded as a step: replayed, it returns the same successor, so a crash
// never starts two. Compensations
// the old run registered ([Compensate]) are dropped: it did not fail.
// Any durable call the code makes after it returns the same error.
func (w *Workflow[P, R]) ContinueAsNew(wctx Context, in P, opts *StartOpts) error {
	r := wctx.workflowRun()
	if w.def.name != r.name {
		return fmt.Errorf("%w: run %q of workflow %q cannot continue as workflow %q: a chain is of one workflow", ErrInvalidArgument, r.id, r.name, w.def.name)
	}
	name := "continue:" + w.def.name
	pos, rec, err := r.begin(name)
	if err != nil {
		return err
	}
	var next string
	if rec != nil {
		if rec.status != stepDone || json.Unmarshal(rec.output, &next) != nil || next == "" {
			return r.halt(&DecodeError{WorkflowID: r.id, What: fmt.Sprintf("step %d (continue as new)", pos), Err: errors.New("no run ID recorded")})
		}
		return r.halt(&continuedError{id: r.id, next: next})
	}
	started := r.e.clock.now()
	next, input, err := w.prepare(in, opts, nextInChain(r.id))
	if err != nil {
		return err
	}
	if next == r.id {
		return fmt.Errorf("%w: run %q cannot continue as itself", ErrInvalidArgument, r.id)
	}
	deadline, err := opts.deadline(r.e.clock.now())
	if err != nil {
		return err
	}
	tags, err := opts.tags()
	if err != nil {
		return err
	}
	linked := false
	err = r.retryDB("continue as new", func(ctx context.Context) error {
		// The link first, fenced: a run that lost its owner starts
		// nothing. The continuation is its parent's child as the run
		// was. Its start is as a child's: the ID and input are the same
		// in every execution, so one repeated after a crash finds the
		// same run.
		link, ok, err := r.e.cq.ContinueAs(ctx, r.e.pool, r.id, r.epoch, next)
		if linked = ok; err != nil || !ok {
			return err
		}
		o := &sysdb.OwnedRun{ID: next, Name: w.def.name, Input: input, ParentID: link.Parent, Deadline: deadline, Tags: tags}
		if opts == nil || opts.Tags == nil {
			o.Tags = link.Tags // the run's tags, SetTag's included
		}
		if link.Queue != "" {
			return continueQueued(ctx, r, w.def.name, next, input, opts, link, o.Tags)
		}
		sp := r.trace().startChild(w.def.name, next, pos)
		_, err = w.insertAndRun(ctx, sp, o, opts.sameInput(input))
		sp.end(err)
		return err
	})
	switch {
	case errors.Is(err, ErrWorkflowConflict):
		return err
	case err != nil:
		if h := r.halted(); h != nil {
			return h
		}
		return r.halt(fmt.Errorf("durable: workflow %q: continue as %q: %w", r.id, next, err))
	case !linked:
		return r.diagnose(pos, name, false)
	}
	if r.e.knobs.Boundary != nil {
		if err := boundary(r, pos, name, hooks.BeforeCheckpoint); err != nil {
			return err
		}
	}
	idJSON, _ := json.Marshal(next)
	if err := r.checkpoint(pos, name, stepDone, idJSON, nil, 1, started); err != nil {
		return err
	}
	return r.halt(&continuedError{id: r.id, next: next})
}

// continuedError is the halt of a run that continued as run next: the
// run finishes successfully, and its result is the chain's.
type continuedError struct{ id, next string }

func (e *continuedError) Error() string {
	return fmt.Sprintf("durable: workflow %q continued as %q", e.id, e.next)
}

// nextInChain is the default ID of the run that continues run id: the
// chain's first ID, "#", and the next number.
func nextInChain(id string) string {
	base, n := id, 1
	if i := strings.LastIndexByte(id, '#'); i > 0 {
		if k, err := strconv.Atoi(id[i+1:]); err == nil && k >= 2 && strconv.Itoa(k) == id[i+1:] {
			base, n = id[:i], k
		}
	}
	return base + "#" + strconv.Itoa(n+1)
}

// continuedAs returns the run r continued as, if its halt is a
// continuation, and clears the halt: the run then finishes successfully.
func continuedAs(r *run) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ce *continuedError
	if !errors.As(r.stop, &ce) {
		return ""
	}
	r.stop = nil
	return ce.next
}

// chainEnd follows o, the outcome of run id, to the outcome of the last
// run of its chain when id continued as new, and returns that run's ID.
func chainEnd(ctx context.Context, w watcher, id string, o *outcome) (string, *outcome, error) {
	for o.next != "" {
		id = o.next
		var err error
		if o, err = w.outcome(ctx, id); err != nil {
			return id, nil, err
		}
	}
	return id, o, nil
}

// continueQueued enqueues the continuation next of queued run r on r's
// queue, with its partition key and priority: it starts when the queue's
// limits allow, as any run of the queue (an existing run of that ID, from
// an earlier try, is kept). tags are its tags, encoded.
func continueQueued(ctx context.Context, r *run, name, next string, input []byte, opts *StartOpts, link sysdb.ContinuedRow, tags json.RawMessage) error {
	eo := &EnqueueOpts{ID: next, PartitionKey: link.PartitionKey, Priority: link.Priority, AcceptDifferentInput: opts != nil && opts.AcceptDifferentInput}
	if opts != nil {
		eo.Timeout = opts.Timeout
	}
	if tags != nil {
		if err := json.Unmarshal(tags, &eo.Tags); err != nil {
			return err
		}
	}
	_, err := engineSubmitter(r.e).enqueue(ctx, r.e.pool, name, link.Queue, json.RawMessage(input), eo, true)
	if err == nil {
		r.e.queues.wake(link.Queue) // this process's dispatcher, if it works the queue
	}
	return err
}
