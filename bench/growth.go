package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable"
)

// Growth is the hot path's cost as the history grows: the same latencies
// measured on an empty database and after it was filled with finished
// runs (each with one recorded step), as ratios to the empty database in
// the same run.
type Growth struct {
	N    int         `json:"n"` // samples per latency and size
	Rows []GrowthRow `json:"rows"`
	// Resumes of long runs: a run with this many recorded steps, cut short
	// and resumed by a new engine (replay, then one more step).
	Resumes []LongResume `json:"resumes"`
	// Parked is many runs parked in Recv at once.
	Parked *ParkedRuns `json:"parked"`
}

// LongResume is the resume of one long run.
type LongResume struct {
	Steps int     `json:"steps"`
	MS    float64 `json:"resume_ms"` // from Launch until its result
	// HeldMB is the heap in use (after a GC) once the replay of the
	// recorded steps is over, in the first step not recorded, over the
	// heap before the resume (after a GC): what the engine holds of the
	// history it replayed.
	HeldMB float64 `json:"held_heap_mb"`
	// PeakHeapMB is the highest heap in use during the resume, over the
	// heap before it (sampled every millisecond; garbage not yet
	// collected included).
	PeakHeapMB float64 `json:"peak_heap_mb"`
}

// ParkedRuns is N runs parked at once, waiting for a message each.
type ParkedRuns struct {
	N          int     `json:"n"`
	StartS     float64 `json:"start_s"`      // starting them until all are parked
	HeapMB     float64 `json:"heap_mb"`      // heap in use with all parked (after a GC), over before
	Goroutines int     `json:"goroutines"`   // over before
	WakeP50US  float64 `json:"wake_p50_us"`  // Send to the body going on, one run at a time
	WakeP99US  float64 `json:"wake_p99_us"`  //
	WakeN      int     `json:"wake_n"`       // wake-ups measured
	TableMB    float64 `json:"workflows_mb"` // the runs table then
}

// GrowthRow is one size of the history. Latencies are medians (µs).
type GrowthRow struct {
	History int     `json:"history"` // finished runs in the table
	FillS   float64 `json:"fill_s"`  // filling up to this size, and its ANALYZE
	growthLat
	// Ref: the same latencies measured in turns with these on an empty
	// schema of their own, the reference of the ratios.
	Ref     growthLat `json:"ref"`
	TableMB float64   `json:"workflows_mb"` // the runs table with its indexes
	StepsMB float64   `json:"steps_mb"`     // the steps table with its index
}

// growthLat are the hot path's latencies on one schema (medians, µs).
type growthLat struct {
	// WF0US: start and await a 0-step workflow (the start and the finish).
	WF0US float64 `json:"wf0_p50_us"`
	// StepUS: per step, (10-step - 0-step) / 10, from medians.
	StepUS float64 `json:"step_p50_us"`
	// QLatUS: enqueue to the first line of the body, idle queue.
	QLatUS float64 `json:"qlat_p50_us"`
	// ListUS: the first page (50) of ListWorkflows, newest first;
	// ListFailedUS: the first page of failed runs (there are none).
	ListUS       float64 `json:"list_p50_us"`
	ListFailedUS float64 `json:"list_failed_p50_us"`
}

// growthOps are the operations a growth row times.
var growthOps = []string{"wf0", "wf10", "qlat", "list", "list_failed"}

// growthMedians turns the latencies of growthOps into a growthLat.
func growthMedians(lat map[string][]time.Duration) growthLat {
	p50 := func(name string) float64 {
		l := lat[name]
		slices.Sort(l)
		return us(pct(l, 0.5))
	}
	g := growthLat{WF0US: p50("wf0"), QLatUS: p50("qlat"), ListUS: p50("list"), ListFailedUS: p50("list_failed")}
	g.StepUS = (p50("wf10") - g.WF0US) / 10
	return g
}

// growthSide is an engine on a schema of its own with the workflows and
// queue a growth row times.
type growthSide struct {
	pool   *pgxpool.Pool
	eng    *durable.Engine
	steps  *durable.Workflow[int, int]
	qwf    *durable.Workflow[int, int]
	q      *durable.Queue
	starts sync.Map // run ID -> chan time.Time
	seq    int
	close  func()
}

func (b *bench) growthSide(ctx context.Context, schema string) (*growthSide, error) {
	pool, done, err := b.freshSchema(ctx, schema)
	if err != nil {
		return nil, err
	}
	s := &growthSide{pool: pool}
	s.eng, err = durable.New(pool, &durable.Config{Schema: schema, AppVersion: "bench", ExecutorID: "bench-growth", Logger: discard})
	if err != nil {
		done()
		return nil, err
	}
	s.steps = durable.Register(s.eng, "steps", noopSteps, nil)
	s.qwf = durable.Register(s.eng, "qstart", func(wctx durable.Context, k int) (int, error) {
		signalStart(&s.starts, wctx.WorkflowID())
		return k, nil
	}, nil)
	s.q = durable.RegisterQueue(s.eng, growthQueue, nil)
	if err := s.eng.Launch(ctx); err != nil {
		done()
		return nil, err
	}
	s.close = func() {
		_ = s.eng.Shutdown(context.WithoutCancel(ctx))
		done()
	}
	return s, nil
}

// op times the growth operation name once.
func (s *growthSide) op(ctx context.Context, name string) (time.Duration, error) {
	switch name {
	case "wf0":
		return timeOp(ctx, workflowOp(s.steps, 0))
	case "wf10":
		return timeOp(ctx, workflowOp(s.steps, 10))
	case "qlat":
		s.seq++
		id := fmt.Sprintf("growth-q-%d", s.seq)
		ch := make(chan time.Time, 1)
		s.starts.Store(id, ch)
		defer s.starts.Delete(id)
		t := time.Now()
		h, err := s.qwf.Enqueue(ctx, s.q, 0, &durable.EnqueueOpts{ID: id})
		if err != nil {
			return 0, err
		}
		started, err := waitStart(ctx, id, ch)
		if err != nil {
			return 0, err
		}
		_, err = h.Result(ctx)
		return started.Sub(t), err
	case "list":
		return timeOp(ctx, func(ctx context.Context) error {
			_, _, err := s.eng.ListWorkflows(ctx, &durable.ListParams{Limit: 50, OmitPayloads: true})
			return err
		})
	case "list_failed":
		return timeOp(ctx, func(ctx context.Context) error {
			_, _, err := s.eng.ListWorkflows(ctx, &durable.ListParams{Limit: 50, OmitPayloads: true, Statuses: []durable.Status{durable.StatusError}})
			return err
		})
	}
	return 0, fmt.Errorf("no growth operation %q", name)
}

const (
	growthSchema = "bench_growth"
	growthQueue  = "growth"
	growthBatch  = 500_000 // runs a fill statement inserts
)

// growth measures the sizes of Options.Growth in increasing order.
func (b *bench) growth(ctx context.Context) (*Growth, error) {
	o := b.o
	sizes := slices.Clone(o.Growth)
	slices.Sort(sizes)
	if len(sizes) == 0 || sizes[0] != 0 {
		sizes = append([]int{0}, sizes...) // the empty database is the reference
	}
	// Two schemas, measured in turns: the one filled with history and an
	// empty reference, so that each ratio compares latencies taken at the
	// same time (the machine's state drifts over the minutes of a fill).
	grown, err := b.growthSide(ctx, growthSchema)
	if err != nil {
		return nil, err
	}
	defer grown.close()
	ref, err := b.growthSide(ctx, growthSchema+"_ref")
	if err != nil {
		return nil, err
	}
	defer ref.close()

	g := &Growth{N: max(o.N/5, 20)}
	have := 0
	for _, size := range sizes {
		t0 := time.Now()
		for have < size {
			n := min(growthBatch, size-have)
			if err := b.fillHistory(ctx, have, n); err != nil {
				return nil, err
			}
			have += n
			o.logf("growth: %d finished runs in history (%.0fs)", have, time.Since(t0).Seconds())
		}
		for _, s := range []string{growthSchema, growthSchema + "_ref"} {
			if _, err := b.conn.Exec(ctx, "VACUUM ANALYZE "+s+".workflows, "+s+".steps"); err != nil {
				return nil, err
			}
		}
		row := GrowthRow{History: size, FillS: time.Since(t0).Seconds()}
		b.quiesce(ctx)
		lat, refLat := map[string][]time.Duration{}, map[string][]time.Duration{}
		for i := 0; i < g.N; i++ {
			// In turns, the side measured first alternating.
			sides := []*growthSide{grown, ref}
			if i%2 == 1 {
				sides[0], sides[1] = ref, grown
			}
			for _, name := range growthOps {
				for _, s := range sides {
					d, err := s.op(ctx, name)
					if err != nil {
						return nil, fmt.Errorf("growth %d, %s: %w", size, name, err)
					}
					if s == grown {
						lat[name] = append(lat[name], d)
					} else {
						refLat[name] = append(refLat[name], d)
					}
				}
			}
		}
		row.growthLat = growthMedians(lat)
		row.Ref = growthMedians(refLat)
		if err := b.conn.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass) / 1e6, pg_total_relation_size($2::regclass) / 1e6`,
			growthSchema+".workflows", growthSchema+".steps").Scan(&row.TableMB, &row.StepsMB); err != nil {
			return nil, err
		}
		o.logf("growth: %d in history (empty reference in turns): 0-step %.0f/%.0f µs, per step %.0f/%.0f µs, enqueue-to-start %.0f/%.0f µs, "+
			"list %.0f/%.0f µs, list failed %.0f/%.0f µs; runs table %.0f MB", size, row.WF0US, row.Ref.WF0US, row.StepUS, row.Ref.StepUS,
			row.QLatUS, row.Ref.QLatUS, row.ListUS, row.Ref.ListUS, row.ListFailedUS, row.Ref.ListFailedUS, row.TableMB)
		g.Rows = append(g.Rows, row)
	}
	if err := grown.eng.Shutdown(ctx); err != nil {
		return nil, err
	}
	if err := ref.eng.Shutdown(ctx); err != nil {
		return nil, err
	}
	pool := grown.pool
	for _, n := range []int{1000, o.GrowthSteps} {
		r, err := b.longResume(ctx, pool, n)
		if err != nil {
			return nil, fmt.Errorf("resume of %d steps: %w", n, err)
		}
		o.logf("growth: resume of a run with %d steps: %.0f ms, heap held after the replay %+.2f MB, peak +%.1f MB", n, r.MS, r.HeldMB, r.PeakHeapMB)
		g.Resumes = append(g.Resumes, r)
	}
	if o.GrowthParked > 0 {
		p, err := b.parkedRuns(ctx, pool, o.GrowthParked)
		if err != nil {
			return nil, fmt.Errorf("%d parked runs: %w", o.GrowthParked, err)
		}
		g.Parked = p
	}
	return g, nil
}

// longResume records n steps of a run, cuts it short (its engine's
// Shutdown times out while the run waits in step n+1), and times a new
// engine with the same executor ID resuming it to its result.
func (b *bench) longResume(ctx context.Context, pool *pgxpool.Pool, n int) (LongResume, error) {
	r := LongResume{Steps: n}
	cfg := &durable.Config{Schema: growthSchema, AppVersion: "bench", ExecutorID: fmt.Sprintf("bench-long-%d", n), Logger: discard}
	release := make(chan struct{})
	var recorded atomic.Int64
	var resumed atomic.Bool
	held := make(chan uint64, 1)
	long := func(wctx durable.Context, k int) (int, error) {
		for i := 0; i < k; i++ {
			if _, err := durable.Step(wctx, "s", okStep, nil); err != nil {
				return 0, err
			}
			recorded.Store(int64(i + 1))
		}
		_, err := durable.Step(wctx, "last", func(ctx context.Context) (string, error) {
			if resumed.Load() {
				runtime.GC()
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				held <- m.HeapInuse
			}
			select {
			case <-release:
				return "ok", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}, nil)
		return k, err
	}
	e1, err := durable.New(pool, cfg)
	if err != nil {
		return r, err
	}
	w1 := durable.Register(e1, "long", long, nil)
	if err := e1.Launch(ctx); err != nil {
		return r, err
	}
	id := fmt.Sprintf("long-%d", n)
	if _, err := w1.Start(ctx, n, &durable.StartOpts{ID: id}); err != nil {
		return r, err
	}
	for recorded.Load() < int64(n) {
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return r, ctx.Err()
		}
	}
	// Cut short: the run stays with this executor ID, as after a crash.
	sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_ = e1.Shutdown(sctx)
	cancel()
	close(release)

	e2, err := durable.New(pool, cfg)
	if err != nil {
		return r, err
	}
	w2 := durable.Register(e2, "long", long, nil)
	resumed.Store(true)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	stop := make(chan struct{})
	peak := make(chan uint64, 1)
	go func() {
		top := base
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				top = max(top, m.HeapInuse)
			case <-stop:
				peak <- top
				return
			}
		}
	}()
	t0 := time.Now()
	if err := e2.Launch(ctx); err != nil {
		close(stop)
		return r, err
	}
	h, err := w2.Handle(ctx, id)
	if err == nil {
		_, err = h.Result(ctx)
	}
	r.MS = float64(time.Since(t0).Microseconds()) / 1000
	close(stop)
	r.PeakHeapMB = float64(<-peak-base) / 1e6
	if err == nil {
		r.HeldMB = (float64(<-held) - float64(base)) / 1e6
	}
	if serr := e2.Shutdown(ctx); err == nil {
		err = serr
	}
	return r, err
}

// parkedRuns starts n runs that each wait for a message for an hour (so
// they park), measures the heap and goroutines with all of them parked,
// then wakes runs one at a time by a message and times each from the Send
// to the body going on.
func (b *bench) parkedRuns(ctx context.Context, pool *pgxpool.Pool, n int) (*ParkedRuns, error) {
	p := &ParkedRuns{N: n}
	e, err := durable.New(pool, &durable.Config{Schema: growthSchema, AppVersion: "bench", ExecutorID: "bench-parked", Logger: discard,
		ParkThreshold: time.Second})
	if err != nil {
		return nil, err
	}
	var woke sync.Map // run ID -> chan time.Time
	wf := durable.Register(e, "parked", func(wctx durable.Context, k int) (int, error) {
		_, _, err := durable.Recv[int](wctx, "go", time.Hour)
		signalStart(&woke, wctx.WorkflowID())
		return k, err
	}, nil)
	if err := e.Launch(ctx); err != nil {
		return nil, err
	}
	defer func() { _ = e.Shutdown(context.WithoutCancel(ctx)) }()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap0, g0 := ms.HeapInuse, runtime.NumGoroutine()
	t0 := time.Now()
	var seq atomic.Int64
	if err := timeConc(ctx, "park", 32, n, func(ctx context.Context) error {
		_, err := wf.Start(ctx, 1, &durable.StartOpts{ID: fmt.Sprintf("parked-%d", seq.Add(1))})
		return err
	}, map[string]float64{}); err != nil {
		return nil, err
	}
	// Parked: pending, no owner, a wake-up time.
	for {
		var c int64
		if err := b.conn.QueryRow(ctx, "SELECT count(*) FROM "+growthSchema+".workflows WHERE name = 'parked' AND status = 'pending' AND executor_id IS NULL AND wake_at IS NOT NULL").Scan(&c); err != nil {
			return nil, err
		}
		if c >= int64(n) {
			break
		}
		if time.Since(t0) > 10*time.Minute {
			return nil, fmt.Errorf("%d of %d runs parked after 10 minutes", c, n)
		}
		b.o.logf("growth: %d of %d runs parked (%.0fs)", c, n, time.Since(t0).Seconds())
		time.Sleep(2 * time.Second)
	}
	p.StartS = time.Since(t0).Seconds()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	p.HeapMB = (float64(ms.HeapInuse) - float64(heap0)) / 1e6
	p.Goroutines = runtime.NumGoroutine() - g0
	if err := b.conn.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass) / 1e6`, growthSchema+".workflows").Scan(&p.TableMB); err != nil {
		return nil, err
	}
	var lat []time.Duration
	for i := 1; i <= min(n, 50); i++ {
		id := fmt.Sprintf("parked-%d", i*(n/min(n, 50)))
		ch := make(chan time.Time, 1)
		woke.Store(id, ch)
		t := time.Now()
		if err := durable.Send(ctx, e, id, "go", 1, nil); err != nil {
			return nil, err
		}
		got, err := waitStart(ctx, id, ch)
		if err != nil {
			return nil, err
		}
		lat = append(lat, got.Sub(t))
	}
	slices.Sort(lat)
	p.WakeN, p.WakeP50US, p.WakeP99US = len(lat), us(pct(lat, 0.5)), us(pct(lat, 0.99))
	b.o.logf("growth: %d parked runs: started and parked in %.0fs, heap +%.0f MB, goroutines +%d; wake-up p50 %.1f ms p99 %.1f ms",
		n, p.StartS, p.HeapMB, p.Goroutines, p.WakeP50US/1000, p.WakeP99US/1000)
	return p, nil
}

// fillHistory inserts n finished runs (numbered from `from`), each with
// one recorded step, created before the measured runs.
func (b *bench) fillHistory(ctx context.Context, from, n int) error {
	_, err := b.conn.Exec(ctx, `INSERT INTO `+growthSchema+`.workflows (id, name, status, app_version, epoch, input, output, created_at, updated_at)
SELECT 'h-' || i, 'steps', 'success', 'bench', 1, '1', '1', ts, ts
FROM generate_series($1::bigint, $2::bigint) i, LATERAL (SELECT now() - interval '30 days' + i * interval '100 microseconds' AS ts) t`, from, from+n-1)
	if err != nil {
		return err
	}
	_, err = b.conn.Exec(ctx, `INSERT INTO `+growthSchema+`.steps (workflow_id, pos, name, status, output, attempts)
SELECT 'h-' || i, 0, 's', 'done', '"ok"', 1 FROM generate_series($1::bigint, $2::bigint) i`, from, from+n-1)
	return err
}

// timeOp times one op.
func timeOp(ctx context.Context, op opFunc) (time.Duration, error) {
	t := time.Now()
	err := op(ctx)
	return time.Since(t), err
}
