// Package await has workflows that wait for other runs.
package await

import (
	"context"

	"github.com/durable-go/durable"
)

var child *durable.Workflow[int, int]

func bad(wctx durable.Context, in int) (int, error) {
	h, err := child.StartChild(wctx, in, nil)
	if err != nil {
		return 0, err
	}
	if _, err := h.Status(wctx); err != nil { // want `\(\*durable.Handle\).Status in workflow code waits outside the run's record`
		return 0, err
	}
	return h.Result(wctx) // want `\(\*durable.Handle\).Result in workflow code waits outside the run's record, so a resumed run waits again and may see another outcome: use h.Await\(wctx\), which records the outcome`
}

func client(wctx durable.Context, c *durable.Client) (int, error) {
	_, err := c.Status(wctx, "other") // want `\(\*durable.Client\).Status in workflow code does its I/O again on every replay`
	return 0, err
}

func good(wctx durable.Context, in int) (int, error) {
	h, err := child.StartChild(wctx, in, nil)
	if err != nil {
		return 0, err
	}
	// Inside a step, the wait's outcome is the step's recorded output.
	if _, err := durable.Step(wctx, "peek", func(ctx context.Context) (durable.Status, error) {
		return h.Status(ctx)
	}, nil); err != nil {
		return 0, err
	}
	return h.Await(wctx)
}

// notWorkflow is no workflow code: it may wait with Result.
func notWorkflow(ctx context.Context, h *durable.Handle[int]) (int, error) { return h.Result(ctx) }
