package durable_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
)

// BenchmarkStepMetrics measures one plain step (executed and
// checkpointed) of a long run: with no MeterProvider set and OpenTelemetry's
// global provider unset (global), with an explicit no-op provider (noop),
// and with the SDK's (sdk). Compare allocs/op: metrics off must not add any.
func BenchmarkStepMetrics(b *testing.B) {
	for _, mode := range []string{"global", "noop", "sdk"} {
		b.Run(mode, func(b *testing.B) {
			var mp metric.MeterProvider
			switch mode {
			case "noop":
				mp = noop.NewMeterProvider()
			case "sdk":
				p := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				b.Cleanup(func() { _ = p.Shutdown(context.Background()) })
				mp = p
			}
			benchSteps(b, mp)
		})
	}
}

func benchSteps(b *testing.B, mp metric.MeterProvider) {
	pool := pgtest.Pool(b)
	e, err := durable.New(pool, &durable.Config{Schema: pgtest.Schema(b), MeterProvider: mp,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	wf := durable.Register(e, "steps", func(wctx durable.Context, n int) (int, error) {
		sum := 0
		for i := range n {
			v, err := durable.Step(wctx, "s", func(context.Context) (int, error) { return i, nil }, nil)
			if err != nil {
				return 0, err
			}
			sum += v
		}
		return sum, nil
	}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := e.Launch(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = e.Shutdown(ctx) }()
	b.ReportAllocs()
	b.ResetTimer()
	h, err := wf.Start(ctx, b.N, nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := h.Result(ctx); err != nil {
		b.Fatal(err)
	}
}
