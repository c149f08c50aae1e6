package durable_test

import (
	"context"
	"fmt"

	"github.com/durable-go/durable"
)

// Tags find runs again: set at start, changed by the workflow's code with
// SetTag (a recorded step, written once), and filtered on by
// ListWorkflows, which keeps the runs that have every tag given.
func ExampleSetTag() {
	ctx := context.Background()
	eng, _, done := exampleEngine("tags")
	defer done()

	ship := durable.Register(eng, "ship", func(wctx durable.Context, order string) (string, error) {
		if err := durable.SetTag(wctx, "stage", "packed"); err != nil {
			return "", err
		}
		// ... the steps that ship it ...
		return order + " shipped", durable.SetTag(wctx, "stage", "shipped")
	}, nil)
	if err := eng.Launch(ctx); err != nil {
		panic(err)
	}

	for _, o := range []struct{ id, customer string }{{"o-1", "acme"}, {"o-2", "globex"}, {"o-3", "acme"}} {
		h, err := ship.Start(ctx, o.id, &durable.StartOpts{ID: o.id, Tags: map[string]string{"customer": o.customer}})
		if err != nil {
			panic(err)
		}
		if _, err := h.Result(ctx); err != nil {
			panic(err)
		}
	}
	runs, _, err := eng.ListWorkflows(ctx, &durable.ListParams{
		Tags:         map[string]string{"customer": "acme", "stage": "shipped"},
		OmitPayloads: true,
	})
	if err != nil {
		panic(err)
	}
	for _, r := range runs {
		fmt.Println(r.ID, r.Tags)
	}
	// Output:
	// o-3 map[customer:acme stage:shipped]
	// o-1 map[customer:acme stage:shipped]
}
