package durable

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable/internal/hooks"
	"github.com/durable-go/durable/internal/sysdb"
)

// runner executes runs in this process: it launches each on a worker
// goroutine, keeps track of those executing, resumes claimed runs with
// their recorded steps, and records their finish. Everything else a run
// needs (the pool, the statements, the group commit, the waiters) is the
// engine's.
type runner struct {
	e       *Engine
	workers *workerPool
	active  activeRuns     // the runs executing here
	runs    sync.WaitGroup // one per execution in flight; Shutdown waits for them
}

func newRunner(e *Engine) *runner { return &runner{e: e, workers: newWorkerPool()} }

// stop waits for every execution launched here to end: the runs stop at
// their next step boundary once the engine is stopping. If ctx ends first,
// it cancels the runs' contexts (the hard stop) and returns ctx's error.
func (rn *runner) stop(ctx context.Context) error {
	drained := make(chan struct{})
	go func() { rn.runs.Wait(); close(drained) }()
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
		rn.e.hardCancel(ErrShutdown)
		return fmt.Errorf("durable: shutdown: runs still in flight: %w", ctx.Err())
	}
}

// launch starts executing r on a worker goroutine.
func (rn *runner) launch(r *run, def *wfDef, input []byte) { rn.launchThen(r, def, input, nil) }

// launchThen is launch that calls done, if not nil, when the execution is
// over (a recovered run gives back its recovery slot: resume.go).
func (rn *runner) launchThen(r *run, def *wfDef, input []byte, done func()) {
	r.deferSteps = def.deferSteps
	rn.runs.Add(1)
	rn.active.store(r)
	rn.e.clock.enter() // a party of a test's clock from now on
	rn.workers.run(func() {
		defer rn.runs.Done()
		defer rn.e.clock.leave()
		defer rn.active.remove(r)
		if done != nil {
			defer done()
		}
		rn.execute(r, def, input)
	})
}

// start inserts a run of def with the given ID and encoded input and, if
// this call created it, executes it in this process. An existing run with
// that ID is left alone (created reports false); a run of another workflow
// under that ID is a [*ConflictError]. It is the untyped path used by
// schedules.
func (rn *runner) start(ctx context.Context, def *wfDef, id string, input, tags []byte) (created bool, err error) {
	defer rn.e.recov.EnterLaunch()()
	sp := rn.e.tr.start(ctx, "durable.start", def.name, id)
	defer func() { sp.end(err) }()
	created, err = rn.e.commit.WriteStart(ctx, &sysdb.OwnedRun{ID: id, Name: def.name, Input: input, TraceContext: sp.traceparent(),
		Tags: tags})
	if err != nil {
		rn.e.lease.NoteTrouble()
		return false, fmt.Errorf("durable: start workflow %q id %q: %w", def.name, id, err)
	}
	if !created {
		sp.existing()
		return false, checkExisting(ctx, rn.e.q, rn.e.pool, id, def.name, nil, "")
	}
	r := rn.newRun(id, def.name, 1, nil)
	rn.e.tr.run(r, sp.spanContext(), 0, nil, nil)
	rn.e.met.startedRun(r, startSchedule)
	rn.launch(r, def, input)
	return true, nil
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

// newRun makes an execution of run id with nothing recorded before it
// (resumeOne gives a resumed one its history).
func (rn *runner) newRun(id, name string, epoch int64, deadline *time.Time) *run {
	r := &run{e: rn.e, id: id, name: name, epoch: epoch, hist: wholeHistory(nil)}
	r.deferred.r = r
	base, cancelCause := context.WithCancelCause(context.WithValue(rn.e.hardCtx, runKey{}, r))
	r.cancelCause = cancelCause
	if deadline != nil {
		r.deadline = *deadline
		ctx, cancel := rn.e.clock.withDeadline(base, *deadline)
		r.ctx, r.cancel = ctx, func() { cancel(); cancelCause(nil) }
	} else {
		r.ctx, r.cancel = base, func() { cancelCause(nil) }
	}
	return r
}

func (rn *runner) execute(r *run, def *wfDef, input []byte) {
	defer func() { r.cancel() }() // compensations past the deadline replace it
	defer r.releaseStreams()
	if r.queue != nil {
		defer r.queue.release()
	}
	wctx := &wfContext{Context: r.ctx, r: r}
	var out []byte
	var err error
	if r.pastDeadline() && r.hist.replayed() == 0 {
		r.halt(r.deadlineError()) // e.g. queued past its deadline: never starts
	} else {
		// A run resumed past its deadline replays what it recorded (and
		// so registers its compensations again), then halts at its first
		// new step.
		out, err = callWorkflow(def, wctx, input)
		_ = r.flushStreams(r.ctx) // a failure halts the run: it then does not finish here
	}
	next := continuedAs(r) // continue.go
	if next != "" {
		out, err = []byte("null"), nil // a success, whose result is the chain's
	}
	if err != nil && r.halted() == nil && r.ctx.Err() != nil && r.e.hardCtx.Err() == nil && r.pastDeadline() {
		r.halt(r.deadlineError()) // the code gave up on its context's deadline
	}
	if err != nil && r.halted() == nil {
		cause, retried := err, false
		if retried, err = retryLater(r, def.retry, err); retried && r.halted() == nil {
			// retry.go: scheduled to run again; nothing is compensated.
			r.trace().stopped(cause)
			rn.e.hub.Wake(r.id, nil)
			return
		}
	}
	if h := r.halted(); h != nil {
		err = compensate(r, h) // compensate.go: only past the deadline
	} else if err != nil {
		err = compensate(r, err)
	}
	// Deferred step checkpoints (pending.go) go with the finish. Taken
	// first: a write of them in flight ends before, and halts the run if it
	// was refused. A run that stops without finishing here drops them: it
	// runs those steps again when resumed, as after a crash, and no late
	// write can land in a new execution's history.
	if rn.e.knobs.Boundary != nil && r.halted() == nil {
		_ = boundary(r, int(r.next.Load()), "", hooks.BeforeFinish)
	}
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
	if h != nil && errors.Is(h, ErrCancelled) && cancelRequested(r) {
		// A Cancel that asked for compensations left the run pending: it
		// ends here, cancelled (it registered none, or they ran).
		out, err, h = nil, h, nil
	}
	if h != nil {
		if rn.notOursToFinish(h) {
			// Not ours to finish: the run goes on elsewhere or later, or
			// was already ended by a cancel.
			if errors.Is(h, ErrFenced) {
				r.log().Warn("durable: run stopped", "reason", h)
			}
			if r.queue != nil && errors.Is(h, ErrCancelled) {
				rn.releaseSlot(r)
			}
			if errors.Is(h, ErrShutdown) {
				rn.handBack(r)
			}
			r.trace().stopped(h)
			rn.e.hub.Wake(r.id, nil)
			return
		}
		// Non-determinism, an undecodable record, the deadline, or a
		// database error the engine could not ride out: the run fails
		// visibly instead of sitting pending forever.
		out, err = nil, h
	}
	if err != nil && (errors.Is(err, ErrShutdown) || rn.e.hardCtx.Err() != nil) {
		// The code gave up because the engine is stopping (or passed on the
		// shutdown error of a step): the run is handed back to the next owner.
		rn.handBack(r)
		r.trace().stopped(err)
		rn.e.hub.Wake(r.id, nil)
		return
	}
	if err == nil && len(out) > rn.e.cfg.MaxPayloadBytes {
		err = &PayloadTooLargeError{What: fmt.Sprintf("output of workflow %q", r.name), Size: len(out), Limit: rn.e.cfg.MaxPayloadBytes}
		out = nil
	}
	o := &outcome{status: StatusSuccess, output: out, next: next}
	if err != nil {
		o = &outcome{status: StatusError, err: encodeError(err)}
		if r.cancelComp.Load() && errors.Is(err, ErrCancelled) {
			o.status = StatusCancelled
		}
	}
	rn.finish(r, o, steps)
	if o.status == StatusCancelled && r.queue != nil {
		rn.releaseSlot(r) // a cancelled run's slot is held until its code stopped: it has
	}
}

// finish records the final outcome of r, with the checkpoints of its
// steps since its last durable call (deferred, pending.go) in the same
// statement, and wakes its waiters.
func (rn *runner) finish(r *run, o *outcome, steps []*sysdb.InsertStepParams) {
	written, err := rn.writeFinishRetrying(r, finishWrite(r, o, steps))
	if err != nil && steps != nil && !errors.Is(err, ErrShutdown) {
		// The statement failed as a whole: write the checkpoints alone, as
		// a step would have without deferral, so that the one refused fails
		// the run with its own error, then finish.
		for _, s := range steps {
			if err := r.writeCheckpoint(s); err != nil {
				if rn.notOursToFinish(err) {
					r.trace().stopped(err)
					rn.e.hub.Wake(r.id, nil)
					return
				}
				o = &outcome{status: StatusError, err: encodeError(err)}
				break
			}
		}
		written, err = rn.writeFinishRetrying(r, finishWrite(r, o, nil))
	}
	switch {
	case err != nil:
		r.log().Warn("durable: run not finished", "err", err)
		o = nil
	case !written:
		r.log().Warn("durable: run finished elsewhere or lost ownership; result discarded")
		o = nil
		if r.queue != nil {
			rn.e.lease.NoteTrouble() // cancelled without our knowing? its slot is released by the next sweep
		}
	}
	r.trace().finished(o)
	rn.e.met.finished(r, o)
	r.logFinished(o)
	rn.e.hub.Wake(r.id, o)
}

// outcome is a finished run as stored.
type outcome struct {
	status Status
	output []byte
	err    []byte
	next   string // the run it continued as (continue.go): its result is the chain's
}

// finishWrite is the finish of r with outcome o, carrying the checkpoints
// of its last steps, fenced by the run's epoch.
func finishWrite(r *run, o *outcome, steps []*sysdb.InsertStepParams) *sysdb.FinishOneStepsParams {
	f := &sysdb.FinishOneStepsParams{FinishOneParams: sysdb.FinishOneParams{ID: r.id, Epoch: r.epoch, Status: string(o.status),
		Output: o.output, Error: o.err}, Steps: steps}
	if r.queue != nil && o.status != StatusCancelled && r.queue.lane.HandsOn() {
		f.HandOn = r.queue.name // its slot may go to the queue's next run at once
	}
	return f
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
func (rn *runner) handBack(r *run) {
	if rn.e.hardCtx.Err() != nil {
		r.log().Debug("durable: a run stopped by a hard stop stays owned; its next resume counts as a recovery")
		return
	}
	handed, err := rn.e.wq.HandBack(rn.e.hardCtx, rn.e.pool, sysdb.HandBackParams{ID: r.id, Epoch: r.epoch})
	switch {
	case err != nil:
		r.log().Warn("durable: hand back a run stopped by shutdown; its next resume counts as a recovery", "err", err)
	case !handed:
		// Another owner or a final status: nothing of this execution's
		// is left to hand back.
		r.log().Info("durable: a run stopped by shutdown was not pending at its epoch; not handed back", "epoch", r.epoch)
	}
}

// releaseSlot gives back the queue slot of r, cancelled while its code
// ran: Cancel leaves the slot held until that code has stopped, so a
// queue's limits never see more runs' code at once than they allow. On a
// failure the next sweep releases it (releaseStopped).
func (rn *runner) releaseSlot(r *run) {
	err := rn.retryBG(rn.e.hardCtx, "release queue slot", func(ctx context.Context) error {
		_, err := rn.e.qq.Release(ctx, rn.e.pool, sysdb.ReleaseParams{ID: r.id, Epoch: r.epoch})
		return err
	})
	if err != nil {
		rn.e.lease.NoteTrouble()
	}
}

func (rn *runner) writeFinishRetrying(r *run, w *sysdb.FinishOneStepsParams) (written bool, err error) {
	err = r.retryDB("finish workflow", func(ctx context.Context) error {
		var err error
		written, err = rn.e.commit.WriteFinish(ctx, w)
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
