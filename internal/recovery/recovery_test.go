package recovery

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/clock"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/sysdb"
	"github.com/durable-go/durable/internal/sysdbtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// wait bounds the waits for a signal: only a broken mechanism misses it.
const wait = 30 * time.Second

// engine stands in for the engine around a recovery service of executor
// "me": it records what the service asks of it.
type engine struct {
	t      *testing.T
	pool   *pgxpool.Pool
	schema string
	s      *Service

	judges    atomic.Bool
	trouble   atomic.Bool
	launched  chan []sysdb.ClaimedRow
	requeued  chan bool // the own argument of each Requeue
	woken     chan string
	mu        sync.Mutex
	executing map[string]bool   // what Executing returns
	live      map[string]bool   // what IsExecuting tells
	released  []map[string]bool // the executing argument of each ReleaseStopped
}

// newEngine returns a recovery service on a fresh schema with slots
// recovery slots, its sweeper's period long (only wake-ups and due parked
// runs make it look), and its test signals on. cfg edits the config.
func newEngine(t *testing.T, slots int, cfg func(*Config)) *engine {
	t.Helper()
	pool, schema := sysdbtest.Migrated(t)
	e := &engine{t: t, pool: pool, schema: schema, launched: make(chan []sysdb.ClaimedRow, 100),
		requeued: make(chan bool, 100), woken: make(chan string, 100), executing: map[string]bool{}, live: map[string]bool{}}
	e.judges.Store(true)
	c := Config{
		Pool: pool, Queries: sysdb.NewRecoveryQueries(schema, ""), ExecutorID: "me", AppVersion: "v",
		Names: func() []string { return []string{"w"} }, Slots: slots, Batch: 1000,
		LeaseTTL: time.Hour, PollInterval: func() time.Duration { return time.Hour },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Launch: func(_ context.Context, runs []sysdb.ClaimedRow) error {
			e.launched <- runs
			return nil
		},
		JudgesLeases:   e.judges.Load,
		NoteTrouble:    func() { e.trouble.Store(true) },
		TakeStrayCheck: func() bool { return e.trouble.Swap(false) },
		Executing: func() map[string]bool {
			e.mu.Lock()
			defer e.mu.Unlock()
			return copyMap(e.executing)
		},
		IsExecuting: func(id string) bool {
			e.mu.Lock()
			defer e.mu.Unlock()
			return e.live[id]
		},
		ReleaseStopped: func(_ context.Context, executing map[string]bool) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.released = append(e.released, executing)
			return nil
		},
		Requeue: func(_ context.Context, own bool) error {
			e.requeued <- own
			return nil
		},
		WakeQueue: func(name string) { e.woken <- name },
		NextWake: func(ctx context.Context) (*time.Duration, error) { // the engine's statement
			d, ok, err := sysdb.NewWaitQueries(schema, "").NextWake(ctx, pool)
			if !ok {
				return nil, err
			}
			return &d, err
		},
	}
	if cfg != nil {
		cfg(&c)
	}
	e.s = New(c)
	e.s.signals.Swept.Init()
	e.s.signals.SlotsFreed.Init()
	t.Cleanup(func() { require.NoError(t, e.s.Stop(context.Background())) })
	return e
}

func copyMap(m map[string]bool) map[string]bool {
	out := make(map[string]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// exec runs sql on the engine's schema.
func (e *engine) exec(sql string, args ...any) {
	e.t.Helper()
	sysdbtest.Exec(e.t, e.pool, e.schema, sql, args...)
}

// state returns run id as "status owner epoch" ("-": no owner).
func (e *engine) state(id string) string {
	e.t.Helper()
	var s string
	require.NoError(e.t, e.pool.QueryRow(context.Background(), sysdb.Render(
		`SELECT status || ' ' || coalesce(executor_id, '-') || ' ' || epoch FROM {{schema}}.workflows WHERE id = $1`, e.schema), id).Scan(&s))
	return s
}

// launch returns the IDs of the next runs launched.
func (e *engine) launch() []string {
	e.t.Helper()
	select {
	case runs := <-e.launched:
		ids := make([]string, len(runs))
		for i, r := range runs {
			ids[i] = r.ID
		}
		slices.Sort(ids)
		return ids
	case <-time.After(wait):
		e.t.Fatal("no run launched")
		return nil
	}
}

// noLaunch fails the test if runs were launched.
func (e *engine) noLaunch() {
	e.t.Helper()
	select {
	case runs := <-e.launched:
		e.t.Fatalf("launched %d runs, want none", len(runs))
	default:
	}
}

// swept waits for the next sweep pass.
func (e *engine) swept() Pass {
	e.t.Helper()
	return e.s.signals.Swept.Wait(e.t, wait)
}

// TestSweepClaimsOrphans: the sweeper takes the runs without a live owner
// and launches them, and takes those of an executor whose lease expired
// only when it judges leases.
func TestSweepClaimsOrphans(t *testing.T) {
	t.Parallel()
	e := newEngine(t, 10, nil)
	e.judges.Store(false)
	e.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, epoch, executor_id) VALUES
	('unowned', 'w', 'pending', 'v', 0, NULL), ('of-gone', 'w', 'pending', 'v', 1, 'gone')`)
	require.NoError(t, e.s.Start(context.Background()))
	require.Equal(t, Pass{Claimed: 1}, e.swept())
	require.Equal(t, []string{"unowned"}, e.launch())
	require.Equal(t, "pending me 1", e.state("unowned"))
	require.False(t, <-e.requeued, "the sweep requeues the queued runs of dead executors")

	e.judges.Store(true)
	e.s.Wake()
	require.Equal(t, Pass{Claimed: 1}, e.swept())
	require.Equal(t, []string{"of-gone"}, e.launch())
	require.Equal(t, "pending me 2", e.state("of-gone"))
}

// TestSweepBoundedBySlots: the runs claimed hold recovery slots; with
// every slot in use the sweeper claims nothing, and a slot given back
// wakes it to claim one more.
func TestSweepBoundedBySlots(t *testing.T) {
	t.Parallel()
	e := newEngine(t, 2, nil)
	e.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, created_at)
SELECT 'r' || i, 'w', 'pending', 'v', now() - (10 - i) * interval '1 second' FROM generate_series(1, 5) i`)
	require.NoError(t, e.s.Start(context.Background()))
	require.Equal(t, Pass{Claimed: 2}, e.swept())
	require.Equal(t, []string{"r1", "r2"}, e.launch())
	e.s.Wake()
	require.Equal(t, Pass{}, e.swept(), "every slot in use")
	e.noLaunch()

	e.s.GiveSlots(1) // r1's execution ended: it wakes the sweeper
	require.Equal(t, 1, e.s.signals.SlotsFreed.Wait(t, wait))
	require.Equal(t, Pass{Claimed: 1}, e.swept())
	require.Equal(t, []string{"r3"}, e.launch())
	require.Zero(t, e.s.TakeSlots(1), "r2 and r3 hold the slots")
}

// acquireOrder is a pool tracer that logs the start and end of each
// Acquire.
type acquireOrder struct{ log func(string) }

func (a acquireOrder) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	a.log("acquire")
	return ctx
}

func (a acquireOrder) TraceAcquireEnd(context.Context, *pgxpool.Pool, pgxpool.TraceAcquireEndData) {
	a.log("acquired")
}

func (acquireOrder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (acquireOrder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestJudgedWithConnectionInHand: whether a claim may take the runs of
// executors whose lease expired is decided once it holds a connection: a
// wait for one (the pool busy with the application's work) must not
// stretch a judgement made before it.
func TestJudgedWithConnectionInHand(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var events []string
	log := func(s string) {
		mu.Lock()
		events = append(events, s)
		mu.Unlock()
	}
	e := newEngine(t, 10, func(c *Config) {
		cfg := c.Pool.Config()
		cfg.ConnConfig.Tracer = acquireOrder{log}
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		c.Pool = pool
		c.JudgesLeases = func() bool {
			log("judge")
			return true
		}
	})
	n, err := e.s.ClaimOrphans(context.Background(), e.s.TakeSlots(10))
	require.NoError(t, err)
	require.Zero(t, n)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"acquire", "acquired", "judge"}, events)
}

// TestClaimOwn: at Launch, the runs this executor ID left pending are
// claimed up to the slots, the rest handed back unowned for any executor,
// and those this binary cannot run released.
func TestClaimOwn(t *testing.T) {
	t.Parallel()
	e := newEngine(t, 2, func(c *Config) { c.Batch = 1 })
	e.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, created_at) VALUES
	('own-1', 'w', 'pending', 'v', 'me', 1, now() - interval '3 seconds'),
	('own-2', 'w', 'pending', 'v', 'me', 1, now() - interval '2 seconds'),
	('own-3', 'w', 'pending', 'v', 'me', 1, now() - interval '1 second'),
	('other-version', 'w', 'pending', 'v2', 'me', 1, now())`)
	got, err := e.s.ClaimOwn(context.Background())
	require.NoError(t, err)
	require.True(t, <-e.requeued, "this executor's queued runs go back to their queues")
	require.Len(t, got, 2)
	require.Equal(t, "own-1", got[0].ID)
	require.Equal(t, "own-2", got[1].ID, "claimed in batches, each run once")
	require.Equal(t, "pending me 2", e.state("own-1"))
	require.Equal(t, "pending - 2", e.state("own-3"), "beyond the slots: handed back")
	require.Equal(t, "pending - 2", e.state("other-version"), "another version's: released")
	require.Zero(t, e.s.TakeSlots(1), "the claimed runs hold every slot")
}

// TestAdoptStrays: once trouble was noted, the sweep resumes the runs of
// this executor that nothing executes here: a plain one is claimed again
// (a new epoch) and launched, a queued one goes back to its queue, whose
// dispatcher is woken. Runs executing here are left alone: those
// executing before the read (which may have ended since, the read seeing
// them pending) and those executing after it (launched meanwhile).
func TestAdoptStrays(t *testing.T) {
	t.Parallel()
	e := newEngine(t, 10, nil)
	e.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, queue_name) VALUES
	('stray', 'w', 'pending', 'v', 'me', 1, NULL),
	('queued-stray', 'w', 'pending', 'v', 'me', 1, 'q'),
	('ended-since', 'w', 'pending', 'v', 'me', 1, NULL),
	('launched-since', 'w', 'pending', 'v', 'me', 1, NULL)`)
	e.mu.Lock()
	e.executing["ended-since"] = true
	e.live["launched-since"] = true
	e.mu.Unlock()
	require.NoError(t, e.s.Start(context.Background()))
	require.Equal(t, Pass{}, e.swept(), "no trouble noted: no look")
	require.Equal(t, "pending me 1", e.state("stray"))

	e.trouble.Store(true)
	e.s.Wake()
	require.Equal(t, Pass{Strays: 2}, e.swept())
	require.Equal(t, []string{"stray"}, e.launch())
	require.Equal(t, "pending me 2", e.state("stray"))
	require.Equal(t, "enqueued - 2", e.state("queued-stray"))
	require.Equal(t, "q", <-e.woken)
	require.Equal(t, "pending me 1", e.state("ended-since"))
	require.Equal(t, "pending me 1", e.state("launched-since"))
	e.mu.Lock()
	require.Equal(t, []map[string]bool{{"ended-since": true}}, e.released, "the queue slots of stopped runs are released first")
	e.mu.Unlock()
}

// TestPeriodicChecks: without any trouble noted, the sweeper looks for
// strays every strayCheckEvery, and deletes executors dead for long every
// ten minutes, as its clock says.
func TestPeriodicChecks(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	e := newEngine(t, 10, func(c *Config) { c.Clock = fake })
	e.exec(`INSERT INTO {{schema}}.executors (id, incarnation, app_version, lease_expires_at) VALUES ('dead', 'x', 'v', now() - interval '2 hours')`)
	e.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch) VALUES ('stray', 'w', 'pending', 'v', 'me', 1)`)
	executors := func() int {
		var n int
		require.NoError(t, e.pool.QueryRow(context.Background(), sysdb.Render(`SELECT count(*) FROM {{schema}}.executors`, e.schema)).Scan(&n))
		return n
	}
	require.NoError(t, e.s.Start(context.Background()))
	require.Equal(t, Pass{}, e.swept())
	require.Equal(t, 1, executors())

	fake.Advance(strayCheckEvery + time.Second)
	e.s.Wake()
	require.Equal(t, Pass{Strays: 1}, e.swept())
	require.Equal(t, []string{"stray"}, e.launch())
	require.Equal(t, 1, executors(), "not ten minutes yet")

	fake.Advance(10 * time.Minute)
	e.s.Wake()
	e.swept()
	require.Zero(t, executors(), "dead for long and owning nothing: deleted")
}

// TestSweepWakesForParkedRuns: the sweeper sleeps until the next parked
// run is due, not a whole period.
func TestSweepWakesForParkedRuns(t *testing.T) {
	t.Parallel()
	e := newEngine(t, 10, nil)
	e.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, epoch, wake_at) VALUES ('parked', 'w', 'pending', 'v', 1, now() + interval '300 milliseconds')`)
	require.NoError(t, e.s.Start(context.Background()))
	require.Equal(t, []string{"parked"}, e.launch(), "claimed when due, without a wake-up, within an hour's period")
}

// TestOrphanReportOncePerPeriod: the report of runs left for other
// versions, which reads every run in flight, runs at most once a period,
// however often wake-ups make the sweeper look.
func TestOrphanReportOncePerPeriod(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	var logs strings.Builder
	e := newEngine(t, 10, func(c *Config) {
		c.Clock = fake
		c.PollInterval = func() time.Duration { return time.Minute }
		c.Logger = slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return logs.Write(p)
		}), nil))
	})
	e.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, epoch) VALUES ('v2-run', 'w', 'pending', 'v2', 1)`)
	reported := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(logs.String(), "wait for an executor of their application version")
	}
	require.NoError(t, e.s.Start(context.Background()))
	e.swept()
	for range 3 {
		e.s.Wake()
		e.swept()
	}
	require.False(t, reported(), "reported within the first period")
	fake.Advance(time.Minute)
	e.s.Wake()
	e.swept()
	require.True(t, reported(), "a period later")
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
