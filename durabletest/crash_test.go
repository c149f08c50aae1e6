package durabletest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/durabletest"
)

// provider is a fake payments provider: it counts calls and distinct
// payments (by idempotency key).
type provider struct {
	mu    sync.Mutex
	calls int
	keys  map[string]bool
}

func (p *provider) pay(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if p.keys == nil {
		p.keys = map[string]bool{}
	}
	p.keys[key] = true
}

func (p *provider) effects() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return map[string]int{"payments": len(p.keys)}
}

// checkout reserves, sleeps a day, pays (deduplicated on the step's
// idempotency key, or not with dedupe false) and confirms.
func checkout(p *provider, dedupe bool) func(*durable.Engine) *durable.Workflow[int, string] {
	return func(e *durable.Engine) *durable.Workflow[int, string] {
		return durable.Register(e, "checkout", func(wctx durable.Context, amount int) (string, error) {
			if _, err := durable.Step(wctx, "reserve", func(context.Context) (int, error) { return amount, nil }, nil); err != nil {
				return "", err
			}
			if err := durable.Sleep(wctx, 24*time.Hour); err != nil {
				return "", err
			}
			if _, err := durable.Step(wctx, "pay", func(ctx context.Context) (bool, error) {
				key := durable.IdempotencyKey(ctx)
				if !dedupe {
					key += time.Now().String() // a new payment on every call
				}
				p.pay(key)
				return true, nil
			}, nil); err != nil {
				return "", err
			}
			return durable.Step(wctx, "confirm", func(context.Context) (string, error) { return "paid", nil }, nil)
		}, nil)
	}
}

// TestCrashMatrixPasses: a deterministic workflow with an idempotent
// effect passes at every boundary, which are those of its steps.
func TestCrashMatrixPasses(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, nil)
	p := &provider{}
	rep := durabletest.CrashMatrix(t, env, checkout(p, true), 30, &durabletest.CrashOpts{Effects: p.effects})
	require.NoError(t, rep.Err())
	var before []string
	for _, b := range rep.Boundaries {
		if b.Point == durabletest.BeforeStep {
			before = append(before, b.Step)
		}
	}
	require.Equal(t, []string{"reserve", "durable.sleep", "pay", "confirm"}, before)
	require.Len(t, rep.Boundaries, 9) // 4 steps, before each and before each checkpoint, and the finish
}

// TestCrashMatrixFindsRepeatedEffect: a payment not deduplicated on the
// idempotency key is made twice when the process dies after it and
// before its checkpoint; the matrix says where.
func TestCrashMatrixFindsRepeatedEffect(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, nil)
	p := &provider{}
	rep := durabletest.CrashMatrix(t, env, checkout(p, false), 30, &durabletest.CrashOpts{Effects: p.effects, ReportOnly: true,
		Points: []durabletest.Point{durabletest.BeforeCheckpoint}})
	require.Len(t, rep.Boundaries, 4)
	require.Len(t, rep.Failures, 1, "%v", rep.Failures)
	f := rep.Failures[0]
	require.ErrorIs(t, f, durabletest.ErrEffects)
	require.Equal(t, durabletest.Boundary{Pos: 2, Step: "pay", Point: durabletest.BeforeCheckpoint}, f.At)
}

// TestCrashMatrixFindsDifferentResult: a workflow whose result depends on
// something outside its steps (here, whether it runs for the first time)
// ends otherwise when resumed, from the first boundary on.
func TestCrashMatrixFindsDifferentResult(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, nil)
	var mu sync.Mutex
	executions := map[string]int{}
	register := func(e *durable.Engine) *durable.Workflow[int, int] {
		return durable.Register(e, "counted", func(wctx durable.Context, in int) (int, error) {
			mu.Lock()
			executions[wctx.WorkflowID()]++
			n := executions[wctx.WorkflowID()] // planted: not recorded
			mu.Unlock()
			return durable.Step(wctx, "double", func(context.Context) (int, error) { return 2*in + n, nil }, nil)
		}, nil)
	}
	rep := durabletest.CrashMatrix(t, env, register, 1, &durabletest.CrashOpts{ReportOnly: true})
	require.Len(t, rep.Boundaries, 3)
	require.Len(t, rep.Failures, 2, "%v", rep.Failures) // replayed after the checkpoint, the result is the first one's
	f := rep.Failures[0]
	require.ErrorIs(t, f, durabletest.ErrDiverged)
	require.Equal(t, durabletest.Boundary{Pos: 0, Step: "double", Point: durabletest.BeforeStep}, f.At)
	require.Equal(t, -1, f.Pos)
}

// TestCrashMatrixFindsNonDeterminism: a workflow that calls another step
// when it runs again (here: on a second execution in this process) fails
// from the first boundary where the step it changes is recorded, and the
// report names that step.
func TestCrashMatrixFindsNonDeterminism(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, nil)
	var mu sync.Mutex
	executions := map[string]int{}
	register := func(e *durable.Engine) *durable.Workflow[int, int] {
		return durable.Register(e, "planted", func(wctx durable.Context, in int) (int, error) {
			mu.Lock()
			executions[wctx.WorkflowID()]++
			again := executions[wctx.WorkflowID()] > 1
			mu.Unlock()
			a, err := durable.Step(wctx, "a", func(context.Context) (int, error) { return in, nil }, nil)
			if err != nil {
				return 0, err
			}
			name := "b"
			if again {
				name = "b-v2" // the planted non-determinism
			}
			b, err := durable.Step(wctx, name, func(context.Context) (int, error) { return 1, nil }, nil)
			if err != nil {
				return 0, err
			}
			c, err := durable.Step(wctx, "c", func(context.Context) (int, error) { return 2, nil }, nil)
			return a + b + c, err
		}, nil)
	}
	rep := durabletest.CrashMatrix(t, env, register, 1, &durabletest.CrashOpts{ReportOnly: true})
	require.Error(t, rep.Err())
	f := rep.Failures[0]
	require.ErrorIs(t, f, durabletest.ErrDiverged)
	require.Equal(t, durabletest.Boundary{Pos: 2, Step: "c", Point: durabletest.BeforeStep}, f.At, "first failure: %v", f)
	require.Equal(t, 1, f.Pos)
	require.Equal(t, "b-v2", f.Step)
	require.Len(t, rep.Failures, 3) // before c, before c's checkpoint, before the finish
	for _, f := range rep.Failures {
		require.True(t, errors.Is(f, durabletest.ErrDiverged) && f.Pos == 1, "%v", f)
	}
}
