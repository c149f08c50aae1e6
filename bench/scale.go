package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable"
)

// Scale is the drain of one queue by 1, 2 and 4 executor processes at
// once: how the claim and the group commits behave when several engines
// share a queue (on this machine's cores, CPU and not the engine is what
// more processes compete for).
type Scale struct {
	N       int         `json:"n"`        // 1-step runs per drain
	WarmPer int         `json:"warm_per"` // untimed runs per process before each drain
	Repeats int         `json:"repeats"`  // drains per process count; the medians are reported
	Rows    []ScaleRow  `json:"rows"`
	Samples [][]float64 `json:"samples"` // runs per second of each drain, per row
}

// ScaleRow is one process count.
type ScaleRow struct {
	Processes int     `json:"processes"`
	PerS      float64 `json:"per_s"`           // median runs per second, from Launch to the last finish
	ServerCPU float64 `json:"server_cpu_us"`   // per run, every server process
	ExecCPU   float64 `json:"executor_cpu_us"` // per run, the executor processes together
	MinShare  float64 `json:"min_share"`       // the smallest share of the runs one process finished
	MaxShare  float64 `json:"max_share"`       // the largest
}

const (
	scaleSchema   = "bench_scale"
	scaleChildEnv = "DURABLE_BENCH_SCALE_CHILD"
	scaleRepeats  = 3
	// scaleWarmQueue is where each drain's processes first drain
	// scaleWarmPer runs each, untimed, so that their connections have
	// planned and cached the statements (a new connection's first plans
	// of the workflows table cost milliseconds each).
	scaleWarmQueue = "drain-warm"
	scaleWarmPer   = 500
)

var scaleProcs = []int{1, 2, 4}

// scaleSpec is what a scale child is told.
type scaleSpec struct {
	URL, Database, Executor string
	MaxConns                int
}

// scaleChildMain is a scale child: it launches an engine that works the
// drain queue and the warm-up queue of bench_scale, says READY, and shuts
// it down and exits when stdin closes.
func scaleChildMain(specJSON string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "bench scale child:", err)
		return 1
	}
	var s scaleSpec
	if err := json.Unmarshal([]byte(specJSON), &s); err != nil {
		return fail(err)
	}
	ctx := context.Background()
	pool, err := childPool(ctx, s.URL, s.Database, s.MaxConns)
	if err != nil {
		return fail(err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return fail(err)
	}
	dcfg := drainConfig(s.Executor)
	dcfg.Schema = scaleSchema
	eng, err := durable.New(pool, dcfg)
	if err != nil {
		return fail(err)
	}
	durable.Register(eng, "drain1", oneStep, nil)
	durable.RegisterQueue(eng, drainQueue, nil)
	durable.RegisterQueue(eng, scaleWarmQueue, nil)
	if err := eng.Launch(ctx); err != nil {
		return fail(err)
	}
	fmt.Println("READY")
	_, _ = io.Copy(io.Discard, os.Stdin)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := eng.Shutdown(sctx); err != nil {
		return fail(err)
	}
	return 0
}

// scale measures the drain of DrainN 1-step runs by 1, 2 and 4 executor
// processes (this binary re-executed), scaleRepeats times each, taking
// turns.
func (b *bench) scale(ctx context.Context) (*Scale, error) {
	sc := &Scale{N: b.o.DrainN, WarmPer: min(scaleWarmPer, b.o.DrainN), Repeats: scaleRepeats}
	if err := b.dropSchema(ctx, scaleSchema); err != nil {
		return nil, err
	}
	defer func() { _ = b.dropSchema(context.WithoutCancel(ctx), scaleSchema) }()
	// Declare the queue and make the schema (a client engine enqueues).
	pool, err := b.newPool(ctx, b.o.MaxConns, true)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	cfg := drainConfig("bench-scale-client")
	cfg.Schema = scaleSchema
	decl, err := durable.New(pool, cfg)
	if err != nil {
		return nil, err
	}
	wf := durable.Register(decl, "drain1", notHere[int, int], nil)
	q := durable.RegisterQueue(decl, drainQueue, nil)
	warmQ := durable.RegisterQueue(decl, scaleWarmQueue, nil)
	if err := decl.Launch(ctx); err != nil {
		return nil, err
	}
	if err := decl.Shutdown(ctx); err != nil {
		return nil, err
	}
	enqueue := func(q *durable.Queue, n int) error {
		items := make([]durable.EnqueueItem[int], drainBatch)
		for i := 0; i < n; i += drainBatch {
			part := items[:min(drainBatch, n-i)]
			for j := range part {
				part[j].Input = i + j
			}
			if _, err := wf.EnqueueMany(ctx, q, part); err != nil {
				return err
			}
		}
		return nil
	}

	got := map[int][]scaleSample{}
	for rep := 0; rep < scaleRepeats; rep++ {
		for _, k := range scaleProcs {
			if _, err := b.conn.Exec(ctx, "TRUNCATE "+scaleSchema+".steps, "+scaleSchema+".workflows"); err != nil {
				return nil, err
			}
			s, err := b.scaleDrain(ctx, k, func() error { return enqueue(warmQ, sc.WarmPer*k) },
				func() error {
					if err := q.Pause(ctx); err != nil {
						return err
					}
					return enqueue(q, sc.N)
				}, func() error { return q.Resume(ctx) })
			if err != nil {
				return nil, fmt.Errorf("%d processes: %w", k, err)
			}
			got[k] = append(got[k], s)
			b.o.logf("scale: %d executor process(es) drained %d runs: %.0f /s (server %.0f µs, executors %.0f µs per run; shares %.2f-%.2f)",
				k, sc.N, s.perS, s.server, s.exec, s.minShare, s.maxShare)
		}
	}
	for _, k := range scaleProcs {
		ss := got[k]
		sort.Slice(ss, func(i, j int) bool { return ss[i].perS < ss[j].perS })
		med := ss[len(ss)/2]
		var rates []float64
		for _, s := range got[k] {
			rates = append(rates, s.perS)
		}
		sc.Samples = append(sc.Samples, rates)
		sc.Rows = append(sc.Rows, ScaleRow{Processes: k, PerS: med.perS, ServerCPU: med.server, ExecCPU: med.exec,
			MinShare: med.minShare, MaxShare: med.maxShare})
	}
	return sc, nil
}

// scaleSample is one drain of the scale scenario: runs per second, CPU
// per run (server, executors), and the fewest and most runs one process
// finished, as shares.
type scaleSample struct{ perS, server, exec, minShare, maxShare float64 }

// scaleChild is a running scale child.
type scaleChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// scaleDrain starts k children and waits until each is READY, has them
// drain the warm-up runs (warm), pauses the queue and fills it (fill),
// then times the drain from resume until no run of the queue is left.
func (b *bench) scaleDrain(ctx context.Context, k int, warm, fill, resume func() error) (s scaleSample, err error) {
	exe, err := os.Executable()
	if err != nil {
		return s, err
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var kids []scaleChild
	defer func() {
		for _, c := range kids {
			_ = c.stdin.Close()
		}
		for _, c := range kids {
			_ = c.cmd.Wait()
		}
	}()
	for i := 0; i < k; i++ {
		spec, _ := json.Marshal(scaleSpec{URL: b.o.URL, Database: b.o.Database, Executor: fmt.Sprintf("bench-scale-%d", i),
			MaxConns: b.o.MaxConns})
		cmd := exec.CommandContext(cctx, exe)
		cmd.Env = append(os.Environ(), scaleChildEnv+"="+string(spec))
		cmd.Stderr = b.o.Progress
		if cmd.Stderr == nil {
			cmd.Stderr = io.Discard
		}
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return s, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return s, err
		}
		if err := cmd.Start(); err != nil {
			return s, err
		}
		kids = append(kids, scaleChild{cmd: cmd, stdin: stdin})
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if strings.TrimSpace(line) != "READY" {
			return s, fmt.Errorf("scale child %d ended before it was ready (%v)", i, err)
		}
	}
	anyLeft, count := queueLeft(scaleSchema)
	if err := warm(); err != nil {
		return s, err
	}
	if _, err := waitZero(ctx, b.conn, gatedPollEvery, anyLeft, count, scaleWarmQueue); err != nil {
		return s, err
	}
	if err := fill(); err != nil {
		return s, err
	}
	b.quiesce(ctx)
	cpu0 := sampleCPU()
	kid0 := b.kidsCPU(kids)
	t0 := time.Now()
	if err := resume(); err != nil {
		return s, err
	}
	done, err := waitZero(ctx, b.conn, gatedPollEvery, anyLeft, count, drainQueue)
	if err != nil {
		return s, err
	}
	n := float64(b.o.DrainN)
	s.perS = n / done.Sub(t0).Seconds()
	by := sampleCPU().server(cpu0)
	s.server = us(by["backend"]+by["autovacuum"]+by["background"]) / n
	b.o.logf("scale: server CPU per run: backends %.0f µs, autovacuum %.0f µs, background %.0f µs", us(by["backend"])/n, us(by["autovacuum"])/n, us(by["background"])/n)
	s.exec = us(b.kidsCPU(kids)-kid0) / n
	rows, err := b.conn.Query(ctx, "SELECT count(*) FROM "+scaleSchema+".workflows WHERE queue_name = $1 AND status = 'success' GROUP BY executor_id", drainQueue)
	if err != nil {
		return s, err
	}
	var counts []float64
	total := 0.0
	for rows.Next() {
		var c float64
		if err := rows.Scan(&c); err != nil {
			return s, err
		}
		counts = append(counts, c)
		total += c
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	if int(total) != b.o.DrainN {
		return s, fmt.Errorf("%d of %d runs succeeded", int(total), b.o.DrainN)
	}
	for len(counts) < k {
		counts = append(counts, 0) // a process that finished none
	}
	sort.Float64s(counts)
	s.minShare, s.maxShare = counts[0]/total, counts[len(counts)-1]/total
	return s, nil
}

// kidsCPU is the CPU time the children used so far: utime + stime of
// /proc/<pid>/stat, which adds up all of a process's threads (clock
// ticks: 10 ms of error per process and field at worst).
func (b *bench) kidsCPU(kids []scaleChild) time.Duration {
	var d time.Duration
	for _, c := range kids {
		st, err := os.ReadFile("/proc/" + strconv.Itoa(c.cmd.Process.Pid) + "/stat")
		if err != nil {
			continue
		}
		// The fields after the command name, which ends with the last ')'.
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		d += time.Duration(ut+stime) * time.Second / clockTicks
	}
	return d
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times (100 on
// Linux's architectures).
const clockTicks = 100

// childPool is the pool of a bench child process: url's server, database
// db, at most maxConns connections.
func childPool(ctx context.Context, url, db string, maxConns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.Database = db
	cfg.MaxConns = int32(maxConns)
	return pgxpool.NewWithConfig(ctx, cfg)
}
