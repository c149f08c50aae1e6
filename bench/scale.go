package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable"
)

// Scale is 1, 2, 4 and 8 executor processes on one Postgres: the drain of
// one queue by all of them at once (how the claim and the group commits
// behave when several engines share a queue), 1-step workflows started and
// awaited in every process at once, and what idle executors cost the
// server (leases, sweeps, polls). On this machine's cores, CPU and not the
// engine is what more processes compete for; the shares of the machine's
// CPU show which side takes it.
type Scale struct {
	N       int         `json:"n"`        // 1-step runs per drain
	WarmPer int         `json:"warm_per"` // untimed runs per process before each drain
	Repeats int         `json:"repeats"`  // rounds per process count; the medians are reported
	TputN   int         `json:"tput_n"`   // 1-step workflows per throughput round, shared by the processes
	TputPer int         `json:"tput_conc_per_process"`
	IdleS   float64     `json:"idle_s"` // the idle window
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
	// The drain's share of the machine's CPU (all cores): the server's
	// processes, the executor processes.
	ServerShare float64 `json:"server_share"`
	ExecShare   float64 `json:"executor_share"`
	// 1-step workflows started and awaited by every process at once
	// (TputPer goroutines each): per second, CPU per workflow, shares.
	TputPerS        float64 `json:"tput_per_s"`
	TputServerCPU   float64 `json:"tput_server_cpu_us"`
	TputExecCPU     float64 `json:"tput_executor_cpu_us"`
	TputServerShare float64 `json:"tput_server_share"`
	TputExecShare   float64 `json:"tput_executor_share"`
	// Idle executors: statements and write transactions per executor and
	// second (heartbeats, takeover sweeps, queue polls); -1 without
	// pg_stat_statements.
	IdleStmtsPerS float64 `json:"idle_statements_per_executor_s"`
	IdleXactsPerS float64 `json:"idle_write_xacts_per_executor_s"`
	// The drain's statements and write transactions per run (the round of
	// the median rate; statements -1 without pg_stat_statements): a drain
	// whose batches broke up into single-row writes shows here.
	StmtsPerRun float64 `json:"drain_statements_per_run"`
	XactsPerRun float64 `json:"drain_write_xacts_per_run"`
}

const (
	scaleSchema   = "bench_scale"
	scaleChildEnv = "DURABLE_BENCH_SCALE_CHILD"
	// scaleWarmQueue is where each drain's processes first drain
	// scaleWarmPer runs each, untimed, so that their connections have
	// planned and cached the statements (a new connection's first plans
	// of the workflows table cost milliseconds each).
	scaleWarmQueue = "drain-warm"
	scaleWarmPer   = 500
)

const (
	// scaleTputConc goroutines per process start and await workflows.
	scaleTputConc = 16
	scaleMinConns = 16
)

// scaleSpec is what a scale child is told.
type scaleSpec struct {
	URL, Database, Executor string
	MaxConns                int
}

// scaleChildMain is a scale child: it launches an engine that works the
// drain queue and the warm-up queue of bench_scale, says READY, and shuts
// it down and exits when stdin closes.
func scaleChildMain(specJSON string) int {
	s, fail, err := childSpec[scaleSpec]("bench scale child", specJSON)
	if err != nil {
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
	tput := durable.Register(eng, "tput1", oneStep, nil)
	durable.RegisterQueue(eng, drainQueue, nil)
	durable.RegisterQueue(eng, scaleWarmQueue, nil)
	if err := eng.Launch(ctx); err != nil {
		return fail(err)
	}
	fmt.Println("READY")
	// "TPUT n conc": start and await n 1-step workflows from conc
	// goroutines, then say DONE. The end of stdin: shut down.
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var n, conc int
		if _, err := fmt.Sscanf(in.Text(), "TPUT %d %d", &n, &conc); err != nil {
			return fail(fmt.Errorf("command %q: %w", in.Text(), err))
		}
		if err := timeConc(ctx, "tput", conc, n, workflowOp(tput, 1), map[string]float64{}); err != nil {
			return fail(err)
		}
		fmt.Println("DONE")
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := eng.Shutdown(sctx); err != nil {
		return fail(err)
	}
	return 0
}

// scale measures, for 1, 2, 4 and 8 executor processes (this binary
// re-executed), ScaleRepeats times each, taking turns: the idle traffic,
// the throughput of 1-step workflows, and the drain of DrainN 1-step runs.
func (b *bench) scale(ctx context.Context) (*Scale, error) {
	sc := &Scale{N: b.o.DrainN, WarmPer: min(scaleWarmPer, b.o.DrainN), Repeats: b.o.ScaleRepeats,
		TputN: b.scaleTputN(), TputPer: scaleTputConc, IdleS: b.o.ScaleIdle.Seconds()}
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
	for rep := 0; rep < b.o.ScaleRepeats; rep++ {
		for _, k := range b.o.ScaleProcs {
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
			b.o.logf("scale: %d executor process(es) drained %d runs: %.0f /s (server %.0f µs, executors %.0f µs per run; shares %.2f-%.2f; "+
				"%.3f statements, %.3f write transactions per run); 1-step workflows %.0f /s; idle %.1f statements/s per executor",
				k, sc.N, s.perS, s.server, s.exec, s.minShare, s.maxShare, s.stmts, s.xacts, s.tput.perS, s.idleStmts)
		}
	}
	for _, k := range b.o.ScaleProcs {
		ss := got[k]
		sort.Slice(ss, func(i, j int) bool { return ss[i].perS < ss[j].perS })
		med := ss[len(ss)/2]
		var rates []float64
		for _, s := range got[k] {
			rates = append(rates, s.perS)
		}
		sc.Samples = append(sc.Samples, rates)
		tp := make([]scaleSample, len(ss))
		copy(tp, ss)
		sort.Slice(tp, func(i, j int) bool { return tp[i].tput.perS < tp[j].tput.perS })
		tm := tp[len(tp)/2].tput
		sort.Slice(tp, func(i, j int) bool { return tp[i].idleStmts < tp[j].idleStmts })
		idle := tp[len(tp)/2]
		sc.Rows = append(sc.Rows, ScaleRow{Processes: k, PerS: med.perS, ServerCPU: med.server, ExecCPU: med.exec,
			MinShare: med.minShare, MaxShare: med.maxShare, ServerShare: med.serverShare, ExecShare: med.execShare,
			TputPerS: tm.perS, TputServerCPU: tm.server, TputExecCPU: tm.exec, TputServerShare: tm.serverShare, TputExecShare: tm.execShare,
			IdleStmtsPerS: idle.idleStmts, IdleXactsPerS: idle.idleXacts, StmtsPerRun: med.stmts, XactsPerRun: med.xacts})
	}
	return sc, nil
}

// scaleSample is one round of the scale scenario: the drain's runs per
// second, CPU per run (server, executors), the fewest and most runs one
// process finished, the shares of the machine's CPU; the throughput
// round's figures; the idle traffic per executor and second.
type scaleSample struct {
	perS, server, exec, minShare, maxShare float64
	serverShare, execShare                 float64
	stmts, xacts                           float64 // the drain's, per run (stmts -1: not counted)
	tput                                   scaleLoad
	idleStmts, idleXacts                   float64
}

// scaleLoad is a timed load: per second, CPU per unit, CPU shares.
type scaleLoad struct{ perS, server, exec, serverShare, execShare float64 }

// scaleChild is a running scale child.
type scaleChild struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
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
		// The processes share about the pool of one (at least 16 each):
		// 8 processes of 40 would pass the server's max_connections.
		spec, _ := json.Marshal(scaleSpec{URL: b.o.URL, Database: b.o.Database, Executor: fmt.Sprintf("bench-scale-%d", i),
			MaxConns: max(b.o.MaxConns/k, scaleMinConns)})
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
		c := scaleChild{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(stdout)}
		kids = append(kids, c)
		line, err := c.stdout.ReadString('\n')
		if strings.TrimSpace(line) != "READY" {
			return s, fmt.Errorf("scale child %d ended before it was ready (%v)", i, err)
		}
	}
	// Idle: the executors are only alive (after their boot's statements).
	b.quiesce(ctx)
	time.Sleep(min(time.Second, b.o.ScaleIdle))
	if s.idleStmts, s.idleXacts, err = b.idleTraffic(ctx, k); err != nil {
		return s, err
	}
	// 1-step workflows started and awaited in every process at once.
	if s.tput, err = b.scaleTput(ctx, kids); err != nil {
		return s, err
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
	wal0, xid0, err := b.startCosts(ctx)
	if err != nil {
		return s, err
	}
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
	kid1 := b.kidsCPU(kids)
	c, err := b.endCosts(ctx, wal0, xid0)
	if err != nil {
		return s, err
	}
	s.stmts, s.xacts = -1, float64(c.xids)/n
	if c.calls >= 0 {
		s.stmts = float64(c.calls) / n
	}
	s.server = us(by["backend"]+by["autovacuum"]+by["background"]) / n
	b.o.logf("scale: server CPU per run: backends %.0f µs, autovacuum %.0f µs, background %.0f µs", us(by["backend"])/n, us(by["autovacuum"])/n, us(by["background"])/n)
	s.exec = us(kid1-kid0) / n
	s.serverShare, s.execShare = cpuShare(s.server*n, done.Sub(t0)), cpuShare(s.exec*n, done.Sub(t0))
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

// cpuShare is the share of the machine's CPU (all cores) that cpuUS
// microseconds of CPU are over elapsed.
func cpuShare(cpuUS float64, elapsed time.Duration) float64 {
	return cpuUS / (float64(elapsed.Microseconds()) * float64(runtime.NumCPU()))
}

// scaleTputN is the 1-step workflows of a throughput round, shared by the
// processes: 4 rounds of -tput (a multiple of 8).
func (b *bench) scaleTputN() int { return max(4*b.o.TputTotal/8, 1) * 8 }

// idleTraffic is what k idle executors cost the server over ScaleIdle:
// statements and write transactions per executor and second (statements
// -1 without pg_stat_statements).
func (b *bench) idleTraffic(ctx context.Context, k int) (stmts, xacts float64, err error) {
	wal0, xid0, err := b.startCosts(ctx)
	if err != nil {
		return 0, 0, err
	}
	select {
	case <-time.After(b.o.ScaleIdle):
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	c, err := b.endCosts(ctx, wal0, xid0)
	if err != nil {
		return 0, 0, err
	}
	per := float64(k) * b.o.ScaleIdle.Seconds()
	stmts = -1
	if c.calls >= 0 {
		stmts = float64(c.calls) / per
	}
	return stmts, float64(c.xids) / per, nil
}

// scaleTput has every child start and await its share of scaleTputN()
// 1-step workflows at once, timed from the first command to the last
// DONE.
func (b *bench) scaleTput(ctx context.Context, kids []scaleChild) (l scaleLoad, err error) {
	b.quiesce(ctx)
	per := b.scaleTputN() / len(kids)
	cpu0 := sampleCPU()
	kid0 := b.kidsCPU(kids)
	t0 := time.Now()
	for _, c := range kids {
		if _, err := fmt.Fprintf(c.stdin, "TPUT %d %d\n", per, scaleTputConc); err != nil {
			return l, err
		}
	}
	for i, c := range kids {
		line, err := c.stdout.ReadString('\n')
		if strings.TrimSpace(line) != "DONE" {
			return l, fmt.Errorf("scale child %d: %q (%v)", i, line, err)
		}
	}
	elapsed := time.Since(t0)
	n := float64(per * len(kids))
	l.perS = n / elapsed.Seconds()
	by := sampleCPU().server(cpu0)
	l.server = us(by["backend"]+by["autovacuum"]+by["background"]) / n
	l.exec = us(b.kidsCPU(kids)-kid0) / n
	l.serverShare, l.execShare = cpuShare(l.server*n, elapsed), cpuShare(l.exec*n, elapsed)
	return l, nil
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

// childSpec decodes the spec of a bench child process (JSON in its
// environment) and returns it with the child's fail: it reports an error
// on stderr under name and returns the exit code.
func childSpec[S any](name, specJSON string) (S, func(error) int, error) {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, name+":", err)
		return 1
	}
	var s S
	err := json.Unmarshal([]byte(specJSON), &s)
	return s, fail, err
}

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
