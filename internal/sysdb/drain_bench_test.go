package sysdb

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/proccpu"
)

// BenchmarkDrainStatements replays what a queue drain of one-step runs
// asks of the server, without an engine: b.N queued runs claimed 500 at a
// time, a step recorded for each, each finished. In turn (one connection,
// one statement at a time) it reports the server CPU per run of each
// statement; pipelined (claims, steps and finishes on three connections
// at once, each batch handed on as a drain's dispatcher and batchers do)
// what they cost together, where their writes meet on the same pages.
// With no engine in the process, both are steadier than a drain's
// figures. Compare variants of the schema or the statements in separate
// processes (one -bench pattern each, in alternation): within one process
// the later benchmarks ran up to 15% cheaper, which once made a fill
// factor on the runs table look like a lever (in separate processes it
// changed nothing).
func BenchmarkDrainStatements(b *testing.B) {
	b.Run("in-turn", func(b *testing.B) { benchDrainStatements(b, false) })
	b.Run("pipelined", func(b *testing.B) { benchDrainStatements(b, true) })
}

// drainReplay is the schema and statements of BenchmarkDrainStatements.
type drainReplay struct {
	pool *pgxpool.Pool
	qq   *QueueQueries
	q    *Queries
}

func benchDrainStatements(b *testing.B, pipelined bool) {
	ctx := context.Background()
	pool, schema := migratedFresh(b)
	d := &drainReplay{pool: pool, qq: NewQueueQueries(schema, ""), q: New(schema, false)}
	require.NoError(b, d.qq.Declare(ctx, pool, QueueDeclareParams{Name: "q", Declared: "bench"}))
	bq := NewBatchQueries(schema, "")
	runs := make([]QueuedRun, 0, 1000)
	for i := 0; i < b.N; i++ {
		runs = append(runs, QueuedRun{ID: fmt.Sprintf("run-%08d", i), Input: json.RawMessage(fmt.Sprint(i))})
		if len(runs) == cap(runs) || i == b.N-1 {
			_, err := bq.EnqueueMany(ctx, pool, EnqueueManyParams{Queue: "q", Workflow: "w", AppVersion: "v", Runs: runs})
			require.NoError(b, err)
			runs = runs[:0]
		}
	}
	b.ResetTimer()
	if pipelined {
		d.pipelined(b)
		return
	}
	conn, err := pool.Acquire(ctx)
	require.NoError(b, err)
	defer conn.Release()
	var claim, step, finish time.Duration
	phase := func(into *time.Duration, f func() error) {
		t0 := proccpu.PostgresTotal()
		require.NoError(b, f())
		*into += proccpu.PostgresTotal() - t0
	}
	for done := 0; done < b.N; {
		var claimed []ClaimedRow
		phase(&claim, func() (err error) { claimed, err = d.claim(ctx, conn); return err })
		require.NotEmpty(b, claimed)
		phase(&step, func() error { return d.step(ctx, conn, claimed) })
		phase(&finish, func() error { return d.finish(ctx, conn, claimed) })
		done += len(claimed)
	}
	b.StopTimer()
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(b.N) }
	b.ReportMetric(per(claim), "claim-µs/run")
	b.ReportMetric(per(step), "step-µs/run")
	b.ReportMetric(per(finish), "finish-µs/run")
	b.ReportMetric(per(claim+step+finish), "server-µs/run")
}

func (d *drainReplay) claim(ctx context.Context, db DBTX) ([]ClaimedRow, error) {
	return d.qq.ClaimSimple(ctx, db, ClaimSimpleParams{Queue: "q", ExecutorID: "x", AppVersion: "v",
		Workflows: []string{"w"}, Limit: 500})
}

func (d *drainReplay) step(ctx context.Context, db DBTX, claimed []ClaimedRow) error {
	steps := make([]*InsertStepParams, len(claimed))
	for i, r := range claimed {
		steps[i] = &InsertStepParams{WorkflowID: r.ID, Name: "s", Status: "done", Output: json.RawMessage(`"ok"`),
			Attempts: 1, StartedAt: time.Now(), Epoch: r.Epoch}
	}
	written, err := d.q.InsertSteps(ctx, db, steps)
	for _, w := range written {
		if !w {
			return fmt.Errorf("a step was not written")
		}
	}
	return err
}

func (d *drainReplay) finish(ctx context.Context, db DBTX, claimed []ClaimedRow) error {
	fins := make([]*FinishOneParams, len(claimed))
	for i, r := range claimed {
		fins[i] = &FinishOneParams{ID: r.ID, Epoch: r.Epoch, Status: "success", Output: json.RawMessage(`1`)}
	}
	finished, _, err := d.q.FinishWorkflows(ctx, db, fins)
	for _, f := range finished {
		if !f {
			return fmt.Errorf("a run was not finished")
		}
	}
	return err
}

// pipelined claims, records steps and finishes on three connections at
// once, each batch handed on to the next statement as soon as the one
// before it returns.
func (d *drainReplay) pipelined(b *testing.B) {
	ctx := context.Background()
	toStep, toFinish := make(chan []ClaimedRow, 4), make(chan []ClaimedRow, 4)
	errs := make(chan error, 3)
	t0 := proccpu.PostgresTotal()
	go func() {
		defer close(toStep)
		for done := 0; done < b.N; {
			claimed, err := d.claim(ctx, d.pool)
			if err == nil && len(claimed) == 0 {
				err = fmt.Errorf("claimed nothing after %d of %d runs", done, b.N)
			}
			if err != nil {
				errs <- err
				return
			}
			done += len(claimed)
			toStep <- claimed
		}
		errs <- nil
	}()
	pass := func(in <-chan []ClaimedRow, out chan<- []ClaimedRow, f func(context.Context, DBTX, []ClaimedRow) error) {
		if out != nil {
			defer close(out)
		}
		for claimed := range in {
			if err := f(ctx, d.pool, claimed); err != nil {
				errs <- err
				for range in { // let the stage before this one end
				}
				return
			}
			if out != nil {
				out <- claimed
			}
		}
		errs <- nil
	}
	go pass(toStep, toFinish, d.step)
	go pass(toFinish, nil, d.finish)
	for range 3 {
		require.NoError(b, <-errs)
	}
	b.StopTimer()
	b.ReportMetric(float64((proccpu.PostgresTotal()-t0).Nanoseconds())/1e3/float64(b.N), "server-µs/run")
}
