package durable_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// rowsOf counts the rows of each table keyed by workflow ID that belong to
// run id.
func rowsOf(t *testing.T, pool *pgxpool.Pool, schema, id string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, table := range []string{"workflows", "steps", "messages", "events", "streams"} {
		col := "workflow_id"
		if table == "workflows" {
			col = "id"
		}
		var n int
		require.NoError(t, pool.QueryRow(context.Background(),
			fmt.Sprintf("SELECT count(*) FROM %s WHERE %s = $1", pgx.Identifier{schema, table}.Sanitize(), col), id).Scan(&n))
		out[table] = n
	}
	return out
}

func dbNow(t *testing.T, pool *pgxpool.Pool) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&now))
	return now
}

// TestRetention covers the deletion of finished runs: Engine.Prune, its
// batches next to live work, and Config.Retention.
func TestRetention(t *testing.T) {
	t.Parallel()

	t.Run("Prune", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		release := make(chan struct{})
		var full, fail, child, parent *durable.Workflow[string, string]
		e := b.engine(t, nil, func(e *durable.Engine) {
			// full leaves a row in every table: steps, a consumed and an
			// unconsumed message, an event, stream entries.
			full = durable.Register(e, "prune-full", func(wctx durable.Context, in string) (string, error) {
				if _, err := durable.Step(wctx, "one", func(context.Context) (int, error) { return 1, nil }, nil); err != nil {
					return "", err
				}
				if err := durable.SetEvent(wctx, "progress", "half"); err != nil {
					return "", err
				}
				if err := durable.StreamWrite(wctx, "log", "hello"); err != nil {
					return "", err
				}
				msg, ok, err := durable.Recv[string](wctx, "go", time.Minute)
				if err != nil || !ok {
					return "", fmt.Errorf("recv: ok=%v err=%v", ok, err)
				}
				return in + msg, nil
			}, nil)
			fail = durable.Register(e, "prune-fail", func(wctx durable.Context, in string) (string, error) {
				_, err := durable.Step(wctx, "boom", func(context.Context) (int, error) { return 0, durable.Permanent(errors.New("boom")) }, nil)
				return "", err
			}, nil)
			child = durable.Register(e, "prune-child", func(wctx durable.Context, in string) (string, error) {
				return durable.Step(wctx, "c", func(context.Context) (string, error) { return "child:" + in, nil }, nil)
			}, nil)
			parent = durable.Register(e, "prune-parent", func(wctx durable.Context, in string) (string, error) {
				h, err := child.StartChild(wctx, in, nil)
				if err != nil {
					return "", err
				}
				out, err := h.Await(wctx)
				if err != nil {
					return "", err
				}
				if in == "block" {
					if _, err := durable.Step(wctx, "wait", func(ctx context.Context) (int, error) {
						select {
						case <-release:
							return 0, nil
						case <-ctx.Done():
							return 0, ctx.Err()
						}
					}, nil); err != nil {
						return "", err
					}
				}
				return out, nil
			}, nil)
		})
		ctx := ctxT(t)

		runFull := func(id string) {
			h, err := full.Start(ctx, "x", &durable.StartOpts{ID: id})
			require.NoError(t, err)
			// "unread" first: the run finishes once it has "go".
			require.NoError(t, durable.Send(ctx, e, id, "unread", "never received", nil))
			require.NoError(t, durable.Send(ctx, e, id, "go", "!", nil))
			out, err := h.Result(ctx)
			require.NoError(t, err)
			require.Equal(t, "x!", out)
		}
		runFull("old-full")
		h, err := fail.Start(ctx, "x", &durable.StartOpts{ID: "old-fail"})
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.Error(t, err)
		hp, err := parent.Start(ctx, "done", &durable.StartOpts{ID: "old-parent"})
		require.NoError(t, err)
		_, err = hp.Result(ctx)
		require.NoError(t, err)
		// A pending parent whose child finished: neither may go.
		blocked, err := parent.Start(ctx, "block", &durable.StartOpts{ID: "pending-parent"})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			return rowsOf(t, b.pool, b.schema, "pending-parent/0")["workflows"] == 1 &&
				rowsOf(t, b.pool, b.schema, "pending-parent")["steps"] >= 2 // child start + await recorded
		}, 30*time.Second, 10*time.Millisecond)
		cutoff := dbNow(t, b.pool)
		runFull("new-full") // finished after the cutoff

		before := rowsOf(t, b.pool, b.schema, "old-full")
		require.Equal(t, map[string]int{"workflows": 1, "steps": 4, "messages": 2, "events": 1, "streams": 1}, before,
			"the old run has rows in every table")

		res, err := e.Prune(ctx, cutoff, nil)
		require.NoError(t, err)
		// old-full, old-fail, old-parent and its child old-parent/0.
		require.Equal(t, int64(4), res.Runs)
		require.Equal(t, int64(2), res.Messages)
		require.Equal(t, int64(1), res.Events)
		require.Equal(t, int64(1), res.Streams)
		require.Equal(t, 1, res.Batches)
		for _, id := range []string{"old-full", "old-fail", "old-parent", "old-parent/0"} {
			require.Equal(t, map[string]int{"workflows": 0, "steps": 0, "messages": 0, "events": 0, "streams": 0},
				rowsOf(t, b.pool, b.schema, id), id)
		}
		require.Equal(t, before, rowsOf(t, b.pool, b.schema, "new-full"), "a run finished after the cutoff stays")
		require.Equal(t, 1, rowsOf(t, b.pool, b.schema, "pending-parent")["workflows"], "a pending run stays")
		require.Equal(t, 1, rowsOf(t, b.pool, b.schema, "pending-parent/0")["workflows"], "the finished child of a pending parent stays")

		_, err = full.Handle(ctx, "old-full")
		require.ErrorIs(t, err, durable.ErrWorkflowNotFound)

		// Once the parent finished before a cutoff, both go.
		close(release)
		_, err = blocked.Result(ctx)
		require.NoError(t, err)
		res, err = e.Prune(ctx, dbNow(t, b.pool), nil)
		require.NoError(t, err)
		require.Equal(t, int64(3), res.Runs) // new-full, pending-parent, its child
		var left int
		require.NoError(t, b.pool.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s.workflows", pgx.Identifier{b.schema}.Sanitize())).Scan(&left))
		require.Zero(t, left)

		// A pruned ID is forgotten: starting it again starts a new run, instead
		// of returning the old run's result ("x!").
		again, err := full.Start(ctx, "y", &durable.StartOpts{ID: "old-full"})
		require.NoError(t, err)
		require.NoError(t, durable.Send(ctx, e, "old-full", "go", "!", nil))
		out, err := again.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "y!", out)

		_, err = e.Prune(ctx, time.Time{}, nil)
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		_, err = e.Prune(ctx, time.Now(), &durable.PruneOpts{BatchSize: durable.PruneBatchMax + 1})
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
	})

	t.Run("PruneBatches", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		e, err := durable.New(b.pool, b.cfg) // never launched: Prune works from any process
		require.NoError(t, err)
		ctx := ctxT(t)
		require.NoError(t, durable.Migrate(ctx, b.pool, b.schema))
		seedFinished(t, b.pool, b.schema, "s-", 25, 3)

		res, err := e.Prune(ctx, time.Now().Add(-30*24*time.Hour), &durable.PruneOpts{BatchSize: 10, MaxRuns: 7})
		require.NoError(t, err)
		require.Equal(t, durable.PruneResult{Runs: 7, Steps: 21, Streams: 21, Batches: 1}, res)

		res, err = e.Prune(ctx, time.Now().Add(-30*24*time.Hour), &durable.PruneOpts{BatchSize: 10})
		require.NoError(t, err)
		require.Equal(t, durable.PruneResult{Runs: 18, Steps: 54, Streams: 54, Batches: 2}, res)

		res, err = e.Prune(ctx, time.Now(), nil)
		require.NoError(t, err)
		require.Equal(t, durable.PruneResult{}, res)
	})

	// PruneDoesNotBlockLiveWork runs a prune of many rows while live runs
	// start, checkpoint and finish, and holds one prune batch open in the
	// middle of its deletes (a lock the test takes on one of its rows) to show
	// live work goes on while a batch is in flight. It also shows a prune
	// skips, rather than waits for, a run someone else has locked.
	t.Run("PruneDoesNotBlockLiveWork", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var live *durable.Workflow[int, int]
		e := b.engine(t, nil, func(e *durable.Engine) {
			live = durable.Register(e, "prune-live", func(wctx durable.Context, in int) (int, error) {
				for i := range 3 {
					if _, err := durable.Step(wctx, fmt.Sprint("s", i), func(context.Context) (int, error) { return i, nil }, nil); err != nil {
						return 0, err
					}
				}
				return in, nil
			}, nil)
		})
		ctx := ctxT(t)
		const old = 2000
		seedFinished(t, b.pool, b.schema, "old-", old, 10)
		s := pgx.Identifier{b.schema}.Sanitize()

		// Live work, all along.
		var finished atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var liveErr atomic.Value
		for w := range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					h, err := live.Start(ctx, i, &durable.StartOpts{ID: fmt.Sprintf("live-%d-%d", w, i)})
					if err == nil {
						_, err = h.Result(ctx)
					}
					if err != nil {
						liveErr.Store(err)
						return
					}
					finished.Add(1)
				}
			})
		}
		defer func() {
			close(stop)
			wg.Wait()
		}()

		// Someone holds the row of one old run (say a Resume in flight): the
		// prune skips it instead of waiting.
		rowLocker, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer rowLocker.Rollback(ctx)
		_, err = rowLocker.Exec(ctx, `SELECT 1 FROM `+s+`.workflows WHERE id = 'old-1' FOR UPDATE`)
		require.NoError(t, err)
		// And one step row of the oldest run: the first batch's delete waits
		// on it, holding that batch's transaction open.
		stepLocker, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer stepLocker.Rollback(ctx)
		_, err = stepLocker.Exec(ctx, `SELECT 1 FROM `+s+`.steps WHERE workflow_id = 'old-`+fmt.Sprint(old)+`' AND pos = 0 FOR UPDATE`)
		require.NoError(t, err)

		type pruned struct {
			res durable.PruneResult
			err error
		}
		done := make(chan pruned, 1)
		go func() {
			res, err := e.Prune(ctx, time.Now().Add(-24*time.Hour), &durable.PruneOpts{BatchSize: 100})
			done <- pruned{res, err}
		}()
		// The first batch is now stuck on the step row, inside its transaction.
		require.Eventually(t, func() bool {
			var waiting bool
			err := b.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND query LIKE '%WITH victims AS%' AND query LIKE '%'||$1||'%')`, b.schema).Scan(&waiting)
			return err == nil && waiting
		}, 30*time.Second, 10*time.Millisecond)
		// Live runs keep finishing while it is stuck.
		at := finished.Load()
		require.Eventually(t, func() bool { return finished.Load() >= at+20 || liveErr.Load() != nil },
			60*time.Second, 10*time.Millisecond, "live runs stopped finishing while a prune batch was open")
		require.Nil(t, liveErr.Load())
		select {
		case p := <-done:
			t.Fatalf("prune returned while its batch should be waiting: %+v %v", p.res, p.err)
		default:
		}

		// Release the step row: the prune goes on over every old run but the
		// locked one, while live runs keep finishing.
		require.NoError(t, stepLocker.Commit(ctx))
		var p pruned
		select {
		case p = <-done:
		case <-ctx.Done():
			t.Fatal("prune did not finish")
		}
		require.NoError(t, p.err)
		require.Equal(t, int64(old-1), p.res.Runs, "every old run but the locked one")
		require.Equal(t, int64((old-1)*10), p.res.Steps)
		require.GreaterOrEqual(t, p.res.Batches, old/100)
		at = finished.Load()
		require.Eventually(t, func() bool { return finished.Load() >= at+5 || liveErr.Load() != nil }, 60*time.Second, 10*time.Millisecond)
		require.Nil(t, liveErr.Load())

		var oldLeft, liveLeft int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE id LIKE 'old-%'), count(*) FILTER (WHERE id LIKE 'live-%') FROM `+s+`.workflows`).Scan(&oldLeft, &liveLeft))
		require.Equal(t, 1, oldLeft, "the locked run was skipped")
		require.Positive(t, liveLeft, "live runs are recent: none pruned")

		// Unlocked, it goes at the next prune.
		require.NoError(t, rowLocker.Commit(ctx))
		res, err := e.Prune(ctx, time.Now().Add(-24*time.Hour), nil)
		require.NoError(t, err)
		require.Equal(t, int64(1), res.Runs)
	})

	// Background: Config.Retention prunes old runs by itself, in
	// one executor at a time (the one holding the schema's retention lock).
	t.Run("Background", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := ctxT(t)
		require.NoError(t, durable.Migrate(ctx, b.pool, b.schema))
		seedFinished(t, b.pool, b.schema, "old-", 30, 2)
		s := pgx.Identifier{b.schema}.Sanitize()
		_, err := b.pool.Exec(ctx, `INSERT INTO `+s+`.workflows (id, name, status, app_version, updated_at)
VALUES ('recent', 'seeded', 'success', 'test', now() - interval '1 hour'),
	('old-pending', 'seeded', 'pending', 'other-version', now() - interval '90 days')`)
		require.NoError(t, err)

		// Another executor's pass holds the lock: this one skips its passes.
		// (In a transaction, as a pass does: a session lock would not stay
		// with its client through a pooler in transaction mode.)
		holder, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = holder.Rollback(context.Background()) }()
		_, err = holder.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "durable.retention:"+b.schema)
		require.NoError(t, err)

		b.engine(t, func(c *durable.Config) {
			c.Retention = 30 * 24 * time.Hour
			c.RetentionInterval = 20 * time.Millisecond
		}, nil)
		require.Eventually(t, func() bool { return strings.Contains(b.logs.String(), "retention pass skipped") },
			30*time.Second, 10*time.Millisecond)
		count := func() (old, other int) {
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE id LIKE 'old-%' AND status = 'success'),
	count(*) FILTER (WHERE id IN ('recent', 'old-pending')) FROM `+s+`.workflows`).Scan(&old, &other))
			return
		}
		old, other := count()
		require.Equal(t, 30, old)
		require.Equal(t, 2, other)

		require.NoError(t, holder.Rollback(ctx))
		require.Eventually(t, func() bool { old, _ := count(); return old == 0 }, 30*time.Second, 10*time.Millisecond)
		_, other = count()
		require.Equal(t, 2, other, "a recent run and a pending run stay")
	})

	// PruneKeepsRecentQueueStarts: a queue's rate limit counts the starts
	// of its period from the runs' rows, so a run that started within the
	// period stays, however old the cutoff says it is.
	t.Run("PruneKeepsRecentQueueStarts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var wf *durable.Workflow[int, int]
		var limited, plain *durable.Queue
		e := b.engine(t, nil, func(e *durable.Engine) {
			wf = durable.Register(e, "prune-q", func(wctx durable.Context, in int) (int, error) { return in, nil }, nil)
			limited = durable.RegisterQueue(e, "prune-limited", &durable.QueueOpts{RateLimit: 5, RatePeriod: time.Hour})
			plain = durable.RegisterQueue(e, "prune-plain", nil)
		})
		ctx := ctxT(t)
		for _, q := range []*durable.Queue{limited, plain} {
			h, err := wf.Enqueue(ctx, q, 1, &durable.EnqueueOpts{ID: "run-" + q.Name()})
			require.NoError(t, err)
			_, err = h.Result(ctx)
			require.NoError(t, err)
		}
		res, err := e.Prune(ctx, dbNow(t, b.pool), nil)
		require.NoError(t, err)
		require.Equal(t, int64(1), res.Runs)
		require.Equal(t, 0, rowsOf(t, b.pool, b.schema, "run-prune-plain")["workflows"])
		require.Equal(t, 1, rowsOf(t, b.pool, b.schema, "run-prune-limited")["workflows"], "started within the rate period")
	})
}

// seedFinished inserts n runs finished 40 days ago, each with steps and
// stream entries, straight into the tables: the shape the engine leaves.
func seedFinished(t *testing.T, pool *pgxpool.Pool, schema, prefix string, n, perRun int) {
	t.Helper()
	s := pgx.Identifier{schema}.Sanitize()
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO `+s+`.workflows (id, name, status, app_version, input, output, created_at, updated_at)
SELECT $1 || i, 'seeded', 'success', 'test', '1', '2', now() - interval '41 days', now() - interval '40 days' - i * interval '1 second'
FROM generate_series(1, $2) i`, prefix, n)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO `+s+`.steps (workflow_id, pos, name, status, output, started_at, finished_at)
SELECT $1 || i, p, 'step', 'done', '"some recorded output"', now() - interval '41 days', now() - interval '41 days'
FROM generate_series(1, $2) i, generate_series(0, $3 - 1) p`, prefix, n, perRun)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO `+s+`.streams (workflow_id, key, off, value)
SELECT $1 || i, 'tokens', p, '"tok"' FROM generate_series(1, $2) i, generate_series(0, $3 - 1) p`, prefix, n, perRun)
	require.NoError(t, err)
}
