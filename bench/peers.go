package main

// Peers measured in the same run: DBOS Transact for Go v1.8.0, River v0.51.2
// (riverpgxv5), and this library with group commit off (the group-commit
// comparison). Each peer gets its own database on the same server.

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/hooks"
)

const dbosAppVersion = "bench-v1" // pinned, as in the earlier study of DBOS on this machine type

// peers holds the peer systems of a run.
type peers struct {
	dbosCtx dbos.Context
	dbosPl  *pgxpool.Pool
	nogcEng *durable.Engine
	nogcPl  *pgxpool.Pool
	nogcWF  *durable.Workflow[int, int]
}

func (o *Options) dbName(suffix string) string { return o.Database + "_" + suffix }

// dbosPool is a pool on the DBOS database url with maxConns
// connections, the size durable's and River's pools get (DBOS's own
// default is 20). Close it after dbos.Shutdown.
func dbosPool(ctx context.Context, url string, maxConns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(maxConns)
	return pgxpool.NewWithConfig(ctx, cfg)
}

// dbosConfig is the bench's DBOS configuration on pool.
func dbosConfig(pool *pgxpool.Pool) dbos.Config {
	return dbos.Config{AppName: "bench", SystemDBPool: pool, Logger: discard, ApplicationVersion: dbosAppVersion}
}

// urlFor returns the server URL with its database replaced.
func urlFor(server, db string) (string, error) {
	if u, err := url.Parse(server); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + db
		return u.String(), nil
	}
	cfg, err := pgx.ParseConfig(server)
	if err != nil {
		return "", err
	}
	u := url.URL{Scheme: "postgres", Host: fmt.Sprintf("%s:%d", cfg.Host, cfg.Port), Path: "/" + db, RawQuery: "sslmode=disable"}
	if cfg.Password != "" {
		u.User = url.UserPassword(cfg.User, cfg.Password)
	} else {
		u.User = url.User(cfg.User)
	}
	return u.String(), nil
}

// dbosSteps is the DBOS workflow of k no-op steps.
func dbosSteps(ctx dbos.Context, k int) (int, error) {
	for i := 0; i < k; i++ {
		if _, err := dbos.RunAsStep(ctx, func(context.Context) (string, error) { return "ok", nil }); err != nil {
			return 0, err
		}
	}
	returned.Add(1)
	return k, nil
}

func (b *bench) openPeers(ctx context.Context) error {
	o := b.o
	p := &peers{}
	b.peers = p
	if o.DBOS {
		db := o.dbName("dbos")
		if err := recreateDB(ctx, o.URL, db); err != nil {
			return err
		}
		u, err := urlFor(o.URL, db)
		if err != nil {
			return err
		}
		if p.dbosPl, err = dbosPool(ctx, u, o.MaxConns); err != nil {
			return err
		}
		p.dbosCtx, err = dbos.NewContext(ctx, dbosConfig(p.dbosPl))
		if err != nil {
			return fmt.Errorf("dbos: %w", err)
		}
		dbos.RegisterWorkflow(p.dbosCtx, dbosSteps, dbos.WithWorkflowName("steps"))
		if err := dbos.Launch(p.dbosCtx); err != nil {
			return fmt.Errorf("dbos launch: %w", err)
		}
	}
	if o.GroupCommitCmp {
		var err error
		if p.nogcPl, err = b.newPool(ctx, o.MaxConns, true); err != nil {
			return err
		}
		nogc := &durable.Config{Schema: "bench_nogc", AppVersion: "bench", Logger: discard}
		hooks.Set(nogc, hooks.Knobs{NoGroupCommit: true})
		p.nogcEng, err = durable.New(p.nogcPl, nogc)
		if err != nil {
			return err
		}
		p.nogcWF = durable.Register(p.nogcEng, "steps", noopSteps, nil)
		if err := p.nogcEng.Launch(ctx); err != nil {
			p.nogcEng = nil
			return err
		}
	}
	return nil
}

// stopPeers shuts the peers down (after the rounds, so that recovery and
// the counting batches run without their background statements).
func (b *bench) stopPeers(ctx context.Context) {
	p := b.peers
	if p == nil {
		return
	}
	if p.dbosCtx != nil {
		dbos.Shutdown(p.dbosCtx, 10*time.Second)
		p.dbosCtx = nil
	}
	if p.dbosPl != nil {
		p.dbosPl.Close()
		p.dbosPl = nil
	}
	if p.nogcEng != nil {
		_ = p.nogcEng.Shutdown(ctx)
		p.nogcEng = nil
	}
	if p.nogcPl != nil {
		p.nogcPl.Close()
		p.nogcPl = nil
	}
}

func (b *bench) closePeers(ctx context.Context, drop bool) {
	if b.peers == nil {
		return
	}
	b.stopPeers(ctx)
	if drop {
		for _, s := range []string{"dbos", "dbosq", "dbosr", "river"} {
			dropDB(b.o.URL, b.o.dbName(s))
		}
	}
}

// dbosWorkflow runs the k-step DBOS workflow and waits for its result
// (in-process channel handle).
func (b *bench) dbosWorkflow(k int) opFunc {
	return func(ctx context.Context) error {
		h, err := dbos.RunWorkflow(b.peers.dbosCtx, dbosSteps, k)
		if err != nil {
			return err
		}
		got, err := h.GetResult()
		if err != nil {
			return err
		}
		if got != k {
			return fmt.Errorf("dbos workflow returned %d, want %d", got, k)
		}
		return nil
	}
}

func (b *bench) peerSeqScenarios() []seqScenario {
	o := b.o
	if !o.DBOS {
		return nil
	}
	n := max(1, o.PeerN)
	return []seqScenario{
		{name: "dbos_wf0", n: n, op: b.dbosWorkflow(0)},
		{name: "dbos_wf1", n: n, op: b.dbosWorkflow(1)},
		{name: "dbos_wf10", n: max(1, n/5), op: b.dbosWorkflow(10)},
	}
}

func (b *bench) peerConcScenarios(c int) []concScenario {
	var s []concScenario
	if b.o.DBOS {
		s = append(s, concScenario{name: fmt.Sprintf("tput_dbos_c%d", c), c: c, op: b.dbosWorkflow(1), total: min(b.o.TputTotal, b.o.PeerTput)})
	}
	if b.o.GroupCommitCmp && c >= 32 {
		s = append(s, concScenario{name: fmt.Sprintf("tput_nogc_c%d", c), c: c, op: workflowOp(b.peers.nogcWF, 1)})
	}
	return s
}

// dbosDrains runs DBOS's drain and its enqueue-to-start latency.
func (b *bench) dbosDrains(ctx context.Context, r int, out map[string]float64) error {
	o := b.o
	if o.DBOS {
		t0 := time.Now()
		if err := b.dbosDrain(ctx, out); err != nil {
			return fmt.Errorf("dbos drain: %w", err)
		}
		o.logf("round %d/%d  dbos drain      %d wf in %.2fs: %.0f wf/s (enqueue %.0f/s; Launch %.0f ms)  (%.1fs)", r+1, o.Rounds,
			o.PeerDrainN, out["dbos_drain_s"], out["dbos_drain_per_s"], out["dbos_drain_enqueue_per_s"], out["dbos_drain_launch_ms"], time.Since(t0).Seconds())
		if o.DBOSQLatN > 0 {
			t0 := time.Now()
			if err := b.dbosQLat(ctx, out); err != nil {
				return fmt.Errorf("dbos enqueue-to-start: %w", err)
			}
			o.logf("round %d/%d  dbos qlat       enqueue-to-start p50 %.1f ms p99 %.1f ms (default polling); p50 %.1f ms p99 %.1f ms (50 ms polling)  (%.1fs)",
				r+1, o.Rounds, out["dbos_qlat_p50_us"]/1000, out["dbos_qlat_p99_us"]/1000, out["dbos_qlat50_p50_us"]/1000, out["dbos_qlat50_p99_us"]/1000,
				time.Since(t0).Seconds())
		}
	}
	return nil
}

// riverDrains runs River's drains (defaults, then tuned) and its
// insert-to-start latency.
func (b *bench) riverDrains(ctx context.Context, r int, out map[string]float64) error {
	o := b.o
	if o.River {
		t0 := time.Now()
		if err := b.riverRound(ctx, out); err != nil {
			return fmt.Errorf("river: %w", err)
		}
		o.logf("round %d/%d  river drain     %d jobs: defaults %.0f jobs/s, tuned %.0f jobs/s; insert-to-start p50 %.0f µs p99 %.0f µs  (%.1fs)",
			r+1, o.Rounds, o.RiverDrainN, out["river_drain_per_s"], out["river_tuned_drain_per_s"], out["river_lat_p50_us"], out["river_lat_p99_us"], time.Since(t0).Seconds())
	}
	return nil
}

// dbosDrain: a fresh database; a DBOS context declares queue "drain" and
// registers the workflow, without launching; a DBOS client enqueues
// PeerDrainN one-step workflows from 8 goroutines (application version
// pinned); the clock starts at Launch and stops when every one is SUCCESS
// (once every body returned, an index probe every 1 ms on a separate
// connection, then a count).
func (b *bench) dbosDrain(ctx context.Context, out map[string]float64) error {
	o := b.o
	n := o.PeerDrainN
	db := o.dbName("dbosq")
	if err := recreateDB(ctx, o.URL, db); err != nil {
		return err
	}
	u, err := urlFor(o.URL, db)
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
	dbos.RegisterWorkflow(wctx, dbosSteps, dbos.WithWorkflowName("steps"))
	if _, err := dbos.RegisterQueue(wctx, "drain"); err != nil {
		return err
	}
	client, err := dbos.NewClient(ctx, dbos.ClientConfig{AppName: "bench", DatabaseURL: u, Logger: discard})
	if err != nil {
		return err
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr error
	var mu sync.Mutex
	te := time.Now()
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if _, err := dbos.Enqueue[int](client, "drain", "steps", 1, dbos.WithEnqueueApplicationVersion(dbosAppVersion)); err != nil {
					mu.Lock()
					firstErr = cmp(firstErr, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	out["dbos_drain_enqueue_per_s"] = float64(n) / time.Since(te).Seconds()
	dbos.Shutdown(client, 10*time.Second)
	if firstErr != nil {
		return firstErr
	}
	poll, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer poll.Close(context.WithoutCancel(ctx))
	b.quiesce(ctx)
	returned.Store(0)
	t0 := time.Now()
	if err := dbos.Launch(wctx); err != nil {
		return err
	}
	out["dbos_drain_launch_ms"] = float64(time.Since(t0)) / float64(time.Millisecond)
	// As for durable's drain: DBOS's index of in-flight runs is probed.
	inflight := " FROM dbos.workflow_status WHERE queue_name = 'drain' AND status IN ('ENQUEUED', 'PENDING')"
	if err := waitReturned(ctx, n); err != nil {
		return fmt.Errorf("DBOS drain: %w", err)
	}
	end, err := waitZero(ctx, poll, gatedPollEvery, "SELECT /* "+pollMarker+" */ EXISTS (SELECT 1"+inflight+")", "SELECT /* "+pollMarker+" */ count(*)"+inflight)
	if err != nil {
		return fmt.Errorf("DBOS drain: %w", err)
	}
	el := end.Sub(t0)
	var done int
	if err := poll.QueryRow(ctx, "SELECT count(*) FROM dbos.workflow_status WHERE queue_name = 'drain' AND status = 'SUCCESS' /* bench:poll */").Scan(&done); err != nil {
		return err
	}
	if done != n {
		return fmt.Errorf("DBOS drain: %d of %d runs SUCCESS", done, n)
	}
	out["dbos_drain_s"] = el.Seconds()
	out["dbos_drain_per_s"] = float64(n) / el.Seconds()
	return nil
}

func cmp(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	started chan time.Time // nil: no report
}

func (w *noopWorker) Work(ctx context.Context, job *river.Job[noopArgs]) error {
	if ch := w.started; ch != nil {
		select {
		case ch <- time.Now():
		default:
		}
	}
	return nil
}

// riverRound: in a fresh migrated database, the drain of RiverDrainN no-op
// jobs inserted by one InsertMany before the client starts, with River's
// default fetch settings (MaxWorkers 100) and with `river bench`'s
// (MaxWorkers 2000, FetchCooldown 2 ms, FetchPollInterval 20 ms); timed
// from Start until RiverDrainN completion events (sent after the completer
// committed). Then, with the defaults, insert-to-start latency of
// RiverLatN single jobs on an idle queue (Insert until Work begins).
func (b *bench) riverRound(ctx context.Context, out map[string]float64) error {
	o := b.o
	db := o.dbName("river")
	if err := recreateDB(ctx, o.URL, db); err != nil {
		return err
	}
	u, err := urlFor(o.URL, db)
	if err != nil {
		return err
	}
	pcfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		return err
	}
	pcfg.MaxConns = int32(o.MaxConns)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	mig, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return err
	}
	for _, tuned := range []bool{false, true} {
		key := "river_drain"
		if tuned {
			key = "river_tuned_drain"
		}
		if _, err := pool.Exec(ctx, "TRUNCATE river_job"); err != nil {
			return err
		}
		w := &noopWorker{}
		if !tuned && o.RiverLatN > 0 {
			w.started = make(chan time.Time, 1)
		}
		if err := b.riverDrain(ctx, pool, o.RiverDrainN, tuned, w, o.RiverLatN, key, out); err != nil {
			return err
		}
	}
	return nil
}

func riverConfig(tuned bool, w *noopWorker, logger bool) *river.Config {
	workers := river.NewWorkers()
	river.AddWorker[noopArgs](workers, w)
	cfg := &river.Config{Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}}, Workers: workers, Logger: discard}
	if tuned {
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2000}}
		cfg.FetchCooldown = 2 * time.Millisecond
		cfg.FetchPollInterval = 20 * time.Millisecond
	}
	return cfg
}

// riverDrain times one River drain of n no-op jobs (InsertMany before
// Start); the tuned one also records River's statements (riverTop).
func (b *bench) riverDrain(ctx context.Context, pool *pgxpool.Pool, n int, tuned bool, w *noopWorker, latN int, key string,
	out map[string]float64) error {
	client, err := river.NewClient(riverpgxv5.New(pool), riverConfig(tuned, w, false))
	if err != nil {
		return err
	}
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: noopArgs{}}
	}
	ti := time.Now()
	for i := 0; i < n; i += 1000 { // batches of 1,000
		if _, err := client.InsertMany(ctx, params[i:min(n, i+1000)]); err != nil {
			return err
		}
	}
	out[key+"_insert_per_s"] = float64(n) / time.Since(ti).Seconds()
	b.quiesce(ctx)
	db := b.o.dbName("river")
	stmts, _ := b.statementsAvailable(ctx)
	stmts = stmts && tuned
	if stmts {
		if err := b.resetStatements(ctx, db); err != nil {
			return err
		}
	}
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: n + latN + 100, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	defer cancel()
	cpu0 := sampleCPU()
	t0 := time.Now()
	if err := client.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, c := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer c()
		_ = client.Stop(sctx)
	}()
	timeout := time.After(2 * time.Minute)
	for got := 0; got < n; {
		select {
		case <-events:
			got++
		case <-timeout:
			return fmt.Errorf("river: %d of %d jobs completed after 2 minutes", got, n)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	el := time.Since(t0)
	storeCPUPer(out, key, cpu0, sampleCPU(), n)
	if stmts {
		var err error
		if _, b.riverTop, err = b.readStatements(ctx, db); err != nil {
			return err
		}
	}
	out[key+"_s"] = el.Seconds()
	out[key+"_per_s"] = float64(n) / el.Seconds()
	if w.started == nil {
		return nil
	}
	// Insert-to-start latency on an idle queue: one job at a time; after it
	// started, wait (untimed) for its completion event and a fetch cooldown.
	for len(w.started) > 0 {
		<-w.started
	}
	lat := make([]time.Duration, 0, latN)
	for i := 0; i < latN; i++ {
		time.Sleep(110 * time.Millisecond) // > FetchCooldown (100 ms): an idle queue
		st := time.Now()
		if _, err := client.Insert(ctx, noopArgs{}, nil); err != nil {
			return err
		}
		select {
		case t := <-w.started:
			lat = append(lat, t.Sub(st))
		case <-time.After(10 * time.Second):
			return errors.New("river: a job did not start within 10 s")
		}
	}
	seqStats("river_lat", lat, out)
	return nil
}
