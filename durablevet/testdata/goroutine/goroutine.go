// Package goroutine has workflows that start goroutines.
package goroutine

import (
	"context"
	"sync"

	"github.com/durable-go/durable"
)

func bad(wctx durable.Context, in []string) (int, error) {
	done := make(chan int, len(in))
	for _, s := range in {
		go func() { // want `go statement in workflow code runs code whose order and timing differ on replay: start parallel steps with durable.Go\(wctx, name, fn, opts\) and wait with Future.Wait`
			n, _ := durable.Step(wctx, "len-"+s, func(context.Context) (int, error) { return len(s), nil }, nil)
			done <- n
		}()
	}
	var wg sync.WaitGroup
	wg.Go(func() {}) // want `\(\*sync.WaitGroup\).Go in workflow code runs code whose order`
	wg.Wait()
	return len(in), nil
}

func good(wctx durable.Context, in []string) (int, error) {
	futures := make([]*durable.Future[int], len(in))
	for i, s := range in {
		futures[i] = durable.Go(wctx, "len-"+s, func(ctx context.Context) (int, error) {
			// Goroutines inside a step are the step's business.
			var wg sync.WaitGroup
			wg.Go(func() {})
			go func() {}()
			wg.Wait()
			return len(s), nil
		}, nil)
	}
	total := 0
	for _, f := range futures {
		n, err := f.Wait()
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}
