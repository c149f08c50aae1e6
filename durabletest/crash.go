package durabletest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/clock"
	"github.com/durable-go/durable/internal/hooks"
)

// Point is where, at a step boundary, the crash matrix stops a run.
type Point int

const (
	// BeforeStep: the run stops before the step at Pos runs; every
	// earlier step is recorded.
	BeforeStep Point = iota + 1
	// BeforeCheckpoint: the step at Pos ran, and the run stops before its
	// checkpoint is written (plain steps: Step, Go, and the engine's own).
	// The step runs again on resume: plain steps are at-least-once, so
	// its effect must be idempotent (see durable.IdempotencyKey).
	BeforeCheckpoint
	// BeforeFinish: the workflow function returned, and the run stops
	// before its finish is written.
	BeforeFinish
)

// hookPoint is the engine's name of p.
func (p Point) hookPoint() hooks.Point {
	switch p {
	case BeforeCheckpoint:
		return hooks.BeforeCheckpoint
	case BeforeFinish:
		return hooks.BeforeFinish
	}
	return hooks.BeforeStep
}

func pointOf(p hooks.Point) (Point, bool) {
	switch p {
	case hooks.BeforeStep:
		return BeforeStep, true
	case hooks.BeforeCheckpoint:
		return BeforeCheckpoint, true
	case hooks.BeforeFinish:
		return BeforeFinish, true
	}
	return 0, false
}

// Boundary is a point of a run where the crash matrix stops it.
type Boundary struct {
	Pos   int    // the step's position; for BeforeFinish, the run's number of positions
	Step  string // the step's name; "" for BeforeFinish
	Point Point
}

func (b Boundary) String() string {
	switch b.Point {
	case BeforeCheckpoint:
		return fmt.Sprintf("after step %d %q ran, before its checkpoint", b.Pos, b.Step)
	case BeforeFinish:
		return "after the workflow returned, before its finish"
	}
	return fmt.Sprintf("before step %d %q", b.Pos, b.Step)
}

// CrashOpts configure [CrashMatrix]. The zero value works.
type CrashOpts struct {
	// Effects returns counters of the workflow's side effects: what a
	// fake provider did (distinct payments, emails sent), rows written.
	// It is read before and after every run: each crashed and resumed run
	// must change them exactly as the uninterrupted run did. Defaults to
	// nil: only the kit's own check (no recorded step runs again).
	Effects func() map[string]int

	// Same reports whether the result of a resumed run (resumed) is the
	// same as the uninterrupted run's (uninterrupted); both are values of
	// the workflow's result type R. Use it when results rightly differ
	// from run to run, e.g. by the IDs a provider gives out. Defaults to
	// nil: their JSON encodings must be equal.
	Same func(uninterrupted, resumed any) bool

	// Points are the points of each step boundary tried.
	// Defaults to all: BeforeStep, BeforeCheckpoint and BeforeFinish.
	Points []Point

	// ReportOnly makes CrashMatrix return its report without failing the
	// test (to check that it finds a planted fault). Defaults to false.
	ReportOnly bool

	// Timeout bounds each run of the workflow. Defaults to one minute.
	Timeout time.Duration
}

// CrashReport is what [CrashMatrix] found.
type CrashReport struct {
	// Boundaries are those of the uninterrupted run, in the order it
	// reached them; the matrix stopped a run at each.
	Boundaries []Boundary
	// Failures are the boundaries whose stopped and resumed run went
	// wrong, in the order of Boundaries.
	Failures []*CrashFailure
}

// Err returns the first failure, or nil when every boundary passed.
func (r *CrashReport) Err() error {
	if len(r.Failures) == 0 {
		return nil
	}
	return r.Failures[0]
}

// Errors the failures of a crash matrix match.
var (
	// ErrDiverged: the resumed run did not replay what the first
	// execution recorded (a NonDeterminismError), or reached another
	// result than the uninterrupted run.
	ErrDiverged = errors.New("durabletest: replay diverged")
	// ErrRanAgain: a step whose checkpoint was recorded before the crash
	// ran again on resume.
	ErrRanAgain = errors.New("durabletest: a recorded step ran again")
	// ErrEffects: the side effects (CrashOpts.Effects) of the crashed and
	// resumed run differ from the uninterrupted run's.
	ErrEffects = errors.New("durabletest: side effects differ from the uninterrupted run's")
)

// CrashFailure is a boundary whose stopped and resumed run went wrong.
type CrashFailure struct {
	// At is where the run was stopped.
	At Boundary
	// Pos and Step name the step to blame: the position where replay
	// diverged and the step the code called there, or the step that ran
	// again. Pos is -1 when no step is (another result, other effects).
	Pos  int
	Step string
	// Err says what went wrong; it matches ErrDiverged, ErrRanAgain or
	// ErrEffects.
	Err error
}

func (f *CrashFailure) Error() string {
	if f.Pos >= 0 {
		return fmt.Sprintf("crashed %s: step %d %q: %v", f.At, f.Pos, f.Step, f.Err)
	}
	return fmt.Sprintf("crashed %s: %v", f.At, f.Err)
}

func (f *CrashFailure) Unwrap() error { return f.Err }

// CrashMatrix checks that a workflow survives a crash at each of its step
// boundaries. It runs the workflow once on input, uninterrupted, to learn
// its boundaries; then, for each boundary in turn, it starts it again
// (under a new ID) on an engine that it stops hard when the run reaches
// the boundary, as a process dying there would (nothing is handed back),
// and resumes the run on a new engine of the same executor ID (a
// restarted process). It checks that the resumed run replays what was
// recorded and reaches the same result (errors compare by message), that
// no step recorded before the crash runs again, and, with
// CrashOpts.Effects, that the side effects are those of the uninterrupted
// run. The test fails with the first boundary that went wrong, the
// position and name of the step to blame, unless CrashOpts.ReportOnly.
//
// register declares the workflow (and whatever it needs, e.g. its child
// workflows) on an engine; the matrix calls it on each of its engines,
// which share env's pool, schema, configuration and start time. Each run
// has a clock of its own that skips the waits (Options.AutoSkip), so the
// workflow must reach its end from its input alone: a run waiting for a
// message times out. opts may be nil.
func CrashMatrix[P, R any](t testing.TB, env *Env, register func(*durable.Engine) *durable.Workflow[P, R], input P, opts *CrashOpts) *CrashReport {
	t.Helper()
	var o CrashOpts
	if opts != nil {
		o = *opts
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Minute
	}
	if len(o.Points) == 0 {
		o.Points = []Point{BeforeStep, BeforeCheckpoint, BeforeFinish}
	}
	m := &matrix{t: t, env: env, opts: o, prefix: "crash-" + randomHex(4)}

	ref, bounds := reference(m, register, input)
	report := &CrashReport{}
	for _, b := range bounds {
		if !slices.Contains(o.Points, b.Point) {
			continue
		}
		report.Boundaries = append(report.Boundaries, b)
		if f := trial(m, register, input, b, len(report.Boundaries), ref); f != nil {
			report.Failures = append(report.Failures, f)
		}
	}
	if err := report.Err(); err != nil && !o.ReportOnly {
		t.Errorf("durabletest: crash matrix: %d of %d boundaries failed; the first: %v", len(report.Failures), len(report.Boundaries), err)
	}
	return report
}

// matrix is one CrashMatrix call.
type matrix struct {
	t      testing.TB
	env    *Env
	opts   CrashOpts
	prefix string // of its run IDs
}

// engine makes an engine of the matrix: env's configuration under
// executor ID exec, on clk (nil: the system clock), with hook.
func (m *matrix) engine(exec string, clk *clock.Fake, hook func(hooks.Boundary) error) *durable.Engine {
	m.t.Helper()
	cfg := m.env.cfg
	cfg.ExecutorID = exec
	return m.env.newEngine(cfg, hooks.Knobs{Clock: clk, Boundary: hook})
}

// clock returns a new clock for one run, starting where env's started
// and skipping waits; nil when env has the system clock.
func (m *matrix) clock() *clock.Fake {
	if m.env.real {
		return nil
	}
	f := clock.NewFake(m.env.start)
	f.SetAuto(true)
	return f
}

func (m *matrix) effects() map[string]int {
	if m.opts.Effects == nil {
		return nil
	}
	return maps.Clone(m.opts.Effects())
}

// delta is after minus before, without the counters that did not change.
func delta(before, after map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	for k, v := range before {
		if _, ok := after[k]; !ok && v != 0 {
			out[k] = -v
		}
	}
	return out
}

// outcome is a run's result as the matrix compares it: the JSON of its
// output or its error's message, with the run's ID replaced.
type outcome struct {
	val     any // the result, when no error
	out     string
	err     string
	effects map[string]int
}

func (o outcome) String() string {
	if o.err != "" {
		return "error " + strconv.Quote(o.err)
	}
	return "result " + o.out
}

func outcomeOf[R any](id string, out R, err error) outcome {
	if err != nil {
		return outcome{err: strings.ReplaceAll(err.Error(), id, "<run>")}
	}
	b, jerr := json.Marshal(out)
	if jerr != nil {
		return outcome{err: "durabletest: encode the result: " + jerr.Error()}
	}
	return outcome{val: out, out: strings.ReplaceAll(string(b), id, "<run>")}
}

// same reports whether got is ref's outcome.
func (m *matrix) same(ref, got outcome) bool {
	if got.err != ref.err {
		return false
	}
	if m.opts.Same != nil && got.err == "" {
		return m.opts.Same(ref.val, got.val)
	}
	return got.out == ref.out
}

// reference runs the workflow uninterrupted and returns its outcome and
// boundaries.
func reference[P, R any](m *matrix, register func(*durable.Engine) *durable.Workflow[P, R], input P) (outcome, []Boundary) {
	t := m.t
	t.Helper()
	id := m.prefix + "-ref"
	var mu sync.Mutex
	var bounds []Boundary
	seen := map[Boundary]bool{}
	e := m.engine("durabletest-crash-"+randomHex(4), m.clock(), func(b hooks.Boundary) error {
		p, ok := pointOf(b.Point)
		if b.RunID != id || !ok {
			return nil
		}
		bd := Boundary{Pos: b.Pos, Step: b.Name, Point: p}
		mu.Lock()
		if !seen[bd] {
			seen[bd] = true
			bounds = append(bounds, bd)
		}
		mu.Unlock()
		return nil
	})
	wf := register(e)
	launch(t, e)
	defer shutdown(e)
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.Timeout)
	defer cancel()
	before := m.effects()
	h, err := wf.Start(ctx, input, &durable.StartOpts{ID: id})
	if err != nil {
		t.Fatalf("durabletest: crash matrix: start the uninterrupted run: %v", err)
	}
	out, err := h.Result(ctx)
	if ctx.Err() != nil {
		t.Fatalf("durabletest: crash matrix: the uninterrupted run did not finish within %v", m.opts.Timeout)
	}
	ref := outcomeOf(id, out, err)
	ref.effects = delta(before, m.effects())
	mu.Lock()
	defer mu.Unlock()
	return ref, bounds
}

// runLog is what an engine's hook saw of the runs of one trial.
type runLog struct {
	mu       sync.Mutex
	runs     map[string]bool // every run seen: the trial's and its children
	calls    []hooks.Boundary
	diverged *hooks.Boundary
}

func (l *runLog) note(b hooks.Boundary, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runs == nil {
		l.runs = map[string]bool{}
	}
	l.runs[b.RunID] = true
	switch {
	case b.Point == hooks.Call:
		l.calls = append(l.calls, b)
	case b.Point == hooks.Diverged && b.RunID == id && l.diverged == nil:
		l.diverged = &b
	}
}

// trial stops a run at b, resumes it on a new engine and checks it; the
// n-th trial.
func trial[P, R any](m *matrix, register func(*durable.Engine) *durable.Workflow[P, R], input P, b Boundary, n int, ref outcome) *CrashFailure {
	t := m.t
	t.Helper()
	id := m.prefix + "-" + strconv.Itoa(n)
	fail := func(pos int, step string, err error) *CrashFailure {
		return &CrashFailure{At: b, Pos: pos, Step: step, Err: err}
	}
	clk := m.clock()
	exec := "durabletest-crash-" + randomHex(4)
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.Timeout)
	defer cancel()

	// The first execution, stopped at b: the hook holds the run there
	// until the engine is stopped hard, then halts it as a crash would
	// (nothing handed back, nothing more written).
	reached, release := make(chan struct{}), make(chan struct{})
	var fired atomic.Bool
	var first runLog
	crash := fmt.Errorf("durabletest: crash %s: %w", b, durable.ErrShutdown)
	eA := m.engine(exec, clk, func(h hooks.Boundary) error {
		first.note(h, id)
		if h.RunID != id || h.Pos != b.Pos || h.Point != b.Point.hookPoint() || !fired.CompareAndSwap(false, true) {
			return nil
		}
		close(reached)
		<-release
		return crash
	})
	wfA := register(eA)
	launch(t, eA)
	before := m.effects()
	h, err := wfA.Start(ctx, input, &durable.StartOpts{ID: id})
	if err != nil {
		close(release)
		shutdown(eA)
		t.Fatalf("durabletest: crash matrix: start run %s: %v", id, err)
	}
	finished := make(chan outcome, 1)
	rctx, rcancel := context.WithCancel(ctx)
	go func() {
		out, err := h.Result(rctx)
		if rctx.Err() == nil {
			finished <- outcomeOf(id, out, err)
		}
	}()
	var early *outcome
	atBoundary := false
	select {
	case <-reached:
		atBoundary = true
	case o := <-finished:
		early = &o
	case <-ctx.Done():
	}
	rcancel()
	hard, stop := context.WithCancel(context.Background())
	stop()
	_ = eA.Shutdown(hard) // the runs still executing stay owned, as after a crash
	close(release)
	switch {
	case early != nil:
		return fail(-1, "", fmt.Errorf("%w: the run finished (%v) without reaching this boundary, which the uninterrupted run reached", ErrDiverged, early))
	case !atBoundary:
		return fail(-1, "", fmt.Errorf("%w: the run did not reach this boundary within %v", ErrDiverged, m.opts.Timeout))
	}

	// What was recorded when the process died.
	var second runLog
	eB := m.engine(exec, clk, func(h hooks.Boundary) error { second.note(h, id); return nil })
	wfB := register(eB)
	recorded := map[string]map[int]bool{}
	first.mu.Lock()
	runs := slices.Sorted(maps.Keys(first.runs))
	first.mu.Unlock()
	for _, run := range runs {
		steps, err := eB.ListSteps(ctx, run)
		if err != nil {
			continue // a child whose start was not committed
		}
		recorded[run] = map[int]bool{}
		for _, s := range steps {
			recorded[run][s.Pos] = true
		}
	}

	// The restarted process resumes the run at Launch.
	launch(t, eB)
	defer shutdown(eB)
	hB, err := wfB.Handle(ctx, id)
	if err != nil {
		t.Fatalf("durabletest: crash matrix: run %s: %v", id, err)
	}
	out, err := hB.Result(ctx)
	if ctx.Err() != nil {
		return fail(-1, "", fmt.Errorf("%w: the resumed run did not finish within %v", ErrDiverged, m.opts.Timeout))
	}
	got := outcomeOf(id, out, err)
	got.effects = delta(before, m.effects())

	second.mu.Lock()
	defer second.mu.Unlock()
	if d := second.diverged; d != nil {
		return fail(d.Pos, d.Name, fmt.Errorf("%w: %v", ErrDiverged, got))
	}
	if !m.same(ref, got) {
		return fail(-1, "", fmt.Errorf("%w: the resumed run ended with %v, the uninterrupted run with %v", ErrDiverged, got, ref))
	}
	for _, c := range second.calls {
		if recorded[c.RunID][c.Pos] {
			what := "the run"
			if c.RunID != id {
				what = "its child " + strconv.Quote(c.RunID)
			}
			return fail(c.Pos, c.Name, fmt.Errorf("%w: %s recorded it before the crash, and it ran again on resume", ErrRanAgain, what))
		}
	}
	if m.opts.Effects != nil && !maps.Equal(got.effects, ref.effects) {
		return fail(-1, "", fmt.Errorf("%w: the crashed and resumed run changed them by %v, the uninterrupted run by %v", ErrEffects, got.effects, ref.effects))
	}
	return nil
}
