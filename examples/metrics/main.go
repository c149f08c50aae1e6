// Command metrics exports the engine's OpenTelemetry metrics to
// Prometheus: it serves /metrics with OpenTelemetry's Prometheus exporter,
// sends a burst of orders through a queue (one in five fails its payment
// step), and prints a few of the series a scrape then shows.
//
// It is a module of its own (the Prometheus client is not a dependency of
// durable), so run it from its folder:
//
//	cd examples/metrics && ../../scripts/with-postgres go run .
//
// then, while it serves (until Ctrl-C), scrape it:
//
//	curl -s localhost:9464/metrics | grep ^durable_
//
// The demo drops and recreates the schema metrics_durable on every run.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/examples/internal/demo"
)

// options of one demo run.
type options struct {
	Schema string // engine schema; default "metrics_durable"
	Addr   string // where /metrics is served; default "127.0.0.1:9464"
	Orders int    // default 50
	// Serve keeps serving /metrics after the orders are done, until ctx
	// ends; otherwise run returns once it has scraped itself.
	Serve bool
}

func (o options) withDefaults() options {
	if o.Schema == "" {
		o.Schema = "metrics_durable"
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1:9464"
	}
	if o.Orders <= 0 {
		o.Orders = 50
	}
	return o
}

func main() {
	var o options
	flag.StringVar(&o.Addr, "addr", "127.0.0.1:9464", "where to serve /metrics")
	flag.IntVar(&o.Orders, "orders", 50, "orders to enqueue")
	flag.Parse()
	o.Serve = true
	demo.Main("metrics", func(ctx context.Context, out io.Writer) error { return run(ctx, out, o) })
}

func run(ctx context.Context, out io.Writer, o options) error {
	o = o.withDefaults()
	pool, err := demo.Connect(ctx, "metrics")
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{o.Schema}.Sanitize()+" CASCADE"); err != nil {
		return err
	}

	// The exporter is a metric reader: each scrape of /metrics collects
	// the engine's instruments (and runs the callback of its gauges, which
	// reads the queue depths and parked runs from the database).
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer func() { _ = mp.Shutdown(context.Background()) }()

	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()
	url := "http://" + ln.Addr().String() + "/metrics"
	fmt.Fprintf(out, "serving %s\n", url)

	e, err := durable.New(pool, &durable.Config{Schema: o.Schema, MeterProvider: mp})
	if err != nil {
		return err
	}
	orders := durable.RegisterQueue(e, "orders", &durable.QueueOpts{GlobalConcurrency: 5})
	order := durable.Register(e, "order", func(wctx durable.Context, n int) (string, error) {
		if _, err := durable.Step(wctx, "reserve", func(context.Context) (int, error) { return n, nil }, nil); err != nil {
			return "", err
		}
		return durable.Step(wctx, "charge", func(context.Context) (string, error) {
			time.Sleep(5 * time.Millisecond) // the payment provider
			if n%5 == 0 {
				return "", durable.Permanent(errors.New("card declined"))
			}
			return fmt.Sprintf("paid-%d", n), nil
		}, nil)
	}, nil)
	if err := e.Launch(ctx); err != nil {
		return err
	}
	defer func() { _ = e.Shutdown(context.Background()) }()

	var hs []*durable.Handle[string]
	for i := 1; i <= o.Orders; i++ {
		h, err := order.Enqueue(ctx, orders, i, nil)
		if err != nil {
			return err
		}
		hs = append(hs, h)
	}
	failed := 0
	for _, h := range hs {
		if _, err := h.Result(ctx); err != nil {
			failed++
		}
	}
	fmt.Fprintf(out, "%d orders done, %d declined\n", len(hs), failed)

	// A run's metrics are recorded as its finish commits, a moment before
	// or after its Result returns: scrape until every finish is counted.
	var series []string
	for deadline := time.Now().Add(10 * time.Second); ; {
		if series, err = scrape(ctx, url); err != nil {
			return err
		}
		if finished(series) == len(hs) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, name := range []string{
		`durable_workflow_finished_total{`,
		`durable_queue_depth{`,
		`durable_step_duration_seconds_count{`,
		`durable_queue_wait_seconds_count{`,
	} {
		for _, s := range series {
			if strings.HasPrefix(s, name) {
				fmt.Fprintln(out, "  "+s)
			}
		}
	}
	if !o.Serve {
		return nil
	}
	fmt.Fprintln(out, "serving until Ctrl-C")
	<-ctx.Done()
	return nil
}

// scrape fetches url and returns the lines of the durable_ series,
// without the scope labels the exporter adds.
func scrape(ctx context.Context, url string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "durable_") {
			out = append(out, dropScope(line))
		}
	}
	return out, sc.Err()
}

// finished adds up the durable_workflow_finished_total series.
func finished(series []string) int {
	n := 0
	for _, s := range series {
		if strings.HasPrefix(s, "durable_workflow_finished_total{") {
			if v, err := strconv.Atoi(s[strings.LastIndexByte(s, ' ')+1:]); err == nil {
				n += v
			}
		}
	}
	return n
}

// dropScope removes the otel_scope_* labels from a series line.
func dropScope(line string) string {
	open, close := strings.IndexByte(line, '{'), strings.LastIndexByte(line, '}')
	if open < 0 || close < open {
		return line
	}
	var keep []string
	for _, l := range strings.Split(line[open+1:close], ",") {
		if l != "" && !strings.HasPrefix(l, "otel_scope_") {
			keep = append(keep, l)
		}
	}
	return line[:open+1] + strings.Join(keep, ",") + line[close:]
}
