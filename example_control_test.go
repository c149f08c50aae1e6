package durable_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/durable-go/durable"
)

// Cancel stops a run wherever it is: at its next step boundary if it is
// executing, at once if it sleeps, waits or is queued. Its result is then
// an error matching ErrCancelled and context.Canceled. Engine.Resume
// would continue it from its last checkpoint.
func ExampleEngine_Cancel() {
	ctx := context.Background()
	eng, _, done := exampleEngine("cancel")
	defer done()

	approval := durable.Register(eng, "approval", func(wctx durable.Context, amount int) (bool, error) {
		ok, _, err := durable.Recv[bool](wctx, "approved", 48*time.Hour)
		return ok, err
	}, nil)
	if err := eng.Launch(ctx); err != nil {
		panic(err)
	}

	h, err := approval.Start(ctx, 5000, &durable.StartOpts{ID: "expense-12"})
	if err != nil {
		panic(err)
	}
	if err := eng.Cancel(ctx, "expense-12", nil); err != nil {
		panic(err)
	}
	_, err = h.Result(ctx)
	fmt.Println(errors.Is(err, durable.ErrCancelled), errors.Is(err, context.Canceled))
	status, err := h.Status(ctx)
	fmt.Println(status, err)
	// Output:
	// true true
	// cancelled <nil>
}
