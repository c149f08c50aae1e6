package durable_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/proccpu"
	"github.com/durable-go/durable/internal/sysdbtest"
)

// BenchmarkDrain drains b.N queued one-step runs (plain-0-steps: runs
// without a step) on one engine: what the
// engine allocates per drained run (allocs/op) is the client-side lever
// of the queue drain that bench/ measures against River.
func BenchmarkDrain(b *testing.B) {
	for _, c := range []struct {
		name  string
		opts  *durable.QueueOpts
		keys  int
		steps int
	}{
		{"plain", nil, 0, 1},
		// What the step costs a drain: the same runs without it.
		{"plain-0-steps", nil, 0, 0},
		{"global-100", &durable.QueueOpts{GlobalConcurrency: 100}, 0, 1},
		{"worker-100", &durable.QueueOpts{WorkerConcurrency: 100}, 0, 1},
		{"fair-100-keys", &durable.QueueOpts{FairShare: true}, 100, 1},
	} {
		b.Run(c.name, func(b *testing.B) { benchDrain(b, c.opts, c.keys, c.steps, nil) })
	}
}

// BenchmarkDrainLevers drains b.N queued one-step runs of a plain queue
// as BenchmarkDrain/plain does, on a schema changed as no release may
// change it: what an index the claim or the finish of every run writes
// costs the drain. Run it beside BenchmarkDrain/plain, in alternation
// (-count), to compare.
func BenchmarkDrainLevers(b *testing.B) {
	for _, c := range []struct {
		name  string
		stmts []string
	}{
		// The listing index that migration 026 replaced with the creation
		// log: the claim and the finish each entered the run's new row
		// version in it.
		{"with-created-idx", []string{"CREATE INDEX workflows_created_idx ON {{schema}}.workflows (created_at, id)"}},
		// The finish-time index keyed as before migration 027, by
		// (updated_at, id): a key per finished run, where keyed by the time
		// alone the runs of one finish statement share one.
		{"with-finished-at-id-key", []string{"DROP INDEX {{schema}}.workflows_finish_time_idx",
			"CREATE INDEX workflows_finished_at_idx ON {{schema}}.workflows (updated_at, id) " +
				"WHERE status IN ('success', 'error', 'cancelled', 'dead') AND updated_at IS NOT NULL"}},
		// No index of finished runs by finish time (retention and the
		// dashboard's activity read it): what is left of that lever.
		{"without-finish-time-idx", []string{"DROP INDEX {{schema}}.workflows_finish_time_idx"}},
	} {
		b.Run(c.name, func(b *testing.B) { benchDrain(b, nil, 0, 1, c.stmts) })
	}
}

// benchDrain drains b.N queued runs of steps steps each, over keys
// partition keys (0: none), on a queue of opts, after running stmts on the
// schema (BenchmarkDrainLevers).
func benchDrain(b *testing.B, opts *durable.QueueOpts, keys, steps int, stmts []string) {
	var returned atomic.Int64
	var wf *durable.Workflow[int, int]
	var q *durable.Queue
	bu := setup(b)
	for _, stmt := range stmts {
		sysdbtest.Exec(b, bu.pool, bu.schema, stmt)
	}
	bu.engine(b, func(c *durable.Config) { c.Logger = slog.New(slog.DiscardHandler) }, func(e *durable.Engine) {
		wf = durable.Register(e, "drain1", func(wctx durable.Context, i int) (int, error) {
			var err error
			for range steps {
				if _, err = durable.Step(wctx, "s", func(context.Context) (string, error) { return "ok", nil }, nil); err != nil {
					break
				}
			}
			returned.Add(1)
			return i, err
		}, nil)
		q = durable.RegisterQueue(e, "drain", opts)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := q.Pause(ctx); err != nil {
		b.Fatal(err)
	}
	enqueueAll(ctx, b, wf, q, keys)
	b.ReportAllocs()
	b.ResetTimer()
	client, server := cpuNow()
	if err := q.Resume(ctx); err != nil {
		b.Fatal(err)
	}
	for returned.Load() < int64(b.N) {
		time.Sleep(time.Millisecond)
	}
	for {
		st, err := q.Stats(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if st.Ready == 0 && st.Running == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	reportCPU(b, client, server)
}

// enqueueAll enqueues b.N runs of wf on q in batches of 1,000
// (EnqueueMany), inputs 0 to b.N-1, over keys partition keys (0: none).
func enqueueAll(ctx context.Context, b *testing.B, wf *durable.Workflow[int, int], q *durable.Queue, keys int) {
	items := make([]durable.EnqueueItem[int], 0, 1000)
	for i := 0; i < b.N; i++ {
		it := durable.EnqueueItem[int]{Input: i}
		if keys > 0 {
			it.Opts = &durable.EnqueueOpts{PartitionKey: fmt.Sprint("k", i%keys)}
		}
		items = append(items, it)
		if len(items) == cap(items) || i == b.N-1 {
			if _, err := wf.EnqueueMany(ctx, q, items); err != nil {
				b.Fatal(err)
			}
			items = items[:0]
		}
	}
}

// reportCPU reports the CPU this process and the server used per op since
// cpuNow returned client and server.
func reportCPU(b *testing.B, client, server time.Duration) {
	client2, server2 := cpuNow()
	b.ReportMetric(float64((client2-client).Microseconds())/float64(b.N), "client-cpu-µs/op")
	if server > 0 {
		b.ReportMetric(float64((server2-server).Microseconds())/float64(b.N), "server-cpu-µs/op")
	}
}

// cpuNow is the CPU time this process and the Postgres server processes
// on this machine (0 if none) have used so far: the drain is CPU-bound on
// a small machine, so its CPU per run is steadier than its time per run.
func cpuNow() (client, server time.Duration) {
	return proccpu.Self(), proccpu.PostgresTotal()
}

// BenchmarkEnqueueMany enqueues b.N runs in batches of 1,000 from one
// goroutine (EnqueueMany, one statement per batch): what writing a run
// costs the engine and the server, the other side of what its drain
// costs.
func BenchmarkEnqueueMany(b *testing.B) {
	var wf *durable.Workflow[int, int]
	var q *durable.Queue
	setup(b).engine(b, func(c *durable.Config) { c.Logger = slog.New(slog.DiscardHandler) }, func(e *durable.Engine) {
		wf = durable.Register(e, "enq", func(wctx durable.Context, i int) (int, error) { return i, nil }, nil)
		q = durable.RegisterQueue(e, "enq", nil)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := q.Pause(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	client, server := cpuNow()
	enqueueAll(ctx, b, wf, q, 0)
	b.StopTimer()
	reportCPU(b, client, server)
}
