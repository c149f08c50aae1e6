package durable

import (
	"context"
	"encoding/hex"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Tracing. With Config.TracerProvider set, the engine makes OpenTelemetry
// spans (see the package doc, "Tracing and logs"):
//
//	durable.start <workflow>     Start, StartTx, StartChild, a schedule's tick, StartMany (producer)
//	durable.enqueue <workflow>   Enqueue, EnqueueTx, EnqueueMany (producer)
//	durable.fork <workflow>      Workflow.Fork (producer)
//	  durable.run <workflow>     one per execution of the run, in any process
//	    durable.step <step>      one per executed step (not per replayed one)
//	    durable.sleep, durable.recv <topic>, durable.await   waits
//
// The start span's W3C trace context is written with the run's row (by
// the start statement itself) and every execution's run span is its child,
// so a run that is recovered by another process after a crash stays one
// trace. Without a provider, tracing costs a nil check per hook.

const tracerName = "github.com/durable-go/durable"

// Span attribute keys.
const (
	attrWorkflowID    = attribute.Key("durable.workflow.id")
	attrWorkflowName  = attribute.Key("durable.workflow.name")
	attrStatus        = attribute.Key("durable.workflow.status")
	attrAppVersion    = attribute.Key("durable.app_version")
	attrExecutor      = attribute.Key("durable.executor.id")
	attrRecovery      = attribute.Key("durable.recovery_attempt")
	attrEpoch         = attribute.Key("durable.epoch")
	attrReplayed      = attribute.Key("durable.replayed_steps")
	attrParentID      = attribute.Key("durable.workflow.parent_id")
	attrExisting      = attribute.Key("durable.workflow.existing")
	attrQueue         = attribute.Key("durable.queue.name")
	attrQueueWait     = attribute.Key("durable.queue.wait_ms")
	attrForkOf        = attribute.Key("durable.fork.source_id")
	attrBatchSize     = attribute.Key("durable.batch.size")
	attrForkFrom      = attribute.Key("durable.fork.from_step")
	attrStepName      = attribute.Key("durable.step.name")
	attrStepPos       = attribute.Key("durable.step.pos")
	attrStepKind      = attribute.Key("durable.step.kind")
	attrStepAttempts  = attribute.Key("durable.step.attempts")
	attrAttempt       = attribute.Key("durable.step.attempt")
	attrRetryDelay    = attribute.Key("durable.retry.delay_ms")
	attrStopReason    = attribute.Key("durable.stop_reason")
	attrWaitUntil     = attribute.Key("durable.wait.until")
	attrWaitTopic     = attribute.Key("durable.wait.topic")
	attrWaitChild     = attribute.Key("durable.wait.child_id")
	attrDeadLimit     = attribute.Key("durable.recovery_limit")
	stepKindPlain     = "step"
	stepKindTx        = "tx"
	stepKindIntent    = "intent"
	stopParked        = "parked"
	stopShutdown      = "shutdown"
	stopFenced        = "fenced"
	statusStoppedHere = "pending"
)

// tspan is one span of the engine, or nil when tracing is off: every method
// is a no-op on nil, so hooks cost a nil check without a provider.
type tspan struct {
	span     trace.Span
	ctx      context.Context // carries span
	attempts int             // step spans: the attempt under way, from 1
}

// newTracer returns the engine's tracer from the user's provider; nil (no
// spans, no cost) for none or for OpenTelemetry's no-op provider.
func newTracer(tp trace.TracerProvider) trace.Tracer {
	switch tp.(type) {
	case nil, noop.TracerProvider, *noop.TracerProvider:
		return nil
	}
	return tp.Tracer(tracerName)
}

// tracer makes the engine's spans; with a nil Tracer it makes none, and
// every hook costs a nil check.
type tracer struct {
	t          trace.Tracer // nil: tracing off
	appVersion string
	executorID string
}

// runTracer makes the spans of one run's durable calls.
type runTracer struct{ r *run }

// trace returns the maker of r's spans.
func (r *run) trace() runTracer { return runTracer{r} }

// start starts the span of a call that creates run id of workflow
// (op is durable.start, durable.enqueue or durable.fork). It is a child of
// the span in ctx, if any, and is stored with the run as its trace parent.
func (t *tracer) start(ctx context.Context, op, workflow, id string) *tspan {
	if t.t == nil {
		return nil
	}
	sctx, span := t.t.Start(ctx, op+" "+workflow, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attrWorkflowID.String(id), attrWorkflowName.String(workflow)))
	return &tspan{span: span, ctx: sctx}
}

// enqueue starts the span of an enqueue of run id of workflow on queue.
func (t *tracer) enqueue(ctx context.Context, workflow, id, queue string) *tspan {
	if t.t == nil {
		return nil
	}
	sp := t.start(ctx, "durable.enqueue", workflow, id)
	sp.span.SetAttributes(attrQueue.String(queue))
	return sp
}

// batch starts the one span of a call that creates n runs of workflow at
// once (op is durable.start or durable.enqueue; queue "" for a start).
// Every run of the batch stores it as its trace parent.
func (t *tracer) batch(ctx context.Context, op, workflow, queue string, n int) *tspan {
	if t.t == nil {
		return nil
	}
	sctx, span := t.t.Start(ctx, op+" "+workflow, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attrWorkflowName.String(workflow), attrBatchSize.Int(n)))
	if queue != "" {
		span.SetAttributes(attrQueue.String(queue))
	}
	return &tspan{span: span, ctx: sctx}
}

// fork starts the span of a fork of run source from step from as the
// new run id.
func (t *tracer) fork(ctx context.Context, workflow, id, source string, from int) *tspan {
	if t.t == nil {
		return nil
	}
	sp := t.start(ctx, "durable.fork", workflow, id)
	sp.span.SetAttributes(attrForkOf.String(source), attrForkFrom.Int(from))
	return sp
}

// run starts the span of this execution of r, as a child of parent (the
// run's start span, from memory or from the database), and makes r's
// context carry it. It is called before r's goroutine starts.
func (t *tracer) run(r *run, parent trace.SpanContext, recovery int, queue *string, queued *time.Duration) {
	if t.t == nil {
		return
	}
	ctx := r.ctx
	if parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	attrs := []attribute.KeyValue{
		attrWorkflowID.String(r.id), attrWorkflowName.String(r.name),
		attrAppVersion.String(t.appVersion), attrExecutor.String(t.executorID),
		attrRecovery.Int(recovery), attrEpoch.Int64(r.epoch), attrReplayed.Int(r.hist.replayed()),
	}
	if queue != nil {
		attrs = append(attrs, attrQueue.String(*queue))
		if queued != nil {
			attrs = append(attrs, attrQueueWait.Int64(max(queued.Milliseconds(), 0)))
		}
	}
	sctx, span := t.t.Start(ctx, "durable.run "+r.name, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attrs...))
	r.tr = &tspan{span: span, ctx: sctx}
	r.ctx = sctx
}

// claimed starts the span of a claimed run's execution, its parent
// read from the run's stored trace context.
func (t *tracer) claimed(r *run, c *claimed) {
	if t.t == nil {
		return
	}
	var queued *time.Duration
	if c.Queue != nil && c.Epoch == 1 { // the first start of an enqueued run
		queued = c.Queued
	}
	t.run(r, parseTraceparent(c.Trace), c.Attempts, c.Queue, queued)
}

// stopped ends the run span of an execution that stopped without
// finishing the run (parked, shut down, fenced, cancelled).
func (rt runTracer) stopped(reason error) {
	if rt.r.tr == nil {
		return
	}
	status := statusStoppedHere
	if errors.Is(reason, ErrCancelled) {
		status = string(StatusCancelled)
	}
	rt.r.tr.span.SetAttributes(attrStatus.String(status))
	rt.r.tr.end(reason)
}

// finished ends the run span with the recorded outcome (nil: not
// recorded by this execution).
func (rt runTracer) finished(o *outcome) {
	if rt.r.tr == nil {
		return
	}
	if o == nil {
		rt.r.tr.span.SetAttributes(attrStatus.String(statusStoppedHere), attrStopReason.String(stopFenced))
		rt.r.tr.end(nil)
		return
	}
	rt.r.tr.span.SetAttributes(attrStatus.String(string(o.status)))
	if o.status == StatusSuccess {
		rt.r.tr.span.SetStatus(codes.Ok, "")
		rt.r.tr.end(nil)
		return
	}
	rt.r.tr.end(decodeError(o.err))
}

// deadLetter records a run dead-lettered at claim time as a run span
// of its trace that ends at once.
func (t *tracer) deadLetter(c *claimed, limit int, err error) {
	if t.t == nil {
		return
	}
	ctx := context.Background()
	if p := parseTraceparent(c.Trace); p.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, p)
	}
	_, span := t.t.Start(ctx, "durable.run "+c.Name, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attrWorkflowID.String(c.ID), attrWorkflowName.String(c.Name),
			attrAppVersion.String(t.appVersion), attrExecutor.String(t.executorID),
			attrRecovery.Int(c.Attempts), attrDeadLimit.Int(limit), attrStatus.String(string(StatusDead))))
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
	span.End()
}

// step starts the span of an executed step at pos, a child of the run
// span. Replayed steps get none: the run span counts them
// (durable.replayed_steps).
func (rt runTracer) step(pos int, name, kind string) *tspan {
	if rt.r.tr == nil {
		return nil
	}
	ctx, span := rt.r.e.tr.t.Start(rt.r.ctx, "durable.step "+name, trace.WithAttributes(
		attrStepName.String(name), attrStepPos.Int(pos), attrStepKind.String(kind)))
	return &tspan{span: span, ctx: ctx, attempts: 1}
}

// startChild starts the start span of a child workflow of r, at
// step pos: a child of r's run span, so the child's executions are in the
// parent's trace.
func (rt runTracer) startChild(workflow, id string, pos int) *tspan {
	if rt.r.tr == nil {
		return nil
	}
	sp := rt.r.e.tr.start(rt.r.ctx, "durable.start", workflow, id)
	sp.span.SetAttributes(attrParentID.String(rt.r.id), attrStepPos.Int(pos))
	return sp
}

// sleep starts the span of an in-memory sleep until wake.
func (rt runTracer) sleep(wake time.Time) *tspan {
	if rt.r.tr == nil {
		return nil
	}
	return rt.wait("durable.sleep", attrWaitUntil.String(wake.UTC().Format(time.RFC3339Nano)))
}

// recv starts the span of a wait for a message on topic.
func (rt runTracer) recv(topic string, deadline time.Time) *tspan {
	if rt.r.tr == nil {
		return nil
	}
	return rt.wait("durable.recv "+topic, attrWaitTopic.String(topic),
		attrWaitUntil.String(deadline.UTC().Format(time.RFC3339Nano)))
}

// await starts the span of a wait for the child run id to finish.
func (rt runTracer) await(id string) *tspan {
	if rt.r.tr == nil {
		return nil
	}
	return rt.wait("durable.await", attrWaitChild.String(id))
}

// selectWait starts the span of a Select's wait among n cases.
func (rt runTracer) selectWait(n int) *tspan {
	if rt.r.tr == nil {
		return nil
	}
	return rt.wait("durable.select", attribute.Int("durable.select.cases", n))
}

func (rt runTracer) wait(name string, attrs ...attribute.KeyValue) *tspan {
	ctx, span := rt.r.e.tr.t.Start(rt.r.ctx, name, trace.WithAttributes(attrs...))
	return &tspan{span: span, ctx: ctx}
}

// context returns the context a step attempt derives from: the step span's
// (so spans of user code nest under it), or r's without tracing.
func (s *tspan) context(r *run) context.Context {
	if s == nil {
		return r.ctx
	}
	return s.ctx
}

// retry records failed attempt n, to be tried again after delay.
func (s *tspan) retry(n int, err error, delay time.Duration) {
	if s == nil {
		return
	}
	s.span.RecordError(err, trace.WithAttributes(attrAttempt.Int(n), attrRetryDelay.Int64(delay.Milliseconds())))
	s.attempts = n + 1
}

// event adds an event without attributes to the span.
func (s *tspan) event(name string) {
	if s == nil {
		return
	}
	s.span.AddEvent(name)
}

// conflict records a serialization failure or deadlock of a transaction
// step's attempt n, which re-runs the transaction.
func (s *tspan) conflict(n int) {
	if s == nil {
		return
	}
	s.span.AddEvent("durable.tx.conflict", trace.WithAttributes(attrAttempt.Int(n)))
}

// existing marks a start span whose run ID already existed: nothing started.
func (s *tspan) existing() {
	if s == nil {
		return
	}
	s.span.SetAttributes(attrExisting.Bool(true))
}

// spanContext returns the span's context, invalid on nil.
func (s *tspan) spanContext() trace.SpanContext {
	if s == nil {
		return trace.SpanContext{}
	}
	return s.span.SpanContext()
}

// traceparent returns the span's W3C traceparent, "" on nil.
func (s *tspan) traceparent() string {
	if s == nil {
		return ""
	}
	return formatTraceparent(s.span.SpanContext())
}

// end ends the span with err's outcome. A run that parks or an engine that
// shuts down is not an error: the span gets durable.stop_reason instead.
func (s *tspan) end(err error) {
	if s == nil {
		return
	}
	if s.attempts > 0 {
		s.span.SetAttributes(attrStepAttempts.Int(s.attempts))
	}
	switch {
	case err == nil:
	case errors.Is(err, errParked):
		s.span.SetAttributes(attrStopReason.String(stopParked))
	case errors.Is(err, ErrShutdown):
		s.span.SetAttributes(attrStopReason.String(stopShutdown))
	case errors.Is(err, ErrFenced):
		s.span.SetAttributes(attrStopReason.String(stopFenced))
		s.span.SetStatus(codes.Error, err.Error())
	default:
		s.span.RecordError(err)
		s.span.SetStatus(codes.Error, err.Error())
	}
	s.span.End()
}

// formatTraceparent returns sc as a W3C traceparent header value, or "" for
// an invalid span context.
func formatTraceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// parseTraceparent reads a stored W3C traceparent (version 00). Anything
// else, NULL included, gives an invalid span context: the run's spans then
// start a new trace instead of failing the run.
func parseTraceparent(p *string) trace.SpanContext {
	if p == nil {
		return trace.SpanContext{}
	}
	s := *p
	if len(s) != 55 || s[:3] != "00-" || s[35] != '-' || s[52] != '-' {
		return trace.SpanContext{}
	}
	tid, err := trace.TraceIDFromHex(s[3:35])
	if err != nil {
		return trace.SpanContext{}
	}
	sid, err := trace.SpanIDFromHex(s[36:52])
	if err != nil {
		return trace.SpanContext{}
	}
	var flags [1]byte
	if _, err := hex.Decode(flags[:], []byte(s[53:55])); err != nil {
		return trace.SpanContext{}
	}
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags[0]) & trace.FlagsSampled, Remote: true,
	})
}
