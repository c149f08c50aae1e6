package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable"
)

type opFunc func(ctx context.Context) error

// seqScenario is an op timed back to back on its own, n times per round.
type seqScenario struct {
	name  string
	n     int
	op    opFunc
	timed timedFunc // instead of op: measures its own interval
}

// timedFunc performs one op and returns the interval it measured itself.
type timedFunc func(ctx context.Context) (time.Duration, error)

// run performs one op of s and returns the time it took (or, for a timed
// scenario, the interval the op measured).
func (s *seqScenario) run(ctx context.Context) (time.Duration, error) {
	if s.timed != nil {
		return s.timed(ctx)
	}
	st := time.Now()
	err := s.op(ctx)
	return time.Since(st), err
}

// concScenario is an op run total times per round by c goroutines.
type concScenario struct {
	name  string
	c     int
	op    opFunc
	total int // ops per round; 0: o.TputTotal
}

func (b *bench) seqScenarios() []seqScenario {
	o := b.o
	s := []seqScenario{
		{name: "floor_insert", n: o.N, op: b.floorInsert},
		{name: "floor_insert_async", n: o.N, op: b.floorInsertAsync},
		{name: "floor_tx", n: o.N, op: b.floorTx},
		{name: "floor_select", n: o.N, op: b.floorSelect},
		{name: "floor_ckpt", n: o.N, op: b.ckptFenced},
		{name: "floor_ckpt_plain", n: o.N, op: b.ckptPlain},
		{name: "wf0", n: o.N, op: workflowOp(b.steps, 0)},
		{name: "wf1", n: o.N, op: workflowOp(b.steps, 1)},
		{name: "wf1_defer", n: o.N, op: workflowOp(b.deferSteps, 1)},
		{name: "wf10", n: o.nK10(), op: workflowOp(b.steps, 10)},
		{name: "txwf", n: o.N, op: workflowOp(b.txwf, 1)},
	}
	if o.QLatN > 0 {
		s = append(s,
			seqScenario{name: "qlat_local", n: o.QLatN, timed: b.enqueueToStart(false)},
			seqScenario{name: "qlat_client", n: o.QLatN, timed: b.enqueueToStart(true)})
	}
	return append(s, b.peerSeqScenarios()...)
}

func (b *bench) concScenarios() []concScenario {
	var s []concScenario
	for _, c := range b.o.Concurrency {
		s = append(s,
			concScenario{name: fmt.Sprintf("tput_wf1_c%d", c), c: c, op: workflowOp(b.steps, 1)},
			concScenario{name: fmt.Sprintf("tput_insert_c%d", c), c: c, op: b.rawInsert})
		s = append(s, b.peerConcScenarios(c)...)
	}
	return s
}

// round measures every scenario once and stores the numbers in out.
//
// The sequential scenarios are cut into o.Blocks blocks that take turns
// (A B C ... A B C ...), with the order rotated from block to block, so a
// slow second of the machine lands on every scenario alike and the ratios
// compare numbers taken within the same second or so. Each throughput
// scenario then runs once, the durable one right next to its raw floor.
func (b *bench) round(ctx context.Context, r int, out map[string]float64) error {
	o := b.o
	seqs := b.seqScenarios()
	for _, s := range seqs {
		for i := 0; i < o.Warmup; i++ {
			if _, err := s.run(ctx); err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
		}
	}
	lat := make([][]time.Duration, len(seqs))
	b.enqueueCall = [2][]time.Duration{}
	blocks := max(o.Blocks, 1)
	t0 := time.Now()
	for blk := 0; blk < blocks; blk++ {
		for j := range seqs {
			i := (j + blk + r) % len(seqs)
			s := &seqs[i]
			cnt := s.n / blocks
			if blk < s.n%blocks {
				cnt++
			}
			for k := 0; k < cnt; k++ {
				d, err := s.run(ctx)
				if err != nil {
					return fmt.Errorf("%s: %w", s.name, err)
				}
				lat[i] = append(lat[i], d)
			}
		}
	}
	for i, s := range seqs {
		seqStats(s.name, lat[i], out)
		o.logf("round %d/%d  %-15s mean %7.1f µs  p50 %7.1f  p99 %7.1f", r+1, o.Rounds, s.name,
			out[s.name+"_us"], out[s.name+"_p50_us"], out[s.name+"_p99_us"])
	}
	for i, name := range []string{"qlat_local_enqueue", "qlat_client_enqueue"} {
		if len(b.enqueueCall[i]) > 0 {
			seqStats(name, b.enqueueCall[i], out)
			o.logf("round %d/%d  %-15s mean %7.1f µs  p50 %7.1f  p99 %7.1f  (the Enqueue call alone)", r+1, o.Rounds, name,
				out[name+"_us"], out[name+"_p50_us"], out[name+"_p99_us"])
		}
	}
	o.logf("round %d/%d  (sequential scenarios: %.1fs)", r+1, o.Rounds, time.Since(t0).Seconds())
	for _, s := range b.concScenarios() {
		t0 := time.Now()
		total := o.TputTotal
		if s.total > 0 {
			total = s.total
		}
		if err := timeConc(ctx, s.name, s.c, total, s.op, out); err != nil {
			return err
		}
		o.logf("round %d/%d  %-15s %7.0f /s  mean latency %7.1f µs  (%.1fs)", r+1, o.Rounds, s.name,
			out[s.name+"_per_s"], out[s.name+"_lat_us"], time.Since(t0).Seconds())
	}
	return nil
}

func (b *bench) floorInsert(ctx context.Context) error {
	_, err := b.conn.Exec(ctx, insertFloorSQL, "x")
	return err
}

// floorInsertAsync is floor A on a connection with synchronous_commit off:
// the same round trip and commit, without waiting for the WAL flush.
func (b *bench) floorInsertAsync(ctx context.Context) error {
	_, err := b.async.Exec(ctx, insertFloorSQL, "x")
	return err
}

func (b *bench) floorTx(ctx context.Context) error {
	tx, err := b.conn.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, insertFloorSQL, "x"); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	return tx.Commit(ctx)
}

func (b *bench) floorSelect(ctx context.Context) error {
	var one int
	return b.conn.QueryRow(ctx, "SELECT 1").Scan(&one)
}

func (b *bench) rawInsert(ctx context.Context) error {
	_, err := b.raw.Exec(ctx, insertFloorSQL, "x")
	return err
}

// workflowOp returns an op that starts a run of w with input k and waits for
// its result.
func workflowOp(w *durable.Workflow[int, int], k int) opFunc {
	return func(ctx context.Context) error {
		h, err := w.Start(ctx, k, nil)
		if err != nil {
			return err
		}
		got, err := h.Result(ctx)
		if err != nil {
			return err
		}
		if got != k {
			return fmt.Errorf("workflow %s returned %d, want %d", h.ID(), got, k)
		}
		return nil
	}
}

// seqStats stores the mean, p50 and p99 of lat in µs.
func seqStats(name string, lat []time.Duration, out map[string]float64) {
	if len(lat) == 0 {
		return
	}
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	slices.Sort(lat)
	out[name+"_us"] = us(sum) / float64(len(lat))
	out[name+"_p50_us"] = us(pct(lat, 0.50))
	out[name+"_p99_us"] = us(pct(lat, 0.99))
}

// timeConc runs op total times from c goroutines that each take the next
// op as soon as their previous one is done, and stores ops/s over the wall
// time and the mean latency of one op.
func timeConc(ctx context.Context, name string, c, total int, op opFunc, out map[string]float64) error {
	var next atomic.Int64
	var latSum atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, c)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t0 := time.Now()
	for g := 0; g < c; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(total) {
				s := time.Now()
				if err := op(ctx); err != nil {
					errs <- err
					cancel()
					return
				}
				latSum.Add(int64(time.Since(s)))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	select {
	case err := <-errs:
		return err
	default:
	}
	out[name+"_per_s"] = float64(total) / elapsed.Seconds()
	out[name+"_lat_us"] = us(time.Duration(latSum.Load())) / float64(total)
	return nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
