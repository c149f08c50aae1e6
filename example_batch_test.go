package durable_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable"
)

// EnqueueMany puts a whole batch on a queue in one statement, all or
// nothing; EnqueueManyTx does it inside the caller's transaction, with the
// rows that produced the work.
func ExampleWorkflow_EnqueueMany() {
	ctx := context.Background()
	eng, pool, done := exampleEngine("batch")
	defer done()

	resize := durable.Register(eng, "resize", func(wctx durable.Context, image string) (string, error) {
		return image + "@2x", nil
	}, nil)
	images := durable.RegisterQueue(eng, "images", &durable.QueueOpts{WorkerConcurrency: 4})
	if err := eng.Launch(ctx); err != nil {
		panic(err)
	}

	var items []durable.EnqueueItem[string]
	for _, img := range []string{"cat.png", "dog.png", "owl.png"} {
		items = append(items, durable.EnqueueItem[string]{Input: img, Opts: &durable.EnqueueOpts{ID: "resize-" + img}})
	}
	var hs []*durable.Handle[string]
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// ... insert the uploads' rows in tx ...
		var err error
		hs, err = resize.EnqueueManyTx(ctx, tx, images, items)
		return err
	})
	if err != nil {
		panic(err)
	}
	for _, h := range hs { // in the order of the items
		fmt.Println(h.Result(ctx))
	}

	// An item a single enqueue would refuse fails the whole batch.
	items[1].Input = "cat.png" // an existing ID with another input
	_, err = resize.EnqueueMany(ctx, images, items)
	var itemErr *durable.BatchItemError
	fmt.Println(errors.As(err, &itemErr), itemErr.Index, errors.Is(err, durable.ErrInputMismatch))
	// Output:
	// cat.png@2x <nil>
	// dog.png@2x <nil>
	// owl.png@2x <nil>
	// true 1 true
}
