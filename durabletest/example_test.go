package durabletest_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/durabletest"
)

// ExampleSchema gives a test a Postgres (DATABASE_URL, or a private
// cluster when the server binaries are installed) and a schema of its own
// for an engine it builds itself.
func ExampleSchema() {
	t := exampleT() // in a test: its *testing.T
	defer t.end()

	pool := durabletest.Pool(t)
	e, err := durable.New(pool, &durable.Config{Schema: durabletest.Schema(t), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	greet := durable.Register(e, "greet", func(wctx durable.Context, name string) (string, error) {
		return durable.Step(wctx, "greet", func(context.Context) (string, error) { return "hello " + name, nil }, nil)
	}, nil)
	ctx := context.Background()
	if err := e.Launch(ctx); err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(ctx)
	h, _ := greet.Start(ctx, "ada", nil)
	fmt.Println(h.Result(ctx))
	// Output: hello ada <nil>
}

// ExampleClock_Advance tests a workflow that sleeps two days: the test
// moves the engine's clock instead of waiting.
func ExampleClock_Advance() {
	t := exampleT() // in a test: its *testing.T
	defer t.end()

	env := durabletest.New(t, nil)
	remind := durable.Register(env.Engine, "remind", func(wctx durable.Context, who string) (string, error) {
		if err := durable.Sleep(wctx, 48*time.Hour); err != nil {
			return "", err
		}
		return durable.Step(wctx, "remind", func(context.Context) (string, error) { return "reminded " + who, nil }, nil)
	}, nil)
	env.Launch()
	ctx := context.Background()
	h, _ := remind.Start(ctx, "ada", nil)
	_ = env.Clock.BlockUntil(ctx, 1) // the run sleeps
	env.Clock.Advance(48 * time.Hour)
	fmt.Println(h.Result(ctx))
	// Output: reminded ada <nil>
}

// ExampleOptions_autoSkip lets the clock jump to the next wake-up on its
// own whenever every run waits on it.
func ExampleOptions_autoSkip() {
	t := exampleT() // in a test: its *testing.T
	defer t.end()

	env := durabletest.New(t, &durabletest.Options{AutoSkip: true})
	trial := durable.Register(env.Engine, "trial", func(wctx durable.Context, _ struct{}) (string, error) {
		for day := 1; day <= 30; day++ {
			if err := durable.Sleep(wctx, 24*time.Hour); err != nil {
				return "", err
			}
		}
		return "trial over", nil
	}, nil)
	env.Launch()
	ctx := context.Background()
	start := env.Clock.Now()
	h, _ := trial.Start(ctx, struct{}{}, nil)
	out, err := h.Result(ctx)
	fmt.Println(out, err, env.Clock.Now().Sub(start))
	// Output: trial over <nil> 720h0m0s
}

// ExampleCrashMatrix checks that a workflow survives a crash at every step
// boundary, with each payment made once.
func ExampleCrashMatrix() {
	t := exampleT() // in a test: its *testing.T
	defer t.end()

	var mu sync.Mutex
	payments := map[string]bool{} // a provider that dedupes on the key
	register := func(e *durable.Engine) *durable.Workflow[int, string] {
		return durable.Register(e, "order", func(wctx durable.Context, cents int) (string, error) {
			if _, err := durable.Step(wctx, "pay", func(ctx context.Context) (bool, error) {
				mu.Lock()
				defer mu.Unlock()
				payments[durable.IdempotencyKey(ctx)] = true
				return true, nil
			}, nil); err != nil {
				return "", err
			}
			return durable.Step(wctx, "ship", func(context.Context) (string, error) { return "shipped", nil }, nil)
		}, nil)
	}
	env := durabletest.New(t, nil)
	report := durabletest.CrashMatrix(t, env, register, 4999, &durabletest.CrashOpts{
		Effects: func() map[string]int {
			mu.Lock()
			defer mu.Unlock()
			return map[string]int{"payments": len(payments)}
		},
	})
	for _, b := range report.Boundaries {
		fmt.Println(b)
	}
	fmt.Println(report.Err())
	// Output:
	// before step 0 "pay"
	// after step 0 "pay" ran, before its checkpoint
	// before step 1 "ship"
	// after step 1 "ship" ran, before its checkpoint
	// after the workflow returned, before its finish
	// <nil>
}

// exampleTB stands for the *testing.T of a test in the examples, which
// have none: it runs the cleanups at end and reports failures by
// printing them (an example then fails on its output).
type exampleTB struct {
	testing.TB // not called: every method the kit uses is below
	mu         sync.Mutex
	cleanups   []func()
}

func exampleT() *exampleTB { return &exampleTB{} }

func (t *exampleTB) Helper()                   {}
func (t *exampleTB) Name() string              { return "Example" }
func (t *exampleTB) Cleanup(f func())          { t.mu.Lock(); t.cleanups = append(t.cleanups, f); t.mu.Unlock() }
func (t *exampleTB) Log(args ...any)           {}
func (t *exampleTB) Logf(string, ...any)       {}
func (t *exampleTB) Error(args ...any)         { fmt.Println(args...) }
func (t *exampleTB) Errorf(f string, a ...any) { fmt.Printf(f+"\n", a...) }
func (t *exampleTB) Fatal(args ...any)         { fmt.Println(args...); panic("example failed") }
func (t *exampleTB) Fatalf(f string, a ...any) { fmt.Printf(f+"\n", a...); panic("example failed") }
func (t *exampleTB) Skip(args ...any)          { fmt.Println(args...); panic("example skipped") }
func (t *exampleTB) Skipf(f string, a ...any)  { fmt.Printf(f+"\n", a...); panic("example skipped") }

// end runs the cleanups, last registered first.
func (t *exampleTB) end() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}
