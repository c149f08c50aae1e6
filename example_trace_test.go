package durable_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"

	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/durable-go/durable"
)

// Spans go to the tracer provider given in Config (here the OpenTelemetry
// SDK with an in-memory exporter). A run started under the caller's span
// joins its trace: the start span, the run span, one span per step.
func ExampleConfig_tracerProvider() {
	ctx := context.Background()
	pool, _ := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	defer pool.Close()
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS example_trace CASCADE")

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	eng, _ := durable.New(pool, &durable.Config{
		Schema:         "example_trace",
		TracerProvider: tp,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	charge := durable.Register(eng, "charge", func(wctx durable.Context, cents int) (string, error) {
		auth, err := durable.Step(wctx, "authorize", func(ctx context.Context) (string, error) {
			durable.Logger(ctx).Info("authorizing", "cents", cents) // carries workflow_id, step, trace_id...
			return "auth-1", nil
		}, nil)
		if err != nil {
			return "", err
		}
		return durable.Step(wctx, "capture", func(ctx context.Context) (string, error) { return auth + " captured", nil }, nil)
	}, nil)
	_ = eng.Launch(ctx)
	defer func() { _ = eng.Shutdown(ctx) }()

	ctx, request := tp.Tracer("app").Start(ctx, "POST /checkout")
	h, _ := charge.Start(ctx, 1999, &durable.StartOpts{ID: "order-7"})
	request.End()
	out, _ := h.Result(ctx)
	fmt.Println(out)

	spans := exp.GetSpans()
	names := map[string]string{} // span ID -> name
	for _, s := range spans {
		names[s.SpanContext.SpanID().String()] = s.Name
	}
	var tree []string
	for _, s := range spans {
		if s.SpanContext.TraceID() != request.SpanContext().TraceID() {
			continue
		}
		parent := "(root)"
		if s.Parent.IsValid() {
			parent = names[s.Parent.SpanID().String()]
		}
		tree = append(tree, fmt.Sprintf("%s <- %s", s.Name, parent))
	}
	sort.Strings(tree)
	for _, l := range tree {
		fmt.Println(l)
	}
	// Output:
	// auth-1 captured
	// POST /checkout <- (root)
	// durable.run charge <- durable.start charge
	// durable.start charge <- POST /checkout
	// durable.step authorize <- durable.run charge
	// durable.step capture <- durable.run charge
}
