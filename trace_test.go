package durable_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/proctest"
)

// memTracer returns a tracer provider whose spans are exported, as each
// ends, to the returned in-memory exporter.
func memTracer(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

// spanSet indexes exported spans by name.
type spanSet map[string][]tracetest.SpanStub

func spansOf(exp *tracetest.InMemoryExporter) spanSet {
	s := spanSet{}
	for _, sp := range exp.GetSpans() {
		s[sp.Name] = append(s[sp.Name], sp)
	}
	return s
}

// waitSpans waits until a span of each name was exported: a run span ends
// just after the run's outcome is committed, so a reader of the database
// may see the outcome first.
func waitSpans(t *testing.T, exp *tracetest.InMemoryExporter, names ...string) spanSet {
	t.Helper()
	var s spanSet
	require.Eventually(t, func() bool {
		s = spansOf(exp)
		for _, n := range names {
			if len(s[n]) == 0 {
				return false
			}
		}
		return true
	}, 30*time.Second, 5*time.Millisecond, "spans %v", names)
	return s
}

// one returns the single span named name.
func (s spanSet) one(t *testing.T, name string) tracetest.SpanStub {
	t.Helper()
	require.Len(t, s[name], 1, "spans named %q (have %v)", name, s.names())
	return s[name][0]
}

func (s spanSet) names() []string {
	var out []string
	for n, v := range s {
		out = append(out, fmt.Sprintf("%s x%d", n, len(v)))
	}
	return out
}

func attr(sp tracetest.SpanStub, key string) attribute.Value {
	for _, kv := range sp.Attributes {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func requireChild(t *testing.T, child, parent tracetest.SpanStub) {
	t.Helper()
	require.Equal(t, parent.SpanContext.SpanID(), child.Parent.SpanID(), "%q must be a child of %q", child.Name, parent.Name)
	require.Equal(t, parent.SpanContext.TraceID(), child.SpanContext.TraceID(), "%q must be in the trace of %q", child.Name, parent.Name)
}

// TestTrace covers OpenTelemetry tracing: the span tree of a run, failures
// and queues, one trace across a crash, and no statement added.
func TestTrace(t *testing.T) {
	t.Parallel()

	// SpanTree checks the span tree of a run started under a caller's
	// span: the caller's trace holds the start span and, under it, one run span
	// per execution (the run parks in Recv and is woken by a message: two
	// executions, one trace); under those, one span per executed step (a retry
	// recorded as an exception event on it), the transaction step, the waits,
	// and the child workflow, whose start and run spans are under the parent's
	// run span.
	t.Run("SpanTree", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tp, exp := memTracer(t)
		var flaky atomic.Int32
		var child *durable.Workflow[int, int]
		var parent *durable.Workflow[int, int]
		e := b.engine(t, func(c *durable.Config) { c.TracerProvider = tp }, func(e *durable.Engine) {
			child = durable.Register(e, "child", func(wctx durable.Context, in int) (int, error) {
				return durable.Step(wctx, "c1", func(ctx context.Context) (int, error) { return in * 2, nil }, nil)
			}, nil)
			parent = durable.Register(e, "parent", func(wctx durable.Context, in int) (int, error) {
				a, err := durable.Step(wctx, "a", func(ctx context.Context) (int, error) {
					// User code's spans nest under the step's span.
					_, sp := tp.Tracer("app").Start(ctx, "provider-call")
					sp.End()
					return in + 1, nil
				}, nil)
				if err != nil {
					return 0, err
				}
				f, err := durable.Step(wctx, "flaky", func(ctx context.Context) (int, error) {
					if flaky.Add(1) == 1 {
						return 0, errors.New("provider down")
					}
					return 10, nil
				}, nil)
				if err != nil {
					return 0, err
				}
				x, err := durable.TxStep(wctx, "tx", func(ctx context.Context, tx pgx.Tx) (int, error) {
					var v int
					return v, tx.QueryRow(ctx, "SELECT 100").Scan(&v)
				}, nil)
				if err != nil {
					return 0, err
				}
				if err := durable.Sleep(wctx, 20*time.Millisecond); err != nil {
					return 0, err
				}
				// Longer than the park threshold: the run parks until the
				// message comes, and is resumed by replay.
				if _, _, err := durable.Recv[string](wctx, "go", time.Hour); err != nil {
					return 0, err
				}
				h, err := child.StartChild(wctx, 3, nil)
				if err != nil {
					return 0, err
				}
				c, err := h.Await(wctx)
				return a + f + x + c, err
			}, nil)
		})

		ctx := ctxT(t)
		ctx, caller := tp.Tracer("app").Start(ctx, "request")
		h, err := parent.Start(ctx, 1, &durable.StartOpts{ID: "traced-1"})
		require.NoError(t, err)
		caller.End()
		// The first execution parks in Recv; the message wakes the run and a
		// second execution resumes it by replay.
		waitSpans(t, exp, "durable.run parent")
		require.NoError(t, durable.Send(ctxT(t), e, "traced-1", "go", "now", nil))
		out, err := h.Result(ctxT(t))
		require.NoError(t, err)
		require.Equal(t, 2+10+100+6, out)

		// A run span ends just after its outcome is committed, which a reader
		// of the database (Result here, after the park) may see first.
		var s spanSet
		require.Eventually(t, func() bool {
			s = spansOf(exp)
			return len(s["durable.run parent"]) == 2 && len(s["durable.run child"]) == 1
		}, 30*time.Second, 5*time.Millisecond)
		req := s.one(t, "request")
		// Operators find the trace from the run (Inspect, listings, dashboard).
		info, err := e.Inspect(ctx, "traced-1")
		require.NoError(t, err)
		require.Equal(t, req.SpanContext.TraceID().String(), info.TraceID)
		for _, sp := range exp.GetSpans() {
			require.Equal(t, req.SpanContext.TraceID(), sp.SpanContext.TraceID(), "span %q joins the caller's trace", sp.Name)
		}
		start := s.one(t, "durable.start parent")
		requireChild(t, start, req)
		require.Equal(t, trace.SpanKindProducer, start.SpanKind)
		require.Equal(t, "traced-1", attr(start, "durable.workflow.id").AsString())

		// Two executions, both children of the start span: the first parked,
		// the second replayed the first five steps and finished.
		parked, run := s["durable.run parent"][0], s["durable.run parent"][1]
		requireChild(t, parked, start)
		requireChild(t, run, start)
		require.Equal(t, "pending", attr(parked, "durable.workflow.status").AsString())
		require.Equal(t, "parked", attr(parked, "durable.stop_reason").AsString())
		require.Equal(t, codes.Unset, parked.Status.Code)
		require.Equal(t, int64(0), attr(parked, "durable.replayed_steps").AsInt64())
		require.Equal(t, int64(5), attr(run, "durable.replayed_steps").AsInt64())
		require.Equal(t, "traced-1", attr(run, "durable.workflow.id").AsString())
		require.Equal(t, "parent", attr(run, "durable.workflow.name").AsString())
		require.Equal(t, "test", attr(run, "durable.app_version").AsString())
		require.NotEmpty(t, attr(run, "durable.executor.id").AsString())
		require.Equal(t, int64(0), attr(run, "durable.recovery_attempt").AsInt64(), "a wake-up is not a recovery")
		require.Equal(t, "success", attr(run, "durable.workflow.status").AsString())
		require.Equal(t, codes.Ok, run.Status.Code)

		for i, name := range []string{"a", "flaky", "tx", "durable.sleep", "durable.recv-deadline:go"} {
			st := s.one(t, "durable.step "+name)
			requireChild(t, st, parked)
			require.Equal(t, int64(i), attr(st, "durable.step.pos").AsInt64(), name)
		}
		requireChild(t, s.one(t, "provider-call"), s.one(t, "durable.step a"))
		require.Equal(t, "tx", attr(s.one(t, "durable.step tx"), "durable.step.kind").AsString())
		require.Equal(t, "step", attr(s.one(t, "durable.step a"), "durable.step.kind").AsString())

		// The retry is recorded on the step's span.
		fl := s.one(t, "durable.step flaky")
		require.Equal(t, int64(2), attr(fl, "durable.step.attempts").AsInt64())
		require.Len(t, fl.Events, 1)
		require.Equal(t, "exception", fl.Events[0].Name)
		evAttrs := map[string]attribute.Value{}
		for _, kv := range fl.Events[0].Attributes {
			evAttrs[string(kv.Key)] = kv.Value
		}
		require.Equal(t, "provider down", evAttrs["exception.message"].AsString())
		require.Equal(t, int64(1), evAttrs["durable.step.attempt"].AsInt64())
		require.Equal(t, codes.Unset, fl.Status.Code, "the step succeeded in the end")

		// A sleep whose wake-up time already passed when its step was recorded
		// (a loaded machine) does not wait, and then makes no wait span.
		if len(s["durable.sleep"]) > 0 {
			requireChild(t, s.one(t, "durable.sleep"), parked)
		}
		// The wait for the message: parked in the first execution, received at
		// once in the second.
		require.Len(t, s["durable.recv go"], 2)
		requireChild(t, s["durable.recv go"][0], parked)
		require.Equal(t, "parked", attr(s["durable.recv go"][0], "durable.stop_reason").AsString())
		require.Equal(t, "go", attr(s["durable.recv go"][0], "durable.wait.topic").AsString())
		requireChild(t, s["durable.recv go"][1], run)
		requireChild(t, s.one(t, "durable.await"), run)

		// The child workflow: its start span is under the parent's run span,
		// its run span under its start span.
		cstart := s.one(t, "durable.start child")
		requireChild(t, cstart, run)
		require.Equal(t, "traced-1", attr(cstart, "durable.workflow.parent_id").AsString())
		crun := s.one(t, "durable.run child")
		requireChild(t, crun, cstart)
		requireChild(t, s.one(t, "durable.step c1"), crun)

		// The stored trace context is the start span's.
		var stored string
		require.NoError(t, b.pool.QueryRow(ctxT(t), "SELECT trace_context FROM "+pgx.Identifier{b.schema, "workflows"}.Sanitize()+" WHERE id = $1", "traced-1").Scan(&stored))
		require.Equal(t, fmt.Sprintf("00-%s-%s-01", start.SpanContext.TraceID(), start.SpanContext.SpanID()), stored)

		// Starting the same ID again starts nothing: its start span says so,
		// and no second run span appears.
		_, err = parent.Start(ctxT(t), 1, &durable.StartOpts{ID: "traced-1"})
		require.NoError(t, err)
		s = spansOf(exp)
		require.Len(t, s["durable.start parent"], 2)
		require.True(t, attr(s["durable.start parent"][1], "durable.workflow.existing").AsBool())
		require.Len(t, s["durable.run parent"], 2)
	})

	// FailureAndQueue checks a failed step and run (error status and
	// recorded exception) and the queue wait of an enqueued run, whose run span
	// is a child of the enqueue span.
	t.Run("FailureAndQueue", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tp, exp := memTracer(t)
		var wf *durable.Workflow[string, string]
		var q *durable.Queue
		b.engine(t, func(c *durable.Config) { c.TracerProvider = tp }, func(e *durable.Engine) {
			q = durable.RegisterQueue(e, "work", nil)
			wf = durable.Register(e, "fails", func(wctx durable.Context, in string) (string, error) {
				return durable.Step(wctx, "boom", func(ctx context.Context) (string, error) {
					return "", durable.Permanent(errors.New("card declined"))
				}, nil)
			}, nil)
		})
		h, err := wf.Enqueue(ctxT(t), q, "x", &durable.EnqueueOpts{ID: "queued-1"})
		require.NoError(t, err)
		_, err = h.Result(ctxT(t))
		require.ErrorContains(t, err, "card declined")

		s := waitSpans(t, exp, "durable.run fails")
		enq := s.one(t, "durable.enqueue fails")
		require.Equal(t, "work", attr(enq, "durable.queue.name").AsString())
		run := s.one(t, "durable.run fails")
		requireChild(t, run, enq)
		require.Equal(t, "work", attr(run, "durable.queue.name").AsString())
		require.True(t, attr(run, "durable.queue.wait_ms").Type() == attribute.INT64, "queue wait recorded")
		require.GreaterOrEqual(t, attr(run, "durable.queue.wait_ms").AsInt64(), int64(0))
		require.Equal(t, "error", attr(run, "durable.workflow.status").AsString())
		require.Equal(t, codes.Error, run.Status.Code)
		require.Contains(t, run.Status.Description, "card declined")
		step := s.one(t, "durable.step boom")
		requireChild(t, step, run)
		require.Equal(t, codes.Error, step.Status.Code)
		require.Equal(t, int64(1), attr(step, "durable.step.attempts").AsInt64())
	})

	// AcrossCrash SIGKILLs a child process in the middle of a run and
	// recovers the run in this process: every span of the run, in both
	// processes, has the trace ID the child printed, which is also the one
	// stored with the run; the recovered execution's run span is a child of the
	// start span the child made, and replayed steps make no spans.
	t.Run("AcrossCrash", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		file := filepath.Join(t.TempDir(), "spans.jsonl")
		first := startChild(t, "trace", b.schema, "trace-exec", "DURABLE_TRACE_FILE="+file)
		line := first.WaitLine(t, "trace ")
		traceID := strings.TrimPrefix(line, "trace ")
		err := first.Wait(t)
		require.True(t, proctest.KilledBySIGKILL(err), "the child must die by SIGKILL, got %v; stderr:\n%s", err, first.Stderr.String())

		// The child's spans: the caller's, the start span, and steps 0 and 1,
		// all in one trace. Its run span never ended: the process died.
		f, err := os.Open(file)
		require.NoError(t, err)
		defer f.Close()
		childSpans := map[string]spanLine{}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var l spanLine
			require.NoError(t, json.Unmarshal(sc.Bytes(), &l))
			require.Equal(t, traceID, l.Trace, "child span %q", l.Name)
			childSpans[l.Name] = l
		}
		require.NoError(t, sc.Err())
		require.Contains(t, childSpans, "request")
		require.Contains(t, childSpans, "durable.start traced")
		require.Contains(t, childSpans, "durable.step s0")
		require.Contains(t, childSpans, "durable.step s1")
		require.NotContains(t, childSpans, "durable.step s2")
		start := childSpans["durable.start traced"]
		require.Equal(t, childSpans["request"].Span, start.Parent)
		require.Equal(t, childSpans["durable.step s0"].Parent, childSpans["durable.step s1"].Parent, "both under the (lost) run span")

		var stored string
		require.NoError(t, b.pool.QueryRow(ctxT(t), "SELECT trace_context FROM "+pgx.Identifier{b.schema, "workflows"}.Sanitize()+" WHERE id = 'traced-run'").Scan(&stored))
		require.Equal(t, "00-"+traceID+"-"+start.Span+"-01", stored)

		// Recover the run here: the same executor ID resumes it at Launch.
		tp, exp := memTracer(t)
		var wf *durable.Workflow[int, int]
		b.engine(t, func(c *durable.Config) {
			c.TracerProvider = tp
			c.ExecutorID = "trace-exec"
			c.AppVersion = "crash"
		}, func(e *durable.Engine) { wf = registerTraced(e, nil) })
		h, err := wf.Handle(ctxT(t), "traced-run")
		require.NoError(t, err)
		out, err := h.Result(ctxT(t))
		require.NoError(t, err)
		require.Equal(t, 106, out)

		s := waitSpans(t, exp, "durable.run traced")
		for _, sp := range exp.GetSpans() {
			require.Equal(t, traceID, sp.SpanContext.TraceID().String(), "recovered span %q is in the run's trace", sp.Name)
		}
		run := s.one(t, "durable.run traced")
		require.Equal(t, start.Span, run.Parent.SpanID().String(), "the recovered execution is a child of the stored start span")
		require.True(t, run.Parent.IsRemote())
		require.Equal(t, int64(1), attr(run, "durable.recovery_attempt").AsInt64())
		require.Equal(t, int64(2), attr(run, "durable.replayed_steps").AsInt64())
		require.Equal(t, "success", attr(run, "durable.workflow.status").AsString())
		require.Empty(t, s["durable.step s0"], "replayed steps make no spans")
		require.Empty(t, s["durable.step s1"])
		requireChild(t, s.one(t, "durable.step s2"), run)
		requireChild(t, s.one(t, "durable.step s3"), run)
	})

	// AddsNoStatement counts the SQL statements of runs of 0 and 10
	// steps, with and without tracing: the trace context rides on the start
	// statement, so a run costs one statement to start, one per step and one
	// to finish either way.
	t.Run("AddsNoStatement", func(t *testing.T) {
		t.Parallel()
		counter := &stmtCounter{byID: map[string]int{}, ids: map[string]bool{}, texts: map[string][]string{}}
		for _, id := range []string{"off-0", "off-10", "on-0", "on-10"} {
			counter.ids[id] = true
		}
		cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
		require.NoError(t, err)
		cfg.ConnConfig.Tracer = counter
		pool, err := pgxpool.NewWithConfig(ctxT(t), cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		b := setup(t)
		b.pool = pool
		tp, exp := memTracer(t)
		for _, mode := range []string{"off", "on"} {
			var wf *durable.Workflow[int, int]
			b.engine(t, func(c *durable.Config) {
				if mode == "on" {
					c.TracerProvider = tp
				}
			}, func(e *durable.Engine) {
				wf = durable.Register(e, "count", func(wctx durable.Context, n int) (int, error) {
					for i := range n {
						if _, err := durable.Step(wctx, fmt.Sprint("s", i), func(ctx context.Context) (int, error) { return i, nil }, nil); err != nil {
							return 0, err
						}
					}
					return n, nil
				}, nil)
			})
			for _, n := range []int{0, 10} {
				h, err := wf.Start(ctxT(t), n, &durable.StartOpts{ID: fmt.Sprintf("%s-%d", mode, n)})
				require.NoError(t, err)
				_, err = h.Result(ctxT(t))
				require.NoError(t, err)
			}
		}
		counter.mu.Lock()
		defer counter.mu.Unlock()
		for _, mode := range []string{"off", "on"} {
			require.Equal(t, 2, counter.byID[mode+"-0"], "%s: a run without steps is a start and a finish: %v", mode, counter.texts[mode+"-0"])
			require.Equal(t, 12, counter.byID[mode+"-10"], "%s: one statement per step: %v", mode, counter.texts[mode+"-10"])
		}
		require.Len(t, spansOf(exp)["durable.run count"], 2, "the traced runs made spans")
	})
}

// spanLine is one span written by the crash test's child process.
type spanLine struct {
	Name   string `json:"name"`
	Trace  string `json:"trace_id"`
	Span   string `json:"span_id"`
	Parent string `json:"parent_span_id"`
}

// fileExporter writes each span, as it ends, as a JSON line to a file: the
// child process's exporter, which a SIGKILL cannot lose (each write is done
// before the span's End returns).
type fileExporter struct {
	mu sync.Mutex
	f  *os.File
}

func (x *fileExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, s := range spans {
		line := spanLine{Name: s.Name(), Trace: s.SpanContext().TraceID().String(), Span: s.SpanContext().SpanID().String()}
		if s.Parent().IsValid() {
			line.Parent = s.Parent().SpanID().String()
		}
		b, _ := json.Marshal(line)
		if _, err := x.f.Write(append(b, '\n')); err != nil {
			return err
		}
	}
	return nil
}

func (x *fileExporter) Shutdown(context.Context) error { return x.f.Close() }

// childTracerProvider is the crash tests' children's tracer provider: spans
// go to the file DURABLE_TRACE_FILE names, if set.
func childTracerProvider() trace.TracerProvider {
	path := os.Getenv("DURABLE_TRACE_FILE")
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		panic(err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithSyncer(&fileExporter{f: f}))
}

// tracedSteps is the workflow of the tracing crash test; kill, when not
// nil, is called before step 2.
func registerTraced(e *durable.Engine, kill func()) *durable.Workflow[int, int] {
	return durable.Register(e, "traced", func(wctx durable.Context, in int) (int, error) {
		sum := in
		for i := range 4 {
			if i == 2 && kill != nil {
				kill()
			}
			v, err := durable.Step(wctx, fmt.Sprintf("s%d", i), func(ctx context.Context) (int, error) { return i, nil }, nil)
			if err != nil {
				return 0, err
			}
			sum += v
		}
		return sum, nil
	}, nil)
}

// runTraceChild starts run "traced-run" under a caller's span, prints its
// trace ID and SIGKILLs itself before the run's step 2.
func runTraceChild(ctx context.Context, e *durable.Engine, tp trace.TracerProvider) error {
	printed := make(chan struct{})
	wf := registerTraced(e, func() { <-printed; killSelf() })
	if err := e.Launch(ctx); err != nil {
		return err
	}
	ctx, caller := tp.Tracer("app").Start(ctx, "request")
	if _, err := wf.Start(ctx, 100, &durable.StartOpts{ID: "traced-run"}); err != nil {
		return err
	}
	caller.End()
	fmt.Println("trace", caller.SpanContext().TraceID())
	close(printed)
	select {} // killed by the run
}

// stmtCounter counts the SQL statements that carry a given workflow ID
// among their arguments.
type stmtCounter struct {
	mu    sync.Mutex
	byID  map[string]int
	ids   map[string]bool
	texts map[string][]string
}

func (c *stmtCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range data.Args {
		var ids []string
		switch v := a.(type) {
		case string:
			ids = []string{v}
		case []string:
			ids = v
		}
		for _, id := range ids {
			if c.ids[id] {
				c.byID[id]++
				c.texts[id] = append(c.texts[id], strings.Join(strings.Fields(data.SQL), " "))
				return ctx
			}
		}
	}
	return ctx
}

func (c *stmtCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
