package durable_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
)

// newExampleClient is a client on the schema of eng, through pool,
// polling instead of listening when the tests run through a pooler in
// transaction mode (see forPooler).
func newExampleClient(pool *pgxpool.Pool, eng *durable.Engine) *durable.Client {
	cfg := &durable.ClientConfig{Schema: eng.Schema(), AppVersion: eng.AppVersion()}
	if pgtest.Pooled() {
		cfg.PollOnly, cfg.PollInterval = true, 50*time.Millisecond
	}
	client, err := durable.NewClient(pool, cfg)
	if err != nil {
		panic(err)
	}
	return client
}

// A process that only submits work starts runs of a workflow that the
// executors register, typed, without its function and without an engine.
func ExampleClientWorkflow() {
	ctx := context.Background()
	eng, pool, done := exampleEngine("client")
	defer done()

	// The executor's side: it registers the workflow and runs it.
	type Signup struct{ Email string }
	durable.Register(eng, "onboard", func(wctx durable.Context, in Signup) (string, error) {
		return durable.Step(wctx, "provision", func(ctx context.Context) (string, error) {
			return "workspace of " + in.Email, nil
		}, nil)
	}, nil)
	if err := eng.Launch(ctx); err != nil {
		panic(err)
	}

	// The submitter's side (an API server, say): the name and the types.
	client := newExampleClient(pool, eng)
	defer client.Close()
	onboard := durable.ClientWorkflow[Signup, string](client, "onboard")
	h, err := onboard.Start(ctx, Signup{Email: "ada@example.com"}, &durable.StartOpts{ID: "signup-ada"})
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	// Output: workspace of ada@example.com <nil>
}

// A client talks to a run by its ID: it reads the run's events, sends it
// messages and waits for its result, with values as JSON.
func ExampleClient_Send() {
	ctx := context.Background()
	eng, pool, done := exampleEngine("client_send")
	defer done()

	durable.Register(eng, "refund", func(wctx durable.Context, amount int) (string, error) {
		if err := durable.SetEvent(wctx, "awaiting", "approval of "+fmt.Sprint(amount)); err != nil {
			return "", err
		}
		approved, _, err := durable.Recv[bool](wctx, "approval", time.Minute)
		if err != nil || !approved {
			return "refused", err
		}
		return "refunded", nil
	}, nil)
	if err := eng.Launch(ctx); err != nil {
		panic(err)
	}

	client := newExampleClient(pool, eng)
	defer client.Close()
	id, err := client.Start(ctx, "refund", 120, nil)
	if err != nil {
		panic(err)
	}
	awaiting, _, err := client.GetEvent(ctx, id, "awaiting", 10*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(awaiting))
	if err := client.Send(ctx, id, "approval", true, nil); err != nil {
		panic(err)
	}
	out, err := client.Result(ctx, id)
	fmt.Println(string(out), err)
	// Output:
	// "approval of 120"
	// "refunded" <nil>
}

// A client declares a queue, so work is queued before any executor that
// works it has started; the first executor keeps the declared limits.
func ExampleClient_DeclareQueue() {
	ctx := context.Background()
	eng, pool, done := exampleEngine("client_queue")
	defer done()
	if err := durable.Migrate(ctx, pool, eng.Schema()); err != nil {
		panic(err)
	}

	client := newExampleClient(pool, eng)
	defer client.Close()
	if err := client.DeclareQueue(ctx, "thumbnails", &durable.QueueOpts{GlobalConcurrency: 2}); err != nil {
		panic(err)
	}
	resize := durable.ClientWorkflow[string, string](client, "resize")
	h, err := resize.Enqueue(ctx, "thumbnails", "cat.png", &durable.EnqueueOpts{DedupID: "cat.png"})
	if err != nil {
		panic(err)
	}

	// Later, the first worker starts.
	durable.Register(eng, "resize", func(wctx durable.Context, file string) (string, error) {
		return "thumb-" + file, nil
	}, nil)
	thumbnails := durable.RegisterQueue(eng, "thumbnails", nil)
	if err := eng.Launch(ctx); err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	st, err := thumbnails.Stats(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("global concurrency:", st.Settings.GlobalConcurrency)
	// Output:
	// thumb-cat.png <nil>
	// global concurrency: 2
}
