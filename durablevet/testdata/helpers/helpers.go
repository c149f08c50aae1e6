// Package helpers has workflows that call helper functions and closures.
package helpers

import (
	"context"
	"math/rand"
	"net/http"
	"sort"
	"time"

	"github.com/durable-go/durable"
)

type app struct{ client *http.Client }

func (a *app) bad(wctx durable.Context, in []int) (int, error) {
	stamp()
	a.fetch("http://example.com")
	deep()
	_ = countdown(3)
	_ = pick[int](in)
	func() {
		_ = time.Now() // want `time.Now in workflow code`
	}()
	defer func() {
		_ = time.Now() // want `time.Now in workflow code`
	}()
	sort.Slice(in, func(i, j int) bool {
		return rand.Intn(2) == 0 // want `rand.Intn in workflow code`
	})
	run := func(ctx context.Context) {
		_ = time.Now() // want `time.Now in workflow code`
	}
	run(wctx) // run takes a context.Context, but runs here, in the workflow
	return len(in), nil
}

func stamp() time.Time {
	return time.Now() // want `time.Now in stamp \(called from workflow code\) returns another time on replay`
}

func (a *app) fetch(url string) {
	_, _ = a.client.Get(url) // want `\(\*http.Client\).Get in fetch \(called from workflow code\)`
}

func deep()   { deeper() }
func deeper() { time.Sleep(time.Second) } // want `time.Sleep in deeper \(called from workflow code\)`

func countdown(n int) int {
	if n == 0 {
		return int(time.Now().Unix()) // want `time.Now in countdown \(called from workflow code\)`
	}
	return countdown(n - 1)
}

func pick[T any](xs []T) T {
	return xs[rand.Intn(len(xs))] // want `rand.Intn in pick \(called from workflow code\)`
}

// unused is not reached from workflow code.
func unused() time.Time { return time.Now() }

func (a *app) good(wctx durable.Context, url string) (int, error) {
	// fetchStep builds a step function: its literal is step code.
	n, err := durable.Step(wctx, "fetch", a.fetchStep(url), nil)
	if err != nil {
		return 0, err
	}
	// stepFunc is passed, not called, by workflow code.
	m, err := durable.Step(wctx, "stamp", stepFunc, nil)
	return n + m, err
}

func (a *app) fetchStep(url string) func(context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		resp, err := a.client.Get(url)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		return resp.StatusCode, nil
	}
}

func stepFunc(ctx context.Context) (int, error) { return int(time.Now().Unix()), nil }
