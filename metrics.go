package durable

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/durable-go/durable/internal/commit"
	"github.com/durable-go/durable/internal/sysdb"
)

// Metrics. The engine records these OpenTelemetry instruments through
// Config.MeterProvider (docs/metrics.md lists them with their attributes):
//
//	durable.workflow.started      counter    runs created, by workflow and durable.start.kind
//	durable.workflow.finished     counter    runs ended, by workflow and status
//	durable.workflow.duration     histogram  creation to end of the runs finished here
//	durable.workflow.recoveries   counter    runs resumed after their executor died
//	durable.workflow.executing    gauge      executions in this process
//	durable.workflow.parked       gauge      parked runs (database)
//	durable.step.duration         histogram  executed steps, by workflow, kind and status
//	durable.queue.depth           gauge      queued and running runs per queue (database)
//	durable.queue.wait            histogram  enqueue to first start, by queue
//	durable.queue.joined          counter    enqueues that joined a queued run (debounce, batch), by queue
//	durable.queue.keys            gauge      partition keys with queued runs per keyed queue (database)
//	durable.commit.batch.size     histogram  writes per group-commit statement
//
// Every attribute has a bounded set of values: workflow names are those
// registered, queue names those declared; step names and run IDs are
// never attributes. The gauges that read the database query it in the
// reader's collection callback, once per collection, never on a run's path.
// With metrics off (a no-op provider), every hook costs a nil check.

const meterName = tracerName

// Metric attribute keys (with attrWorkflowName, attrStatus, attrQueue and
// attrStepKind of the spans, trace.go).
const (
	attrStartKind    = attribute.Key("durable.start.kind")
	attrStepStatus   = attribute.Key("durable.step.status")
	attrQueueState   = attribute.Key("durable.queue.state")
	attrRecoveryKind = attribute.Key("durable.recovery.kind")
	attrCommitKind   = attribute.Key("durable.commit.kind")
	attrJoinKind     = attribute.Key("durable.join.kind")
)

// How an enqueue joined a queued run: the values of durable.join.kind.
const (
	joinDebounce = "debounce" // a debounced enqueue collapsed into its key's queued run
	joinBatch    = "batch"    // a Batcher item added to its open batch
)

// keysCounted bounds the partition keys counted per queue for
// durable.queue.keys: one index probe each.
const keysCounted = 1024

// How a run was created: the values of durable.start.kind.
const (
	startDirect   = "start"    // Start, StartTx
	startEnqueue  = "enqueue"  // Enqueue, EnqueueTx
	startChild    = "child"    // StartChild
	startSchedule = "schedule" // a schedule's tick
	startFork     = "fork"     // Engine.Fork
)

// startKindOf is the start kind of a run started by Start (parent "") or
// StartChild.
func startKindOf(parent string) string {
	if parent != "" {
		return startChild
	}
	return startDirect
}

// Why a run was resumed after its executor died: durable.recovery.kind.
const (
	recoveryRestart  = "restart"  // this executor ID's own runs, at Launch
	recoveryTakeover = "takeover" // another executor's, whose lease expired
	recoveryRequeue  = "requeue"  // a dead executor's queued runs, back in their queue
)

// The values of durable.queue.state.
const (
	queueReady   = "ready"
	queueDelayed = "delayed"
	queueRunning = "running"
)

// observeTimeout bounds the queries of one collection of the gauges.
const observeTimeout = 5 * time.Second

// Histogram bucket boundaries, in seconds (or writes): runs and waits
// last from milliseconds to days, steps from sub-milliseconds to minutes.
var (
	runBuckets   = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400}
	stepBuckets  = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
	batchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, commit.MaxBatch}
)

// stepKinds are the kinds of step, indexed as wfMeters.step is.
var stepKinds = [3]string{stepKindPlain, stepKindTx, stepKindIntent}

const (
	kindPlain = iota
	kindTx
	kindIntent
)

// meters are the engine's instruments, or nil when metrics are off: every
// method is a no-op on nil.
type meters struct {
	e  *Engine
	mq *sysdb.MetricsQueries

	startedC, finishedC, recoveries metric.Int64Counter
	joined                          metric.Int64Counter
	wfDuration, stepDuration, qWait metric.Float64Histogram
	batch                           metric.Int64Histogram
	depth, parked, executing, keys  metric.Int64ObservableGauge
	reg                             metric.Registration // the gauges' callback
	byName, byQueue, byJoin         sync.Map            // workflow name -> *wfMeters; queue -> []metric.RecordOption; queue+kind -> []metric.AddOption
	batchOpts                       map[string][]metric.RecordOption
	recoveryOpts                    map[string][]metric.AddOption
	cancelOpts                      []metric.AddOption
}

// wfMeters are the attribute sets of one workflow's measurements, made
// once so that recording one allocates nothing for them.
type wfMeters struct {
	m        *meters
	started  map[string][]metric.AddOption    // by start kind
	finished map[Status][]metric.AddOption    // by status
	duration map[Status][]metric.RecordOption // by status
	step     [3][2][]metric.RecordOption      // by kind, then done (0) or error (1)
}

// runMeters is a run's handle on its workflow's instruments.
type runMeters struct {
	w       *wfMeters // nil: metrics off
	created time.Time // when the run was created, for durable.workflow.duration
}

// newMeters makes the engine's instruments from mp (OpenTelemetry's
// global provider when nil); nil, metrics off, for a no-op provider.
func newMeters(mp metric.MeterProvider, e *Engine) *meters {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	switch mp.(type) {
	case noop.MeterProvider, *noop.MeterProvider:
		return nil
	}
	meter := mp.Meter(meterName)
	m := &meters{e: e, mq: sysdb.NewMetricsQueries(e.cfg.Schema)}
	var errs []error
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var err error
	m.startedC, err = meter.Int64Counter("durable.workflow.started", metric.WithUnit("{run}"),
		metric.WithDescription("Workflow runs created, by workflow and how (durable.start.kind)."))
	check(err)
	m.finishedC, err = meter.Int64Counter("durable.workflow.finished", metric.WithUnit("{run}"),
		metric.WithDescription("Workflow runs ended, by workflow and final status (durable.workflow.status)."))
	check(err)
	m.wfDuration, err = meter.Float64Histogram("durable.workflow.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a run's creation to its end, for the runs that end in this process."),
		metric.WithExplicitBucketBoundaries(runBuckets...))
	check(err)
	m.recoveries, err = meter.Int64Counter("durable.workflow.recoveries", metric.WithUnit("{run}"),
		metric.WithDescription("Runs resumed after the executor running them died, by durable.recovery.kind."))
	check(err)
	m.stepDuration, err = meter.Float64Histogram("durable.step.duration", metric.WithUnit("s"),
		metric.WithDescription("Executed steps (not replayed ones), from the first attempt's start to the recorded outcome, retries included."),
		metric.WithExplicitBucketBoundaries(stepBuckets...))
	check(err)
	m.qWait, err = meter.Float64Histogram("durable.queue.wait", metric.WithUnit("s"),
		metric.WithDescription("Time queued runs waited from their enqueue to their first start."),
		metric.WithExplicitBucketBoundaries(runBuckets...))
	check(err)
	m.joined, err = meter.Int64Counter("durable.queue.joined", metric.WithUnit("{enqueue}"),
		metric.WithDescription("Enqueues that joined a queued run instead of creating one, by queue and durable.join.kind (debounce, batch)."))
	check(err)
	m.keys, err = meter.Int64ObservableGauge("durable.queue.keys", metric.WithUnit("{key}"),
		metric.WithDescription("Partition keys with queued runs, per queue dispatched by key (fair sharing, limits or rates per key), counted up to 1024; read from the database."))
	check(err)
	m.batch, err = meter.Int64Histogram("durable.commit.batch.size", metric.WithUnit("{write}"),
		metric.WithDescription("Writes per group-commit statement (1: a write that went alone), by durable.commit.kind."),
		metric.WithExplicitBucketBoundaries(batchBuckets...))
	check(err)
	m.depth, err = meter.Int64ObservableGauge("durable.queue.depth", metric.WithUnit("{run}"),
		metric.WithDescription("Runs of each declared queue by durable.queue.state (ready, delayed, running), read from the database."))
	check(err)
	m.parked, err = meter.Int64ObservableGauge("durable.workflow.parked", metric.WithUnit("{run}"),
		metric.WithDescription("Parked runs (a long sleep or wait, holding no goroutine), read from the database."))
	check(err)
	m.executing, err = meter.Int64ObservableGauge("durable.workflow.executing", metric.WithUnit("{run}"),
		metric.WithDescription("Runs executing in this process."))
	check(err)
	m.reg, err = meter.RegisterCallback(m.observe, m.depth, m.parked, m.executing, m.keys)
	check(err)
	if len(errs) > 0 {
		e.log.Warn("durable: metrics: make instruments", "err", errors.Join(errs...))
	}

	m.batchOpts = map[string][]metric.RecordOption{}
	for _, k := range []string{commit.Starts, commit.Steps, commit.Finishes} {
		m.batchOpts[k] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attrCommitKind.String(k)))}
	}
	m.recoveryOpts = map[string][]metric.AddOption{}
	for _, k := range []string{recoveryRestart, recoveryTakeover, recoveryRequeue} {
		m.recoveryOpts[k] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attrRecoveryKind.String(k)))}
	}
	m.cancelOpts = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attrStatus.String(string(StatusCancelled))))}
	return m
}

// workflow returns the attribute sets of workflow name's measurements.
func (m *meters) workflow(name string) *wfMeters {
	if w, ok := m.byName.Load(name); ok {
		return w.(*wfMeters)
	}
	wn := attrWorkflowName.String(name)
	w := &wfMeters{m: m, started: map[string][]metric.AddOption{}, finished: map[Status][]metric.AddOption{},
		duration: map[Status][]metric.RecordOption{}}
	for _, k := range []string{startDirect, startEnqueue, startChild, startSchedule, startFork} {
		w.started[k] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(wn, attrStartKind.String(k)))}
	}
	for _, s := range []Status{StatusSuccess, StatusError, StatusCancelled, StatusDead} {
		set := attribute.NewSet(wn, attrStatus.String(string(s)))
		w.finished[s] = []metric.AddOption{metric.WithAttributeSet(set)}
		w.duration[s] = []metric.RecordOption{metric.WithAttributeSet(set)}
	}
	for k, kind := range stepKinds {
		for i, st := range []string{stepDone, stepError} {
			w.step[k][i] = []metric.RecordOption{metric.WithAttributeSet(
				attribute.NewSet(wn, attrStepKind.String(kind), attrStepStatus.String(st)))}
		}
	}
	got, _ := m.byName.LoadOrStore(name, w)
	return got.(*wfMeters)
}

// started counts a run of workflow created by a call (kind) that does
// not execute it here.
func (m *meters) started(ctx context.Context, workflow, kind string) {
	if m == nil {
		return
	}
	m.startedC.Add(ctx, 1, m.workflow(workflow).started[kind]...)
}

// startedMany counts n runs of workflow created at once, as started does.
func (m *meters) startedMany(ctx context.Context, workflow, kind string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.startedC.Add(ctx, int64(n), m.workflow(workflow).started[kind]...)
}

// startedRun counts r, just created by this process to execute here.
func (m *meters) startedRun(r *run, kind string) {
	if m == nil {
		return
	}
	r.m = runMeters{w: m.workflow(r.name), created: time.Now()}
	m.startedC.Add(r.ctx, 1, r.m.w.started[kind]...)
}

// claimedRun prepares the measurements of claimed run r: its creation
// time, and the wait of a queued run claimed for the first time.
func (m *meters) claimedRun(r *run, c *claimed) {
	if m == nil {
		return
	}
	now := time.Now()
	r.m = runMeters{w: m.workflow(r.name), created: now}
	if c.Queued != nil {
		r.m.created = now.Add(-*c.Queued)
		if c.Queue != nil && c.Epoch == 1 { // the first start of an enqueued run
			m.qWait.Record(r.ctx, max(c.Queued.Seconds(), 0), m.queue(*c.Queue)...)
		}
	}
}

// queue returns the attribute set of queue name's measurements.
func (m *meters) queue(name string) []metric.RecordOption {
	if o, ok := m.byQueue.Load(name); ok {
		return o.([]metric.RecordOption)
	}
	o := []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attrQueue.String(name)))}
	got, _ := m.byQueue.LoadOrStore(name, o)
	return got.([]metric.RecordOption)
}

// joinKey names the attribute set of durable.queue.joined.
type joinKey struct{ queue, kind string }

// joinedRun counts an enqueue that joined a queued run of queue
// (kind: joinDebounce or joinBatch).
func (m *meters) joinedRun(ctx context.Context, queue, kind string) {
	if m == nil {
		return
	}
	k := joinKey{queue, kind}
	o, ok := m.byJoin.Load(k)
	if !ok {
		o, _ = m.byJoin.LoadOrStore(k, []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attrQueue.String(queue), attrJoinKind.String(kind)))})
	}
	m.joined.Add(ctx, 1, o.([]metric.AddOption)...)
}

// finished counts the recorded end of r (o nil: none recorded here).
func (m *meters) finished(r *run, o *outcome) {
	if m == nil || o == nil || r.m.w == nil {
		return
	}
	m.finishedC.Add(r.ctx, 1, r.m.w.finished[o.status]...)
	m.wfDuration.Record(r.ctx, time.Since(r.m.created).Seconds(), r.m.w.duration[o.status]...)
}

// deadLettered counts claimed run c, moved to the dead status.
func (m *meters) deadLettered(c *claimed) {
	if m == nil {
		return
	}
	w := m.workflow(c.Name)
	ctx := context.Background()
	m.finishedC.Add(ctx, 1, w.finished[StatusDead]...)
	if c.Queued != nil {
		m.wfDuration.Record(ctx, max(c.Queued.Seconds(), 0), w.duration[StatusDead]...)
	}
}

// cancelled counts n runs that a Cancel of this process ended. Their
// workflow names are not known here: the count has only the status.
func (m *meters) cancelled(ctx context.Context, n int) {
	if m == nil || n == 0 {
		return
	}
	m.finishedC.Add(ctx, int64(n), m.cancelOpts...)
}

// recovered counts the runs of got whose claim counted a recovery
// attempt, as kind.
func (m *meters) recovered(got []claimed, kind string) {
	if m == nil {
		return
	}
	n := 0
	for i := range got {
		if got[i].Recovered {
			n++
		}
	}
	if n > 0 {
		m.recoveries.Add(context.Background(), int64(n), m.recoveryOpts[kind]...)
	}
}

// batchFunc returns the group commit's OnBatch: nil when metrics are off.
func (m *meters) batchFunc() func(kind string, n int) {
	if m == nil {
		return nil
	}
	return func(kind string, n int) { m.batch.Record(context.Background(), int64(n), m.batchOpts[kind]...) }
}

// requeuedFunc returns the dispatcher's Requeued: nil when metrics are off.
func (m *meters) requeuedFunc() func(queue string, n int) {
	if m == nil {
		return nil
	}
	return func(_ string, n int) {
		m.recoveries.Add(context.Background(), int64(n), m.recoveryOpts[recoveryRequeue]...)
	}
}

// observe is the gauges' callback, called by each collection of a
// reader: the runs executing here, and, from Launch to Shutdown, the
// queues' depth and the parked runs, as the database has them.
func (m *meters) observe(ctx context.Context, o metric.Observer) error {
	o.ObserveInt64(m.executing, int64(m.e.runner.active.count()))
	m.e.mu.Lock()
	launched := m.e.state == stateLaunched
	m.e.mu.Unlock()
	if !launched {
		return nil // before Launch the schema may not exist yet
	}
	ctx, cancel := context.WithTimeout(ctx, observeTimeout)
	defer cancel()
	var errs []error
	if qs, err := m.e.ListQueues(ctx); err != nil {
		errs = append(errs, err)
	} else {
		for _, q := range qs {
			qa := attrQueue.String(q.Name)
			o.ObserveInt64(m.depth, int64(q.Ready), metric.WithAttributes(qa, attrQueueState.String(queueReady)))
			o.ObserveInt64(m.depth, int64(q.Delayed), metric.WithAttributes(qa, attrQueueState.String(queueDelayed)))
			o.ObserveInt64(m.depth, int64(q.Running), metric.WithAttributes(qa, attrQueueState.String(queueRunning)))
			if st := q.Settings; !st.FairShare && st.PartitionConcurrency == 0 && st.PartitionRateLimit == 0 {
				continue // not dispatched by key
			}
			keys, err := m.e.pq.Keys(ctx, m.e.pool, sysdb.PartitionKeysParams{Queue: q.Name, Limit: keysCounted, WithKeyless: true})
			if err != nil {
				errs = append(errs, err)
				continue
			}
			o.ObserveInt64(m.keys, int64(len(keys)), metric.WithAttributes(qa))
		}
	}
	if n, err := m.mq.CountParked(ctx, m.e.pool); err != nil {
		errs = append(errs, err)
	} else {
		o.ObserveInt64(m.parked, n)
	}
	if err := errors.Join(errs...); err != nil {
		return errors.Join(errors.New("durable: metrics: read the database"), err)
	}
	return nil
}

// close unregisters the gauges' callback: a stopped engine reads nothing.
func (m *meters) close() {
	if m == nil || m.reg == nil {
		return
	}
	_ = m.reg.Unregister()
}

// step records the duration of the step of kind just run since started,
// and recorded with err (nil, or its *StepError); a step cut short by a
// halt (err of another kind) is not recorded.
func (rm *runMeters) step(ctx context.Context, kind int, started time.Time, err error) {
	if rm.w == nil {
		return
	}
	st := 0
	if err != nil {
		var se *StepError
		if !errors.As(err, &se) {
			return
		}
		st = 1
	}
	rm.w.m.stepDuration.Record(ctx, time.Since(started).Seconds(), rm.w.step[kind][st]...)
}

// count returns how many runs execute here.
func (a *activeRuns) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.m)
}
