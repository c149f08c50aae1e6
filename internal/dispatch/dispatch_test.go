package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/sysdb"
	"github.com/durable-go/durable/internal/sysdbtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// never is a poll interval no test waits for: only a wake-up starts a
// pass after the first.
const never = time.Hour

// long bounds the waits for what a working mechanism does at once.
const long = 30 * time.Second

// fix is a migrated schema and a Dispatcher of one queue on it, whose
// Launch hands the claimed runs to the test.
type fix struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	schema string
	qq     *sysdb.QueueQueries
	q      *Queue
	cfg    Config
	d      *Dispatcher

	launched chan []sysdb.ClaimedRow
	trouble  atomic.Int32
	runs     int // runs enqueued so far
}

func newFix(t *testing.T, s sysdb.QueueSettings) *fix {
	t.Helper()
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	pool, schema := sysdbtest.Migrated(t)

	f := &fix{t: t, ctx: ctx, pool: pool, schema: schema, qq: sysdb.NewQueueQueries(schema, ""),
		q: NewQueue("q"), launched: make(chan []sysdb.ClaimedRow, 100)}
	require.NoError(t, f.qq.Declare(ctx, pool, sysdb.QueueDeclareParams{Name: "q", Settings: s, Declared: "test"}))
	f.cfg = Config{
		Pool: pool, Queries: f.qq, Partitions: sysdb.NewPartitionQueries(schema), ExecutorID: "me", AppVersion: "v", Workflows: []string{"w"}, Queues: []*Queue{f.q},
		PollInterval: func() time.Duration { return never },
		Launch: func(_ context.Context, q *Queue, got []sysdb.ClaimedRow) error {
			require.Same(t, f.q, q)
			f.launched <- got
			return nil
		},
		DBTrouble: func() { f.trouble.Add(1) },
		Logger:    slog.New(slog.DiscardHandler),
	}
	return f
}

// start makes the Dispatcher of f.cfg, with its pass signal, and starts
// it; the test's end stops it.
func (f *fix) start() {
	f.t.Helper()
	f.d = New(f.cfg)
	f.d.signals.Pass.Init()
	require.NoError(f.t, f.d.Start(f.ctx))
	f.t.Cleanup(func() { require.NoError(f.t, f.d.Stop(context.Background())) })
}

// enqueue queues n more runs of workflow w (r0000, r0001...), in order,
// with partition keys taken in turn from keys.
func (f *fix) enqueue(n int, keys ...string) {
	f.t.Helper()
	for i := range n {
		p := sysdb.EnqueueParams{ID: fmt.Sprintf("r%04d", f.runs), Workflow: "w", AppVersion: "v", Input: []byte("1"), Queue: "q"}
		f.runs++
		if len(keys) > 0 {
			p.PartitionKey = keys[i%len(keys)]
		}
		res, err := f.qq.Enqueue(f.ctx, f.pool, p)
		require.NoError(f.t, err)
		require.True(f.t, res.Inserted)
	}
}

// exec runs sql with the schema marker.
func (f *fix) exec(sql string) {
	f.t.Helper()
	_, err := f.pool.Exec(f.ctx, sysdb.Render(sql, f.schema))
	require.NoError(f.t, err)
}

// pass waits for the next pass.
func (f *fix) pass() Pass {
	f.t.Helper()
	p := f.d.signals.Pass.Wait(f.t, long)
	require.NoError(f.t, p.Err)
	return p
}

// launch returns the runs of the next Launch.
func (f *fix) launch() []sysdb.ClaimedRow {
	f.t.Helper()
	select {
	case got := <-f.launched:
		return got
	case <-time.After(long):
		f.t.Fatal("no launch")
		return nil
	}
}

func ids(rows []sysdb.ClaimedRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

// TestWorkerLimitAndRelease: a pass claims no more than the per-executor
// limit leaves, counting the runs claimed here that have not ended; a run
// that ends here gives its slot back and wakes the loop, which claims the
// next run.
func TestWorkerLimitAndRelease(t *testing.T) {
	f := newFix(t, sysdb.QueueSettings{WorkerConcurrency: 2})
	f.enqueue(5)
	f.start()
	require.Equal(t, Pass{Queue: "q", Claimed: 2, More: true, Wait: never}, f.pass())
	require.Equal(t, []string{"r0000", "r0001"}, ids(f.launch()))
	require.Equal(t, 2, f.q.Running())
	require.Equal(t, Pass{Queue: "q", Wait: never}, f.pass(), "the limit is reached: nothing claimed")

	f.q.Release(1)
	require.Equal(t, Pass{Queue: "q", Claimed: 1, More: true, Wait: never}, f.pass())
	require.Equal(t, []string{"r0002"}, ids(f.launch()))
	require.Equal(t, 2, f.q.Running())
}

// TestWakeStartsAPass: a wake-up makes an idle loop look at its queue
// at once, without waiting for the poll interval.
func TestWakeStartsAPass(t *testing.T) {
	f := newFix(t, sysdb.QueueSettings{})
	f.start()
	require.Equal(t, Pass{Queue: "q", Wait: never}, f.pass())
	f.enqueue(1)
	f.q.Wake()
	require.Equal(t, 1, f.pass().Claimed)
	got := f.launch()
	require.Equal(t, []string{"r0000"}, ids(got))
	require.Equal(t, int64(1), got[0].Epoch)
	var status, owner string
	require.NoError(t, f.pool.QueryRow(f.ctx, sysdb.Render(`SELECT status, executor_id FROM {{schema}}.workflows`, f.schema)).Scan(&status, &owner))
	require.Equal(t, "pending me", status+" "+owner)
}

// TestBatchGrows: after an idle spell a pass claims batchFirst runs;
// each pass that takes all it asked for doubles the next one.
func TestBatchGrows(t *testing.T) {
	f := newFix(t, sysdb.QueueSettings{})
	f.enqueue(batchFirst + 2*batchFirst + 10)
	f.start()
	for _, want := range []Pass{
		{Queue: "q", Claimed: batchFirst, More: true, Wait: never},
		{Queue: "q", Claimed: 2 * batchFirst, More: true, Wait: never},
		{Queue: "q", Claimed: 10, Wait: never}, // of 4*batchFirst asked for
	} {
		require.Equal(t, want, f.pass())
		require.Len(t, f.launch(), want.Claimed)
	}
	f.enqueue(2 * batchFirst)
	f.q.Wake()
	require.Equal(t, batchFirst, f.pass().Claimed, "back to batchFirst after a pass that took less than it asked")
}

// TestLimits: a pass claims at most what the queue's global, rate and
// partition limits leave, counting the runs of other executors, and
// nothing from a paused queue.
func TestLimits(t *testing.T) {
	t.Run("global", func(t *testing.T) {
		f := newFix(t, sysdb.QueueSettings{GlobalConcurrency: 3})
		f.enqueue(5)
		f.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, queue_name) VALUES
			('other', 'w', 'pending', 'v', 'peer', 'q'), ('stopping', 'w', 'cancelled', 'v', 'peer', 'q')`)
		f.start()
		require.Equal(t, 1, f.pass().Claimed)
		require.Equal(t, []string{"r0000"}, ids(f.launch()))
	})
	t.Run("rate", func(t *testing.T) {
		f := newFix(t, sysdb.QueueSettings{RateLimit: 3, RatePeriod: time.Hour})
		f.enqueue(5)
		f.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, queue_name, rate_start) VALUES
			('done', 'w', 'success', 'v', 'q', now() - interval '59 minutes')`)
		f.start()
		p := f.pass()
		require.Equal(t, 2, p.Claimed)
		require.Equal(t, []string{"r0000", "r0001"}, ids(f.launch()))
		p = f.pass()
		require.Zero(t, p.Claimed, "3 starts in the period")
		require.Less(t, p.Wait, 2*time.Minute, "the loop looks again when the oldest start leaves the period")
		require.Positive(t, p.Wait)
	})
	t.Run("partition", func(t *testing.T) {
		f := newFix(t, sysdb.QueueSettings{PartitionConcurrency: 1})
		f.enqueue(6, "a", "a", "b", "c")
		f.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, queue_name, partition_key) VALUES
			('other', 'w', 'pending', 'v', 'peer', 'q', 'c')`)
		f.start()
		require.Equal(t, 2, f.pass().Claimed)
		require.ElementsMatch(t, []string{"r0000", "r0002"}, ids(f.launch()), "one of a, one of b, none of c")
	})
	t.Run("paused", func(t *testing.T) {
		f := newFix(t, sysdb.QueueSettings{})
		f.enqueue(1)
		f.exec(`UPDATE {{schema}}.queues SET paused = true`)
		f.start()
		require.Zero(t, f.pass().Claimed)
		f.exec(`UPDATE {{schema}}.queues SET paused = false`)
		f.q.Wake()
		require.Equal(t, 1, f.pass().Claimed)
	})
}

// TestFailedPassAndLaunch: a pass that fails, or whose Launch fails,
// reports the trouble (a claim may have committed unseen).
func TestFailedPassAndLaunch(t *testing.T) {
	f := newFix(t, sysdb.QueueSettings{})
	f.enqueue(1)
	launchErr := errors.New("launch failed")
	f.cfg.Launch = func(context.Context, *Queue, []sysdb.ClaimedRow) error { return launchErr }
	f.start()
	require.Equal(t, 1, f.pass().Claimed)
	require.Equal(t, int32(1), f.trouble.Load())

	f.exec(`DELETE FROM {{schema}}.queues`)
	f.q.Wake()
	p := f.d.signals.Pass.Wait(t, long)
	require.ErrorContains(t, p.Err, `queue not found: "q" was deleted`)
	require.Equal(t, time.Second, p.Wait, "a failed pass is retried within a second")
	require.Equal(t, int32(2), f.trouble.Load())
}

// TestStopWaitsForThePass: Stop cancels the loops and returns only once
// they ended, a Launch in flight included.
func TestStopWaitsForThePass(t *testing.T) {
	f := newFix(t, sysdb.QueueSettings{})
	f.enqueue(1)
	inLaunch, cancelled, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var launchEnded atomic.Bool
	f.cfg.Launch = func(ctx context.Context, _ *Queue, _ []sysdb.ClaimedRow) error {
		close(inLaunch)
		<-ctx.Done() // Stop cancels the pass
		close(cancelled)
		<-release
		launchEnded.Store(true)
		return nil
	}
	d := New(f.cfg)
	require.NoError(t, d.Start(f.ctx))
	<-inLaunch
	stopped := make(chan bool, 1)
	go func() {
		_ = d.Stop(context.Background())
		stopped <- launchEnded.Load()
	}()
	<-cancelled
	// Stop must not return while Launch runs; a Stop that does not wait
	// returns at once, well within this bound.
	select {
	case <-stopped:
		t.Fatal("Stop returned before the pass ended")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	require.True(t, <-stopped, "Stop returned before the pass ended")
	require.False(t, d.Running())
	require.NoError(t, d.Start(f.ctx), "a stopped Dispatcher starts again")
	require.NoError(t, d.Stop(context.Background()))
}

// TestRequeueWakesItsQueue: Requeue gives the queued runs of a dead
// executor back to their queue, only when this executor judges leases,
// and wakes the queue's loop, which claims them.
func TestRequeueWakesItsQueue(t *testing.T) {
	f := newFix(t, sysdb.QueueSettings{})
	var judges atomic.Bool
	f.cfg.JudgesLeases = judges.Load
	var requeued atomic.Int64
	f.cfg.Requeued = func(q string, n int) {
		if q == "q" {
			requeued.Add(int64(n))
		}
	}
	f.start()
	require.Zero(t, f.pass().Claimed)
	f.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, queue_name) VALUES
		('lost', 'w', 'pending', 'v', 'dead', 1, 'q')`)

	require.NoError(t, f.d.Requeue(f.ctx, false))
	var status string
	require.NoError(t, f.pool.QueryRow(f.ctx, sysdb.Render(`SELECT status FROM {{schema}}.workflows`, f.schema)).Scan(&status))
	require.Equal(t, "pending", status, "leases not judged: the run stays")
	require.Zero(t, requeued.Load())

	judges.Store(true)
	require.NoError(t, f.d.Requeue(f.ctx, false))
	require.EqualValues(t, 1, requeued.Load(), "Requeued is told of the run returned")
	require.Equal(t, 1, f.pass().Claimed)
	got := f.launch()
	require.Equal(t, []string{"lost"}, ids(got))
	require.Equal(t, int64(3), got[0].Epoch, "requeued then claimed: the dead owner is fenced twice over")
}

// TestNotifierCoalesces: notifications of one queue asked for while one
// is in flight are sent as one, after it; none is lost.
func TestNotifierCoalesces(t *testing.T) {
	t.Parallel()
	sent := make(chan string, 100)
	open := make(chan struct{})
	n := NewNotifier(func(queue string) {
		sent <- queue
		if queue == "q" {
			<-open
		}
	})
	n.signals.Idle.Init()
	next := func() string {
		t.Helper()
		select {
		case q := <-sent:
			return q
		case <-time.After(long):
			t.Fatal("no notification sent")
			return ""
		}
	}
	n.Notify("q")
	require.Equal(t, "q", next())
	for range 10 {
		n.Notify("q")
	}
	n.mu.Lock()
	held := n.inflight["q"] && n.pending["q"]
	n.mu.Unlock()
	require.True(t, held, "the notifications asked for meanwhile wait for the one in flight")
	n.Notify("other") // another queue does not wait for q's
	require.Equal(t, "other", next())
	require.Equal(t, "other", n.signals.Idle.Wait(t, long))
	close(open)
	require.Equal(t, "q", next(), "the notifications asked for meanwhile are sent after it")
	require.Equal(t, "q", n.signals.Idle.Wait(t, long))
	require.Empty(t, sent, "and as one")

	n.Notify("q")
	require.Equal(t, "q", next(), "an idle queue's notification goes at once")
	require.Equal(t, "q", n.signals.Idle.Wait(t, long))
}
