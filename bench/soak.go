package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/durable-go/durable"
)

// Soak is steady load for a long time with retention pruning behind it:
// latencies per minute, table sizes, dead tuples and autovacuum runs.
type Soak struct {
	Minutes     float64      `json:"minutes"`
	MaxPerS     float64      `json:"max_per_s"`     // the mix's measured maximum, closed loop
	RatePerS    float64      `json:"rate_per_s"`    // the offered load: a share of the maximum
	RetentionS  float64      `json:"retention_s"`   // runs finished longer ago are pruned
	Ops         int64        `json:"ops"`           // operations completed
	Errors      int64        `json:"errors"`        // operations that failed
	Dropped     int64        `json:"dropped"`       // operations not started: too many in flight
	Pruned      int64        `json:"pruned_runs"`   // runs deleted by retention
	Mix         string       `json:"mix"`           // what an operation is
	P99Ratio    float64      `json:"p99_ratio"`     // p99 of the last five minutes over the first five's
	SizeRatio   float64      `json:"size_ratio"`    // total size at the end over the size once retention was steady
	SteadyAtMin int          `json:"steady_at_min"` // the minute the size ratio starts from
	Per         []SoakMinute `json:"per_minute"`
}

// SoakMinute is one minute of the soak.
type SoakMinute struct {
	Minute      int     `json:"minute"`
	Ops         int     `json:"ops"`
	P50US       float64 `json:"p50_us"` // latency from the scheduled start (queueing included)
	P99US       float64 `json:"p99_us"`
	WorkflowsMB float64 `json:"workflows_mb"` // with indexes and TOAST
	StepsMB     float64 `json:"steps_mb"`
	OtherMB     float64 `json:"other_mb"` // messages, events, streams, step attempts
	LiveRuns    int64   `json:"live_runs"`
	DeadTuples  int64   `json:"dead_tuples"` // in the engine's tables
	Autovacuums int64   `json:"autovacuums"` // runs so far, the engine's tables
}

const (
	soakSchema      = "bench_soak"
	soakQueue       = "soak"
	soakShare       = 0.7 // of the maximum
	soakMaxInFlight = 4096
)

var soakMix = "per operation, at random: 50% a 1-step workflow started and awaited; 20% a 2-step workflow enqueued on a queue " +
	"and awaited; 15% a workflow that sleeps 1 s (durably) between two steps; 15% a workflow that waits for a message the " +
	"driver sends it 50 ms after its start"

// soak runs the soak for o.Soak.
func (b *bench) soak(ctx context.Context) (*Soak, error) {
	o := b.o
	pool, done, err := b.freshSchema(ctx, soakSchema)
	if err != nil {
		return nil, err
	}
	defer done()
	eng, err := durable.New(pool, &durable.Config{Schema: soakSchema, AppVersion: "bench", ExecutorID: "bench-soak", Logger: discard})
	if err != nil {
		return nil, err
	}
	one := durable.Register(eng, "one", noopSteps, nil)
	queued := durable.Register(eng, "queued", noopSteps, nil)
	sleeper := durable.Register(eng, "sleeper", func(wctx durable.Context, k int) (int, error) {
		if _, err := durable.Step(wctx, "a", okStep, nil); err != nil {
			return 0, err
		}
		if err := durable.Sleep(wctx, time.Second); err != nil {
			return 0, err
		}
		_, err := durable.Step(wctx, "b", okStep, nil)
		return k, err
	}, nil)
	waiter := durable.Register(eng, "waiter", func(wctx durable.Context, k int) (int, error) {
		v, _, err := durable.Recv[int](wctx, "go", time.Minute)
		return v, err
	}, nil)
	q := durable.RegisterQueue(eng, soakQueue, nil)
	if err := eng.Launch(ctx); err != nil {
		return nil, err
	}
	defer func() { _ = eng.Shutdown(context.WithoutCancel(ctx)) }()

	// op runs one operation of the mix; what it returns is its own
	// latency beyond its fixed waits (the sleep, the message's delay).
	op := func(ctx context.Context) (time.Duration, error) {
		t := time.Now()
		switch x := rand.IntN(100); {
		case x < 50:
			h, err := one.Start(ctx, 1, nil)
			if err != nil {
				return 0, err
			}
			_, err = h.Result(ctx)
			return time.Since(t), err
		case x < 70:
			h, err := queued.Enqueue(ctx, q, 2, nil)
			if err != nil {
				return 0, err
			}
			_, err = h.Result(ctx)
			return time.Since(t), err
		case x < 85:
			h, err := sleeper.Start(ctx, 1, nil)
			if err != nil {
				return 0, err
			}
			_, err = h.Result(ctx)
			return time.Since(t) - time.Second, err
		default:
			h, err := waiter.Start(ctx, 1, nil)
			if err != nil {
				return 0, err
			}
			time.Sleep(50 * time.Millisecond)
			if err := durable.Send(ctx, eng, h.ID(), "go", 1, nil); err != nil {
				return 0, err
			}
			_, err = h.Result(ctx)
			return time.Since(t) - 50*time.Millisecond, err
		}
	}

	s := &Soak{Minutes: o.Soak.Minutes(), RetentionS: o.SoakRetention.Seconds(), Mix: soakMix}
	// The maximum: closed loop, 128 goroutines, 20 s.
	var n atomic.Int64
	mctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	var wg sync.WaitGroup
	t0 := time.Now()
	for g := 0; g < 128; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for mctx.Err() == nil {
				if _, err := op(mctx); err == nil {
					n.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	cancel()
	s.MaxPerS = float64(n.Load()) / time.Since(t0).Seconds()
	s.RatePerS = soakShare * s.MaxPerS
	o.logf("soak: the mix's maximum %.0f ops/s; offering %.0f ops/s for %v, pruning runs finished over %v ago", s.MaxPerS, s.RatePerS, o.Soak, o.SoakRetention)

	// Open loop at RatePerS: each operation's latency counts from its
	// scheduled time, so a stall shows as latency, not as fewer samples.
	var mu sync.Mutex
	var lat []time.Duration
	var ops, errs, dropped, pruned atomic.Int64
	sem := make(chan struct{}, soakMaxInFlight)
	sctx, stop := context.WithTimeout(ctx, o.Soak)
	defer stop()
	go func() { // retention
		t := time.NewTicker(15 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				res, err := eng.Prune(sctx, time.Now().Add(-o.SoakRetention), nil)
				if err == nil {
					pruned.Add(res.Runs)
				}
			case <-sctx.Done():
				return
			}
		}
	}()
	interval := time.Duration(float64(time.Second) / s.RatePerS)
	start := time.Now()
	nextMinute := start.Add(time.Minute)
	var inflight sync.WaitGroup
	for i := int64(0); ; i++ {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			select {
			case <-time.After(d):
			case <-sctx.Done():
			}
		}
		if now := time.Now(); now.After(nextMinute) || sctx.Err() != nil {
			mu.Lock()
			l := lat
			lat = nil
			mu.Unlock()
			m, err := b.soakMinute(ctx, len(s.Per)+1, l)
			if err != nil {
				return nil, err
			}
			s.Per = append(s.Per, m)
			o.logf("soak: minute %d: %d ops, p50 %.1f ms p99 %.1f ms; runs table %.0f MB, steps %.0f MB, %d live runs, %d dead tuples, %d autovacuums",
				m.Minute, m.Ops, m.P50US/1000, m.P99US/1000, m.WorkflowsMB, m.StepsMB, m.LiveRuns, m.DeadTuples, m.Autovacuums)
			nextMinute = nextMinute.Add(time.Minute)
			if sctx.Err() != nil {
				break
			}
		}
		select {
		case sem <- struct{}{}:
		default:
			dropped.Add(1)
			continue
		}
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			defer func() { <-sem }()
			wait := time.Since(at) // behind schedule before it began
			d, err := op(ctx)
			if err != nil {
				errs.Add(1)
				return
			}
			ops.Add(1)
			mu.Lock()
			lat = append(lat, wait+d)
			mu.Unlock()
		}()
	}
	inflight.Wait()
	s.Ops, s.Errors, s.Dropped, s.Pruned = ops.Load(), errs.Load(), dropped.Load(), pruned.Load()
	s.summarize()
	return s, nil
}

// soakMinute reads one minute's latencies and the tables' state.
func (b *bench) soakMinute(ctx context.Context, minute int, lat []time.Duration) (SoakMinute, error) {
	m := SoakMinute{Minute: minute, Ops: len(lat)}
	slices.Sort(lat)
	m.P50US, m.P99US = us(pct(lat, 0.5)), us(pct(lat, 0.99))
	err := b.conn.QueryRow(ctx, `SELECT
	pg_total_relation_size('`+soakSchema+`.workflows') / 1e6,
	pg_total_relation_size('`+soakSchema+`.steps') / 1e6,
	(pg_total_relation_size('`+soakSchema+`.messages') + pg_total_relation_size('`+soakSchema+`.events') +
	 pg_total_relation_size('`+soakSchema+`.streams') + pg_total_relation_size('`+soakSchema+`.step_attempts')) / 1e6,
	(SELECT coalesce(sum(n_live_tup), 0) FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'workflows'),
	(SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE schemaname = $1),
	(SELECT coalesce(sum(autovacuum_count), 0) FROM pg_stat_user_tables WHERE schemaname = $1)`, soakSchema).
		Scan(&m.WorkflowsMB, &m.StepsMB, &m.OtherMB, &m.LiveRuns, &m.DeadTuples, &m.Autovacuums)
	return m, err
}

// summarize computes the soak's verdicts: the p99 of the last five
// minutes over the first five's (medians of the minutes' p99), and the
// total size at the end over the size once retention had pruned for two
// periods (the first minute after 2 x retention).
func (s *Soak) summarize() {
	full := s.Per
	if len(full) > 0 && full[len(full)-1].Ops == 0 {
		full = full[:len(full)-1]
	}
	if len(full) >= 10 {
		med := func(ms []SoakMinute) float64 {
			v := make([]float64, len(ms))
			for i, m := range ms {
				v[i] = m.P99US
			}
			slices.Sort(v)
			return v[len(v)/2]
		}
		s.P99Ratio = med(full[len(full)-5:]) / med(full[:5])
	}
	steady := int(2*s.RetentionS/60) + 1
	if steady < len(full)-1 {
		size := func(m SoakMinute) float64 { return m.WorkflowsMB + m.StepsMB + m.OtherMB }
		s.SteadyAtMin = full[steady].Minute
		s.SizeRatio = size(full[len(full)-1]) / size(full[steady])
	}
}

// soakChart writes soak.png: p50 and p99 per minute, and the tables'
// size.
func (s *Soak) chart(dir string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("soak: %.0f ops/s for %.0f minutes, retention %.0f s", s.RatePerS, s.Minutes, s.RetentionS)
	p.X.Label.Text = "minute"
	p.Y.Label.Text = "ms / MB"
	p.Add(plotter.NewGrid())
	var p50, p99, size plotter.XYs
	for _, m := range s.Per {
		x := float64(m.Minute)
		p50 = append(p50, plotter.XY{X: x, Y: m.P50US / 1000})
		p99 = append(p99, plotter.XY{X: x, Y: m.P99US / 1000})
		size = append(size, plotter.XY{X: x, Y: m.WorkflowsMB + m.StepsMB + m.OtherMB})
	}
	for i, l := range []struct {
		name string
		xys  plotter.XYs
	}{{"p50 latency (ms)", p50}, {"p99 latency (ms)", p99}, {"tables (MB)", size}} {
		line, err := plotter.NewLine(l.xys)
		if err != nil {
			return err
		}
		line.Color = chartColors[[]int{0, 2, 5}[i]]
		p.Add(line)
		p.Legend.Add(l.name, line)
	}
	p.Legend.Top = true
	p.Y.Min = 0
	return p.Save(8*vg.Inch, 4*vg.Inch, filepath.Join(dir, "soak.png"))
}
