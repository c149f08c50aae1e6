package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable"
)

// Flow is what the flow-control scenarios measured, once per run.
type Flow struct {
	// Fairness: a small tenant's first run, enqueued once a backlog of
	// one big tenant holds every slot of a queue with GlobalConcurrency
	// FlowSlots, waits this long from its enqueue to the start of its body:
	// on a queue with FairShare and on one in priority order.
	Backlog        int     `json:"backlog"`
	HoldMS         float64 `json:"hold_ms"` // each backlog run's body sleeps this long
	FairWaitMS     float64 `json:"fair_wait_ms"`
	PriorityWaitMS float64 `json:"priority_wait_ms"`
	// The cost of dispatching by key: the drain of DrainN 0-step runs
	// spread over Keys partition keys on a FairShare queue, against the
	// same runs without keys on a plain queue.
	DrainN         int     `json:"drain_n"`
	Keys           int     `json:"keys"`
	FairDrainPerS  float64 `json:"fair_drain_per_s"`
	PlainDrainPerS float64 `json:"plain_drain_per_s"`
	// The same runs without keys on a queue with a global limit of
	// GlobalLimit slots: what a limit costs the drain.
	GlobalLimit      int     `json:"global_limit,omitempty"`
	LimitedDrainPerS float64 `json:"limited_drain_per_s,omitempty"`
	// Debounce: Enqueues from 8 goroutines on DebounceKeys keys, with and
	// without a debounce key; DebounceRuns runs came of them.
	DebounceN        int     `json:"debounce_n"`
	DebounceKeys     int     `json:"debounce_keys"`
	DebouncePerS     float64 `json:"debounce_per_s"`
	PlainEnqueuePerS float64 `json:"plain_enqueue_per_s"`
	DebounceRuns     int     `json:"debounce_runs"`
}

const (
	flowSchema  = "bench_flow"
	flowSlots   = 8
	flowBacklog = 1000
	flowHold    = 10 * time.Millisecond
	flowKeys    = 100
	flowLimit   = 100 // the global limit of the limited drain
)

// flow measures fair sharing, the cost of the keyed dispatch and
// debounced enqueues, in schema bench_flow.
func (b *bench) flow(ctx context.Context) (*Flow, error) {
	// The sizes follow DrainN down (a quick run, the package's test).
	f := &Flow{Backlog: min(flowBacklog, 10*b.o.DrainN), HoldMS: float64(flowHold) / float64(time.Millisecond), DrainN: b.o.DrainN,
		Keys: flowKeys, DebounceN: min(8000, 10*b.o.DrainN), DebounceKeys: flowKeys}
	if err := b.dropSchema(ctx, flowSchema); err != nil {
		return nil, err
	}
	defer func() { _ = b.dropSchema(context.WithoutCancel(ctx), flowSchema) }()
	pool, err := b.newPool(ctx, b.o.MaxConns, true)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	for _, fair := range []bool{true, false} {
		wait, err := b.smallTenantWait(ctx, pool, fair, f.Backlog)
		if err != nil {
			return nil, err
		}
		if fair {
			f.FairWaitMS = wait
		} else {
			f.PriorityWaitMS = wait
		}
	}
	f.GlobalLimit = flowLimit
	for _, kind := range []string{"fair", "plain", "limited"} {
		rate, err := b.flowDrain(ctx, pool, kind)
		if err != nil {
			return nil, err
		}
		switch kind {
		case "fair":
			f.FairDrainPerS = rate
		case "plain":
			f.PlainDrainPerS = rate
		default:
			f.LimitedDrainPerS = rate
		}
	}
	if err := b.debounceRate(ctx, pool, f); err != nil {
		return nil, err
	}
	b.o.logf("flow: small tenant behind %d runs waits %.1f ms (FairShare) vs %.0f ms (priority order); drain by key %.0f /s vs plain %.0f /s, with a global limit of %d %.0f /s; debounced enqueue %.0f /s vs %.0f /s (%d runs)",
		f.Backlog, f.FairWaitMS, f.PriorityWaitMS, f.FairDrainPerS, f.PlainDrainPerS, f.GlobalLimit, f.LimitedDrainPerS, f.DebouncePerS, f.PlainEnqueuePerS, f.DebounceRuns)
	return f, nil
}

// flowEngine is a launched engine on bench_flow with queue name (opts)
// and workflow "hold" (body: sleep in, and say when it began on started,
// if the input is negative).
func (b *bench) flowEngine(ctx context.Context, pool *pgxpool.Pool, name string, opts *durable.QueueOpts, started chan<- time.Time) (*durable.Engine, *durable.Workflow[int, int], *durable.Queue, error) {
	e, err := durable.New(pool, &durable.Config{Schema: flowSchema, ExecutorID: "bench-flow-" + name, AppVersion: "bench", Logger: discard})
	if err != nil {
		return nil, nil, nil, err
	}
	wf := durable.Register(e, "hold-"+name, func(_ durable.Context, in int) (int, error) {
		if in < 0 {
			started <- time.Now()
			return 0, nil
		}
		time.Sleep(time.Duration(in) * time.Microsecond)
		return in, nil
	}, nil)
	q := durable.RegisterQueue(e, name, opts)
	return e, wf, q, e.Launch(ctx)
}

// smallTenantWait: a backlog of one key fills the queue's slots; one run
// of another key comes; its wait, from the enqueue to its body, in ms.
func (b *bench) smallTenantWait(ctx context.Context, pool *pgxpool.Pool, fair bool, n int) (float64, error) {
	name := "fairness-priority"
	if fair {
		name = "fairness-fair"
	}
	started := make(chan time.Time, 1)
	e, wf, q, err := b.flowEngine(ctx, pool, name, &durable.QueueOpts{GlobalConcurrency: flowSlots, FairShare: fair}, started)
	if err != nil {
		return 0, err
	}
	defer func() { _ = e.Shutdown(context.WithoutCancel(ctx)) }()
	if err := q.Pause(ctx); err != nil {
		return 0, err
	}
	items := make([]durable.EnqueueItem[int], n)
	for i := range items {
		items[i] = durable.EnqueueItem[int]{Input: int(flowHold / time.Microsecond), Opts: &durable.EnqueueOpts{PartitionKey: "big"}}
	}
	backlog, err := wf.EnqueueMany(ctx, q, items)
	if err != nil {
		return 0, err
	}
	if err := q.Resume(ctx); err != nil {
		return 0, err
	}
	if err := pollUntil(ctx, time.Millisecond, "the backlog fills the slots", func() (bool, int64, error) {
		st, err := q.Stats(ctx)
		return st.Running == flowSlots, int64(st.Running), err
	}); err != nil {
		return 0, err
	}
	t0 := time.Now()
	h, err := wf.Enqueue(ctx, q, -1, &durable.EnqueueOpts{PartitionKey: "small"})
	if err != nil {
		return 0, err
	}
	var wait time.Duration
	select {
	case t := <-started:
		wait = t.Sub(t0)
	case <-time.After(2 * time.Minute):
		return 0, fmt.Errorf("%s: the small tenant's run did not start within 2 minutes", name)
	}
	if _, err := h.Result(ctx); err != nil {
		return 0, err
	}
	for _, h := range backlog {
		if _, err := h.Result(ctx); err != nil {
			return 0, err
		}
	}
	return float64(wait) / float64(time.Millisecond), nil
}

// flowDrain times the drain of DrainN 0-step runs (enqueued while the
// queue is paused), over flowKeys keys on a FairShare queue ("fair"), or
// without keys on a plain queue ("plain") or on one with a global limit
// of flowLimit slots ("limited"); runs per second.
func (b *bench) flowDrain(ctx context.Context, pool *pgxpool.Pool, kind string) (float64, error) {
	name := "drain-" + kind
	fair := kind == "fair"
	opts := &durable.QueueOpts{FairShare: fair}
	if kind == "limited" {
		opts.GlobalConcurrency = flowLimit
	}
	e, wf, q, err := b.flowEngine(ctx, pool, name, opts, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = e.Shutdown(context.WithoutCancel(ctx)) }()
	if err := q.Pause(ctx); err != nil {
		return 0, err
	}
	n := b.o.DrainN
	var hs []*durable.Handle[int]
	for i := 0; i < n; i += drainBatch {
		items := make([]durable.EnqueueItem[int], min(drainBatch, n-i))
		for j := range items {
			items[j].Input = 0
			if fair {
				items[j].Opts = &durable.EnqueueOpts{PartitionKey: fmt.Sprintf("tenant-%03d", (i+j)%flowKeys)}
			}
		}
		got, err := wf.EnqueueMany(ctx, q, items)
		if err != nil {
			return 0, err
		}
		hs = append(hs, got...)
	}
	b.quiesce(ctx)
	t0 := time.Now()
	if err := q.Resume(ctx); err != nil {
		return 0, err
	}
	// The end: no run of the queue queued or running, found by two index
	// probes (a count of the backlog every 2 ms would take the CPU the
	// drain needs).
	var polls int64
	if err := pollUntil(ctx, 2*time.Millisecond, "the drain by key", func() (bool, int64, error) {
		var left bool
		polls++
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+flowSchema+`.workflows WHERE queue_name = $1 AND status = 'enqueued')
			OR EXISTS (SELECT 1 FROM `+flowSchema+`.workflows WHERE queue_name = $1 AND status = 'pending')`, name).Scan(&left)
		return !left, polls, err
	}); err != nil {
		return 0, err
	}
	el := time.Since(t0)
	for _, h := range hs[:min(len(hs), 100)] { // spot checks: the runs succeeded
		if _, err := h.Result(ctx); err != nil {
			return 0, err
		}
	}
	return float64(n) / el.Seconds(), nil
}

// debounceRate: DebounceN enqueues from 8 goroutines on DebounceKeys keys
// with a debounce key (a window of a minute: they all collapse), against
// as many plain enqueues.
func (b *bench) debounceRate(ctx context.Context, pool *pgxpool.Pool, f *Flow) error {
	e, wf, q, err := b.flowEngine(ctx, pool, "debounce", nil, nil)
	if err != nil {
		return err
	}
	defer func() { _ = e.Shutdown(context.WithoutCancel(ctx)) }()
	if err := q.Pause(ctx); err != nil { // the plain runs stay queued
		return err
	}
	for _, debounce := range []bool{true, false} {
		var next atomic.Int64
		var firstErr error
		var mu sync.Mutex
		var wg sync.WaitGroup
		t0 := time.Now()
		for range 8 {
			wg.Go(func() {
				for {
					i := next.Add(1)
					if i > int64(f.DebounceN) {
						return
					}
					var opts *durable.EnqueueOpts
					if debounce {
						opts = &durable.EnqueueOpts{Debounce: &durable.Debounce{Key: fmt.Sprintf("doc-%03d", i%int64(f.DebounceKeys)), Window: time.Minute}}
					}
					if _, err := wf.Enqueue(ctx, q, int(i), opts); err != nil {
						mu.Lock()
						firstErr = cmpErr(firstErr, err)
						mu.Unlock()
						return
					}
				}
			})
		}
		wg.Wait()
		if firstErr != nil {
			return firstErr
		}
		rate := float64(f.DebounceN) / time.Since(t0).Seconds()
		if debounce {
			f.DebouncePerS = rate
			st, err := q.Stats(ctx)
			if err != nil {
				return err
			}
			f.DebounceRuns = st.Ready + st.Delayed
		} else {
			f.PlainEnqueuePerS = rate
		}
	}
	return nil
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
