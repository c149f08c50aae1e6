package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/sysdb"
)

// Context is the context of workflow code. It is a [context.Context] that
// also carries the run; pass it to [Step], [TxStep] and the other durable
// calls. Workflow code must be deterministic: see the package doc.
type Context interface {
	context.Context
	// WorkflowID returns the ID of the running workflow.
	WorkflowID() string
	workflowRun() *run
}

type wfContext struct {
	context.Context
	r *run
}

func (c *wfContext) WorkflowID() string { return c.r.id }
func (c *wfContext) workflowRun() *run  { return c.r }

// run is one execution of a workflow in this process, from start or
// resume until it finishes or stops.
type run struct {
	e           *Engine
	id          string
	name        string
	epoch       int64
	ctx         context.Context // workflow and step code's context: hard shutdown, deadline
	cancel      context.CancelFunc
	cancelCause context.CancelCauseFunc // cancels r.ctx with a cause (ErrCancelled)
	deadline    time.Time               // zero: none
	queue       *Queue                  // the queue whose slot this run holds here, if any

	steps map[int]*stepRecord // recorded before this execution; read-only
	next  atomic.Int32        // next step position

	mu   sync.Mutex
	stop error // set once: the run must end without finishing (fenced, shutdown) or fail (non-determinism)

	// Plain step checkpoints not written yet (pending.go).
	deferSteps bool // the run defers them (set before it executes)
	deferred   deferredSteps

	tr     *tspan                      // this execution's span; nil without tracing (trace.go)
	logger atomic.Pointer[slog.Logger] // made on first use (log.go)
}

type stepRecord struct {
	pos      int
	name     string
	status   string
	output   []byte
	err      []byte
	attempts int
}

const (
	stepDone   = "done"
	stepError  = "error"
	stepIntent = "intent"
)

// halt records why the run must stop; the first reason wins.
func (r *run) halt(err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stop == nil {
		r.stop = err
	}
	return r.stop
}

func (r *run) halted() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stop
}

// begin assigns the next step position to a call named name and returns
// the recorded step at that position, if any.
func (r *run) begin(name string) (int, *stepRecord, error) {
	if r.deferSteps {
		if err := r.deferred.flush(); err != nil { // pending.go
			return 0, nil, err
		}
	}
	if err := r.halted(); err != nil {
		return 0, nil, err
	}
	pos := int(r.next.Add(1)) - 1
	if rec, ok := r.steps[pos]; ok {
		if rec.name != name {
			return pos, nil, r.halt(&NonDeterminismError{WorkflowID: r.id, Pos: pos, Recorded: rec.name, Called: name})
		}
		return pos, rec, nil
	}
	if err := r.interrupted(); err != nil {
		return pos, nil, err
	}
	return pos, nil, nil
}

// interrupted halts the run if it must not start new work: the engine is
// stopping or the run passed its deadline.
func (r *run) interrupted() error {
	if err := r.cancelled(); err != nil {
		return err
	}
	if r.pastDeadline() {
		return r.halt(r.deadlineError())
	}
	if r.e.isStopping() || r.e.hardCtx.Err() != nil {
		return r.halt(fmt.Errorf("workflow %q stopped at a step boundary: %w", r.id, ErrShutdown))
	}
	return nil
}

// cancelled halts the run if Cancel reached it (the cause of its context)
// and returns the halt reason; nil if it was not cancelled.
func (r *run) cancelled() error {
	if errors.Is(context.Cause(r.ctx), ErrCancelled) {
		return r.halt(fmt.Errorf("durable: workflow %q: %w", r.id, ErrCancelled))
	}
	return nil
}

func (r *run) pastDeadline() bool { return !r.deadline.IsZero() && !time.Now().Before(r.deadline) }

func (r *run) deadlineError() error {
	return fmt.Errorf("durable: workflow %q passed its deadline %s: %w", r.id, r.deadline.Format(time.RFC3339Nano), context.DeadlineExceeded)
}

// cutShort turns an error a step returned after the engine cancelled its
// context (shutdown or deadline) into the run's halt reason.
func (r *run) cutShort(pos int, name string, err error) error {
	if err == nil || r.ctx.Err() == nil {
		return err
	}
	return r.haltEnded(fmt.Sprintf("step %d %q interrupted", pos, name))
}

// haltEnded halts the run whose context ended and returns why: cancelled,
// past its deadline, or the engine stopping (what says what was cut).
func (r *run) haltEnded(what string) error {
	if err := r.cancelled(); err != nil {
		return err
	}
	if r.e.hardCtx.Err() == nil && r.pastDeadline() {
		return r.halt(r.deadlineError())
	}
	return r.halt(fmt.Errorf("durable: workflow %q: %s: %w", r.id, what, ErrShutdown))
}

// sleep waits d unless the engine begins to stop.
func (r *run) sleep(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-r.e.stopping:
		return r.halt(fmt.Errorf("workflow %q: %w", r.id, ErrShutdown))
	case <-r.ctx.Done():
		return r.interrupted()
	}
}

// retryDB runs op until it succeeds, fails with a non-transient error, or
// the run's context ends. It is how checkpoint writes ride out a database
// outage instead of failing the run.
func (r *run) retryDB(what string, op func(ctx context.Context) error) error {
	// r.e.hardCtx, not r.ctx: a run past its deadline still records its end.
	err, stopped := retryTransient(r.e.hardCtx, op, func(attempt int, err error) {
		if attempt == 1 || attempt%10 == 0 {
			r.log().Warn("durable: database write failed, retrying", "op", what, "attempt", attempt, "err", err)
		}
	})
	if stopped {
		return r.halt(fmt.Errorf("workflow %q: %s: %w", r.id, what, ErrShutdown))
	}
	return err
}

// checkpoint writes the outcome of a step: the one statement of the live
// path. It returns nil when the outcome is recorded (by this call or by an
// earlier try whose acknowledgement was lost).
func (r *run) checkpoint(pos int, name, status string, output, errb []byte, attempts int, started time.Time) error {
	return r.writeCheckpoint(r.stepWrite(pos, name, status, output, errb, attempts, started))
}

// stepWrite is the checkpoint of the step at pos, fenced by the run's epoch.
func (r *run) stepWrite(pos int, name, status string, output, errb []byte, attempts int, started time.Time) *sysdb.InsertStepParams {
	return &sysdb.InsertStepParams{WorkflowID: r.id, Pos: pos, Name: name, Status: status, Output: output, Error: errb,
		Attempts: attempts, StartedAt: started, Epoch: r.epoch}
}

func (r *run) writeCheckpoint(w *sysdb.InsertStepParams) error {
	pos, name, status := w.Pos, w.Name, w.Status
	var written bool
	err := r.retryDB("record step", func(ctx context.Context) error {
		var err error
		written, err = r.e.commit.WriteStep(ctx, w)
		return err
	})
	if err != nil {
		if h := r.halted(); h != nil {
			return h
		}
		return r.halt(fmt.Errorf("durable: workflow %q: record step %d %q: %w", r.id, pos, name, err))
	}
	if written {
		return nil
	}
	return r.diagnose(pos, name, status == stepIntent)
}

// diagnose explains a fenced write that touched no row: the run changed
// owner or ended, or the step was already recorded by this same owner.
func (r *run) diagnose(pos int, name string, intentOK bool) error {
	var own sysdb.OwnershipCheckRow
	err := r.retryDB("check ownership", func(ctx context.Context) error {
		var err error
		own, err = r.e.fenceCheck(ctx, sysdb.OwnershipCheckParams{WorkflowID: r.id, Pos: pos})
		return err
	})
	status, epoch, stepStatus := own.Status, own.Epoch, own.StepStatus
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return r.halt(fmt.Errorf("durable: workflow %q was deleted while running: %w", r.id, ErrFenced))
	case err != nil:
		if h := r.halted(); h != nil {
			return h
		}
		return r.halt(fmt.Errorf("durable: workflow %q: check ownership: %w", r.id, err))
	case epoch != r.epoch:
		return r.halt(fmt.Errorf("durable: workflow %q step %d %q: owner epoch is %d, this executor had %d: %w",
			r.id, pos, name, epoch, r.epoch, ErrFenced))
	case status == string(StatusCancelled):
		return r.halt(fmt.Errorf("durable: workflow %q: %w", r.id, ErrCancelled))
	case status != string(StatusPending):
		return r.halt(fmt.Errorf("durable: workflow %q already finished with status %s: %w", r.id, status, ErrFenced))
	case stepStatus != nil && (*stepStatus != stepIntent || intentOK):
		return nil // recorded by an earlier try of ours
	}
	return r.halt(fmt.Errorf("durable: workflow %q step %d %q: checkpoint not written for an unknown reason: %w", r.id, pos, name, ErrFenced))
}

// wfDef is a registered workflow with its types erased.
type wfDef struct {
	name        string
	call        func(wctx Context, input []byte) ([]byte, error)
	maxRecovery int
	deferSteps  bool // DeferStepCheckpoints (pending.go)
}

// launch starts executing r on a worker goroutine.
func (e *Engine) launch(r *run, def *wfDef, input []byte) { e.launchThen(r, def, input, nil) }

// launchThen is launch that calls done, if not nil, when the execution is
// over (a recovered run gives back its recovery slot: resume.go).
func (e *Engine) launchThen(r *run, def *wfDef, input []byte, done func()) {
	r.deferSteps = def.deferSteps
	e.runs.Add(1)
	e.active.store(r)
	e.workers.run(func() {
		defer e.runs.Done()
		defer e.active.remove(r)
		if done != nil {
			defer done()
		}
		e.execute(r, def, input)
	})
}

// activeRuns holds the runs executing in this process by ID. A map under a
// mutex: every run is stored and removed once and looked up rarely
// (cancel, stray checks), which a sync.Map does at the cost of an
// allocation per store.
type activeRuns struct {
	mu sync.Mutex
	m  map[string]*run
}

func (a *activeRuns) store(r *run) {
	a.mu.Lock()
	if a.m == nil {
		a.m = map[string]*run{}
	}
	a.m[r.id] = r
	a.mu.Unlock()
}

// remove forgets r, unless a later execution of its run took its place.
func (a *activeRuns) remove(r *run) {
	a.mu.Lock()
	if a.m[r.id] == r {
		delete(a.m, r.id)
	}
	a.mu.Unlock()
}

func (a *activeRuns) load(id string) *run {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.m[id]
}

// ids returns the IDs of the runs executing now.
func (a *activeRuns) ids() map[string]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]bool, len(a.m))
	for id := range a.m {
		out[id] = true
	}
	return out
}

// workerPool runs each execution on an idle worker goroutine, or on a new
// one when none is idle. A fresh goroutine per run would grow its stack
// through every run's JSON decoding and database calls and be scheduled
// from nothing: a worker keeps its stack, which shortens a short run's
// latency. At most workersIdleMax wait for work, each for workerIdle.
type workerPool struct {
	work chan func()
	idle atomic.Int32
}

const (
	workersIdleMax = 64
	workerIdle     = 10 * time.Second
)

func newWorkerPool() *workerPool { return &workerPool{work: make(chan func())} }

func (p *workerPool) run(f func()) {
	select {
	case p.work <- f:
	default:
		go p.worker(f)
	}
}

func (p *workerPool) worker(f func()) {
	var t *time.Timer
	for {
		f()
		if p.idle.Add(1) > workersIdleMax {
			p.idle.Add(-1)
			return
		}
		if t == nil {
			t = time.NewTimer(workerIdle)
			defer t.Stop()
		} else {
			t.Reset(workerIdle)
		}
		select {
		case f = <-p.work:
			p.idle.Add(-1)
		case <-t.C:
			p.idle.Add(-1)
			return
		}
	}
}

func (e *Engine) newRun(id, name string, epoch int64, steps map[int]*stepRecord, deadline *time.Time) *run {
	r := &run{e: e, id: id, name: name, epoch: epoch, steps: steps}
	r.deferred.r = r
	base, cancelCause := context.WithCancelCause(context.WithValue(e.hardCtx, runKey{}, r))
	r.cancelCause = cancelCause
	if deadline != nil {
		r.deadline = *deadline
		ctx, cancel := context.WithDeadline(base, *deadline)
		r.ctx, r.cancel = ctx, func() { cancel(); cancelCause(nil) }
	} else {
		r.ctx, r.cancel = base, func() { cancelCause(nil) }
	}
	return r
}

func (e *Engine) execute(r *run, def *wfDef, input []byte) {
	defer r.cancel()
	defer r.releaseStreams()
	if r.queue != nil {
		defer r.queue.release()
	}
	wctx := &wfContext{Context: r.ctx, r: r}
	var out []byte
	var err error
	if r.pastDeadline() {
		r.halt(r.deadlineError()) // e.g. queued past its deadline: never starts
	} else {
		out, err = callWorkflow(def, wctx, input)
		_ = r.flushStreams(r.ctx) // a failure halts the run: it then does not finish here
	}
	if err != nil && r.halted() == nil && r.ctx.Err() != nil && r.e.hardCtx.Err() == nil && r.pastDeadline() {
		r.halt(r.deadlineError()) // the code gave up on its context's deadline
	}
	// Deferred step checkpoints (pending.go) go with the finish. Taken
	// first: a write of them in flight ends before, and halts the run if it
	// was refused. A run that stops without finishing here drops them: it
	// runs those steps again when resumed, as after a crash, and no late
	// write can land in a new execution's history.
	var steps []*sysdb.InsertStepParams
	if r.deferSteps {
		steps = r.deferred.forFinish()
	}
	h := r.halted()
	if h == nil {
		// Cancelled while its code was between durable calls: the cancel
		// recorded the outcome, so a finish would find the run ended.
		h = r.cancelled()
	}
	if h != nil {
		if e.notOursToFinish(h) {
			// Not ours to finish: the run goes on elsewhere or later, or
			// was already ended by a cancel.
			if errors.Is(h, ErrFenced) {
				r.log().Warn("durable: run stopped", "reason", h)
			}
			if r.queue != nil && errors.Is(h, ErrCancelled) {
				e.releaseSlot(r)
			}
			if errors.Is(h, ErrShutdown) {
				e.handBack(r)
			}
			r.trace().stopped(h)
			e.hub.Wake(r.id, nil)
			return
		}
		// Non-determinism, an undecodable record, the deadline, or a
		// database error the engine could not ride out: the run fails
		// visibly instead of sitting pending forever.
		out, err = nil, h
	}
	if err != nil && (errors.Is(err, ErrShutdown) || e.hardCtx.Err() != nil) {
		// The code gave up because the engine is stopping (or passed on the
		// shutdown error of a step): the run is handed back to the next owner.
		e.handBack(r)
		r.trace().stopped(err)
		e.hub.Wake(r.id, nil)
		return
	}
	if err == nil && len(out) > e.cfg.MaxPayloadBytes {
		err = &PayloadTooLargeError{What: fmt.Sprintf("output of workflow %q", r.name), Size: len(out), Limit: e.cfg.MaxPayloadBytes}
		out = nil
	}
	o := &outcome{status: StatusSuccess, output: out}
	if err != nil {
		o = &outcome{status: StatusError, err: encodeError(err)}
	}
	e.finish(r, o, steps)
}

// finish records the final outcome of r, with the checkpoints of its
// steps since its last durable call (deferred, pending.go) in the same
// statement, and wakes its waiters.
func (e *Engine) finish(r *run, o *outcome, steps []*sysdb.InsertStepParams) {
	written, err := e.writeFinishRetrying(r, finishWrite(r, o, steps))
	if err != nil && steps != nil && !errors.Is(err, ErrShutdown) {
		// The statement failed as a whole: write the checkpoints alone, as
		// a step would have without deferral, so that the one refused fails
		// the run with its own error, then finish.
		for _, s := range steps {
			if err := r.writeCheckpoint(s); err != nil {
				if e.notOursToFinish(err) {
					r.trace().stopped(err)
					e.hub.Wake(r.id, nil)
					return
				}
				o = &outcome{status: StatusError, err: encodeError(err)}
				break
			}
		}
		written, err = e.writeFinishRetrying(r, finishWrite(r, o, nil))
	}
	switch {
	case err != nil:
		r.log().Warn("durable: run not finished", "err", err)
		o = nil
	case !written:
		r.log().Warn("durable: run finished elsewhere or lost ownership; result discarded")
		o = nil
		if r.queue != nil {
			e.noteDBTrouble() // cancelled without our knowing? its slot is released by the next sweep
		}
	}
	r.trace().finished(o)
	r.logFinished(o)
	e.hub.Wake(r.id, o)
}

// outcome is a finished run as stored.
type outcome struct {
	status Status
	output []byte
	err    []byte
}

// finishWrite is the finish of r with outcome o, carrying the checkpoints
// of its last steps, fenced by the run's epoch.
func finishWrite(r *run, o *outcome, steps []*sysdb.InsertStepParams) *sysdb.FinishOneStepsParams {
	return &sysdb.FinishOneStepsParams{FinishOneParams: sysdb.FinishOneParams{ID: r.id, Epoch: r.epoch, Status: string(o.status),
		Output: o.output, Error: o.err}, Steps: steps}
}

// handBack parks a run that Shutdown stopped at a step boundary, due at
// once: without an owner, any executor of its version resumes it (a queued
// run through its queue's limits), and no recovery attempt is counted
// (that count is for runs whose process died under them, see
// Config.MaxRecoveryAttempts). A run cut short by a hard
// stop (Shutdown's ctx ended and its step's context was cancelled) stays
// owned here and counts, as after a crash; so does one whose hand-back
// fails (the database is away): it is not retried, so as not to hold
// Shutdown up.
func (e *Engine) handBack(r *run) {
	if e.hardCtx.Err() != nil {
		return
	}
	if _, err := e.wq.HandBack(e.hardCtx, e.pool, sysdb.HandBackParams{ID: r.id, Epoch: r.epoch}); err != nil {
		r.log().Warn("durable: hand back a run stopped by shutdown; its next resume counts as a recovery", "err", err)
	}
}

// releaseSlot gives back the queue slot of r, cancelled while its code
// ran: Cancel leaves the slot held until that code has stopped, so a
// queue's limits never see more runs' code at once than they allow. On a
// failure the next sweep releases it (releaseStopped).
func (e *Engine) releaseSlot(r *run) {
	err := e.retryBG(e.hardCtx, "release queue slot", func(ctx context.Context) error {
		_, err := e.qq.Release(ctx, e.pool, sysdb.ReleaseParams{ID: r.id, Epoch: r.epoch})
		return err
	})
	if err != nil {
		e.noteDBTrouble()
	}
}

func (e *Engine) writeFinishRetrying(r *run, w *sysdb.FinishOneStepsParams) (written bool, err error) {
	err = r.retryDB("finish workflow", func(ctx context.Context) error {
		var err error
		written, err = e.commit.WriteFinish(ctx, w)
		return err
	})
	return written, err
}

// callWorkflow runs workflow code and turns a panic into a PanicError.
func callWorkflow(def *wfDef, wctx Context, input []byte) (out []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, &PanicError{Value: fmt.Sprint(p), Stack: string(debug.Stack())}
		}
	}()
	return def.call(wctx, input)
}

// encodePayload encodes v as JSON within the size limit.
// What it is, for errors, is fmt.Sprintf(what, name), made only then.
func (e *Engine) encodePayload(v any, what, name string) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, Permanent(fmt.Errorf("durable: encode %s: %w", fmt.Sprintf(what, name), err))
	}
	if len(b) > e.cfg.MaxPayloadBytes {
		return nil, &PayloadTooLargeError{What: fmt.Sprintf(what, name), Size: len(b), Limit: e.cfg.MaxPayloadBytes}
	}
	return b, nil
}
