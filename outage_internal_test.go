package durable

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/internal/sysdb"
	"github.com/durable-go/durable/internal/sysdbtest"
)

// incEngine launches an engine of executor id on a fresh schema, with a
// sweeper that looks often, workflow "w" (one step: n+1) and the queue
// name declared with opts.
func incEngine(t *testing.T, id, name string, opts *QueueOpts) (context.Context, *pgxpool.Pool, string, *Engine, *Workflow[int, int], *Queue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	pool, schema := sysdbtest.Migrated(t)
	e, err := New(pool, &Config{Schema: schema, AppVersion: "test", ExecutorID: id,
		LeaseTTL: time.Second, PollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	wf := Register(e, "w", func(wctx Context, n int) (int, error) {
		return Step(wctx, "inc", func(context.Context) (int, error) { return n + 1, nil }, nil)
	}, nil)
	q := RegisterQueue(e, name, opts)
	launchUntilCleanup(ctx, t, e)
	return ctx, pool, schema, e, wf, q
}

// TestAdoptStrays: runs this executor owns but does not execute, as left by
// a start or a queue claim whose answer an outage cut off (the row
// committed, the caller saw an error), are resumed by the sweeper once a
// database error was seen: the plain one is claimed again and executed,
// the queued one goes back to its queue and runs through its limits.
// (Whether the sweeper looks before that depends on heartbeats timing out
// on a loaded machine, so the test does not check it.)
func TestAdoptStrays(t *testing.T) {
	t.Parallel()
	ctx, pool, schema, e, wf, q := incEngine(t, "stray-exec", "q", &QueueOpts{WorkerConcurrency: 1})

	// A start whose INSERT committed but whose answer was lost.
	if _, err := e.q.InsertOwned(ctx, pool, sysdb.InsertOwnedParams{AppVersion: "test", ExecutorID: "stray-exec", Run: &sysdb.OwnedRun{ID: "plain-stray", Name: "w", Input: json.RawMessage("41")}}); err != nil {
		t.Fatal(err)
	}
	// A queue claim whose answer was lost: the run is pending and ours,
	// and no slot of the queue is held for it here.
	if err := q.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := wf.Enqueue(ctx, q, 9, &EnqueueOpts{ID: "queued-stray"}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "workflows"}.Sanitize()+
		" SET status = 'pending', executor_id = 'stray-exec', epoch = epoch + 1, started_at = now() WHERE id = 'queued-stray'"); err != nil {
		t.Fatal(err)
	}
	if err := q.Resume(ctx); err != nil {
		t.Fatal(err)
	}

	e.lease.NoteTrouble()
	e.recov.Wake()
	for id, want := range map[string]int{"plain-stray": 42, "queued-stray": 10} {
		h, err := wf.Handle(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got, err := h.Result(ctx)
		if err != nil || got != want {
			t.Fatalf("%s: %d, %v; want %d", id, got, err, want)
		}
	}
}

// TestReleaseStoppedSlots: a cancelled queued run that still holds its
// slot for this executor although nothing executes it here (its release
// was cut off by an outage) gives the slot back at the sweeper's next
// stray check, and the queue moves on.
func TestReleaseStoppedSlots(t *testing.T) {
	t.Parallel()
	ctx, pool, schema, e, wf, q := incEngine(t, "stop-exec", "one", &QueueOpts{GlobalConcurrency: 1})

	h, err := wf.Enqueue(ctx, q, 1, &EnqueueOpts{ID: "held"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Result(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "workflows"}.Sanitize()+
		" SET status = 'cancelled', executor_id = 'stop-exec' WHERE id = 'held'"); err != nil {
		t.Fatal(err)
	}
	st, err := q.Stats(ctx)
	if err != nil || st.Running != 1 {
		t.Fatalf("stats: %+v, %v; want the held slot counted as running", st, err)
	}
	next, err := wf.Enqueue(ctx, q, 41, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.lease.NoteTrouble()
	e.recov.Wake()
	if got, err := next.Result(ctx); err != nil || got != 42 {
		t.Fatalf("next: %d, %v; want 42", got, err)
	}
	var owner *string
	if err := pool.QueryRow(ctx, "SELECT executor_id FROM "+pgx.Identifier{schema, "workflows"}.Sanitize()+" WHERE id = 'held'").Scan(&owner); err != nil || owner != nil {
		t.Fatalf("held run's owner: %v, %v; want none", owner, err)
	}
}
