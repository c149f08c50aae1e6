package durable

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/notify"
	"github.com/durable-go/durable/internal/sysdb"
)

// maxNameLen bounds workflow IDs, workflow and step names, versions and
// executor IDs, in bytes.
const maxNameLen = 255

// Status is the state of a workflow run.
type Status string

// Run statuses.
const (
	StatusEnqueued  Status = "enqueued"  // waiting in a queue for its turn
	StatusPending   Status = "pending"   // running, or waiting to be resumed
	StatusSuccess   Status = "success"   // finished with a result
	StatusError     Status = "error"     // finished with an error
	StatusCancelled Status = "cancelled" // cancelled before it finished
	StatusDead      Status = "dead"      // dead-lettered: recovery attempts exhausted
)

// Finished reports whether s is a final status.
func (s Status) Finished() bool {
	return s == StatusSuccess || s == StatusError || s == StatusCancelled || s == StatusDead
}

// WorkflowOpts are registration-time options of a workflow.
type WorkflowOpts struct {
	// MaxRecoveryAttempts overrides Config.MaxRecoveryAttempts for this
	// workflow. Defaults to the engine's value.
	MaxRecoveryAttempts int

	// DeferStepCheckpoints turns Config.DeferStepCheckpoints on for this
	// workflow's runs only (it is on for all when the engine's is).
	DeferStepCheckpoints bool

	// Retry runs a run whose code failed again, from its last checkpoint:
	// its recorded steps replay, a last step that recorded a failure runs
	// again (with a new budget of step retries), after a backoff by the
	// policy (attempt n waits Retry.Delay(n), jittered). The wait is
	// durable (the run is parked, as by a long Sleep, and any executor
	// resumes it), and the count of retries is stored with the run
	// (WorkflowInfo.Retries), so MaxAttempts bounds the attempts across
	// crashes. Failures that would fail again are not retried: a
	// Permanent error (a step's, or the code's), a panic, an undecodable
	// record, non-determinism, the run's deadline, a cancel. Once the
	// attempts are spent the run fails with the last error, which says
	// how many attempts were made; only then do its compensations run
	// ([Compensate]). nil: a failure is final at once.
	Retry *RetryPolicy
}

// Workflow is a registered workflow taking P and returning R. It is the
// typed way to start runs and to find them again.
type Workflow[P, R any] struct {
	e   *Engine
	def *wfDef
}

// Name returns the workflow's registered name.
func (w *Workflow[P, R]) Name() string { return w.def.name }

// Register registers fn under name, a stable string recorded with every
// run: keep it when the function is renamed or moved. It panics on a
// programmer error (empty, overlong or duplicate name, registration after
// Launch); [TryRegister] returns the error instead.
func Register[P, R any](e *Engine, name string, fn func(wctx Context, in P) (R, error), opts *WorkflowOpts) *Workflow[P, R] {
	w, err := TryRegister(e, name, fn, opts)
	if err != nil {
		panic(err)
	}
	return w
}

// TryRegister is [Register] returning an error instead of panicking.
func TryRegister[P, R any](e *Engine, name string, fn func(wctx Context, in P) (R, error), opts *WorkflowOpts) (*Workflow[P, R], error) {
	if err := checkName("workflow name", name); err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, fmt.Errorf("%w: workflow %q has a nil function", ErrInvalidArgument, name)
	}
	def := &wfDef{name: name, maxRecovery: e.cfg.MaxRecoveryAttempts, deferSteps: e.cfg.DeferStepCheckpoints}
	if opts != nil && opts.MaxRecoveryAttempts > 0 {
		def.maxRecovery = opts.MaxRecoveryAttempts
	}
	if opts != nil && opts.DeferStepCheckpoints {
		def.deferSteps = true
	}
	if opts != nil && opts.Retry != nil {
		if err := opts.Retry.validate("WorkflowOpts.Retry"); err != nil {
			return nil, fmt.Errorf("workflow %q: %w", name, err)
		}
		p := opts.Retry.withDefaults()
		def.retry = &p
	}
	def.call = func(wctx Context, input []byte) ([]byte, error) {
		var in P
		if err := json.Unmarshal(input, &in); err != nil {
			return nil, &DecodeError{WorkflowID: wctx.WorkflowID(), What: "input", Err: err}
		}
		out, err := fn(wctx, in)
		if err != nil {
			return nil, err
		}
		return encodePayload(out, e.cfg.MaxPayloadBytes, "output of workflow %q", name)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state != stateNew {
		return nil, fmt.Errorf("%w: register workflow %q before Launch", ErrInvalidArgument, name)
	}
	if _, dup := e.defs[name]; dup {
		return nil, fmt.Errorf("%w: workflow %q is already registered", ErrInvalidArgument, name)
	}
	e.defs[name] = def
	return &Workflow[P, R]{e: e, def: def}, nil
}

func checkName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: %s is empty", ErrInvalidArgument, what)
	case len(s) > maxNameLen:
		return fmt.Errorf("%w: %s is %d bytes, over the limit of %d", ErrInvalidArgument, what, len(s), maxNameLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalidArgument, what)
	}
	for _, c := range s {
		if c == 0 {
			return fmt.Errorf("%w: %s contains a NUL byte", ErrInvalidArgument, what)
		}
	}
	return nil
}

// StartOpts are options of a single start.
type StartOpts struct {
	// ID is the workflow ID: the run's idempotency key. Starting an ID that
	// exists with the same input (the same encoded JSON, byte for byte)
	// returns the existing run instead of running again; with another
	// input it fails with a [*ConflictError] matching [ErrInputMismatch],
	// and writes nothing. Defaults to a new UUIDv7 (for a child: parent ID
	// + "/" + position).
	ID string
	// AcceptDifferentInput makes a start of an existing ID return the
	// existing run whatever input it was started with (the first start
	// wins), for IDs that name an occurrence rather than a request, e.g.
	// "report-2026-05-01" with a timestamp in the input. Defaults to false.
	AcceptDifferentInput bool
	// Timeout bounds the whole run. The deadline is stored with the run,
	// so it holds across restarts: once it passes, step contexts are
	// cancelled, no new step starts, and the run ends with an error that
	// matches context.DeadlineExceeded. Defaults to none.
	Timeout time.Duration
	// Tags are the run's first tags, string keys and values that
	// [Engine.ListWorkflows] finds it by (ListParams.Tags); its code may
	// set more with [SetTag]. At most [MaxTags]; keys and values are
	// non-empty, at most 255 bytes of UTF-8 without NUL, else the start
	// fails with [ErrInvalidArgument] and writes nothing. A start that
	// finds its ID taken returns the existing run with the tags it has:
	// they are not compared, as the input is. Defaults to none (a
	// continuation, [Workflow.ContinueAsNew], keeps the run's).
	Tags map[string]string
}

// tags checks and encodes o's Tags (nil: none).
func (o *StartOpts) tags() (json.RawMessage, error) {
	if o == nil {
		return nil, nil
	}
	return encodeTags("StartOpts.Tags", o.Tags)
}

func (o *StartOpts) deadline(now time.Time) (*time.Time, error) {
	if o == nil || o.Timeout == 0 {
		return nil, nil
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("%w: StartOpts.Timeout %v is negative", ErrInvalidArgument, o.Timeout)
	}
	d := now.Add(o.Timeout)
	return &d, nil
}

// Start starts a run of w with input in, executed by this process, and
// returns its handle. If a run with the same ID and input exists, Start
// returns a handle to it without running anything; if that run belongs
// to another workflow, or has another input (see [StartOpts].ID), the
// error is a [*ConflictError].
func (w *Workflow[P, R]) Start(ctx context.Context, in P, opts *StartOpts) (_ *Handle[R], err error) {
	e := w.e
	if err := e.canStart(); err != nil {
		return nil, err
	}
	id, input, err := w.prepare(in, opts, "")
	if err != nil {
		return nil, err
	}
	deadline, err := opts.deadline(e.clock.now())
	if err != nil {
		return nil, err
	}
	tags, err := opts.tags()
	if err != nil {
		return nil, err
	}
	sp := e.tr.start(ctx, "durable.start", w.def.name, id)
	defer func() { sp.end(err) }()
	return w.insertAndRun(ctx, sp, &sysdb.OwnedRun{ID: id, Name: w.def.name, Input: input, Deadline: deadline, Tags: tags},
		opts.sameInput(input))
}

// sameInput is the input an existing run of the ID must have been started
// with: input, or nil (any) with AcceptDifferentInput.
func (o *StartOpts) sameInput(input []byte) []byte {
	if o != nil && o.AcceptDifferentInput {
		return nil
	}
	return input
}

func (w *Workflow[P, R]) prepare(in P, opts *StartOpts, defaultID string) (string, []byte, error) {
	id := defaultID
	if opts != nil && opts.ID != "" {
		id = opts.ID
	}
	return prepareRun(w.def.name, in, id, w.e.cfg.MaxPayloadBytes)
}

// encodeArg is encodePayload for a value a caller hands in (a workflow
// input, a message, an event value): one that JSON cannot encode (a
// channel, a func, a cycle, a failing MarshalJSON) is an
// [ErrInvalidArgument], still permanent.
func encodeArg(v any, limit int, what, name string) ([]byte, error) {
	b, err := encodePayload(v, limit, what, name)
	if err != nil && !errors.Is(err, ErrPayloadTooLarge) {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return b, err
}

// insertAndRun inserts the run o of w, owned by this executor, in the
// trace of sp and, when the insert created it, executes it here. An
// existing run of the ID must have input want (nil: any).
func (w *Workflow[P, R]) insertAndRun(ctx context.Context, sp *tspan, o *sysdb.OwnedRun, want []byte) (*Handle[R], error) {
	e := w.e
	defer e.recov.EnterLaunch()()
	id, input, parent, deadline := o.ID, o.Input, o.ParentID, o.Deadline
	local := e.hub.SubscribeLocal(id)
	o.TraceContext = sp.traceparent()
	inserted, err := e.commit.WriteStart(ctx, o)
	if err != nil {
		e.lease.NoteTrouble()
		e.hub.Unsubscribe(id, local)
		return nil, fmt.Errorf("durable: start workflow %q id %q: %w", w.def.name, id, err)
	}
	if !inserted {
		e.hub.Unsubscribe(id, local)
		sp.existing()
		return w.existing(ctx, e.pool, id, want, parent)
	}
	r := e.runner.newRun(id, w.def.name, 1, deadline)
	e.tr.run(r, sp.spanContext(), 0, nil, nil)
	e.met.startedRun(r, startKindOf(parent))
	e.runner.launch(r, w.def, input)
	return &Handle[R]{e: e, id: id, local: local}, nil
}

// queryer is what the reads and writes of a start run on: the pool, or
// the caller's transaction.
type queryer = sysdb.DBTX

// existing returns a handle to the stored run id, checking it belongs to w
// and, unless input is nil, that it was started with input (see
// checkExisting for parent).
func (w *Workflow[P, R]) existing(ctx context.Context, q queryer, id string, input []byte, parent string) (*Handle[R], error) {
	if err := checkExisting(ctx, w.e.q, q, id, w.def.name, input, parent); err != nil {
		return nil, err
	}
	return &Handle[R]{e: w.e, id: id}, nil
}

// checkExisting reads the stored run id and checks it is a run of the
// workflow name and, unless input is nil, that its recorded input is
// input: [ErrWorkflowNotFound] or a [*ConflictError] otherwise. The input
// column is json, stored as sent, so the bytes compare exactly. It is the
// path of a start that found its ID taken, which reads the run anyway: a
// new ID costs no extra round trip. A run that is already a child of
// parent (not "") is that parent's own start, made again by its replay
// after a crash between the child's insert and the start's checkpoint:
// the parent gets its child back, as a recorded start would give it.
func checkExisting(ctx context.Context, qs *sysdb.Queries, q queryer, id, name string, input []byte, parent string) error {
	info, err := readRun(ctx, qs, q, id)
	if err != nil {
		return err
	}
	if info.name != name {
		return &ConflictError{WorkflowID: id, Existing: info.name, Requested: name}
	}
	ownChild := parent != "" && info.parent != nil && *info.parent == parent
	if input != nil && !ownChild && !bytes.Equal(info.input, input) {
		return &ConflictError{WorkflowID: id, Existing: info.name, Requested: name, InputDiffers: true}
	}
	return nil
}

// StartTx inserts a run of w inside the caller's transaction tx: the run
// exists if and only if tx commits. After the commit, a live executor with
// w registered claims and runs it within milliseconds (woken by a
// notification sent on commit). The returned handle waits for that run.
func (w *Workflow[P, R]) StartTx(ctx context.Context, tx pgx.Tx, in P, opts *StartOpts) (*Handle[R], error) {
	if tx == nil {
		return nil, fmt.Errorf("%w: StartTx needs a transaction", ErrInvalidArgument)
	}
	id, err := engineSubmitter(w.e).start(ctx, tx, w.def.name, in, opts)
	if err != nil {
		return nil, err
	}
	return &Handle[R]{e: w.e, id: id}, nil
}

// StartChild starts a run of w as a child of the calling workflow. The
// start is recorded as a step of the parent, so a resumed parent gets the
// same child back instead of starting another; the child's ID defaults to
// the parent's ID plus "/" plus the step position.
func (w *Workflow[P, R]) StartChild(wctx Context, in P, opts *StartOpts) (*Handle[R], error) {
	r := wctx.workflowRun()
	name := "child:" + w.def.name
	pos, rec, err := r.begin(name)
	if err != nil {
		return nil, err
	}
	if rec != nil {
		var id string
		if rec.status != stepDone || json.Unmarshal(rec.output, &id) != nil {
			return nil, r.halt(&DecodeError{WorkflowID: r.id, What: fmt.Sprintf("step %d (child start)", pos), Err: errors.New("no child ID recorded")})
		}
		return &Handle[R]{e: w.e, id: id}, nil
	}
	started := r.e.clock.now()
	id, input, err := w.prepare(in, opts, r.id+"/"+strconv.Itoa(pos))
	if err != nil {
		return nil, err
	}
	deadline, err := opts.deadline(r.e.clock.now())
	if err != nil {
		return nil, err
	}
	if deadline == nil && !r.deadline.IsZero() {
		deadline = &r.deadline // a child inherits its parent's deadline
	}
	tags, err := opts.tags()
	if err != nil {
		return nil, err
	}
	// The child's start span is a child of the parent's run span: the
	// child's executions are in the parent's trace.
	sp := r.trace().startChild(w.def.name, id, pos)
	var h *Handle[R]
	err = r.retryDB("start child", func(ctx context.Context) error {
		var err error
		h, err = w.insertAndRun(ctx, sp, &sysdb.OwnedRun{ID: id, Name: w.def.name, Input: input, ParentID: r.id, Deadline: deadline,
			Tags: tags}, opts.sameInput(input))
		return err
	})
	sp.end(err)
	if err != nil {
		if errors.Is(err, ErrWorkflowConflict) {
			return nil, err
		}
		if h := r.halted(); h != nil {
			return nil, h
		}
		return nil, fmt.Errorf("durable: start child workflow %q: %w", id, err)
	}
	idJSON, _ := json.Marshal(id)
	if err := r.checkpoint(pos, name, stepDone, idJSON, nil, 1, started); err != nil {
		return nil, err
	}
	return h, nil
}

// Handle retrieves the handle of run id of w from any process. It fails
// with [ErrWorkflowNotFound] or a [*ConflictError] when id is not a run of w.
func (w *Workflow[P, R]) Handle(ctx context.Context, id string) (*Handle[R], error) {
	return w.existing(ctx, w.e.pool, id, nil, "")
}

// Handle follows one run.
type Handle[R any] struct {
	e         *Engine
	id        string
	local     *notify.Waiter[*outcome] // the run executes in this process
	localSeen atomic.Bool              // the local outcome was returned once
}

// ID returns the workflow ID.
func (h *Handle[R]) ID() string { return h.id }

// Status returns the run's current status.
func (h *Handle[R]) Status(ctx context.Context) (Status, error) {
	info, err := readRun(ctx, h.e.q, h.e.pool, h.id)
	if err != nil {
		return "", err
	}
	return info.status, nil
}

// Result waits until the run finishes and returns its result, or its error
// as recorded (so errors.Is matches the recorded cause). On a launched
// engine it waits on a notification of the finish; an engine that is not
// launched, or polls only (Config.PollOnly), reads the run every
// Config.PollInterval. ctx bounds the wait. It may be called any number of
// times.
func (h *Handle[R]) Result(ctx context.Context) (R, error) {
	var zero R
	if h.local != nil && !h.localSeen.Load() {
		select {
		case <-h.local.Done():
			// The in-process outcome serves the first Result; later calls
			// read the database, as the run may have been resumed since.
			h.localSeen.Store(true)
			if o := h.local.Outcome(); o != nil {
				id, o, err := chainEnd(ctx, engineWatcher(h.e), h.id, o)
				if err != nil {
					return zero, err
				}
				return decodeOutcome[R](id, o)
			}
		case <-ctx.Done():
			return zero, ctx.Err()
		}
	}
	w := engineWatcher(h.e)
	o, err := w.outcome(ctx, h.id)
	if err != nil {
		return zero, err
	}
	id, o, err := chainEnd(ctx, w, h.id, o)
	if err != nil {
		return zero, err
	}
	return decodeOutcome[R](id, o)
}

func decodeOutcome[R any](id string, o *outcome) (R, error) {
	var out R
	if o.status != StatusSuccess {
		return out, decodeError(o.err)
	}
	if err := json.Unmarshal(o.output, &out); err != nil {
		return out, &DecodeError{WorkflowID: id, What: "output", Err: err}
	}
	return out, nil
}

// runInfo is a stored run.
type runInfo struct {
	id, name, appVersion string
	status               Status
	executor, parent     *string
	epoch                int64
	recoveryAttempts     int
	notify               bool
	input, output, err   []byte
	createdAt, updatedAt time.Time
	queue                *string
	deadline             *time.Time
	continuedAs          *string
}

// outcome is the outcome of the finished run i.
func (i *runInfo) outcome() *outcome {
	o := &outcome{status: i.status, output: i.output, err: i.err}
	if i.status == StatusSuccess && i.continuedAs != nil {
		o.next = *i.continuedAs
	}
	return o
}

// readRun reads the stored run id through qs on q.
func readRun(ctx context.Context, qs *sysdb.Queries, q queryer, id string) (*runInfo, error) {
	if err := checkName("workflow ID", id); err != nil {
		return nil, err
	}
	row, found, err := qs.WorkflowByID(ctx, q, id)
	if err != nil {
		return nil, fmt.Errorf("durable: read workflow %q: %w", id, err)
	}
	if !found {
		return nil, fmt.Errorf("%w: %q", ErrWorkflowNotFound, id)
	}
	return &runInfo{id: row.ID, name: row.Name, appVersion: row.AppVersion, status: Status(row.Status), executor: row.ExecutorID,
		parent: row.ParentID, epoch: row.Epoch, recoveryAttempts: row.RecoveryAttempts, notify: row.Notify, input: row.Input,
		output: row.Output, err: row.Error, createdAt: row.CreatedAt, updatedAt: row.UpdatedAt, queue: row.QueueName,
		deadline: row.Deadline, continuedAs: row.ContinuedAs}, nil
}

// Now returns the current time, recorded as a step so a replay sees the
// same value. Use it instead of time.Now in workflow code.
func Now(wctx Context) (time.Time, error) {
	r := wctx.workflowRun()
	return Step(wctx, "durable.now", func(context.Context) (time.Time, error) { return r.e.clock.now(), nil }, &StepOpts{Retry: noRetry})
}

// NewID returns a random UUID, recorded as a step so a replay sees the same
// value. Use it instead of generating random IDs in workflow code.
func NewID(wctx Context) (string, error) {
	return Step(wctx, "durable.id", func(context.Context) (string, error) { return uuid.NewString(), nil }, &StepOpts{Retry: noRetry})
}

// Halted returns why the calling run has stopped running its code (it
// parked, its engine is shutting down, it was cancelled or lost its
// owner), or nil while it runs. Workflow code that turns errors into
// values (an agent's tool showing a failure to its model) passes an
// error on when Halted is not nil: the run is not failing, it is leaving,
// and resumes later by replay.
func Halted(wctx Context) error { return wctx.workflowRun().halted() }

// awaited is the recorded outcome of a child awaited with Handle.Await.
type awaited struct {
	Status Status          `json:"status"`
	Output json.RawMessage `json:"output,omitempty"`
	Error  json.RawMessage `json:"error,omitempty"`
}

// Await waits, from workflow code, for the run h follows (typically a child
// started with StartChild) and returns its result. The outcome is recorded
// as a step of the caller, so a replay gets the same answer without
// waiting. A wait longer than Config.ParkThreshold parks the caller: it
// holds no goroutine, and the child's finish wakes it on any executor.
func (h *Handle[R]) Await(wctx Context) (_ R, err error) {
	var zero R
	r := wctx.workflowRun()
	name := "durable.await:" + h.id
	pos, rec, err := r.begin(name)
	if err != nil {
		return zero, err
	}
	if rec == nil {
		ws := r.trace().await(h.id)
		defer func() { ws.end(err) }()
		started := r.e.clock.now()
		waitUntil := started.Add(r.e.cfg.ParkThreshold)
		id := h.id // the run of h's chain waited for (continue.go)
		for {
			w := r.e.hub.Subscribe(id)
			var info *runInfo
			err := r.retryDB("read child", func(ctx context.Context) error {
				var err error
				info, err = readRun(ctx, r.e.q, r.e.pool, id)
				return err
			})
			if err != nil {
				r.e.hub.Unsubscribe(id, w)
				if errors.Is(err, ErrWorkflowNotFound) {
					return zero, err
				}
				return zero, r.halt(err)
			}
			if info.status.Finished() {
				r.e.hub.Unsubscribe(id, w)
				if next := info.outcome().next; next != "" {
					id = next // it continued as new: the chain's last run answers
					continue
				}
				out, _ := json.Marshal(awaited{Status: info.status, Output: info.output, Error: info.err})
				if err := r.checkpoint(pos, name, stepDone, out, nil, 1, started); err != nil {
					return zero, err
				}
				rec = &stepRecord{pos: pos, name: name, status: stepDone, output: out}
				break
			}
			if !info.notify {
				_, _ = r.e.q.WatchWorkflow(r.e.hardCtx, r.e.pool, id) // a remote finish notifies us
			}
			if r.e.clock.until(waitUntil) <= 0 {
				r.e.hub.Unsubscribe(id, w)
				return zero, r.parkOnChild(id)
			}
			err = r.waitFor(w.Done(), waitUntil)
			r.e.hub.Unsubscribe(id, w)
			if err != nil {
				return zero, err
			}
		}
		ws.end(nil)
		ws = nil // ended: the deferred end does nothing
	}
	a, err := replay[awaited](r, rec)
	if err != nil {
		return zero, err
	}
	return decodeOutcome[R](h.id, &outcome{status: a.Status, output: a.Output, err: a.Error})
}

// parkOnChild parks the run until child finishes (its finish sets our
// wake-up time to now). The child may have finished before the park
// committed: park looks again.
func (r *run) parkOnChild(child string) error {
	return r.park(time.Now().Add(100*365*24*time.Hour), waitOn{topic: "child:" + child, ready: func(ctx context.Context) (bool, error) {
		return runFinished(ctx, r.e, child)
	}})
}

// runFinished reports whether run id finished. A run that does not exist
// never will: false, with the error.
func runFinished(ctx context.Context, e *Engine, id string) (bool, error) {
	info, err := readRun(ctx, e.q, e.pool, id)
	if err != nil {
		return false, err
	}
	return info.status.Finished(), nil
}
