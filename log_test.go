package durable_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/proctest"
)

// jsonLogs returns the JSON log lines in buf whose message is msg.
func jsonLogs(t *testing.T, buf *proctest.Buffer, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(buf.String()))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// TestLoggerAttributes checks that durable.Logger gives workflow code a
// logger with the run's attributes and step code one with the step's too,
// that the engine's own logs about a step (a retry) carry the same, and
// that with tracing on they carry the trace and span IDs of the spans.
func TestLoggerAttributes(t *testing.T) {
	t.Parallel()
	for _, traced := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "traced"}[traced], func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			buf := &proctest.Buffer{}
			tp, exp := memTracer(t)
			var fails atomic.Int32
			var wf *durable.Workflow[string, string]
			b.engine(t, func(c *durable.Config) {
				c.Logger = slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
				if traced {
					c.TracerProvider = tp
				}
			}, func(e *durable.Engine) {
				wf = durable.Register(e, "greeter", func(wctx durable.Context, in string) (string, error) {
					durable.Logger(wctx).Info("planning", "who", in)
					s, err := durable.Step(wctx, "greet", func(ctx context.Context) (string, error) {
						durable.Logger(ctx).Info("calling provider")
						return "hello " + in, nil
					}, nil)
					if err != nil {
						return "", err
					}
					return durable.Step(wctx, "flaky", func(ctx context.Context) (string, error) {
						if fails.Add(1) == 1 {
							return "", errors.New("timeout")
						}
						return s + "!", nil
					}, nil)
				}, nil)
			})
			h, err := wf.Start(ctxT(t), "ada", &durable.StartOpts{ID: "log-1"})
			require.NoError(t, err)
			out, err := h.Result(ctxT(t))
			require.NoError(t, err)
			require.Equal(t, "hello ada!", out)

			var traceID, greetSpan string
			if traced {
				s := spansOf(exp)
				traceID = s.one(t, "durable.run greeter").SpanContext.TraceID().String()
				greetSpan = s.one(t, "durable.step greet").SpanContext.SpanID().String()
			}

			wfLogs := jsonLogs(t, buf, "planning")
			require.Len(t, wfLogs, 1)
			require.Equal(t, "log-1", wfLogs[0]["workflow_id"])
			require.Equal(t, "greeter", wfLogs[0]["workflow"])
			require.Equal(t, "ada", wfLogs[0]["who"])
			require.NotContains(t, wfLogs[0], "step", "workflow code is not in a step")
			require.NotEmpty(t, wfLogs[0]["durable.executor"])

			stepLogs := jsonLogs(t, buf, "calling provider")
			require.Len(t, stepLogs, 1)
			require.Equal(t, "log-1", stepLogs[0]["workflow_id"])
			require.Equal(t, "greeter", stepLogs[0]["workflow"])
			require.Equal(t, "greet", stepLogs[0]["step"])
			require.Equal(t, float64(0), stepLogs[0]["step_pos"])
			require.Equal(t, float64(1), stepLogs[0]["attempt"])

			retry := jsonLogs(t, buf, "durable: step failed, retrying")
			require.Len(t, retry, 1)
			require.Equal(t, "log-1", retry[0]["workflow_id"])
			require.Equal(t, "greeter", retry[0]["workflow"])
			require.Equal(t, "flaky", retry[0]["step"])
			require.Equal(t, float64(1), retry[0]["step_pos"])
			require.Equal(t, float64(1), retry[0]["attempt"])
			require.Equal(t, "timeout", retry[0]["err"])

			done := jsonLogs(t, buf, "durable: run finished")
			require.Len(t, done, 1)
			require.Equal(t, "success", done[0]["status"])
			require.Equal(t, "log-1", done[0]["workflow_id"])

			if traced {
				for _, l := range []map[string]any{wfLogs[0], stepLogs[0], retry[0], done[0]} {
					require.Equal(t, traceID, l["trace_id"], "log %q carries the run's trace ID", l["msg"])
				}
				require.Equal(t, greetSpan, stepLogs[0]["span_id"], "a step's log carries the step span's ID")
			} else {
				require.NotContains(t, wfLogs[0], "trace_id")
				require.NotContains(t, stepLogs[0], "span_id")
			}
		})
	}
	// Outside a workflow, Logger is the default logger.
	require.Same(t, slog.Default(), durable.Logger(context.Background()))
}
