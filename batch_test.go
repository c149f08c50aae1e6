package durable_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
)

// countKey marks the context of the calls whose statements a
// statementCounter counts.
type countKey struct{}

// statementCounter is a pgx tracer that records the statements sent with
// a context marked by counted: those of one call, whatever else the
// engine sends on the same pool meanwhile.
type statementCounter struct {
	mu   sync.Mutex
	sent []string
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if ctx.Value(countKey{}) != nil {
		c.mu.Lock()
		c.sent = append(c.sent, data.SQL)
		c.mu.Unlock()
	}
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// counted runs call with a marked context and returns the statements it
// sent: how many, and how many of them insert runs.
func (c *statementCounter) counted(ctx context.Context, call func(ctx context.Context)) (sent, inserts int) {
	c.mu.Lock()
	c.sent = nil
	c.mu.Unlock()
	call(context.WithValue(ctx, countKey{}, true))
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, sql := range c.sent {
		if strings.Contains(sql, "INSERT INTO") {
			inserts++
		}
	}
	return len(c.sent), inserts
}

// tracedPool returns a pool of its own whose statements c sees.
func tracedPool(t *testing.T, c *statementCounter) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	cfg.MaxConns = 8
	cfg.ConnConfig.Tracer = c
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// doubles are n items of inputs from 0, with opts(i) (nil: none).
func doubles(n int, opts func(i int) *durable.EnqueueOpts) []durable.EnqueueItem[int] {
	items := make([]durable.EnqueueItem[int], n)
	for i := range items {
		items[i].Input = i
		if opts != nil {
			items[i].Opts = opts(i)
		}
	}
	return items
}

// countRuns counts the runs whose ID starts with prefix.
func countRuns(t *testing.T, b *bundle, prefix string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(ctxT(t), fmt.Sprintf(`SELECT count(*) FROM %s.workflows WHERE starts_with(id, $1)`,
		pgx.Identifier{b.schema}.Sanitize()), prefix).Scan(&n))
	return n
}

// withIDs gives item i the ID prefix-i.
func withIDs(prefix string) func(i int) *durable.EnqueueOpts {
	return func(i int) *durable.EnqueueOpts { return &durable.EnqueueOpts{ID: fmt.Sprintf("%s-%03d", prefix, i)} }
}

// batchEngine launches an engine on b with workflow "double" and queue
// "q" (paused when paused), on pool when not nil.
func batchEngine(t *testing.T, b *bundle, pool *pgxpool.Pool, paused bool) (*durable.Engine, *durable.Workflow[int, int], *durable.Queue) {
	t.Helper()
	var wf *durable.Workflow[int, int]
	var q *durable.Queue
	if pool != nil {
		b = &bundle{pool: pool, schema: b.schema, cfg: b.cfg, logs: b.logs}
	}
	e := b.engine(t, nil, func(e *durable.Engine) {
		q = durable.RegisterQueue(e, "q", &durable.QueueOpts{WorkerConcurrency: 16})
		wf = durable.Register(e, "double", func(wctx durable.Context, in int) (int, error) { return 2 * in, nil }, nil)
	})
	if paused {
		require.NoError(t, q.Pause(ctxT(t)))
	}
	return e, wf, q
}

// TestEnqueueMany covers batch enqueues: one statement per batch, all or
// nothing, validation, dedup and a client's batches.
func TestEnqueueMany(t *testing.T) {
	t.Parallel()

	// OneStatement: a batch sends the same few statements whatever its
	// size (its transaction and one insert), engine and client, Tx or not;
	// a loop of single enqueues would send one insert per item.
	t.Run("OneStatement", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		counter := &statementCounter{}
		pool := tracedPool(t, counter)
		_, wf, q := batchEngine(t, b, pool, true)
		c, err := durable.NewClient(pool, b.clientConfig())
		require.NoError(t, err)
		t.Cleanup(c.Close)
		ref := durable.ClientWorkflow[int, int](c, "double")
		ctx := ctxT(t)

		for _, tc := range []struct {
			name  string
			batch func(ctx context.Context, prefix string, n int) error
			sent  int
		}{
			{"engine", func(ctx context.Context, prefix string, n int) error {
				_, err := wf.EnqueueMany(ctx, q, doubles(n, withIDs(prefix)))
				return err
			}, 3}, // BEGIN, the insert, COMMIT
			{"engine Tx", func(ctx context.Context, prefix string, n int) error {
				return pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error { // BEGIN and COMMIT not counted
					_, err := wf.EnqueueManyTx(ctx, tx, q, doubles(n, withIDs(prefix)))
					return err
				})
			}, 1},
			{"client", func(ctx context.Context, prefix string, n int) error {
				_, err := ref.EnqueueMany(ctx, "q", doubles(n, withIDs(prefix)))
				return err
			}, 3},
			{"engine StartMany", func(ctx context.Context, prefix string, n int) error {
				items := make([]durable.StartItem[int], n)
				for i := range items {
					items[i] = durable.StartItem[int]{Input: i, Opts: &durable.StartOpts{ID: fmt.Sprintf("%s-%03d", prefix, i)}}
				}
				_, err := wf.StartMany(ctx, items)
				return err
			}, 3},
		} {
			for _, n := range []int{10, 500} {
				prefix := fmt.Sprintf("%s-%d", strings.ReplaceAll(tc.name, " ", "-"), n)
				sent, inserts := counter.counted(ctx, func(ctx context.Context) { require.NoError(t, tc.batch(ctx, prefix, n)) })
				require.Equal(t, tc.sent, sent, "%s of %d items: statements sent", tc.name, n)
				require.Equal(t, 1, inserts, "%s of %d items: one insert", tc.name, n)
				require.Equal(t, n, countRuns(t, b, prefix+"-"), tc.name)
			}
		}
	})

	// RunsInOrder: every run of a batch completes, and the handles come
	// in the order of the items.
	t.Run("RunsInOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, wf, q := batchEngine(t, b, nil, false)
		ctx := ctxT(t)
		hs, err := wf.EnqueueMany(ctx, q, doubles(300, func(i int) *durable.EnqueueOpts {
			return &durable.EnqueueOpts{Priority: -i} // the last first: the order of the handles is the items'
		}))
		require.NoError(t, err)
		require.Len(t, hs, 300)
		for i, h := range hs {
			v, err := h.Result(ctx)
			require.NoError(t, err)
			require.Equal(t, 2*i, v)
		}

		// An existing ID with the same input gives that run; with another
		// input too under AcceptDifferentInput.
		hs2, err := wf.EnqueueMany(ctx, q, []durable.EnqueueItem[int]{
			{Input: 7, Opts: &durable.EnqueueOpts{ID: hs[7].ID()}},
			{Input: 99, Opts: &durable.EnqueueOpts{ID: hs[8].ID(), AcceptDifferentInput: true}},
			{Input: 5},
		})
		require.NoError(t, err)
		require.Equal(t, hs[7].ID(), hs2[0].ID())
		require.Equal(t, hs[8].ID(), hs2[1].ID())
		for i, want := range []int{14, 16, 10} {
			v, err := hs2[i].Result(ctx)
			require.NoError(t, err)
			require.Equal(t, want, v)
		}

		// Nothing to do: no statement, no handle.
		hs, err = wf.EnqueueMany(ctx, q, nil)
		require.NoError(t, err)
		require.Nil(t, hs)
	})

	// AllOrNothing: an item refused after the insert fails the batch, and
	// no run of it is left: a batch of its own rolls back; in the caller's
	// transaction the caller rolls back, or commits a batch that passed.
	t.Run("AllOrNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, wf, q := batchEngine(t, b, nil, true)
		ctx := ctxT(t)
		_, err := wf.Enqueue(ctx, q, 1, &durable.EnqueueOpts{ID: "a-007"})
		require.NoError(t, err)
		items := doubles(10, withIDs("a")) // item 7 has ID a-007 and input 7

		_, err = wf.EnqueueMany(ctx, q, items)
		var conflict *durable.ConflictError
		require.ErrorAs(t, err, &conflict)
		require.Equal(t, "a-007", conflict.WorkflowID)
		require.ErrorIs(t, err, durable.ErrInputMismatch)
		var itemErr *durable.BatchItemError
		require.ErrorAs(t, err, &itemErr)
		require.Equal(t, 7, itemErr.Index)
		require.Contains(t, err.Error(), "EnqueueMany item 7")
		require.Equal(t, 1, countRuns(t, b, "a-"), "only the run that was there")

		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = wf.EnqueueManyTx(ctx, tx, q, items)
		require.ErrorAs(t, err, &conflict)
		require.ErrorAs(t, err, &itemErr)
		require.Equal(t, "EnqueueManyTx", itemErr.Op)
		require.NoError(t, tx.Rollback(ctx))
		require.Equal(t, 1, countRuns(t, b, "a-"))

		items[7].Input = 1 // the existing run's input: it is that run
		tx, err = b.pool.Begin(ctx)
		require.NoError(t, err)
		hs, err := wf.EnqueueManyTx(ctx, tx, q, items)
		require.NoError(t, err)
		require.Equal(t, 1, countRuns(t, b, "a-"), "nothing before the commit")
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, 10, countRuns(t, b, "a-"))
		require.NoError(t, q.Resume(ctx))
		for i, h := range hs {
			require.Equal(t, fmt.Sprintf("a-%03d", i), h.ID())
			v, err := h.Result(ctx)
			require.NoError(t, err)
			require.Equal(t, 2*items[i].Input, v)
		}
	})

	// Validation: a bad item fails the batch before any statement (the
	// context is cancelled: a statement would fail with that instead),
	// naming the item.
	t.Run("Validation", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		e, wf, q := batchEngine(t, b, nil, true)
		dead, cancel := context.WithCancel(context.Background())
		cancel()
		bad := func(i int, opts *durable.EnqueueOpts) []durable.EnqueueItem[int] {
			items := doubles(6, withIDs("v"))
			items[i].Opts = opts
			return items
		}
		for _, tc := range []struct {
			name  string
			items []durable.EnqueueItem[int]
			index int
			is    error
			msg   string
		}{
			{"negative timeout", bad(3, &durable.EnqueueOpts{Timeout: -time.Second}), 3, durable.ErrInvalidArgument, "Timeout"},
			{"priority", bad(2, &durable.EnqueueOpts{Priority: 1 << 40}), 2, durable.ErrInvalidArgument, "Priority"},
			{"bad ID", bad(1, &durable.EnqueueOpts{ID: "a\x00b"}), 1, durable.ErrInvalidArgument, "workflow ID"},
			{"bad dedup ID", bad(4, &durable.EnqueueOpts{DedupID: strings.Repeat("d", 300)}), 4, durable.ErrInvalidArgument, "dedup ID"},
			{"same ID twice", bad(5, &durable.EnqueueOpts{ID: "v-002"}), 5, durable.ErrInvalidArgument, `"v-002" is also item 2's`},
		} {
			_, err := wf.EnqueueMany(dead, q, tc.items)
			require.ErrorIs(t, err, tc.is, tc.name)
			var itemErr *durable.BatchItemError
			require.ErrorAs(t, err, &itemErr, tc.name)
			require.Equal(t, tc.index, itemErr.Index, tc.name)
			require.ErrorContains(t, err, fmt.Sprintf("durable: EnqueueMany item %d: invalid argument: ", tc.index), tc.name)
			require.ErrorContains(t, err, tc.msg, tc.name)
		}

		ctx := ctxT(t)
		_, err := wf.EnqueueMany(ctx, e.QueueRef("nowhere"), doubles(3, nil))
		require.ErrorIs(t, err, durable.ErrQueueNotFound)
		_, err = wf.EnqueueMany(ctx, nil, doubles(3, nil))
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		_, err = wf.EnqueueManyTx(ctx, nil, q, doubles(3, nil))
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		_, err = wf.EnqueueMany(dead, q, doubles(durable.BatchMaxItems+1, nil))
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		require.ErrorContains(t, err, "BatchMaxItems")
		hs, err := wf.EnqueueMany(dead, q, nil)
		require.NoError(t, err, "an empty batch sends nothing")
		require.Nil(t, hs)
		require.Zero(t, countRuns(t, b, ""), "nothing written")
	})

	// OversizeInput: an input over MaxPayloadBytes fails the batch as a
	// single enqueue of it would, naming the item.
	t.Run("OversizeInput", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var wf *durable.Workflow[string, int]
		var q *durable.Queue
		b.engine(t, func(c *durable.Config) { c.MaxPayloadBytes = 100 }, func(e *durable.Engine) {
			q = durable.RegisterQueue(e, "q", nil)
			wf = durable.Register(e, "s", func(wctx durable.Context, in string) (int, error) { return len(in), nil }, nil)
		})
		items := []durable.EnqueueItem[string]{{Input: "a"}, {Input: "b"}, {Input: strings.Repeat("x", 200)}, {Input: "c"}}
		_, err := wf.EnqueueMany(ctxT(t), q, items)
		require.ErrorIs(t, err, durable.ErrPayloadTooLarge)
		var itemErr *durable.BatchItemError
		require.ErrorAs(t, err, &itemErr)
		require.Equal(t, 2, itemErr.Index)
		require.Zero(t, countRuns(t, b, ""))
	})

	// Dedup: a dedup ID taken by an existing run or by an earlier item of
	// the batch, under both policies, as single enqueues in item order.
	t.Run("Dedup", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, wf, q := batchEngine(t, b, nil, true) // paused: the runs keep their dedup IDs
		ctx := ctxT(t)
		holder, err := wf.Enqueue(ctx, q, 1, &durable.EnqueueOpts{ID: "holder", DedupID: "d1"})
		require.NoError(t, err)
		existing, err := wf.Enqueue(ctx, q, 2, &durable.EnqueueOpts{ID: "existing"})
		require.NoError(t, err)
		ret := durable.DedupReturnExisting

		hs, err := wf.EnqueueMany(ctx, q, []durable.EnqueueItem[int]{
			{Input: 10, Opts: &durable.EnqueueOpts{DedupID: "d2"}},
			{Input: 11, Opts: &durable.EnqueueOpts{DedupID: "d2", OnDuplicate: ret}}, // the item before
			{Input: 12, Opts: &durable.EnqueueOpts{DedupID: "d1", OnDuplicate: ret}}, // the existing holder
			// The ID exists (without a dedup ID): that run, and d3 stays
			// free for the next item.
			{Input: 2, Opts: &durable.EnqueueOpts{ID: "existing", DedupID: "d3"}},
			{Input: 13, Opts: &durable.EnqueueOpts{ID: "d3-taker", DedupID: "d3"}},
			{Input: 14, Opts: &durable.EnqueueOpts{DedupID: "d3", OnDuplicate: ret}},
		})
		require.NoError(t, err)
		ids := make([]string, len(hs))
		for i, h := range hs {
			ids[i] = h.ID()
		}
		require.Equal(t, []string{ids[0], ids[0], holder.ID(), existing.ID(), "d3-taker", "d3-taker"}, ids)
		require.Equal(t, 4, countRuns(t, b, ""), "holder, existing, the d2 run and d3-taker")

		// The first item takes the dedup ID, whatever the order of the IDs.
		hs, err = wf.EnqueueMany(ctx, q, []durable.EnqueueItem[int]{
			{Input: 30, Opts: &durable.EnqueueOpts{ID: "z-first", DedupID: "d4"}},
			{Input: 31, Opts: &durable.EnqueueOpts{ID: "a-second", DedupID: "d4", OnDuplicate: ret}},
		})
		require.NoError(t, err)
		require.Equal(t, []string{"z-first", "z-first"}, []string{hs[0].ID(), hs[1].ID()})

		for _, items := range [][]durable.EnqueueItem[int]{
			{{Input: 20, Opts: &durable.EnqueueOpts{ID: "r-0"}}, {Input: 21, Opts: &durable.EnqueueOpts{ID: "r-1", DedupID: "d1"}}},
			{{Input: 20, Opts: &durable.EnqueueOpts{ID: "r-0", DedupID: "d9"}}, {Input: 21, Opts: &durable.EnqueueOpts{ID: "r-1", DedupID: "d9"}}},
		} {
			_, err = wf.EnqueueMany(ctx, q, items)
			var dup *durable.DuplicateError
			require.ErrorAs(t, err, &dup)
			var itemErr *durable.BatchItemError
			require.ErrorAs(t, err, &itemErr)
			require.Equal(t, 1, itemErr.Index)
			if items[1].Opts.DedupID == "d1" {
				require.Equal(t, "holder", dup.ExistingID)
			} else {
				require.Equal(t, "r-0", dup.ExistingID, "the earlier item")
			}
			require.Zero(t, countRuns(t, b, "r-"), "nothing of the batch")
		}
	})

	// SameRows: a client's batch writes the rows an engine's batch
	// writes, and those a single enqueue writes; each commit sends one
	// notification.
	t.Run("SameRows", func(t *testing.T) {
		t.Parallel()
		pgtest.SkipIfPooled(t, "no LISTEN through a pooler in transaction mode")
		b := setup(t)
		ctx := ctxT(t)
		e, err := durable.New(b.pool, b.cfg) // never launched: the Tx twins need no executor
		require.NoError(t, err)
		wf := durable.Register(e, "w", func(wctx durable.Context, in map[string]int) (int, error) { return 0, nil }, nil)
		c := b.client(t, nil)
		require.NoError(t, c.DeclareQueue(ctx, "q", nil))
		ref := durable.ClientWorkflow[map[string]int, int](c, "w")
		notified := listenBatch(t, b)

		in := map[string]int{"a": 1}
		notBefore := time.Now().Add(time.Hour).Truncate(time.Second)
		opts := func(id string) *durable.EnqueueOpts {
			return &durable.EnqueueOpts{ID: id, Priority: 2, DedupID: id, PartitionKey: "p", NotBefore: notBefore, Timeout: time.Hour}
		}
		start := func(id string) *durable.StartOpts { return &durable.StartOpts{ID: id, Timeout: time.Hour} }
		inTx := func(write func(tx pgx.Tx) error) {
			t.Helper()
			require.NoError(t, pgx.BeginFunc(ctx, b.pool, write))
		}
		inTx(func(tx pgx.Tx) error {
			_, err := wf.EnqueueTx(ctx, tx, e.QueueRef("q"), in, opts("single"))
			if err == nil {
				_, err = wf.StartTx(ctx, tx, in, start("single-start"))
			}
			return err
		})
		require.ElementsMatch(t, []string{"q:q", "n:single-start"}, notified())
		inTx(func(tx pgx.Tx) error {
			_, err := wf.EnqueueManyTx(ctx, tx, e.QueueRef("q"), []durable.EnqueueItem[map[string]int]{
				{Input: in, Opts: opts("engine-1")}, {Input: in, Opts: opts("engine-2")}})
			if err == nil {
				_, err = wf.StartManyTx(ctx, tx, []durable.StartItem[map[string]int]{
					{Input: in, Opts: start("engine-start-1")}, {Input: in, Opts: start("engine-start-2")}})
			}
			return err
		})
		require.ElementsMatch(t, []string{"q:q", "n:engine-start-1"}, notified(), "one notification per batch")
		inTx(func(tx pgx.Tx) error {
			_, err := ref.EnqueueManyTx(ctx, tx, "q", []durable.EnqueueItem[map[string]int]{{Input: in, Opts: opts("client-1")}})
			if err == nil {
				_, err = ref.StartManyTx(ctx, tx, []durable.StartItem[map[string]int]{{Input: in, Opts: start("client-start-1")}})
			}
			return err
		})
		require.ElementsMatch(t, []string{"q:q", "n:client-start-1"}, notified())

		row := func(id string) map[string]any {
			t.Helper()
			rows, err := b.pool.Query(ctx, fmt.Sprintf(`SELECT name, status, app_version, executor_id, epoch, recovery_attempts,
	notify, parent_id, input::text, output, error, queue_name, priority, partition_key, dedup_id = id AS dedup, not_before,
	deadline IS NOT NULL AS deadline, started_at, wake_at, wait_topic, trace_context, rate_start
FROM %s.workflows WHERE id = $1`, b.schema), id)
			require.NoError(t, err)
			m, err := pgx.CollectExactlyOneRow(rows, pgx.RowToMap)
			require.NoError(t, err, id)
			return m
		}
		for _, id := range []string{"engine-1", "engine-2", "client-1"} {
			require.Equal(t, row("single"), row(id), id)
		}
		for _, id := range []string{"engine-start-1", "engine-start-2", "client-start-1"} {
			require.Equal(t, row("single-start"), row(id), id)
		}
	})
}

// slowEngine launches an engine on b, with workflow "double" and
// queue "q", that neither polls nor sweeps within a test's time: only a
// wake-up starts its runs. With pollOnly it hears no notification either.
// register, if not nil, registers more.
func slowEngine(t *testing.T, b *bundle, pollOnly bool, register func(*durable.Engine)) (*durable.Workflow[int, int], *durable.Queue) {
	t.Helper()
	var wf *durable.Workflow[int, int]
	var q *durable.Queue
	b.engine(t, func(c *durable.Config) {
		c.PollOnly, c.PollInterval, c.LeaseTTL = pollOnly, 10*time.Minute, 10*time.Minute
	}, func(e *durable.Engine) {
		q = durable.RegisterQueue(e, "q", nil)
		wf = durable.Register(e, "double", func(wctx durable.Context, in int) (int, error) { return 2 * in, nil }, nil)
		if register != nil {
			register(e)
		}
	})
	return wf, q
}

// requireResults waits at most 20s for each handle's result, 2*i for
// input i.
func requireResults[H interface {
	Result(context.Context) (int, error)
}](t *testing.T, hs []H, inputs ...int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, h := range hs {
		v, err := h.Result(ctx)
		require.NoError(t, err, "run %d", i)
		require.Equal(t, 2*inputs[i], v)
	}
}

// TestStartManyEnqueueManyWokenAtOnce: the runs of a batch start at
// once, not at the next poll: an engine's batch wakes its own dispatcher
// or sweeper (even polling only), a client's batch the engines.
func TestStartManyEnqueueManyWokenAtOnce(t *testing.T) {
	t.Parallel()
	items := []durable.EnqueueItem[int]{{Input: 1}, {Input: 2}}
	starts := []durable.StartItem[int]{{Input: 1}, {Input: 2}}

	t.Run("PollOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := ctxT(t)
		// A run queued before the launch, which the first dispatch claims
		// and which holds until the test ends: once it runs, that dispatch
		// is over, and only a wake-up makes another.
		c := b.client(t, func(c *durable.ClientConfig) { c.PollOnly = true })
		require.NoError(t, c.DeclareQueue(ctx, "q", nil))
		_, err := c.Enqueue(ctx, "hold", "q", 0, nil)
		require.NoError(t, err)
		started, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		wf, q := slowEngine(t, b, true, func(e *durable.Engine) {
			durable.Register(e, "hold", func(wctx durable.Context, in int) (int, error) {
				once.Do(func() { close(started) })
				<-release
				return 0, nil
			}, nil)
		})
		t.Cleanup(func() { close(release) }) // before the engine's shutdown
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("the first dispatch claimed nothing")
		}
		hs, err := wf.EnqueueMany(ctx, q, items)
		require.NoError(t, err)
		requireResults(t, hs, 1, 2)
		hs, err = wf.StartMany(ctx, starts)
		require.NoError(t, err)
		requireResults(t, hs, 1, 2)
	})

	t.Run("Notified", func(t *testing.T) {
		t.Parallel()
		pgtest.SkipIfPooled(t, "no LISTEN through a pooler in transaction mode")
		b := setup(t)
		slowEngine(t, b, false, nil)
		ref := durable.ClientWorkflow[int, int](b.client(t, nil), "double")
		ctx := ctxT(t)
		hs, err := ref.EnqueueMany(ctx, "q", items)
		require.NoError(t, err)
		requireResults(t, hs, 1, 2)
		hs, err = ref.StartMany(ctx, starts)
		require.NoError(t, err)
		requireResults(t, hs, 1, 2)
	})
}

// listenBatch returns a function that returns the notifications of b's
// schema committed since its last call.
func listenBatch(t *testing.T, b *bundle) func() []string {
	t.Helper()
	ctx := ctxT(t)
	listen, err := pgx.Connect(ctx, pgtest.URL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = listen.Close(context.Background()) })
	channel := pgx.Identifier{"durable:" + b.schema}.Sanitize()
	_, err = listen.Exec(ctx, "LISTEN "+channel)
	require.NoError(t, err)
	seq := 0
	return func() []string {
		t.Helper()
		// A marker sent now arrives after every notification committed
		// before it.
		seq++
		marker := fmt.Sprintf("x:%d", seq)
		_, err := b.pool.Exec(ctx, "SELECT pg_notify($1, $2)", "durable:"+b.schema, marker)
		require.NoError(t, err)
		var got []string
		for {
			n, err := listen.WaitForNotification(ctx)
			require.NoError(t, err)
			if n.Payload == marker {
				return got
			}
			got = append(got, n.Payload)
		}
	}
}

// TestStartMany covers batch starts: the runs are claimed by the
// executors and finish; all or nothing; validation.
func TestStartMany(t *testing.T) {
	t.Parallel()

	startItems := func(prefix string, n int) []durable.StartItem[int] {
		items := make([]durable.StartItem[int], n)
		for i := range items {
			items[i] = durable.StartItem[int]{Input: i, Opts: &durable.StartOpts{ID: fmt.Sprintf("%s-%03d", prefix, i)}}
		}
		return items
	}

	// ClaimedAndFinished: the runs of an engine's batch and of a
	// client's are claimed by the engine and finish; the handles come in
	// the order of the items.
	t.Run("ClaimedAndFinished", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, wf, _ := batchEngine(t, b, nil, false)
		ctx := ctxT(t)
		hs, err := wf.StartMany(ctx, startItems("s", 200))
		require.NoError(t, err)
		c := b.client(t, nil)
		chs, err := durable.ClientWorkflow[int, int](c, "double").StartMany(ctx, startItems("c", 50))
		require.NoError(t, err)
		for i, h := range hs {
			require.Equal(t, fmt.Sprintf("s-%03d", i), h.ID())
			v, err := h.Result(ctx)
			require.NoError(t, err)
			require.Equal(t, 2*i, v)
		}
		for i, h := range chs {
			v, err := h.Result(ctx)
			require.NoError(t, err)
			require.Equal(t, 2*i, v)
		}

		// The same IDs and inputs again: the same runs.
		again, err := wf.StartMany(ctx, startItems("s", 3))
		require.NoError(t, err)
		require.Equal(t, hs[2].ID(), again[2].ID())
	})

	// AllOrNothing: an ID of another input fails the batch, and no run of
	// it is left; in the caller's transaction the caller rolls back, or
	// commits a batch that passed, whose runs then start.
	t.Run("AllOrNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, wf, _ := batchEngine(t, b, nil, false)
		ctx := ctxT(t)
		first, err := wf.StartMany(ctx, []durable.StartItem[int]{{Input: 100, Opts: &durable.StartOpts{ID: "a-004"}}})
		require.NoError(t, err)
		_, err = first[0].Result(ctx)
		require.NoError(t, err)
		items := startItems("a", 8) // item 4: ID a-004, input 4

		_, err = wf.StartMany(ctx, items)
		require.ErrorIs(t, err, durable.ErrInputMismatch)
		var itemErr *durable.BatchItemError
		require.ErrorAs(t, err, &itemErr)
		require.Equal(t, 4, itemErr.Index)
		require.ErrorContains(t, err, "StartMany item 4")
		require.Equal(t, 1, countRuns(t, b, "a-"))

		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = wf.StartManyTx(ctx, tx, items)
		require.ErrorIs(t, err, durable.ErrInputMismatch)
		require.NoError(t, tx.Rollback(ctx))
		require.Equal(t, 1, countRuns(t, b, "a-"))

		items[4].Opts.AcceptDifferentInput = true
		tx, err = b.pool.Begin(ctx)
		require.NoError(t, err)
		hs, err := wf.StartManyTx(ctx, tx, items)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		for i, h := range hs {
			v, err := h.Result(ctx)
			require.NoError(t, err)
			if i == 4 {
				require.Equal(t, 200, v, "the existing run")
			} else {
				require.Equal(t, 2*i, v)
			}
		}
	})

	// Validation: a bad item fails the batch before any statement, naming
	// the item.
	t.Run("Validation", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, wf, _ := batchEngine(t, b, nil, false)
		dead, cancel := context.WithCancel(context.Background())
		cancel()
		items := startItems("v", 5)
		items[3].Opts.Timeout = -time.Second
		_, err := wf.StartMany(dead, items)
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		require.ErrorContains(t, err, "durable: StartMany item 3: invalid argument: StartOpts.Timeout")
		items = startItems("v", 5)
		items[4].Opts.ID = "v-001"
		_, err = wf.StartMany(dead, items)
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		require.ErrorContains(t, err, `StartMany item 4: invalid argument: workflow ID "v-001" is also item 1's`)
		_, err = wf.StartMany(dead, make([]durable.StartItem[int], durable.BatchMaxItems+1))
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		hs, err := wf.StartMany(dead, nil)
		require.NoError(t, err)
		require.Nil(t, hs)
		_, err = wf.StartManyTx(dead, nil, items)
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		require.Zero(t, countRuns(t, b, ""))
	})
}
