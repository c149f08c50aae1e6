package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/durable-go/durable/internal/clock"
	"github.com/durable-go/durable/internal/hooks"
	"github.com/durable-go/durable/internal/sysdb"
)

// Defaults of [RetryPolicy].
const (
	RetryMaxAttemptsDefault  = 3
	RetryBaseDelayDefault    = 100 * time.Millisecond
	RetryMaxDelayDefault     = 30 * time.Second
	RetryFactorDefault       = 2.0
	RetryJitterDefault       = 0.2
	TxConflictRetriesDefault = 10
)

// RetryPolicy says how a failing step is retried. Attempt n waits
// BaseDelay * Factor^(n-1), capped at MaxDelay, spread by ±Jitter. Failed
// attempts are recorded: after a crash a step goes on from the attempt
// after the last one that failed, so MaxAttempts bounds its attempts
// across executions (an attempt cut short by the crash is made again).
type RetryPolicy struct {
	// MaxAttempts counts the first try. 1 means no retry.
	// Defaults to RetryMaxAttemptsDefault.
	MaxAttempts int
	// BaseDelay is the wait before the second attempt.
	// Defaults to RetryBaseDelayDefault.
	BaseDelay time.Duration
	// MaxDelay caps any single wait. Defaults to RetryMaxDelayDefault.
	MaxDelay time.Duration
	// Factor multiplies the wait after each attempt; at least 1.
	// Defaults to RetryFactorDefault.
	Factor float64
	// Jitter spreads each wait by ±Jitter of itself, between 0 and 1; a
	// negative value turns jitter off. Defaults to RetryJitterDefault.
	Jitter float64
}

var noRetry = &RetryPolicy{MaxAttempts: 1}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = RetryMaxAttemptsDefault
	}
	if p.BaseDelay == 0 {
		p.BaseDelay = RetryBaseDelayDefault
	}
	if p.MaxDelay == 0 {
		p.MaxDelay = RetryMaxDelayDefault
	}
	if p.Factor == 0 {
		p.Factor = RetryFactorDefault
	}
	if p.Jitter == 0 {
		p.Jitter = RetryJitterDefault
	}
	return p
}

func (p RetryPolicy) validate(field string) error {
	bad := func(f, msg string) error { return fmt.Errorf("%w: %s.%s %s", ErrInvalidArgument, field, f, msg) }
	switch {
	case p.MaxAttempts < 0:
		return bad("MaxAttempts", "must not be negative")
	case p.BaseDelay < 0:
		return bad("BaseDelay", "must not be negative")
	case p.MaxDelay < 0:
		return bad("MaxDelay", "must not be negative")
	case p.Factor != 0 && !(p.Factor >= 1): // NaN too
		return bad("Factor", "must be at least 1")
	case p.Jitter > 1 || math.IsNaN(p.Jitter):
		return bad("Jitter", "must be at most 1")
	}
	return nil
}

// Delay returns the wait after failed attempt n (1-based), without jitter.
func (p RetryPolicy) Delay(n int) time.Duration {
	p = p.withDefaults()
	d := float64(p.BaseDelay) * math.Pow(p.Factor, float64(n-1))
	if d > float64(p.MaxDelay) || math.IsInf(d, 0) || math.IsNaN(d) {
		return p.MaxDelay
	}
	return time.Duration(d)
}

// wait is the wait after failed attempt n, jitter included.
func (p RetryPolicy) wait(n int) time.Duration { return clock.Jitter(p.Delay(n), max(p.Jitter, 0)) }

// RetryAfter wraps err so that the step's next attempt waits d (capped by
// the policy's MaxDelay) instead of the policy's backoff: for a provider
// that says when to come back (HTTP 429 Retry-After).
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &retryAfterError{err: err, after: d}
}

type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// StepOpts are options of one step call.
type StepOpts struct {
	// Retry overrides the engine's Config.StepRetry for this step.
	Retry *RetryPolicy
	// Timeout bounds each attempt through its context. Defaults to none.
	Timeout time.Duration
}

// TxStepOpts are options of one transaction step.
type TxStepOpts struct {
	// IsoLevel is the transaction's isolation level. Defaults to the
	// server's default (normally read committed).
	IsoLevel pgx.TxIsoLevel
	// Retry is the policy for errors returned by the function (not for
	// serialization failures). Defaults to Config.StepRetry.
	Retry *RetryPolicy
	// ConflictRetries bounds how many times a serialization failure or a
	// deadlock (SQLSTATE 40001, 40P01) re-runs the whole transaction.
	// Defaults to TxConflictRetriesDefault.
	ConflictRetries int
	// Timeout bounds each attempt through its context. Defaults to none.
	Timeout time.Duration
}

// StepInfo describes the step a context belongs to.
type StepInfo struct {
	WorkflowID string
	Name       string
	Pos        int // position of the step in its run, from 0
	// Attempt is 1 for the first try. It counts on across crashes: the
	// attempts that failed in earlier executions of the run are recorded.
	Attempt int
	// Resumed reports that this attempt follows an interruption: an
	// earlier execution of the run began this step (its failed attempts,
	// or an [IntentStep]'s intent, are recorded) and then crashed, lost
	// the run or was shut down before the step's outcome was recorded. A
	// step whose effect has no idempotency key can check for it first. A
	// crash during a first attempt that had not failed yet leaves no
	// record (that would cost a write on every step): use IntentStep for
	// a step that must always know.
	Resumed bool
}

// IdempotencyKey is the step's stable key, workflow ID + "/" + position: the
// same on every retry and every recovery. Hand it to providers that dedupe.
func (s StepInfo) IdempotencyKey() string { return s.WorkflowID + "/" + strconv.Itoa(s.Pos) }

type stepInfoKey struct{}

// stepScope is what a step attempt's context carries: its info, and the
// count of the requests it made through an IdempotentTransport (a new
// count for every attempt). One value, so a step attempt's context costs
// what it did before the count.
type stepScope struct {
	info     StepInfo
	requests atomic.Int64
}

// StepInfoFrom returns the step info carried by the context of a step
// function; ok is false outside a step.
func StepInfoFrom(ctx context.Context) (info StepInfo, ok bool) {
	sc, ok := ctx.Value(stepInfoKey{}).(*stepScope)
	if !ok {
		return StepInfo{}, false
	}
	return sc.info, true
}

// StepInfoMust is [StepInfoFrom] for code that only runs inside steps: it
// panics outside a step.
func StepInfoMust(ctx context.Context) StepInfo {
	info, ok := StepInfoFrom(ctx)
	if !ok {
		panic("durable: StepInfoMust called outside a step")
	}
	return info
}

// IdempotencyKey returns the idempotency key of the step whose context ctx
// is, or "" outside a step. See [StepInfo.IdempotencyKey].
func IdempotencyKey(ctx context.Context) string {
	if info, ok := StepInfoFrom(ctx); ok {
		return info.IdempotencyKey()
	}
	return ""
}

// Step runs fn as the named step of the calling workflow and records its
// result. On replay the recorded result is returned without running fn. A
// failing fn is retried by the policy; an error wrapped by [Permanent] stops
// retries. A step that failed for good returns a [*StepError]; its recorded
// error is returned again on replay. fn's result must survive a JSON round
// trip: the value returned, live or on replay, is the decoded record.
func Step[R any](wctx Context, name string, fn func(ctx context.Context) (R, error), opts *StepOpts) (R, error) {
	if err := checkName("step name", name); err != nil {
		var zero R
		return zero, err
	}
	return step(wctx, name, fn, opts)
}

// step is [Step] for the engine's own steps, whose names put a prefix
// before a checked topic, key or name and so may be longer than a user's.
func step[R any](wctx Context, name string, fn func(ctx context.Context) (R, error), opts *StepOpts) (R, error) {
	r := wctx.workflowRun()
	pos, rec, err := r.begin(name)
	if err != nil {
		var zero R
		return zero, err
	}
	return runStep(r, pos, name, rec, fn, opts)
}

// stepPolicy resolves a step's retry policy and per-attempt timeout: the
// step's own, or the engine's Config.StepRetry.
func (r *run) stepPolicy(opts *StepOpts) (RetryPolicy, time.Duration) {
	if opts == nil {
		return r.e.cfg.StepRetry, 0
	}
	if opts.Retry != nil {
		return opts.Retry.withDefaults(), opts.Timeout
	}
	return r.e.cfg.StepRetry, opts.Timeout
}

// runStep runs (or replays) the step at pos.
func runStep[R any](r *run, pos int, name string, rec *stepRecord, fn func(ctx context.Context) (R, error), opts *StepOpts) (R, error) {
	var zero R
	if rec != nil {
		return replay[R](r, rec)
	}
	policy, timeout := r.stepPolicy(opts)
	started := r.e.clock.now()
	sp := r.trace().step(pos, name, stepKindPlain)
	out, attempts, err := attempt(r, sp, pos, name, policy, timeout, fn)
	if r.e.knobs.Boundary != nil && r.halted() == nil {
		_ = boundary(r, pos, name, hooks.BeforeCheckpoint)
	}
	if h := r.halted(); h != nil {
		sp.end(h)
		return zero, h
	}
	v, err := record(r, pos, name, out, attempts, err, started)
	sp.end(err)
	r.m.step(r.ctx, kindPlain, started, err)
	return v, err
}

// Future is the pending result of a step started with [Go].
type Future[R any] struct {
	done chan struct{}
	out  R
	err  error
}

// Wait waits for the step and returns its result, as [Step] would.
func (f *Future[R]) Wait() (R, error) {
	<-f.done
	return f.out, f.err
}

// Go starts the named step and returns at once; the step runs in its own
// goroutine. Its position in the run is taken when Go is called, so steps
// started one after another from workflow code are recorded at the same
// positions on every execution, however their goroutines interleave: call
// Go in a deterministic order (e.g. a loop over the tool calls of one model
// turn) and Wait for each. On replay a recorded step returns its recorded
// result without running fn.
func Go[R any](wctx Context, name string, fn func(ctx context.Context) (R, error), opts *StepOpts) *Future[R] {
	f := &Future[R]{done: make(chan struct{})}
	r := wctx.workflowRun()
	if err := checkName("step name", name); err != nil {
		f.err = err
		close(f.done)
		return f
	}
	pos, rec, err := r.begin(name)
	if err != nil {
		f.err = err
		close(f.done)
		return f
	}
	go func() {
		defer close(f.done)
		f.out, f.err = runStep(r, pos, name, rec, fn, opts)
	}()
	return f
}

// attempt runs fn under the retry policy.
func attempt[R any](r *run, sp *tspan, pos int, name string, policy RetryPolicy, timeout time.Duration, fn func(context.Context) (R, error)) (R, int, error) {
	var out R
	var err error
	for n := r.failed.first(pos); ; n++ {
		out, err = callStep(r, sp, pos, name, n, timeout, fn)
		if err == nil || errors.Is(err, ErrPermanent) || n >= policy.MaxAttempts {
			return out, n, err
		}
		if err := recordAttempt(r, pos, name, n, err); err != nil { // attempts.go
			return out, n, err
		}
		if err := r.interrupted(); err != nil {
			return out, n, err
		}
		delay := policy.wait(n)
		var ra *retryAfterError
		if errors.As(err, &ra) {
			delay = min(ra.after, policy.MaxDelay)
		}
		if r.debugEnabled() {
			r.stepLog(pos, name, n).Debug("durable: step failed, retrying", "delay", delay, "err", err)
		}
		sp.retry(n, err, delay)
		if serr := r.sleep(delay); serr != nil {
			return out, n, serr
		}
	}
}

func stepContext(r *run, sp *tspan, pos int, name string, n int, timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx := context.WithValue(sp.context(r), stepInfoKey{}, &stepScope{info: StepInfo{WorkflowID: r.id, Name: name, Pos: pos, Attempt: n,
		Resumed: r.failed.resumed(pos, n, r.hist.intent(pos))}})
	if timeout > 0 {
		return context.WithTimeout(ctx, timeout)
	}
	return ctx, func() {}
}

// callStep runs one attempt of fn, turning a panic into a [*PanicError].
func callStep[R any](r *run, sp *tspan, pos int, name string, n int, timeout time.Duration, fn func(context.Context) (R, error)) (out R, err error) {
	ctx, cancel := stepContext(r, sp, pos, name, n, timeout)
	defer cancel()
	if r.e.knobs.Boundary != nil {
		if err := boundary(r, pos, name, hooks.Call); err != nil {
			return out, Permanent(err) // the step returns the halt reason
		}
	}
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Value: fmt.Sprint(p), Stack: string(debug.Stack())}
		}
	}()
	out, err = fn(ctx)
	if ferr := r.flushStreams(ctx); ferr != nil {
		if r.halted() != nil {
			return out, Permanent(ferr) // the step returns the halt reason
		}
		if err == nil {
			err = ferr // the step's timeout ended the wait: this attempt failed
		}
	}
	// When the engine cut the step short, its outcome is not the step's.
	return out, r.cutShort(pos, name, err)
}

// record checkpoints the outcome of a step and returns what replay would.
func record[R any](r *run, pos int, name string, out R, attempts int, runErr error, started time.Time) (R, error) {
	var zero R
	var output, errb []byte
	status := stepDone
	if runErr == nil {
		var err error
		output, err = encodePayload(out, r.e.cfg.MaxPayloadBytes, "output of step %q", name)
		if err != nil {
			runErr = err
		}
	}
	if runErr != nil {
		status, output, errb = stepError, nil, encodeError(runErr)
	}
	w := r.stepWrite(pos, name, status, output, errb, attempts, started)
	if r.deferSteps {
		r.deferred.add(w) // see pending.go
	} else if err := r.writeCheckpoint(w); err != nil {
		return zero, err
	}
	return replayLive(r, out, &stepRecord{pos: pos, name: name, status: status, output: output, err: errb, attempts: attempts})
}

// replayLive is replay for a step that just ran and returned out, which
// rec records: out itself when its type's JSON round trip is exact (see
// jsonIdentity), which spares a decode on the live path.
func replayLive[R any](r *run, out R, rec *stepRecord) (R, error) {
	if rec.status == stepDone && jsonIdentity(&out) {
		return out, nil
	}
	return replay[R](r, rec)
}

// jsonIdentity reports whether *p, of a step's result type R (p is a *R),
// comes back exactly from its JSON round trip, so a live step can return it
// instead of decoding its record: R is bool, a number type of the
// predeclared ones, or string holding valid UTF-8. The test is on R itself,
// not on the dynamic type of an interface value (an int in an `any` decodes
// as a float64); named types may have their own encoding, and invalid UTF-8
// is replaced when encoded.
func jsonIdentity(p any) bool {
	switch x := p.(type) {
	case *bool, *int, *int8, *int16, *int32, *int64, *uint, *uint8, *uint16, *uint32, *uint64, *float32, *float64:
		return true // NaN and infinities never get here: they fail to encode
	case *string:
		return utf8.ValidString(*x)
	}
	return false
}

// replay returns a recorded step's outcome.
func replay[R any](r *run, rec *stepRecord) (R, error) {
	var out R
	switch rec.status {
	case stepDone:
		if err := json.Unmarshal(rec.output, &out); err != nil {
			return out, r.halt(&DecodeError{WorkflowID: r.id, What: fmt.Sprintf("output of step %d %q", rec.pos, rec.name), Err: err})
		}
		return out, nil
	case stepError:
		return out, &StepError{WorkflowID: r.id, Step: rec.name, Pos: rec.pos, Attempts: rec.attempts, Err: decodeError(rec.err)}
	}
	return out, r.halt(&NonDeterminismError{WorkflowID: r.id, Pos: rec.pos, Recorded: rec.name + " (intent step)", Called: rec.name + " (plain step)"})
}

// TxStep runs fn inside a database transaction and records the step's
// output in that same transaction, so the application's writes and the
// checkpoint commit together or not at all. A serialization failure or
// deadlock re-runs the whole transaction (TxStepOpts.ConflictRetries
// times); other errors follow the retry policy. fn must not commit or roll
// back tx. On replay the recorded output is returned without running fn.
func TxStep[R any](wctx Context, name string, fn func(ctx context.Context, tx pgx.Tx) (R, error), opts *TxStepOpts) (_ R, err error) {
	var zero R
	r := wctx.workflowRun()
	if err := checkName("step name", name); err != nil {
		return zero, err
	}
	pos, rec, err := r.begin(name)
	if err != nil {
		return zero, err
	}
	if rec != nil {
		return replay[R](r, rec)
	}
	o := TxStepOpts{}
	if opts != nil {
		o = *opts
	}
	policy, _ := r.stepPolicy(&StepOpts{Retry: o.Retry})
	if o.ConflictRetries == 0 {
		o.ConflictRetries = TxConflictRetriesDefault
	}
	started := r.e.clock.now()
	sp := r.trace().step(pos, name, stepKindTx)
	defer func() { sp.end(err); r.m.step(r.ctx, kindTx, started, err) }()
	conflicts := 0
	for n := r.failed.first(pos); ; {
		out, output, done, err := txAttempt(r, sp, pos, name, n, started, &o, fn)
		if done {
			if err != nil {
				return zero, err
			}
			// After the commit, not inside the transaction: the flush needs
			// a pool connection of its own.
			if ferr := r.flushStreams(r.ctx); ferr != nil {
				return zero, ferr
			}
			return replayLive(r, out, &stepRecord{pos: pos, name: name, status: stepDone, output: output, attempts: n})
		}
		if h := r.halted(); h != nil {
			return zero, h
		}
		switch {
		case isConflict(err) && conflicts < o.ConflictRetries:
			conflicts++
			sp.conflict(n)
			if serr := sleepReal(r, clock.Jitter(time.Duration(conflicts)*2*time.Millisecond, 0.5)); serr != nil {
				return zero, serr
			}
			continue
		case isTransient(err) && !isConflict(err):
			// Connection trouble: the database decides, retry until it is back.
			if serr := sleepReal(r, clock.Jitter(min(time.Duration(1<<min(conflicts, 7))*20*time.Millisecond, 2*time.Second), 0.2)); serr != nil {
				return zero, serr
			}
			conflicts++
			continue
		}
		if errors.Is(err, ErrPermanent) || n >= policy.MaxAttempts {
			return record[R](r, pos, name, zero, n, err, started)
		}
		if rerr := recordAttempt(r, pos, name, n, err); rerr != nil { // attempts.go
			return zero, rerr
		}
		delay := policy.wait(n)
		if r.debugEnabled() {
			r.stepLog(pos, name, n).Debug("durable: step failed, retrying", "delay", delay, "err", err)
		}
		sp.retry(n, err, delay)
		if serr := r.sleep(delay); serr != nil {
			return zero, serr
		}
		n++
	}
}

// txAttempt runs one transaction of a TxStep. done reports that the step is
// settled: recorded (output holds the record) or the run halted (err).
//
// The checkpoint and the COMMIT go to the server in one round trip. If the
// checkpoint is refused, its error aborts the transaction and the COMMIT
// behind it cannot commit the app's writes.
func txAttempt[R any](r *run, sp *tspan, pos int, name string, n int, started time.Time, o *TxStepOpts,
	fn func(context.Context, pgx.Tx) (R, error)) (out R, output []byte, done bool, err error) {
	ctx, cancel := stepContext(r, sp, pos, name, n, o.Timeout)
	defer cancel()
	c, err := r.e.pool.Acquire(ctx)
	if err != nil {
		return out, nil, false, err
	}
	defer c.Release()
	tx, err := c.Conn().BeginTx(ctx, pgx.TxOptions{IsoLevel: o.IsoLevel})
	if err != nil {
		return out, nil, false, err
	}
	finished := false
	defer func() {
		if !finished {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	out, err = callTx(r, pos, name, ctx, tx, fn)
	if err != nil {
		return out, nil, false, err
	}
	if c.Conn().PgConn().TxStatus() != 'T' {
		return out, nil, false, Permanent(fmt.Errorf("durable: step %q: the function committed, rolled back or broke its transaction; the engine commits it", name))
	}
	output, err = encodePayload(out, r.e.cfg.MaxPayloadBytes, "output of step %q", name)
	if err != nil {
		return out, nil, false, err
	}
	batch := &pgx.Batch{}
	r.e.q.QueueInsertStepTx(batch, sysdb.InsertStepParams{WorkflowID: r.id, Pos: pos, Name: name, Status: stepDone, Output: output,
		Attempts: n, StartedAt: started, Epoch: r.epoch})
	batch.Queue("COMMIT")
	br := c.Conn().SendBatch(ctx, batch)
	_, insErr := br.Exec()
	_, commitErr := br.Exec()
	closeErr := br.Close()
	var pgErr *pgconn.PgError
	switch {
	case errors.As(insErr, &pgErr) && pgErr.Code == sysdb.CheckpointRefused:
		_ = tx.Rollback(ctx)
		finished = true
		if derr := r.diagnose(pos, name, false); derr != nil {
			return out, nil, true, derr
		}
		// Recorded by an earlier attempt whose commit acknowledgement was lost.
		output, err := recordedOutput(r, pos)
		return out, output, true, err
	case insErr != nil:
		return out, nil, false, insErr
	case commitErr != nil:
		return out, nil, false, commitErr
	case closeErr != nil:
		return out, nil, false, closeErr
	}
	finished = true
	return out, output, true, nil
}

func callTx[R any](r *run, pos int, name string, ctx context.Context, tx pgx.Tx, fn func(context.Context, pgx.Tx) (R, error)) (out R, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Value: fmt.Sprint(p), Stack: string(debug.Stack())}
		}
	}()
	out, err = fn(ctx, tx)
	return out, r.cutShort(pos, name, err)
}

func recordedOutput(r *run, pos int) ([]byte, error) {
	var rec sysdb.StepRow
	err := r.retryDB("read step", func(ctx context.Context) (err error) {
		rec, err = r.e.iq.Step(ctx, r.e.pool, sysdb.StepParams{WorkflowID: r.id, Pos: pos})
		return err
	})
	if err != nil {
		return nil, r.halt(fmt.Errorf("durable: workflow %q: read step %d: %w", r.id, pos, err))
	}
	return rec.Output, nil
}

// IntentStep runs an external effect whose provider cannot deduplicate. It
// records an intent before calling fn and the outcome after. If a replay
// finds the intent without an outcome (the process died during the call),
// it does not guess: it calls resolve, which must find out what happened
// (ask the provider, check a side table) and return the outcome, or
// [ErrRunAgain] to call fn again. resolve may be nil, which means run again.
func IntentStep[R any](wctx Context, name string, fn func(ctx context.Context) (R, error),
	resolve func(ctx context.Context) (R, error), opts *StepOpts) (_ R, err error) {
	var zero R
	r := wctx.workflowRun()
	if err := checkName("step name", name); err != nil {
		return zero, err
	}
	pos, rec, err := r.begin(name)
	if err != nil {
		return zero, err
	}
	if rec != nil && rec.status != stepIntent {
		return replay[R](r, rec)
	}
	if r.replaying != nil {
		// An effect in flight: a live execution resolves it here.
		return zero, r.halt(errReplayEnd)
	}
	policy, timeout := r.stepPolicy(opts)
	started := r.e.clock.now()
	sp := r.trace().step(pos, name, stepKindIntent)
	defer func() { sp.end(err); r.m.step(r.ctx, kindIntent, started, err) }()
	var out R
	attempts := 0
	runErr := ErrRunAgain
	if rec != nil && resolve != nil {
		sp.event("durable.intent.resolve")
		out, runErr = callStep(r, sp, pos, name, 0, timeout, resolve)
		if h := r.halted(); h != nil {
			return zero, h
		}
	}
	if errors.Is(runErr, ErrRunAgain) {
		if rec == nil {
			if err := r.checkpoint(pos, name, stepIntent, nil, nil, 0, started); err != nil {
				return zero, err
			}
		} else if err := r.interrupted(); err != nil {
			return zero, err
		}
		out, attempts, runErr = attempt(r, sp, pos, name, policy, timeout, fn)
		if h := r.halted(); h != nil {
			return zero, h
		}
	}
	var output, errb []byte
	status := stepDone
	if runErr == nil {
		output, runErr = encodePayload(out, r.e.cfg.MaxPayloadBytes, "output of step %q", name)
	}
	if runErr != nil {
		status, output, errb = stepError, nil, encodeError(runErr)
	}
	var completed bool
	err = r.retryDB("complete intent", func(ctx context.Context) error {
		var err error
		completed, err = r.e.q.CompleteIntent(ctx, r.e.pool, sysdb.CompleteIntentParams{WorkflowID: r.id, Pos: pos, Status: status,
			Output: output, Error: errb, Attempts: attempts, Epoch: r.epoch})
		return err
	})
	if err != nil {
		if h := r.halted(); h != nil {
			return zero, h
		}
		return zero, r.halt(fmt.Errorf("durable: workflow %q: complete step %d %q: %w", r.id, pos, name, err))
	}
	if !completed {
		if err := r.diagnose(pos, name, false); err != nil {
			return zero, err
		}
	}
	return replayLive(r, out, &stepRecord{pos: pos, name: name, status: status, output: output, err: errb, attempts: attempts})
}
