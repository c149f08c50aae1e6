package main

// DBOS Transact Go's enqueue-to-start latency on an idle queue and its
// recovery of workflows left pending by a SIGKILLed process, measured in the
// same run as durable's (queue.go).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	dbosFastPoll         = 50 * time.Millisecond // the second polling setting of the latency scenario
	dbosRecoveryExecutor = "bench-recovery"
	dbosRecoveryChildEnv = "DURABLE_BENCH_DBOS_RECOVERY_CHILD"
	dbosRecoveryConc     = 16 // goroutines that start the runs in the child
)

// dbosQLatStarts maps a workflow ID to the channel that receives the time its
// body started (dbosQStart).
var dbosQLatStarts sync.Map

// dbosQStart is the DBOS latency workflow: its first line takes the time
// and hands it to whoever enqueued the run.
func dbosQStart(ctx dbos.Context, k int) (int, error) {
	if id, err := dbos.GetWorkflowID(ctx); err == nil {
		signalStart(&dbosQLatStarts, id)
	}
	return k, nil
}

// dbosQLat measures DBOS's enqueue-to-start latency: in the database of the
// DBOS drain (already migrated), a new DBOS context registers queue
// "qlat" (default base polling, 1 s) and "qlat50" (WithQueueBasePollingInterval
// 50 ms) and is launched; then, for each queue, DBOSQLatN runs of a 0-step
// workflow are enqueued one at a time with RunWorkflow + WithQueue, timed
// from just before RunWorkflow to the first line of the body. After each
// start the bench waits (untimed) for the run to be SUCCESS, then sleeps a
// random time in [0, polling interval) so the next enqueue lands at a random
// point of the poller's cycle: the queue is idle and the figure is what an
// arrival uncorrelated with the poller sees. One untimed run per queue first.
func (b *bench) dbosQLat(ctx context.Context, out map[string]float64) error {
	o := b.o
	u, err := urlFor(o.URL, o.dbName("dbosq"))
	if err != nil {
		return err
	}
	pool, err := dbosPool(ctx, u, o.MaxConns)
	if err != nil {
		return err
	}
	defer pool.Close()
	wctx, err := dbos.NewContext(ctx, dbosConfig(pool))
	if err != nil {
		return err
	}
	defer dbos.Shutdown(wctx, 10*time.Second)
	dbos.RegisterWorkflow(wctx, dbosQStart, dbos.WithWorkflowName("qstart"))
	qDefault, err := dbos.RegisterQueue(wctx, "qlat")
	if err != nil {
		return err
	}
	qFast, err := dbos.RegisterQueue(wctx, "qlat50", dbos.WithQueueBasePollingInterval(dbosFastPoll))
	if err != nil {
		return err
	}
	if err := dbos.Launch(wctx); err != nil {
		return err
	}
	for _, v := range []struct {
		key string
		q   dbos.Queue
	}{{"dbos_qlat", qDefault}, {"dbos_qlat50", qFast}} {
		period := v.q.GetPollingInterval()
		lat := make([]time.Duration, 0, o.DBOSQLatN)
		for i := 0; i <= o.DBOSQLatN; i++ { // i == 0: untimed
			d, err := dbosEnqueueToStart(ctx, wctx, v.q, period)
			if err != nil {
				return fmt.Errorf("%s: %w", v.key, err)
			}
			if i > 0 {
				lat = append(lat, d)
			}
		}
		seqStats(v.key, lat, out)
		out[v.key+"_poll_ms"] = float64(period) / float64(time.Millisecond)
	}
	return nil
}

var dbosQLatSeq atomic.Int64

func dbosEnqueueToStart(ctx context.Context, wctx dbos.Context, q dbos.Queue, period time.Duration) (time.Duration, error) {
	select { // a random point of the poller's cycle
	case <-time.After(rand.N(period)):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	id := fmt.Sprintf("dbos-qlat-%d", dbosQLatSeq.Add(1))
	ch := make(chan time.Time, 1)
	dbosQLatStarts.Store(id, ch)
	defer dbosQLatStarts.Delete(id)
	t0 := time.Now()
	h, err := dbos.RunWorkflow(wctx, dbosQStart, 0, dbos.WithQueue(q), dbos.WithWorkflowID(id))
	if err != nil {
		return 0, err
	}
	started, err := waitStart(ctx, id, ch)
	if err != nil {
		return 0, err
	}
	if _, err := h.GetResult(dbos.WithHandlePollingInterval(2*time.Millisecond), dbos.WithHandleTimeout(startTimeout)); err != nil {
		return 0, err
	}
	return started.Sub(t0), nil
}

// PeerRecovery is DBOS's recovery scenario, measured once per run.
type PeerRecovery struct {
	N int `json:"n"`
	// ChildSetupS: the child launches, starts N runs and waits until all
	// their first steps are recorded (not a measurement of interest).
	ChildSetupS float64 `json:"child_setup_s"`
	// NewContextMS: dbos.NewContext of the new incarnation (pool, schema
	// check), before the clock starts, as durable's pool is opened before
	// its clock.
	NewContextMS float64 `json:"new_context_ms"`
	// LaunchMS: dbos.Launch (it re-enqueues every PENDING run of its
	// executor ID and application version on DBOS's internal queue).
	LaunchMS float64 `json:"launch_ms"`
	// ElapsedS: from Launch until all N runs are SUCCESS.
	ElapsedS float64 `json:"recovery_s"`
	PerS     float64 `json:"runs_per_s"`
	// The floor next to it: autocommit INSERTs from 32 goroutines.
	FloorInsertC32PerS float64 `json:"floor_insert_c32_per_s"`
	RatioInsertC32     float64 `json:"ratio_insert_c32"`
	// Outcome: how the N runs ended, how many times the second step's code
	// ran in the new incarnation (N when each run was resumed once) and
	// the highest recovery_attempts.
	Succeeded           int     `json:"succeeded"`
	OtherStatus         int     `json:"other_status"`
	SecondStepRuns      int64   `json:"second_step_runs"`
	SecondStepRunsPerN  float64 `json:"second_step_runs_per_run"`
	MaxRecoveryAttempts int     `json:"max_recovery_attempts"`
	// RatioDurableVsDBOS: durable's recovered runs/s over DBOS's, same run
	// (N differs: compare rates); null when durable's recovery was skipped.
	RatioDurableVsDBOS *float64 `json:"ratio_durable_vs_dbos_runs_per_s"`
}

// dbosRecoverySpec is what the DBOS recovery child needs, passed in its
// environment.
type dbosRecoverySpec struct {
	URL      string `json:"url"` // of the DBOS database
	N        int    `json:"n"`
	MaxConns int    `json:"max_conns"`
}

func dbosRecoveryConfig(pool *pgxpool.Pool) dbos.Config {
	c := dbosConfig(pool)
	c.ExecutorID = dbosRecoveryExecutor
	return c
}

// dbosSecondStep is the second step of the recovered DBOS workflow: in the
// child it blocks until the process is killed; in the parent it counts its
// executions and returns at once.
var (
	dbosSecondStep     func(context.Context) (string, error)
	dbosSecondStepRuns atomic.Int64
)

// dbosRec2 is the recovered DBOS workflow: step "one", then step "two".
func dbosRec2(ctx dbos.Context, i int) (int, error) {
	if _, err := dbos.RunAsStep(ctx, okStep, dbos.WithStepName("one")); err != nil {
		return 0, err
	}
	if _, err := dbos.RunAsStep(ctx, dbosSecondStep, dbos.WithStepName("two")); err != nil {
		return 0, err
	}
	return i, nil
}

// dbosRecovery mirrors the durable recovery scenario for DBOS: a child
// process (this binary, re-executed) starts DBOSRecoveryN two-step DBOS
// workflows with ExecutorID bench-recovery and the pinned application
// version, whose second step blocks, and is SIGKILLed once every first
// step is recorded; then a new DBOS context with the same executor ID and
// version is made (untimed) and launched, and timed from Launch until no
// run is PENDING or ENQUEUED (how they ended is reported). Own database <db>_dbosr.
func (b *bench) dbosRecovery(ctx context.Context) (*PeerRecovery, error) {
	o := b.o
	n := o.DBOSRecoveryN
	rec := &PeerRecovery{N: n}
	db := o.dbName("dbosr")
	if err := recreateDB(ctx, o.URL, db); err != nil {
		return nil, err
	}
	u, err := urlFor(o.URL, db)
	if err != nil {
		return nil, err
	}

	// The child.
	spec, _ := json.Marshal(dbosRecoverySpec{URL: u, N: n, MaxConns: o.MaxConns})
	setup, err := killReadyChild(ctx, o, dbosRecoveryChildEnv+"="+string(spec), "DBOS recovery")
	if err != nil {
		return nil, err
	}
	rec.ChildSetupS = setup.Seconds()

	poll, err := pgx.Connect(ctx, u)
	if err != nil {
		return nil, err
	}
	defer poll.Close(context.WithoutCancel(ctx))
	var pending, steps int
	if err := poll.QueryRow(ctx, `SELECT /* `+pollMarker+` */
	(SELECT count(*) FROM dbos.workflow_status WHERE status = 'PENDING' AND executor_id = $1),
	(SELECT count(*) FROM dbos.operation_outputs WHERE function_name = 'one')`, dbosRecoveryExecutor).Scan(&pending, &steps); err != nil {
		return nil, err
	}
	if pending != n || steps != n {
		return nil, fmt.Errorf("after the SIGKILL: %d pending DBOS runs and %d first steps, want %d and %d", pending, steps, n, n)
	}
	o.logf("dbos recovery: child started %d runs and was killed with every first step recorded (%.1fs)", n, rec.ChildSetupS)

	// The floor next to it.
	fl := map[string]float64{}
	if err := timeConc(ctx, "floor", floorDrainConc, o.TputTotal, b.rawInsert, fl); err != nil {
		return nil, err
	}
	rec.FloorInsertC32PerS = fl["floor_per_s"]

	// The new incarnation.
	dbosSecondStepRuns.Store(0)
	dbosSecondStep = func(context.Context) (string, error) {
		dbosSecondStepRuns.Add(1)
		return "ok", nil
	}
	tn := time.Now()
	pool, err := dbosPool(ctx, u, o.MaxConns)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	wctx, err := dbos.NewContext(ctx, dbosRecoveryConfig(pool))
	if err != nil {
		return nil, err
	}
	defer dbos.Shutdown(wctx, 10*time.Second)
	dbos.RegisterWorkflow(wctx, dbosRec2, dbos.WithWorkflowName("rec2"))
	rec.NewContextMS = float64(time.Since(tn)) / float64(time.Millisecond)
	t1 := time.Now()
	if err := dbos.Launch(wctx); err != nil {
		return nil, err
	}
	rec.LaunchMS = float64(time.Since(t1)) / float64(time.Millisecond)
	unfinished := " FROM dbos.workflow_status WHERE status IN ('PENDING', 'ENQUEUED')" // Launch re-enqueues them
	done, err := waitZero(ctx, poll, pollEvery, "SELECT /* "+pollMarker+" */ EXISTS (SELECT 1"+unfinished+")", "SELECT /* "+pollMarker+" */ count(*)"+unfinished)
	if err != nil {
		return nil, fmt.Errorf("dbos recovery: %w", err)
	}
	elapsed := done.Sub(t1)
	rec.SecondStepRuns = dbosSecondStepRuns.Load()
	rec.SecondStepRunsPerN = float64(rec.SecondStepRuns) / float64(n)
	if err := poll.QueryRow(ctx, "SELECT /* "+pollMarker+" */ count(*) FILTER (WHERE status = 'SUCCESS'), count(*) FILTER (WHERE status <> 'SUCCESS'), "+
		"coalesce(max(recovery_attempts), 0) FROM dbos.workflow_status").Scan(&rec.Succeeded, &rec.OtherStatus, &rec.MaxRecoveryAttempts); err != nil {
		return nil, err
	}
	rec.ElapsedS = elapsed.Seconds()
	rec.PerS = float64(n) / elapsed.Seconds()
	if rec.FloorInsertC32PerS > 0 {
		rec.RatioInsertC32 = rec.PerS / rec.FloorInsertC32PerS
	}
	o.logf("dbos recovery: %d runs SUCCESS %.2fs after Launch (NewContext %.0f ms, Launch %.0f ms): %.0f runs/s = %.2fx INSERT/s from %d goroutines (%.0f /s)",
		n, rec.ElapsedS, rec.NewContextMS, rec.LaunchMS, rec.PerS, rec.RatioInsertC32, floorDrainConc, rec.FloorInsertC32PerS)
	o.logf("dbos recovery: second step ran %d times for %d runs (%.2f per run); highest recovery_attempts %d", rec.SecondStepRuns, n,
		rec.SecondStepRunsPerN, rec.MaxRecoveryAttempts)
	return rec, nil
}

// dbosRecoveryChildMain is the whole life of the DBOS recovery child: it
// starts the runs, waits until every first step is recorded, says READY on
// stdout and blocks until the parent kills it.
func dbosRecoveryChildMain(specJSON string) int {
	s, fail, err := childSpec[dbosRecoverySpec]("bench dbos recovery child", specJSON)
	if err != nil {
		return fail(err)
	}
	if s.N < 1 {
		return fail(errors.New("n must be at least 1"))
	}
	ctx := context.Background()
	dbosSecondStep = func(ctx context.Context) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	}
	pool, err := dbosPool(ctx, s.URL, s.MaxConns)
	if err != nil {
		return fail(err)
	}
	wctx, err := dbos.NewContext(ctx, dbosRecoveryConfig(pool))
	if err != nil {
		return fail(err)
	}
	dbos.RegisterWorkflow(wctx, dbosRec2, dbos.WithWorkflowName("rec2"))
	if err := dbos.Launch(wctx); err != nil {
		return fail(err)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, dbosRecoveryConc)
	for g := 0; g < dbosRecoveryConc; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(s.N); i = next.Add(1) {
				if _, err := dbos.RunWorkflow(wctx, dbosRec2, int(i), dbos.WithWorkflowID(fmt.Sprintf("rec-%d", i))); err != nil {
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
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		return fail(err)
	}
	for {
		var k int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM dbos.operation_outputs WHERE function_name = 'one'").Scan(&k); err != nil {
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
