// Package clock has workflows that read the clock.
package clock

import (
	"context"
	"time"

	"github.com/durable-go/durable"
)

func bad(wctx durable.Context, in string) (string, error) {
	start := time.Now()             // want `time.Now in workflow code returns another time on replay: use durable.Now\(wctx\)`
	_ = time.Since(start)           // want `time.Since in workflow code depends on the current time, which differs on replay: subtract from durable.Now\(wctx\)`
	_ = time.Until(start)           // want `time.Until in workflow code depends on the current time`
	time.Sleep(time.Second)         // want `time.Sleep in workflow code is not recorded, so a resumed run waits again from the start: use durable.Sleep\(wctx, d\)`
	<-time.After(time.Second)       // want `time.After in workflow code is not recorded` `channel receive in workflow code`
	t := time.NewTimer(time.Second) // want `time.NewTimer in workflow code is not recorded.*durable.Recv with a timeout`
	t.Stop()
	now := time.Now // want `time.Now in workflow code`
	return now().String(), nil
}

func register(e *durable.Engine) {
	durable.Register(e, "literal", func(wctx durable.Context, in int) (int, error) {
		return time.Now().Second() + in, nil // want `time.Now in workflow code`
	}, nil)
}

// A workflow declared as a package-level func literal.
var declared = func(wctx durable.Context, in int) (int, error) {
	return time.Now().Second() + in, nil // want `time.Now in workflow code`
}

func good(wctx durable.Context, in string) (string, error) {
	now, err := durable.Now(wctx)
	if err != nil {
		return "", err
	}
	at, err := durable.Step(wctx, "stamp", func(ctx context.Context) (time.Time, error) {
		time.Sleep(time.Millisecond)
		return time.Now().Add(time.Since(now)), nil
	}, nil)
	if err != nil {
		return "", err
	}
	if err := durable.Sleep(wctx, at.Sub(now)); err != nil {
		return "", err
	}
	return now.Add(time.Hour).Format(time.RFC3339), nil // methods of time.Time are fine
}

// notWorkflow is no workflow code: it may read the clock.
func notWorkflow(ctx context.Context) time.Time { return time.Now() }
