package durable

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Log attribute keys of runs and steps.
const (
	logWorkflowID = "workflow_id"
	logWorkflow   = "workflow"
	logTraceID    = "trace_id"
	logSpanID     = "span_id"
	logStep       = "step"
	logStepPos    = "step_pos"
	logAttempt    = "attempt"
)

// Logger returns the logger for workflow and step code: Config.Logger with
// the attributes of the run ctx belongs to (workflow_id, workflow, and
// trace_id when traced) and, inside a step, of the step (step, step_pos,
// attempt, and span_id when traced). ctx is a workflow's [Context] or the
// context of one of its steps. Outside a workflow it returns
// slog.Default(). The engine's own logs about a run carry the same
// attributes.
func Logger(ctx context.Context) *slog.Logger {
	if ctx == nil {
		return slog.Default()
	}
	r := runFromContext(ctx)
	if r == nil {
		return slog.Default()
	}
	info, ok := StepInfoFrom(ctx)
	if !ok {
		return r.log()
	}
	args := []any{logStep, info.Name, logStepPos, info.Pos, logAttempt, info.Attempt}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && r.tr != nil {
		args = append(args, logSpanID, sc.SpanID().String())
	}
	return r.log().With(args...)
}

// log returns the logger of r: the engine's with the run's attributes. It
// is made on first use, so a run that logs nothing costs nothing.
func (r *run) log() *slog.Logger {
	if l := r.logger.Load(); l != nil {
		return l
	}
	args := []any{logWorkflowID, r.id, logWorkflow, r.name}
	if r.tr != nil {
		if sc := r.tr.spanContext(); sc.IsValid() {
			args = append(args, logTraceID, sc.TraceID().String())
		}
	}
	r.logger.CompareAndSwap(nil, r.e.log.With(args...))
	return r.logger.Load()
}

// stepLog returns the logger of the step at pos, attempt n, for the
// engine's own logs about it.
func (r *run) stepLog(pos int, name string, n int) *slog.Logger {
	return r.log().With(logStep, name, logStepPos, pos, logAttempt, n)
}

// debugEnabled reports whether the engine logs at debug level, so that
// debug logs of the hot path build nothing when it does not.
func (r *run) debugEnabled() bool {
	return r.e.log.Enabled(r.e.hardCtx, slog.LevelDebug)
}

// logFinished logs, at debug level, the outcome this execution recorded.
func (r *run) logFinished(o *outcome) {
	if o == nil || !r.debugEnabled() {
		return
	}
	if o.status == StatusSuccess {
		r.log().Debug("durable: run finished", "status", o.status)
		return
	}
	r.log().Debug("durable: run finished", "status", o.status, "err", decodeError(o.err))
}
