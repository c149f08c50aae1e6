// Package global has workflows that use package-level variables.
package global

import (
	"context"
	"errors"
	"sync"

	"github.com/durable-go/durable"
)

var (
	counter  int
	cache    = map[string]string{}
	limit    = 10 // changed at run time by setLimit
	greeting = "hello"
	region   string // set at start-up, in init
	errEmpty = errors.New("empty input")
	mu       sync.Mutex
	child    *durable.Workflow[string, string]
	hits     int      // changed by bump, which is silenced
	epoch    int      // changed by the func literal rotate
	started  = &epoch // taking its address at start-up changes nothing yet
)

var rotate = func() { epoch++ }

func init() { region = "eu" }

func setLimit(n int) { limit = n }

// bump counts the requests of a web handler.
//
//durable:nondeterministic-ok
func bump() { hits++ }

func register(e *durable.Engine) {
	child = durable.Register(e, "child", good, nil)
}

func bad(wctx durable.Context, in string) (string, error) {
	counter++            // want `write of package-level variable counter in workflow code happens again on every replay, and other runs see it: keep state in the workflow's local variables, or record it with a durable.Step`
	cache[in] = "x"      // want `write of package-level variable cache in workflow code`
	mu.Lock()            // want `write of package-level variable mu in workflow code`
	defer mu.Unlock()    // want `write of package-level variable mu in workflow code`
	if len(in) > limit { // want `read of package-level variable limit in workflow code may see another value on replay \(the package changes it at run time\): pass the value in the workflow's input, or read it in a durable.Step`
		return "", nil
	}
	_ = epoch                                   // want `read of package-level variable epoch in workflow code`
	return cache["y"] + string(rune(hits)), nil // want `read of package-level variable cache in workflow code` `read of package-level variable hits`
}

func good(wctx durable.Context, in string) (string, error) {
	if in == "" {
		return "", errEmpty
	}
	n, err := durable.Step(wctx, "count", func(context.Context) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		counter++
		return counter + limit, nil
	}, nil)
	if err != nil {
		return "", err
	}
	local := n
	local++
	return greeting + region + in + string(rune(local+*started)), nil
}

func parent(wctx durable.Context, in string) (string, error) {
	h, err := child.StartChild(wctx, in, nil) // a handle set up at start-up
	if err != nil {
		return "", err
	}
	return h.Await(wctx)
}
