package durable_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/durable-go/durable"
)

// meterReader is an SDK meter provider with a manual reader: a test
// collects when it wants to look.
type meterReader struct {
	mp     *sdkmetric.MeterProvider
	reader *sdkmetric.ManualReader
}

func newMeterReader(t *testing.T) *meterReader {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return &meterReader{mp: mp, reader: reader}
}

// point is one data point of a collection: a counter's or gauge's value,
// or a histogram's count and sum.
type point struct {
	value int64
	count uint64
	sum   float64
}

// collect returns every data point of one collection by instrument name
// and attribute set (rendered as "k=v,k=v", sorted by key).
func (m *meterReader) collect(t *testing.T) map[string]map[string]point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, m.reader.Collect(context.Background(), &rm))
	out := map[string]map[string]point{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			pts := map[string]point{}
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					pts[attrs(p.Attributes)] = point{value: p.Value}
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					pts[attrs(p.Attributes)] = point{value: p.Value}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					pts[attrs(p.Attributes)] = point{count: p.Count, sum: p.Sum}
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					pts[attrs(p.Attributes)] = point{count: p.Count, sum: float64(p.Sum)}
				}
			default:
				t.Fatalf("%s: unexpected data %T", mt.Name, mt.Data)
			}
			out[mt.Name] = pts
		}
	}
	return out
}

// waitFor collects until ok says the collection is the one awaited, and
// returns it; it fails the test after 10s. (Not require.Eventually: a
// collection's failure must stop the test in its own goroutine.)
func (m *meterReader) waitFor(t *testing.T, ok func(map[string]map[string]point) bool) map[string]map[string]point {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := m.collect(t)
		if ok(got) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("the awaited measurements did not come; last collection: %v", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func attrs(s attribute.Set) string {
	out := ""
	for i, kv := range s.ToSlice() {
		if i > 0 {
			out += ","
		}
		out += string(kv.Key) + "=" + kv.Value.Emit()
	}
	return out
}

// TestMetricsRuns: a run that succeeds and one that fails are counted
// once each, by workflow and status, with their durations; each executed
// step's duration is recorded by kind and status; the group commit's
// batches are recorded.
func TestMetricsRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := newMeterReader(t)
	var ok *durable.Workflow[int, int]
	var fails *durable.Workflow[int, int]
	e := b.engine(t, func(c *durable.Config) { c.MeterProvider = m.mp }, func(e *durable.Engine) {
		ok = durable.Register(e, "ok", func(wctx durable.Context, in int) (int, error) {
			v, err := durable.Step(wctx, "add", func(context.Context) (int, error) { return in + 1, nil }, nil)
			if err != nil {
				return 0, err
			}
			return durable.TxStep(wctx, "tx", func(ctx context.Context, tx pgx.Tx) (int, error) { return v * 2, nil }, nil)
		}, nil)
		fails = durable.Register(e, "fails", func(wctx durable.Context, in int) (int, error) {
			return durable.Step(wctx, "bad", func(context.Context) (int, error) {
				return 0, durable.Permanent(errors.New("no"))
			}, nil)
		}, nil)
	})
	ctx := ctxT(t)
	h, err := ok.Start(ctx, 1, nil)
	require.NoError(t, err)
	v, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, v)
	hf, err := fails.Start(ctx, 1, nil)
	require.NoError(t, err)
	_, err = hf.Result(ctx)
	require.Error(t, err)
	// The same ID again starts nothing and counts nothing.
	_, err = ok.Start(ctx, 1, &durable.StartOpts{ID: h.ID()})
	require.NoError(t, err)

	// The metrics of a finish are recorded just after its waiters wake.
	got := m.waitFor(t, func(got map[string]map[string]point) bool { return len(got["durable.workflow.finished"]) == 2 })
	require.Equal(t, map[string]point{
		"durable.start.kind=start,durable.workflow.name=fails": {value: 1},
		"durable.start.kind=start,durable.workflow.name=ok":    {value: 1},
	}, got["durable.workflow.started"])
	require.Equal(t, map[string]point{
		"durable.workflow.name=fails,durable.workflow.status=error": {value: 1},
		"durable.workflow.name=ok,durable.workflow.status=success":  {value: 1},
	}, got["durable.workflow.finished"], "each run counted once, with its status")
	dur := got["durable.workflow.duration"]
	require.Len(t, dur, 2)
	require.EqualValues(t, 1, dur["durable.workflow.name=ok,durable.workflow.status=success"].count)
	require.EqualValues(t, 1, dur["durable.workflow.name=fails,durable.workflow.status=error"].count)

	steps := got["durable.step.duration"]
	require.Len(t, steps, 3, "%v", steps)
	for _, k := range []string{
		"durable.step.kind=step,durable.step.status=done,durable.workflow.name=ok",
		"durable.step.kind=tx,durable.step.status=done,durable.workflow.name=ok",
		"durable.step.kind=step,durable.step.status=error,durable.workflow.name=fails",
	} {
		require.EqualValues(t, 1, steps[k].count, k)
	}

	batches := got["durable.commit.batch.size"]
	// Starts: 2 and the existing ID's; steps: add and bad (the tx step
	// commits in its own transaction); finishes: 2.
	require.EqualValues(t, 3, batches["durable.commit.kind=start"].sum)
	require.EqualValues(t, 2, batches["durable.commit.kind=step"].sum)
	require.EqualValues(t, 2, batches["durable.commit.kind=finish"].sum)
	// A run leaves the executing set just after its finish wakes Result.
	require.Eventually(t, func() bool {
		return assert.ObjectsAreEqual(map[string]point{"": {value: 0}}, m.collect(t)["durable.workflow.executing"])
	}, 10*time.Second, 5*time.Millisecond, "no run executing once all finished")

	// Cancelling a finished run counts nothing; a cancelled one counts.
	require.NoError(t, e.Cancel(ctx, h.ID(), nil))
	require.Empty(t, m.collect(t)["durable.workflow.finished"]["durable.workflow.status=cancelled"])

	// A fork is a start of its own kind.
	_, err = e.Fork(ctx, h.ID(), 1, nil)
	require.NoError(t, err)
	require.Equal(t, point{value: 1}, m.collect(t)["durable.workflow.started"]["durable.start.kind=fork,durable.workflow.name=ok"])
}

// TestMetricsQueue: the queue depth gauge reads the queue's runs from the
// database at each collection; the enqueues are counted, and the wait of
// each run from its enqueue to its start is recorded when it starts. The
// parked gauge counts a parked run, and a cancel counts as a finish.
func TestMetricsQueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := newMeterReader(t)
	var wf, sleeper *durable.Workflow[int, int]
	var q *durable.Queue
	e := b.engine(t, func(c *durable.Config) {
		c.MeterProvider = m.mp
		c.ParkThreshold = time.Millisecond
	}, func(e *durable.Engine) {
		q = durable.RegisterQueue(e, "work", nil)
		wf = durable.Register(e, "wf", func(wctx durable.Context, in int) (int, error) { return in, nil }, nil)
		sleeper = durable.Register(e, "sleeper", func(wctx durable.Context, in int) (int, error) {
			return in, durable.Sleep(wctx, time.Hour)
		}, nil)
	})
	ctx := ctxT(t)
	require.NoError(t, q.Pause(ctx))
	var hs []*durable.Handle[int]
	for i := range 3 {
		h, err := wf.Enqueue(ctx, q, i, nil)
		require.NoError(t, err)
		hs = append(hs, h)
	}
	got := m.collect(t)
	require.Equal(t, map[string]point{
		"durable.queue.name=work,durable.queue.state=ready":   {value: 3},
		"durable.queue.name=work,durable.queue.state=delayed": {value: 0},
		"durable.queue.name=work,durable.queue.state=running": {value: 0},
	}, got["durable.queue.depth"])
	require.Equal(t, point{value: 3}, got["durable.workflow.started"]["durable.start.kind=enqueue,durable.workflow.name=wf"])
	require.Empty(t, got["durable.queue.wait"], "no run started yet")

	require.NoError(t, q.Resume(ctx))
	for _, h := range hs {
		_, err := h.Result(ctx)
		require.NoError(t, err)
	}
	got = m.waitFor(t, func(got map[string]map[string]point) bool {
		return got["durable.workflow.finished"]["durable.workflow.name=wf,durable.workflow.status=success"].value == 3
	})
	require.EqualValues(t, 3, got["durable.queue.wait"]["durable.queue.name=work"].count)
	require.Equal(t, point{value: 0}, got["durable.queue.depth"]["durable.queue.name=work,durable.queue.state=ready"])

	// A run that sleeps past ParkThreshold parks: the gauge counts it.
	hs0, err := sleeper.Start(ctx, 1, nil)
	require.NoError(t, err)
	m.waitFor(t, func(got map[string]map[string]point) bool { return got["durable.workflow.parked"][""].value == 1 })
	require.NoError(t, e.Cancel(ctx, hs0.ID(), nil))
	got = m.collect(t)
	require.Equal(t, point{value: 0}, got["durable.workflow.parked"][""])
	require.Equal(t, point{value: 1}, got["durable.workflow.finished"]["durable.workflow.status=cancelled"])
}

// TestMetricsFlowControl: a keyed queue's gauge counts its partition keys
// with queued runs (the runs without a key as one more); enqueues that
// collapse into a debounced run or join an open batch are counted by
// kind, and only the first of each created a run.
func TestMetricsFlowControl(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := newMeterReader(t)
	var wf *durable.Workflow[int, int]
	var batch *durable.Workflow[[]int, int]
	var fair, plain *durable.Queue
	b.engine(t, func(c *durable.Config) { c.MeterProvider = m.mp }, func(e *durable.Engine) {
		fair = durable.RegisterQueue(e, "fair", &durable.QueueOpts{FairShare: true})
		plain = durable.RegisterQueue(e, "plain", nil)
		wf = durable.Register(e, "wf", func(wctx durable.Context, in int) (int, error) { return in, nil }, nil)
		batch = durable.Register(e, "batch", func(wctx durable.Context, in []int) (int, error) { return len(in), nil }, nil)
	})
	ctx := ctxT(t)
	require.NoError(t, fair.Pause(ctx))
	require.NoError(t, plain.Pause(ctx))
	for i, key := range []string{"a", "b", "b", "c", ""} {
		_, err := wf.Enqueue(ctx, fair, i, &durable.EnqueueOpts{PartitionKey: key})
		require.NoError(t, err)
	}
	for i := range 3 {
		_, err := wf.Enqueue(ctx, plain, i, &durable.EnqueueOpts{Debounce: &durable.Debounce{Key: "k", Window: time.Hour}})
		require.NoError(t, err)
	}
	bt, err := durable.NewBatcher(batch, durable.BatchOpts{MaxItems: 10, MaxWait: time.Hour})
	require.NoError(t, err)
	for i := range 4 {
		_, err := bt.Add(ctx, plain, i, nil)
		require.NoError(t, err)
	}
	got := m.collect(t)
	require.Equal(t, map[string]point{"durable.queue.name=fair": {value: 4}}, got["durable.queue.keys"],
		"keys a, b, c and the runs without a key; a plain queue has no keys gauge")
	require.Equal(t, map[string]point{
		"durable.join.kind=debounce,durable.queue.name=plain": {value: 2},
		"durable.join.kind=batch,durable.queue.name=plain":    {value: 3},
	}, got["durable.queue.joined"])
	require.Equal(t, point{value: 5 + 1}, got["durable.workflow.started"]["durable.start.kind=enqueue,durable.workflow.name=wf"])
	require.Equal(t, point{value: 1}, got["durable.workflow.started"]["durable.start.kind=enqueue,durable.workflow.name=batch"])
}

// TestMetricsRecovery: runs resumed after their executor died are counted
// by how they were found: this executor ID's own at Launch (restart), a
// dead peer's by the sweeper (takeover), a dead peer's queued run back in
// its queue (requeue); a run over its recovery limit is counted as dead.
// A replayed step's duration is not recorded.
func TestMetricsRecovery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := newMeterReader(t)
	ctx := ctxT(t)
	exec := func(sql string) {
		t.Helper()
		_, err := b.pool.Exec(ctx, fmt.Sprintf(sql, pgx.Identifier{b.schema}.Sanitize()))
		require.NoError(t, err)
	}
	// The engine makes the schema; the runs are planted before the second
	// engine of the same executor ID launches.
	first, err := durable.New(b.pool, b.cfg)
	require.NoError(t, err)
	require.NoError(t, first.Launch(ctx))
	require.NoError(t, first.Shutdown(ctx))
	exec(`INSERT INTO %[1]s.executors (id, incarnation, app_version, lease_expires_at)
		VALUES ('dead', 'x', 'test', now() - interval '1 hour')`)
	exec(`INSERT INTO %[1]s.queues (name) VALUES ('work')`)
	exec(`INSERT INTO %[1]s.workflows (id, name, status, app_version, executor_id, epoch, input, recovery_attempts, queue_name) VALUES
		('own', 'wf', 'pending', 'test', 'me', 1, '1', 0, NULL),
		('taken', 'wf', 'pending', 'test', 'dead', 1, '2', 0, NULL),
		('queued', 'wf', 'pending', 'test', 'dead', 1, '3', 0, 'work'),
		('doomed', 'wf', 'pending', 'test', 'dead', 1, '4', 5, NULL)`)
	exec(`INSERT INTO %[1]s.steps (workflow_id, pos, name, status, output, started_at)
		VALUES ('taken', 0, 'double', 'done', '4', now())`)

	var wf *durable.Workflow[int, int]
	b.engine(t, func(c *durable.Config) {
		c.MeterProvider = m.mp
		c.ExecutorID = "me"
		c.MaxRecoveryAttempts = 5
	}, func(e *durable.Engine) {
		durable.RegisterQueue(e, "work", nil)
		wf = durable.Register(e, "wf", func(wctx durable.Context, in int) (int, error) {
			return durable.Step(wctx, "double", func(context.Context) (int, error) { return 2 * in, nil }, nil)
		}, nil)
	})
	for id, want := range map[string]int{"own": 2, "taken": 4, "queued": 6} {
		h, err := wf.Handle(ctx, id)
		require.NoError(t, err)
		v, err := h.Result(ctx)
		require.NoError(t, err, id)
		require.Equal(t, want, v, id)
	}
	got := m.waitFor(t, func(got map[string]map[string]point) bool {
		return got["durable.workflow.finished"]["durable.workflow.name=wf,durable.workflow.status=success"].value == 3
	})
	require.Equal(t, map[string]point{
		"durable.recovery.kind=restart":  {value: 1},
		"durable.recovery.kind=takeover": {value: 2}, // taken, and doomed before its dead-lettering
		"durable.recovery.kind=requeue":  {value: 1},
	}, got["durable.workflow.recoveries"])
	require.Equal(t, point{value: 1}, got["durable.workflow.finished"]["durable.workflow.name=wf,durable.workflow.status=dead"])
	require.EqualValues(t, 2, got["durable.step.duration"]["durable.step.kind=step,durable.step.status=done,durable.workflow.name=wf"].count,
		"own's and queued's steps ran; taken's was replayed")
	require.Empty(t, got["durable.workflow.started"], "nothing was started here")
}
