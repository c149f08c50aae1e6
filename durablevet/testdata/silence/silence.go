// Package silence has findings silenced on purpose.
package silence

import (
	"os"
	"time"

	"github.com/durable-go/durable"
)

func wf(wctx durable.Context, in int) (int, error) {
	_ = time.Now() //durable:nondeterministic-ok logged only, never branched on
	//durable:nondeterministic-ok a stand-alone directive covers the next line
	_ = time.Now()
	_ = time.Now()     // want `time.Now in workflow code`
	_ = os.Getenv("A") //durable:nondeterministic-ok
	_ = os.Getenv("B") // want `os.Getenv in workflow code`
	trace()            //durable:nondeterministic-ok the helper only logs: not followed
	quiet()
	_ = time.Now() //durable:nondeterministic-okay is not the directive // want `time.Now in workflow code`
	return in, nil
}

func trace() { _ = time.Now() }

// quiet only measures.
//
//durable:nondeterministic-ok
func quiet() { _ = time.Now() }

// quietWorkflow is a workflow whose doc comment silences it.
//
//durable:nondeterministic-ok
func quietWorkflow(wctx durable.Context, in int) (int, error) {
	return time.Now().Second(), nil
}
