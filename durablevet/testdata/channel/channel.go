// Package channel has workflows that use channels.
package channel

import (
	"context"
	"time"

	"github.com/durable-go/durable"
)

var results = make(chan string, 1) // filled by a web handler

func bad(wctx durable.Context, in string) (string, error) {
	ch := make(chan string, 1)
	ch <- in // want `channel send in workflow code synchronises with code outside the run's record, which differs on replay: receive messages with durable.Recv`
	select { // want `select in workflow code takes whichever case is ready first, which differs on replay`
	case s := <-ch:
		in = s
	case <-wctx.Done():
		return "", wctx.Err()
	}
	for s := range ch { // want `range over a channel in workflow code synchronises`
		in += s
	}
	<-wctx.Done()         // want `channel receive in workflow code`
	return <-results, nil // want `channel receive in workflow code`
}

func good(wctx durable.Context, in string) (string, error) {
	msg, ok, err := durable.Recv[string](wctx, "approval", time.Hour)
	if err != nil || !ok {
		return "", err
	}
	out, err := durable.Step(wctx, "wait-for-result", func(ctx context.Context) (string, error) {
		select {
		case s := <-results:
			return s, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}, nil)
	return in + msg + out, err
}
