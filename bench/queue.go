package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable"
)

// Queue scenarios: enqueue-to-start latency (sequential, part of the
// interleaved blocks), queue drain (once per round in the first
// DrainRounds rounds) and recovery after a SIGKILL (once per run).

const (
	qlatQueue        = "qlat"
	clientConns      = 16   // pool of the client engines (enqueue only)
	enqueueConc      = 8    // goroutines that pre-fill the drain queue
	floorDrainConc   = 32   // goroutines of the INSERT floor next to the drain and the recovery
	floorDrainBatch  = 1000 // rows per DELETE ... RETURNING of the floor drain
	drainQueue       = "drain"
	drainSchema      = "bench_drain"
	drainWarmN       = 1000 // untimed runs drained on the worker pool before the timed drain
	recoverySchema   = "bench_recovery"
	recoveryExecutor = "bench-recovery"
	recoveryChildEnv = "DURABLE_BENCH_RECOVERY_CHILD"
	pollEvery        = 5 * time.Millisecond // completion polling of the recovery
	gatedPollEvery   = time.Millisecond     // completion polling of a drain once its bodies returned (see returned)
	startTimeout     = 30 * time.Second     // a queued run must start within this
	stallTimeout     = 60 * time.Second     // a drain or recovery making no progress this long fails
	pollMarker       = "bench:poll"         // in the bench's own polling queries, left out of statement counts
	quiesceMax       = 5 * time.Second      // longest wait for autovacuum workers before a timed drain
)

// qstartBody is the latency workflow. Its first line takes the time and
// hands it to whoever enqueued the run.
func (b *bench) qstartBody(wctx durable.Context, k int) (int, error) {
	signalStart(&b.starts, wctx.WorkflowID())
	return k, nil
}

// signalStart hands the time now to whoever waits in starts (run ID ->
// chan time.Time, buffered) for run id's body to start.
func signalStart(starts *sync.Map, id string) {
	now := time.Now()
	if ch, ok := starts.Load(id); ok {
		select {
		case ch.(chan time.Time) <- now:
		default:
		}
	}
}

// enqueueOne enqueues one latency run, from the engine that works the
// queue or from the client, and returns its ID, the time taken just before
// Enqueue and the channel that receives the time its body starts.
func (b *bench) enqueueOne(ctx context.Context, client bool) (string, time.Time, chan time.Time, error) {
	id := fmt.Sprintf("qlat-%d", b.seq.Add(1))
	ch := make(chan time.Time, 1)
	b.starts.Store(id, ch)
	opts := &durable.EnqueueOpts{ID: id}
	var err error
	t0 := time.Now()
	if client {
		_, err = b.cqstart.Enqueue(ctx, b.cqlat, 0, opts)
	} else {
		_, err = b.qstart.Enqueue(ctx, b.qlat, 0, opts)
	}
	b.lastEnqueue = time.Since(t0)
	return id, t0, ch, err
}

func waitStart(ctx context.Context, id string, ch chan time.Time) (time.Time, error) {
	t := time.NewTimer(startTimeout)
	defer t.Stop()
	select {
	case s := <-ch:
		return s, nil
	case <-t.C:
		return time.Time{}, fmt.Errorf("queued run %s did not start within %v", id, startTimeout)
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}

// enqueueToStart measures from just before Enqueue to the first line of
// the workflow body. It then waits (untimed) for the run to finish, so the
// next one starts on an idle system.
func (b *bench) enqueueToStart(client bool) timedFunc {
	return func(ctx context.Context) (time.Duration, error) {
		id, t0, ch, err := b.enqueueOne(ctx, client)
		defer b.starts.Delete(id)
		if err != nil {
			return 0, err
		}
		started, err := waitStart(ctx, id, ch)
		if err != nil {
			return 0, err
		}
		i := 0
		if client {
			i = 1
		}
		b.enqueueCall[i] = append(b.enqueueCall[i], b.lastEnqueue)
		// Through the engine that works the queue: the client is never
		// launched, so it would only poll.
		h, err := b.qstart.Handle(ctx, id)
		if err != nil {
			return 0, err
		}
		if _, err := h.Result(ctx); err != nil {
			return 0, err
		}
		return started.Sub(t0), nil
	}
}

// enqueueStarted is the op of the statement-counting batches of queued
// runs: enqueue and wait for the start, without reading the result (which
// would add the handle's own statements); settleQueued waits for the last
// finishes at the end of the batch.
func (b *bench) enqueueStarted(client bool) opFunc {
	return func(ctx context.Context) error {
		id, _, ch, err := b.enqueueOne(ctx, client)
		defer b.starts.Delete(id)
		if err != nil {
			return err
		}
		_, err = waitStart(ctx, id, ch)
		return err
	}
}

func (b *bench) settleQueued(ctx context.Context) error {
	anyLeft, count := queueLeft("bench")
	_, err := waitZero(ctx, b.conn, pollEvery, anyLeft, count, qlatQueue)
	return err
}

// pollUntil calls probe every interval until it reports done. probe also
// reports a measure of progress (what: work done or left); the wait fails
// when that stays the same for stallTimeout.
func pollUntil(ctx context.Context, every time.Duration, what string, probe func() (done bool, progress int64, err error)) error {
	last, lastChange := int64(-1), time.Now()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		done, progress, err := probe()
		if err != nil || done {
			return err
		}
		if progress != last {
			last, lastChange = progress, time.Now()
		} else if time.Since(lastChange) > stallTimeout {
			return fmt.Errorf("no progress for %v: %s = %d", stallTimeout, what, progress)
		}
		t.Reset(every)
	}
}

// waitZero polls anyLeft (a cheap query, true while work is left: index
// probes that stop at the first row) every interval until it returns false,
// and returns the time just before that last query was sent (the work was
// done by its snapshot). The polling must cost the server little: River's
// drain is timed by in-process events, and a count over the whole queue
// every 5 ms took ~10% of the machine's CPU from a drain. Progress is the
// count of runs left, taken once a second. conn is a connection to the
// database polled.
func waitZero(ctx context.Context, conn *pgx.Conn, every time.Duration, anyLeft, count string, args ...any) (time.Time, error) {
	var sent, counted time.Time
	left := int64(-1)
	err := pollUntil(ctx, every, "runs left", func() (bool, int64, error) {
		sent = time.Now()
		var more bool
		if err := conn.QueryRow(ctx, anyLeft, args...).Scan(&more); err != nil || !more {
			return true, left, err
		}
		if time.Since(counted) >= time.Second {
			counted = time.Now()
			if err := conn.QueryRow(ctx, count, args...).Scan(&left); err != nil {
				return false, left, err
			}
		}
		return false, left, nil
	})
	return sent, err
}

// returned counts the returns of the bodies the timed drains run
// (oneStep, zeroSteps, dbosSteps) in this process; a timed drain resets it
// before its clock starts. The drain polls the database for its end only
// once all its runs' bodies have returned, and then every gatedPollEvery:
// before that the runs cannot all be finished, and the polling would only
// take CPU from the drain it times (River's drain is timed by in-process
// events, which cost its server nothing).
var returned atomic.Int64

// waitReturned waits until returned reaches n, checking every millisecond;
// it fails when returned stays the same for stallTimeout.
func waitReturned(ctx context.Context, n int) error {
	return pollUntil(ctx, time.Millisecond, fmt.Sprintf("workflow bodies returned (of %d)", n), func() (bool, int64, error) {
		k := returned.Load()
		return k >= int64(n), k, nil
	})
}

// queueLeft returns waitZero's two queries for the runs of a queue in
// schema, $1 the queue name: the probe goes through the queue's partial
// indexes of ready and running runs.
func queueLeft(schema string) (anyLeft, count string) {
	w := schema + ".workflows"
	return "SELECT /* " + pollMarker + " */ EXISTS (SELECT 1 FROM " + w + " WHERE queue_name = $1 AND status = 'enqueued') " +
			"OR EXISTS (SELECT 1 FROM " + w + " WHERE queue_name = $1 AND status = 'pending')",
		"SELECT /* " + pollMarker + " */ count(*) FROM " + w + " WHERE queue_name = $1 AND status IN ('enqueued', 'pending')"
}

// newPool opens a pool of n connections to the benchmark database and, with
// warm, opens all of them before returning, so that connecting is not
// timed as part of what the pool is then used for.
func (b *bench) newPool(ctx context.Context, n int, warm bool) (*pgxpool.Pool, error) {
	cfg, err := poolConfig(b.o)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(n)
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if warm {
		conns := make([]*pgxpool.Conn, 0, n)
		for i := 0; i < n; i++ {
			c, err := p.Acquire(ctx)
			if err != nil {
				for _, c := range conns {
					c.Release()
				}
				p.Close()
				return nil, err
			}
			conns = append(conns, c)
		}
		for _, c := range conns {
			c.Release()
		}
	}
	return p, nil
}

// freshSchema drops schema and opens a warmed pool of MaxConns for an
// engine on it; done closes the pool and drops the schema again.
func (b *bench) freshSchema(ctx context.Context, schema string) (pool *pgxpool.Pool, done func(), err error) {
	if err := b.dropSchema(ctx, schema); err != nil {
		return nil, nil, err
	}
	if pool, err = b.newPool(ctx, b.o.MaxConns, true); err != nil {
		return nil, nil, err
	}
	return pool, func() {
		pool.Close()
		_ = b.dropSchema(context.WithoutCancel(ctx), schema)
	}, nil
}

func (b *bench) dropSchema(ctx context.Context, schema string) error {
	_, err := b.conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	return err
}

func okStep(context.Context) (string, error) { return "ok", nil }

// oneStep is the drained workflow: one no-op step.
func oneStep(wctx durable.Context, i int) (int, error) {
	_, err := durable.Step(wctx, "s", okStep, nil)
	returned.Add(1)
	return i, err
}

// zeroSteps is the drained workflow of the reference drain: no step.
func zeroSteps(_ durable.Context, i int) (int, error) {
	returned.Add(1)
	return i, nil
}

// costs is what the server did during a timed phase: statements (this
// database, the bench's polling left out), write transactions and WAL.
type costs struct {
	calls     int64 // -1: pg_stat_statements not available
	xids, wal int64
	top       []Stmt
}

// startCosts resets the statement counters and returns the WAL and XID
// positions; endCosts reads the differences.
func (b *bench) startCosts(ctx context.Context) (wal, xid int64, err error) {
	if ok, _ := b.statementsAvailable(ctx); ok {
		if err := b.resetStatements(ctx, ""); err != nil {
			return 0, 0, err
		}
	}
	return b.snap(ctx)
}

func (b *bench) endCosts(ctx context.Context, wal0, xid0 int64) (costs, error) {
	c := costs{calls: -1}
	if ok, _ := b.statementsAvailable(ctx); ok {
		var err error
		if c.calls, c.top, err = b.readStatements(ctx, ""); err != nil {
			return c, err
		}
	}
	wal1, xid1, err := b.snap(ctx)
	if err != nil {
		return c, err
	}
	c.wal, c.xids = wal1-wal0, xid1-xid0
	return c, nil
}

func (c costs) store(prefix string, n int, out map[string]float64) {
	fn := float64(n)
	if c.calls >= 0 {
		out[prefix+"_statements_per_wf"] = float64(c.calls) / fn
	}
	out[prefix+"_xids_per_wf"] = float64(c.xids) / fn
	out[prefix+"_wal_bytes_per_wf"] = float64(c.wal) / fn
}

// drain measures one queue drain and its floors, in a fresh schema:
//
//  1. an engine declares the queue (Launch), drains drainWarmN runs on
//     the worker pool untimed (River's tuned drain also runs on a pool
//     that has worked before), and shuts down; the tables are emptied;
//  2. a client engine (never launched, its own pool) enqueues DrainN
//     one-step workflows from 8 goroutines, next to raw INSERTs from 8;
//  3. the floors: raw INSERTs from 32 goroutines, and DrainN rows of a
//     plain table consumed by DELETE ... RETURNING, 1000 at a time;
//  4. a new engine declares and works the queue: timed from New + Launch
//     until no run of the queue is enqueued or pending;
//  5. for reference, 2 and 4 again with 0-step workflows, which record no
//     step, as a River no-op job records none;
//  6. 2 and 4 again with 1-step workflows and Config.DeferStepCheckpoints
//     on the worker engine: each run's step checkpoint rides its finish.
func (b *bench) drain(ctx context.Context, r int, out map[string]float64) ([]Stmt, error) {
	o := b.o
	n := o.DrainN
	b.drainRound = r
	logf := func(format string, args ...any) {
		o.logf("round %d/%d  "+format, append([]any{r + 1, o.Rounds}, args...)...)
	}
	wpool, done, err := b.freshSchema(ctx, drainSchema)
	if err != nil {
		return nil, err
	}
	defer done()
	// 1. Declare the queue, so that the client may enqueue on it, and
	// warm the worker pool up as River's is (its tuned drain runs on the
	// pool of its default one): an untimed drain of drainWarmN runs, then
	// the tables are emptied.
	decl, err := durable.New(wpool, drainConfig("bench-drain-declarer"))
	if err != nil {
		return nil, err
	}
	dwf := durable.Register(decl, "drain1", oneStep, nil)
	dq := durable.RegisterQueue(decl, drainQueue, nil)
	if err := decl.Launch(ctx); err != nil {
		return nil, err
	}
	var warm []*durable.Handle[int]
	for i := 0; i < drainWarmN; i++ {
		h, err := dwf.Enqueue(ctx, dq, i, nil)
		if err != nil {
			return nil, err
		}
		warm = append(warm, h)
	}
	for _, h := range warm {
		if _, err := h.Result(ctx); err != nil {
			return nil, err
		}
	}
	if err := decl.Shutdown(ctx); err != nil {
		return nil, err
	}
	if err := b.emptyDrain(ctx); err != nil {
		return nil, err
	}

	// 2. Pre-fill from a client, next to its floor.
	if err := timeConc(ctx, "drain_floor_insert_c8", enqueueConc, o.TputTotal, b.rawInsert, out); err != nil {
		return nil, err
	}
	if err := b.drainPrefill(ctx, "drain1", "drain_enqueue", false, out); err != nil {
		return nil, err
	}
	logf("%-15s %7.0f /s  (%d runs from %d goroutines; floor INSERTs from %d: %.0f /s)", "drain_enqueue",
		out["drain_enqueue_per_s"], n, enqueueConc, enqueueConc, out["drain_floor_insert_c8_per_s"])

	// 3. The floors, next to the drain.
	if err := timeConc(ctx, "drain_floor_insert_c32", floorDrainConc, o.TputTotal, b.rawInsert, out); err != nil {
		return nil, err
	}
	if err := b.floorDrain(ctx, n, out); err != nil {
		return nil, err
	}

	// 4. The drain.
	c, err := b.drainTimed(ctx, wpool, "drain1", oneStep, drainConfig("bench-drain-worker"), "drain", out)
	if err != nil {
		return nil, err
	}
	c.store("drain", n, out)
	logf("%-15s %7.0f wf/s  (%d runs in %.2fs, Launch %.0f ms; floors: INSERTs from %d %.0f /s, DELETE ... RETURNING %.0f rows/s)",
		"drain", out["drain_per_s"], n, out["drain_s"], out["drain_launch_ms"], floorDrainConc,
		out["drain_floor_insert_c32_per_s"], out["drain_floor_per_s"])
	if c.calls >= 0 {
		logf("%-15s %.2f statements, %.2f write transactions, %.0f WAL bytes per workflow", "drain",
			out["drain_statements_per_wf"], out["drain_xids_per_wf"], out["drain_wal_bytes_per_wf"])
	}

	// 5. Reference: the same drain of 0-step workflows, which record no
	// step, as a River no-op job records none.
	// Its queue is filled by EnqueueMany, in batches of 1,000 from one
	// goroutine, as River's drain is by InsertMany.
	if _, err := b.drainAgain(ctx, wpool, "drain0", zeroSteps, drainConfig("bench-drain-worker0"), "drain0", out); err != nil {
		return nil, err
	}
	logf("%-15s %7.0f wf/s  (%d 0-step runs in %.2fs, Launch %.0f ms; reference; pre-filled by EnqueueMany at %.0f /s)", "drain0",
		out["drain0_per_s"], n, out["drain0_s"], out["drain0_launch_ms"], out["drain0_enqueue_many_per_s"])

	// 6. The drain with deferred step checkpoints.
	dcfg := drainConfig("bench-drain-worker-defer")
	dcfg.DeferStepCheckpoints = true
	cd, err := b.drainAgain(ctx, wpool, "drain1", oneStep, dcfg, "drain_defer", out)
	if err != nil {
		return nil, err
	}
	cd.store("drain_defer", n, out)
	logf("%-15s %7.0f wf/s  (%d runs in %.2fs, Launch %.0f ms; DeferStepCheckpoints; %.2f statements per workflow)", "drain_defer",
		out["drain_defer_per_s"], n, out["drain_defer_s"], out["drain_defer_launch_ms"], out["drain_defer_statements_per_wf"])
	return c.top, nil
}

// drainAgain empties the drain's tables, pre-fills the queue with DrainN
// runs of workflow name (timed as key_enqueue) and times their drain by an
// engine with cfg (drainTimed).
func (b *bench) drainAgain(ctx context.Context, wpool *pgxpool.Pool, name string, fn func(durable.Context, int) (int, error),
	cfg *durable.Config, key string, out map[string]float64) (costs, error) {
	if err := b.emptyDrain(ctx); err != nil {
		return costs{}, err
	}
	batch := key == "drain0"
	suffix := "_enqueue"
	if batch {
		suffix = "_enqueue_many"
	}
	if err := b.drainPrefill(ctx, name, key+suffix, batch, out); err != nil {
		return costs{}, err
	}
	return b.drainTimed(ctx, wpool, name, fn, cfg, key, out)
}

func (b *bench) emptyDrain(ctx context.Context) error {
	_, err := b.conn.Exec(ctx, "TRUNCATE "+drainSchema+".steps, "+drainSchema+".workflows")
	return err
}

// quiesce gives a timed drain a quiet server, the same for every system:
// a CHECKPOINT writes out what the scenarios before it left dirty (else
// the checkpointer may do it during the drain), then the wait lets running
// autovacuum workers finish (at most quiesceMax). Without the privilege to
// checkpoint (a shared server) only the wait is done.
func (b *bench) quiesce(ctx context.Context) {
	if !b.noCheckpoint {
		if _, err := b.conn.Exec(ctx, "CHECKPOINT"); err != nil {
			b.noCheckpoint = true
			b.o.logf("bench: no CHECKPOINT before the drains (%v); they only wait for autovacuum workers", err)
		}
	}
	deadline := time.Now().Add(quiesceMax)
	for time.Now().Before(deadline) {
		var busy int
		if err := b.conn.QueryRow(ctx, "SELECT /* "+pollMarker+" */ count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'").Scan(&busy); err != nil || busy == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func drainConfig(executor string) *durable.Config {
	return &durable.Config{Schema: drainSchema, AppVersion: "bench", ExecutorID: executor, Logger: discard}
}

// drainBatch is the size of the EnqueueMany batches of a batched pre-fill
// (River's drain inserts with InsertMany batches of the same size).
const drainBatch = 1000

// drainPrefill has a client engine (never launched, its own pool) enqueue
// DrainN runs of the workflow name from enqueueConc goroutines, timed as
// key, and checks the queue holds them all, ready.
func (b *bench) drainPrefill(ctx context.Context, name, key string, batch bool, out map[string]float64) error {
	n := b.o.DrainN
	client, err := durable.New(b.clientPool, drainConfig("bench-drain-client"))
	if err != nil {
		return err
	}
	cwf := durable.Register(client, name, notHere[int, int], nil)
	cq := client.QueueRef(drainQueue)
	var next atomic.Int64
	enqueue := func(ctx context.Context) error {
		_, err := cwf.Enqueue(ctx, cq, int(next.Add(1)), nil)
		return err
	}
	if batch {
		items := make([]durable.EnqueueItem[int], drainBatch)
		t0 := time.Now()
		for i := 0; i < n; i += drainBatch {
			part := items[:min(drainBatch, n-i)]
			for j := range part {
				part[j].Input = i + j
			}
			if _, err := cwf.EnqueueMany(ctx, cq, part); err != nil {
				return err
			}
		}
		out[key+"_per_s"] = float64(n) / time.Since(t0).Seconds()
	} else if err := timeConc(ctx, key, enqueueConc, n, enqueue, out); err != nil {
		return err
	}
	st, err := cq.Stats(ctx)
	if err != nil {
		return err
	}
	if st.Ready != n || st.Running != 0 {
		return fmt.Errorf("after the pre-fill the queue has %d ready and %d running runs, want %d and 0", st.Ready, st.Running, n)
	}
	return nil
}

// drainTimed times a new engine that works the queue with workflow name
// (body fn), from New + Launch until no run of the queue is left, checks
// every run succeeded, stores key_s, key_per_s, key_launch_ms and the CPU
// used per run, and returns what the server did meanwhile (the quiet start
// and the engine's shutdown left out).
func (b *bench) drainTimed(ctx context.Context, wpool *pgxpool.Pool, name string, fn func(durable.Context, int) (int, error),
	cfg *durable.Config, key string, out map[string]float64) (costs, error) {
	n := b.o.DrainN
	b.quiesce(ctx)
	wal0, xid0, err := b.startCosts(ctx)
	if err != nil {
		return costs{}, err
	}
	returned.Store(0)
	if b.o.DrainProfile != "" {
		stop, err := startProfile(fmt.Sprintf("%s.%s.r%d.prof", b.o.DrainProfile, key, b.drainRound+1))
		if err != nil {
			return costs{}, err
		}
		defer stop()
	}
	cpu0 := sampleCPU()
	t0 := time.Now()
	w, err := durable.New(wpool, cfg)
	if err != nil {
		return costs{}, err
	}
	durable.Register(w, name, fn, nil)
	durable.RegisterQueue(w, drainQueue, nil)
	if err := w.Launch(ctx); err != nil {
		return costs{}, err
	}
	launched := time.Since(t0)
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = w.Shutdown(sctx)
	}()
	if err := waitReturned(ctx, n); err != nil {
		return costs{}, err
	}
	anyLeft, count := queueLeft(drainSchema)
	done, err := waitZero(ctx, b.conn, gatedPollEvery, anyLeft, count, drainQueue)
	if err != nil {
		return costs{}, err
	}
	elapsed := done.Sub(t0)
	storeCPUPer(out, key, cpu0, sampleCPU(), n)
	c, err := b.endCosts(ctx, wal0, xid0)
	if err != nil {
		return costs{}, err
	}
	var ok int
	if err := b.conn.QueryRow(ctx, "SELECT /* "+pollMarker+" */ count(*) FROM "+drainSchema+".workflows WHERE queue_name = $1 AND status = 'success'", drainQueue).Scan(&ok); err != nil {
		return costs{}, err
	}
	if ok != n {
		return costs{}, fmt.Errorf("%s: %d of %d runs succeeded", key, ok, n)
	}
	out[key+"_s"] = elapsed.Seconds()
	out[key+"_per_s"] = float64(n) / elapsed.Seconds()
	out[key+"_launch_ms"] = float64(launched) / float64(time.Millisecond)
	return c, nil
}

// floorDrain is the raw floor of a drain: n rows of a plain table, inserted
// untimed, then consumed on one connection by
// DELETE ... WHERE id IN (SELECT ... LIMIT 1000 FOR UPDATE SKIP LOCKED)
// RETURNING, in autocommit, until the table is empty.
func (b *bench) floorDrain(ctx context.Context, n int, out map[string]float64) error {
	if _, err := b.conn.Exec(ctx, "TRUNCATE bench_fq"); err != nil {
		return err
	}
	if _, err := b.conn.Exec(ctx, "INSERT INTO bench_fq (v) SELECT 'x' FROM generate_series(1, $1::int)", n); err != nil {
		return err
	}
	if _, err := b.conn.Exec(ctx, "ANALYZE bench_fq"); err != nil {
		return err
	}
	t0 := time.Now()
	got := 0
	for {
		rows, err := b.conn.Query(ctx, `DELETE FROM bench_fq WHERE id IN (
	SELECT id FROM bench_fq ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING id, v`, floorDrainBatch)
		if err != nil {
			return err
		}
		k := 0
		for rows.Next() {
			var id int64
			var v string
			if err := rows.Scan(&id, &v); err != nil {
				rows.Close()
				return err
			}
			k++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if k == 0 {
			break
		}
		got += k
	}
	elapsed := time.Since(t0)
	if got != n {
		return fmt.Errorf("floor drain consumed %d rows, want %d", got, n)
	}
	out["drain_floor_per_s"] = float64(n) / elapsed.Seconds()
	return nil
}

// Recovery is the recovery scenario, measured once per run.
type Recovery struct {
	N int `json:"n"`
	// ChildSetupS: the child launches, starts N runs and waits until all
	// their first steps are checkpointed (not a measurement of interest).
	ChildSetupS float64 `json:"child_setup_s"`
	// LaunchMS: New + Launch of the new incarnation (Launch claims and
	// starts every run left by the killed one).
	LaunchMS float64 `json:"launch_ms"`
	// ElapsedS: from New + Launch until all N runs finished.
	ElapsedS float64 `json:"recovery_s"`
	PerS     float64 `json:"runs_per_s"`
	// The floor next to it: autocommit INSERTs from 32 goroutines.
	FloorInsertC32PerS float64 `json:"floor_insert_c32_per_s"`
	RatioInsertC32     float64 `json:"ratio_insert_c32"`
	// What the server did per recovered run (statements: null without
	// pg_stat_statements).
	StmtsPerRun *float64 `json:"statements_per_run"`
	XIDsPerRun  float64  `json:"xids_per_run"`
	WALPerRun   float64  `json:"wal_bytes_per_run"`
	Top         []Stmt   `json:"top_statements"`
	// Outcome: how the N runs ended (all should succeed), how many times
	// the second step's code ran in the new incarnation (N when every run
	// was resumed once), and the highest recovery_attempts of a run (1).
	Succeeded           int     `json:"succeeded"`
	Dead                int     `json:"dead"`
	OtherStatus         int     `json:"other_status"`
	SecondStepRuns      int64   `json:"second_step_runs"`
	SecondStepRunsPerN  float64 `json:"second_step_runs_per_run"`
	MaxRecoveryAttempts int     `json:"max_recovery_attempts"`
}

// recoverySpec is what the recovery child needs, passed in its environment.
type recoverySpec struct {
	URL      string `json:"url"`
	Database string `json:"database"`
	N        int    `json:"n"`
	MaxConns int    `json:"max_conns"`
}

// recoveryWorkflow returns the recovered workflow: a first step that
// checkpoints, then second.
func recoveryWorkflow(second func(ctx context.Context) (string, error)) func(durable.Context, int) (int, error) {
	return func(wctx durable.Context, i int) (int, error) {
		if _, err := durable.Step(wctx, "one", okStep, nil); err != nil {
			return 0, err
		}
		if _, err := durable.Step(wctx, "two", second, nil); err != nil {
			return 0, err
		}
		return i, nil
	}
}

func recoveryConfig() *durable.Config {
	return &durable.Config{Schema: recoverySchema, AppVersion: "bench", ExecutorID: recoveryExecutor, Logger: discard}
}

// recovery measures how fast a restarted executor finishes the runs its
// previous incarnation left: a child process (this binary, re-executed)
// starts RecoveryN two-step runs whose second step blocks, and is
// SIGKILLed once every first step is checkpointed; then a new engine with
// the same ExecutorID is made and launched, and timed until all runs
// finished.
func (b *bench) recovery(ctx context.Context) (*Recovery, error) {
	o := b.o
	n := o.RecoveryN
	rec := &Recovery{N: n}
	if err := b.dropSchema(ctx, recoverySchema); err != nil {
		return nil, err
	}
	defer func() { _ = b.dropSchema(context.WithoutCancel(ctx), recoverySchema) }()

	// The child.
	spec, _ := json.Marshal(recoverySpec{URL: o.URL, Database: o.Database, N: n, MaxConns: o.MaxConns})
	setup, err := killReadyChild(ctx, o, recoveryChildEnv+"="+string(spec), "recovery")
	if err != nil {
		return nil, err
	}
	rec.ChildSetupS = setup.Seconds()
	var pending, steps int
	if err := b.conn.QueryRow(ctx, `SELECT
	(SELECT count(*) FROM `+recoverySchema+`.workflows WHERE status = 'pending' AND executor_id = $1),
	(SELECT count(*) FROM `+recoverySchema+`.steps)`, recoveryExecutor).Scan(&pending, &steps); err != nil {
		return nil, err
	}
	if pending != n || steps != n {
		return nil, fmt.Errorf("after the SIGKILL: %d pending runs and %d steps, want %d and %d", pending, steps, n, n)
	}
	o.logf("recovery: child started %d runs and was killed with every first step checkpointed (%.1fs)", n, rec.ChildSetupS)

	// The floor next to it.
	fl := map[string]float64{}
	if err := timeConc(ctx, "floor", floorDrainConc, o.TputTotal, b.rawInsert, fl); err != nil {
		return nil, err
	}
	rec.FloorInsertC32PerS = fl["floor_per_s"]

	// The new incarnation.
	pool, err := b.newPool(ctx, o.MaxConns, true)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	wal0, xid0, err := b.startCosts(ctx)
	if err != nil {
		return nil, err
	}
	t1 := time.Now()
	eng, err := durable.New(pool, recoveryConfig())
	if err != nil {
		return nil, err
	}
	var secondRuns atomic.Int64
	durable.Register(eng, "rec2", recoveryWorkflow(func(context.Context) (string, error) {
		secondRuns.Add(1)
		return "ok", nil
	}), nil)
	if err := eng.Launch(ctx); err != nil {
		return nil, err
	}
	launched := time.Since(t1)
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = eng.Shutdown(sctx)
	}()
	// A pending run is owned (workflows_owned_idx), unowned
	// (workflows_unowned_idx) or parked (workflows_parked_due_idx).
	w := recoverySchema + ".workflows"
	done, err := waitZero(ctx, b.conn, pollEvery, "SELECT /* "+pollMarker+" */ EXISTS (SELECT 1 FROM "+w+" WHERE status = 'pending' AND executor_id IS NOT NULL) "+
		"OR EXISTS (SELECT 1 FROM "+w+" WHERE status = 'pending' AND executor_id IS NULL AND wake_at IS NULL) "+
		"OR EXISTS (SELECT 1 FROM "+w+" WHERE status = 'pending' AND executor_id IS NULL AND wake_at IS NOT NULL)",
		"SELECT /* "+pollMarker+" */ count(*) FROM "+w+" WHERE status = 'pending'")
	if err != nil {
		return nil, err
	}
	elapsed := done.Sub(t1)
	c, err := b.endCosts(ctx, wal0, xid0)
	if err != nil {
		return nil, err
	}
	rec.SecondStepRuns = secondRuns.Load()
	rec.SecondStepRunsPerN = float64(rec.SecondStepRuns) / float64(n)
	if err := b.conn.QueryRow(ctx, "SELECT /* "+pollMarker+" */ count(*) FILTER (WHERE status = 'success'), "+
		"count(*) FILTER (WHERE status = 'dead'), count(*) FILTER (WHERE status NOT IN ('success', 'dead')), "+
		"coalesce(max(recovery_attempts), 0) FROM "+recoverySchema+".workflows").Scan(
		&rec.Succeeded, &rec.Dead, &rec.OtherStatus, &rec.MaxRecoveryAttempts); err != nil {
		return nil, err
	}
	if rec.Succeeded != n {
		// Reported, not fatal: the table shows it as a miss.
		o.logf("recovery: WRONG OUTCOME: %d of %d runs succeeded, %d dead-lettered, %d other", rec.Succeeded, n, rec.Dead, rec.OtherStatus)
	}
	rec.LaunchMS = float64(launched) / float64(time.Millisecond)
	rec.ElapsedS = elapsed.Seconds()
	rec.PerS = float64(n) / elapsed.Seconds()
	if rec.FloorInsertC32PerS > 0 {
		rec.RatioInsertC32 = rec.PerS / rec.FloorInsertC32PerS
	}
	fn := float64(n)
	if c.calls >= 0 {
		rec.StmtsPerRun = ptr(float64(c.calls) / fn)
	}
	rec.XIDsPerRun = float64(c.xids) / fn
	rec.WALPerRun = float64(c.wal) / fn
	rec.Top = c.top
	o.logf("recovery: %d runs finished %.2fs after New + Launch (Launch %.0f ms): %.0f runs/s = %.2fx INSERT/s from %d goroutines (%.0f /s)",
		n, rec.ElapsedS, rec.LaunchMS, rec.PerS, rec.RatioInsertC32, floorDrainConc, rec.FloorInsertC32PerS)
	o.logf("recovery: second step ran %d times for %d runs (%.2f per run); highest recovery_attempts %d", rec.SecondStepRuns, n,
		rec.SecondStepRunsPerN, rec.MaxRecoveryAttempts)
	return rec, nil
}

// recoveryChildMain is the whole life of the recovery child: it starts the
// runs, waits for their first checkpoints, says READY on stdout and
// blocks until the parent kills it.
func recoveryChildMain(specJSON string) int {
	s, fail, err := childSpec[recoverySpec]("bench recovery child", specJSON)
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	pool, err := childPool(ctx, s.URL, s.Database, s.MaxConns)
	if err != nil {
		return fail(err)
	}
	eng, err := durable.New(pool, recoveryConfig())
	if err != nil {
		return fail(err)
	}
	block := func(ctx context.Context) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	}
	wf := durable.Register(eng, "rec2", recoveryWorkflow(block), nil)
	if err := eng.Launch(ctx); err != nil {
		return fail(err)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(s.N); i = next.Add(1) {
				if _, err := wf.Start(ctx, int(i), &durable.StartOpts{ID: fmt.Sprintf("rec-%d", i)}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return fail(err)
	default:
	}
	for {
		var k int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+recoverySchema+".steps").Scan(&k); err != nil {
			return fail(err)
		}
		if k >= s.N {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Println("READY")
	for {
		time.Sleep(time.Hour)
	}
}

// killReadyChild re-executes this binary with env (NAME=value) set, waits
// for it to print READY (the runs it leaves are recorded), SIGKILLs it, and
// returns how long it took to get ready. what names it in errors.
func killReadyChild(ctx context.Context, o *Options, env, what string) (time.Duration, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, exe)
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = o.Progress
	if cmd.Stderr == nil {
		cmd.Stderr = io.Discard
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() { _ = cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill() }() // SIGKILL, also on every early return
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "READY" {
			return time.Since(t0), nil
		}
	}
	return 0, fmt.Errorf("the %s child ended before it was ready (%v)", what, sc.Err())
}
