package durable_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
)

// clientConfig is a client's config on the bundle's schema, set up for a
// pooler in transaction mode when the tests run through one.
func (b *bundle) clientConfig() *durable.ClientConfig {
	c := &durable.ClientConfig{Schema: b.schema, AppVersion: b.cfg.AppVersion, PollInterval: time.Second}
	if pgtest.Pooled() {
		c.PollOnly = true
		c.PollInterval = min(c.PollInterval, 50*time.Millisecond)
	}
	return c
}

// client makes a client on a pool of its own (a process of its own, as
// far as the database can tell), with mutate applied to its config.
func (b *bundle) client(t *testing.T, mutate func(*durable.ClientConfig)) *durable.Client {
	t.Helper()
	cfg := b.clientConfig()
	if mutate != nil {
		mutate(cfg)
	}
	c, err := durable.NewClient(pgtest.Pool(t), cfg)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// clientEngine launches an engine with the workflows the client tests
// start by name: greet, chat (sets event "ready" to its input, then
// sets event "got" to the message it receives on topic "in" and returns
// it) and fail, and the queue "jobs".
func clientEngine(t *testing.T, b *bundle, mutate func(*durable.Config)) *durable.Engine {
	return b.engine(t, mutate, func(e *durable.Engine) {
		durable.Register(e, "greet", func(wctx durable.Context, in string) (string, error) {
			return "hello " + in, nil
		}, nil)
		durable.Register(e, "chat", func(wctx durable.Context, in int) (string, error) {
			if err := durable.SetEvent(wctx, "ready", in); err != nil {
				return "", err
			}
			msg, ok, err := durable.Recv[string](wctx, "in", 25*time.Second) // below ParkThreshold: waits in memory
			if err != nil || !ok {
				return "no message", err
			}
			return msg, durable.SetEvent(wctx, "got", msg)
		}, nil)
		durable.Register(e, "fail", func(wctx durable.Context, in string) (string, error) {
			return "", durable.Permanent(errors.New(in))
		}, nil)
		durable.RegisterQueue(e, "jobs", nil)
	})
}

// TestClient: a Client submits, enqueues, sends and waits by workflow name,
// without registering the function or launching an engine.
func TestClient(t *testing.T) {
	t.Parallel()

	// RunsOnEngine: a client, with none of the workflows' code,
	// starts, enqueues, messages, waits for and reads the events of runs that
	// an engine executes, by name and typed.
	t.Run("RunsOnEngine", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		clientEngine(t, b, nil)
		c := b.client(t, nil)
		ctx := ctxT(t)

		greet := durable.ClientWorkflow[string, string](c, "greet")
		require.Equal(t, "greet", greet.Name())
		h, err := greet.Start(ctx, "ada", nil)
		require.NoError(t, err)
		out, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "hello ada", out)
		st, err := h.Status(ctx)
		require.NoError(t, err)
		require.Equal(t, durable.StatusSuccess, st)

		// By name, with the output as JSON.
		id, err := c.Start(ctx, "greet", "bob", &durable.StartOpts{ID: "greet-bob"})
		require.NoError(t, err)
		require.Equal(t, "greet-bob", id)
		raw, err := c.Result(ctx, id)
		require.NoError(t, err)
		require.JSONEq(t, `"hello bob"`, string(raw))
		id, err = c.Start(ctx, "greet", "bob", &durable.StartOpts{ID: "greet-bob"})
		require.NoError(t, err, "the same ID with the same input is the same run")
		require.Equal(t, "greet-bob", id)
		_, err = c.Start(ctx, "greet", "eve", &durable.StartOpts{ID: "greet-bob"})
		require.ErrorIs(t, err, durable.ErrInputMismatch)

		// Enqueued, with the queue options.
		hq, err := greet.Enqueue(ctx, "jobs", "cy", &durable.EnqueueOpts{ID: "queued-cy", Priority: 3, PartitionKey: "p1",
			NotBefore: time.Now().Add(-time.Second), Timeout: time.Minute})
		require.NoError(t, err)
		out, err = hq.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "hello cy", out)
		var queue, partition string
		var priority int
		var hasDeadline bool
		require.NoError(t, b.pool.QueryRow(ctx, fmt.Sprintf(`SELECT queue_name, priority, partition_key, deadline IS NOT NULL
FROM %s.workflows WHERE id = 'queued-cy'`, b.schema)).Scan(&queue, &priority, &partition, &hasDeadline))
		require.Equal(t, []any{"jobs", 3, "p1", true}, []any{queue, priority, partition, hasDeadline})

		// Events and messages.
		chat := durable.ClientWorkflow[int, string](c, "chat")
		hc, err := chat.Start(ctx, 7, nil)
		require.NoError(t, err)
		ev, ok, err := c.GetEvent(ctx, hc.ID(), "ready", 20*time.Second)
		require.NoError(t, err)
		require.True(t, ok)
		require.JSONEq(t, `7`, string(ev))
		_, ok, err = c.GetEvent(ctx, hc.ID(), "never", 0)
		require.NoError(t, err)
		require.False(t, ok)
		require.NoError(t, c.Send(ctx, hc.ID(), "in", "hi there", nil))
		out, err = hc.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "hi there", out)
		require.ErrorIs(t, c.Send(ctx, hc.ID(), "in", "late", nil), durable.ErrWorkflowFinished)

		// A failure comes back as recorded.
		hf, err := durable.ClientWorkflow[string, string](c, "fail").Start(ctx, "out of stock", nil)
		require.NoError(t, err)
		_, err = hf.Result(ctx)
		require.ErrorIs(t, err, durable.ErrPermanent)
		require.ErrorContains(t, err, "out of stock")
		_, err = c.Result(ctx, hf.ID())
		require.ErrorIs(t, err, durable.ErrPermanent)

		// Handles check the workflow.
		_, err = greet.Handle(ctx, hc.ID())
		require.ErrorIs(t, err, durable.ErrWorkflowConflict)
		_, err = greet.Handle(ctx, "no-such-run")
		require.ErrorIs(t, err, durable.ErrWorkflowNotFound)
		again, err := greet.Handle(ctx, "greet-bob")
		require.NoError(t, err)
		out, err = again.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "hello bob", out)
		_, err = c.Result(ctx, "no-such-run")
		require.ErrorIs(t, err, durable.ErrWorkflowNotFound)
	})

	// BadInput: bad input to a client gets a typed error naming what
	// is wrong, and writes nothing.
	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := ctxT(t)
		require.NoError(t, durable.Migrate(ctx, b.pool, b.schema))

		_, err := durable.NewClient(nil, nil)
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		for field, cfg := range map[string]*durable.ClientConfig{
			"Schema":          {Schema: "no spaces allowed"},
			"AppVersion":      {AppVersion: strings.Repeat("v", 300)},
			"MaxPayloadBytes": {MaxPayloadBytes: -1},
			"PollInterval":    {PollInterval: -time.Second},
		} {
			_, err := durable.NewClient(b.pool, cfg)
			require.ErrorIs(t, err, durable.ErrInvalidArgument, field)
			require.ErrorContains(t, err, "ClientConfig."+field)
		}

		c := b.client(t, func(c *durable.ClientConfig) { c.MaxPayloadBytes = 64 })
		require.NoError(t, c.DeclareQueue(ctx, "q", nil))
		bad := func(what, field string, err error) {
			t.Helper()
			require.ErrorIs(t, err, durable.ErrInvalidArgument, what)
			require.ErrorContains(t, err, field, what)
		}
		_, err = c.Start(ctx, "", 1, nil)
		bad("empty name", "workflow name", err)
		_, err = c.Start(ctx, "w", 1, &durable.StartOpts{ID: "a\x00b"})
		bad("NUL in ID", "workflow ID", err)
		_, err = c.Start(ctx, "w", make(chan int), nil)
		bad("unencodable input", "input of workflow", err)
		_, err = c.Start(ctx, "w", 1, &durable.StartOpts{Timeout: -time.Second})
		bad("negative timeout", "Timeout", err)
		_, err = c.Start(ctx, "w", strings.Repeat("x", 100), nil)
		require.ErrorIs(t, err, durable.ErrPayloadTooLarge)
		_, err = c.StartTx(ctx, nil, "w", 1, nil)
		bad("no transaction", "StartTx", err)

		_, err = c.Enqueue(ctx, "w", "", 1, nil)
		bad("empty queue", "queue name", err)
		_, err = c.Enqueue(ctx, "w", "q", 1, &durable.EnqueueOpts{Priority: 1 << 40})
		bad("priority", "Priority", err)
		_, err = c.Enqueue(ctx, "w", "q", 1, &durable.EnqueueOpts{DedupID: "a\x00"})
		bad("dedup ID", "dedup ID", err)
		_, err = c.Enqueue(ctx, "w", "q", 1, &durable.EnqueueOpts{PartitionKey: strings.Repeat("k", 300)})
		bad("partition key", "partition key", err)
		_, err = c.Enqueue(ctx, "w", "q", 1, &durable.EnqueueOpts{Timeout: -1})
		bad("negative timeout", "Timeout", err)
		_, err = c.EnqueueTx(ctx, nil, "w", "q", 1, nil)
		bad("no transaction", "EnqueueTx", err)

		// A queue nobody declared: the error names it and how to declare it.
		_, err = c.Enqueue(ctx, "w", "undeclared", 1, nil)
		require.ErrorIs(t, err, durable.ErrQueueNotFound)
		require.ErrorContains(t, err, `"undeclared"`)
		require.ErrorContains(t, err, "DeclareQueue")

		bad("empty topic", "topic", c.Send(ctx, "some-run", "", 1, nil))
		bad("no transaction", "SendTx", c.SendTx(ctx, nil, "some-run", "t", 1, nil))
		require.ErrorIs(t, c.Send(ctx, "some-run", "t", 1, nil), durable.ErrWorkflowNotFound)
		_, _, err = c.GetEvent(ctx, "some-run", "k", -time.Second)
		bad("negative timeout", "timeout", err)
		_, _, err = c.GetEvent(ctx, "some-run", "", 0)
		bad("empty key", "event key", err)
		_, err = c.Status(ctx, "")
		bad("empty ID", "workflow ID", err)
		_, err = c.Result(ctx, "some-run")
		require.ErrorIs(t, err, durable.ErrWorkflowNotFound)

		bad("queue limits", "GlobalConcurrency", c.DeclareQueue(ctx, "q2", &durable.QueueOpts{GlobalConcurrency: -1}))
		bad("rate", "RatePeriod", c.DeclareQueue(ctx, "q2", &durable.QueueOpts{RateLimit: 3}))
		bad("queue name", "queue name", c.DeclareQueue(ctx, "", nil))

		var n int
		require.NoError(t, b.pool.QueryRow(ctx, fmt.Sprintf("SELECT (SELECT count(*) FROM %[1]s.workflows) + (SELECT count(*) FROM %[1]s.queues)",
			b.schema)).Scan(&n))
		require.Equal(t, 1, n, "nothing written but queue q")

		// A schema no engine migrated: the error says so.
		other := b.client(t, func(c *durable.ClientConfig) { c.Schema = "never_migrated_here" })
		_, err = other.Start(ctx, "w", 1, nil)
		require.ErrorContains(t, err, "migrated")
	})

	// Transactions: StartTx, EnqueueTx and SendTx commit and roll
	// back with the caller's transaction.
	t.Run("Transactions", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		clientEngine(t, b, nil)
		c := b.client(t, nil)
		ctx := ctxT(t)
		_, err := b.pool.Exec(ctx, fmt.Sprintf("CREATE TABLE %s.orders (id text)", b.schema))
		require.NoError(t, err)
		insertOrder := func(tx pgx.Tx, id string) {
			_, err := tx.Exec(ctx, fmt.Sprintf("INSERT INTO %s.orders VALUES ($1)", b.schema), id)
			require.NoError(t, err)
		}
		greet := durable.ClientWorkflow[string, string](c, "greet")

		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		insertOrder(tx, "rolled")
		_, err = greet.StartTx(ctx, tx, "x", &durable.StartOpts{ID: "started-rolled"})
		require.NoError(t, err)
		_, err = greet.EnqueueTx(ctx, tx, "jobs", "x", &durable.EnqueueOpts{ID: "queued-rolled"})
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))
		for _, id := range []string{"started-rolled", "queued-rolled"} {
			_, err = c.Status(ctx, id)
			require.ErrorIs(t, err, durable.ErrWorkflowNotFound, id)
		}

		tx, err = b.pool.Begin(ctx)
		require.NoError(t, err)
		insertOrder(tx, "kept")
		hs, err := greet.StartTx(ctx, tx, "started", &durable.StartOpts{ID: "started-kept"})
		require.NoError(t, err)
		id, err := c.EnqueueTx(ctx, tx, "greet", "jobs", "queued", &durable.EnqueueOpts{ID: "queued-kept"})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		out, err := hs.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "hello started", out)
		raw, err := c.Result(ctx, id)
		require.NoError(t, err)
		require.JSONEq(t, `"hello queued"`, string(raw))

		// A message sent in a transaction that rolls back is never received.
		hc, err := durable.ClientWorkflow[int, string](c, "chat").Start(ctx, 1, nil)
		require.NoError(t, err)
		_, ok, err := c.GetEvent(ctx, hc.ID(), "ready", 20*time.Second)
		require.NoError(t, err)
		require.True(t, ok)
		tx, err = b.pool.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, c.SendTx(ctx, tx, hc.ID(), "in", "rolled back", nil))
		require.NoError(t, tx.Rollback(ctx))
		tx, err = b.pool.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, c.SendTx(ctx, tx, hc.ID(), "in", "committed", nil))
		require.NoError(t, tx.Commit(ctx))
		out, err = hc.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "committed", out)
	})

	// Dedup: a dedup ID given to a client's enqueue admits one queued
	// or running run at a time.
	t.Run("Dedup", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := ctxT(t)
		require.NoError(t, durable.Migrate(ctx, b.pool, b.schema))
		c := b.client(t, nil)
		require.NoError(t, c.DeclareQueue(ctx, "held", nil)) // no executor works it: runs stay queued

		first, err := c.Enqueue(ctx, "report", "held", "2026-05-01", &durable.EnqueueOpts{DedupID: "report-may"})
		require.NoError(t, err)
		_, err = c.Enqueue(ctx, "report", "held", "2026-05-01", &durable.EnqueueOpts{DedupID: "report-may"})
		var dup *durable.DuplicateError
		require.ErrorAs(t, err, &dup)
		require.ErrorIs(t, err, durable.ErrDuplicate)
		require.Equal(t, durable.DuplicateError{Queue: "held", DedupID: "report-may", ExistingID: first}, *dup)
		h, err := durable.ClientWorkflow[string, string](c, "report").Enqueue(ctx, "held", "other input",
			&durable.EnqueueOpts{DedupID: "report-may", OnDuplicate: durable.DedupReturnExisting})
		require.NoError(t, err)
		require.Equal(t, first, h.ID())
		other, err := c.Enqueue(ctx, "report", "held", "2026-06-01", &durable.EnqueueOpts{DedupID: "report-june"})
		require.NoError(t, err)
		require.NotEqual(t, first, other)
		st, err := c.Status(ctx, first)
		require.NoError(t, err)
		require.Equal(t, durable.StatusEnqueued, st)
	})

	// DeclareQueue: a queue a client declares takes enqueues before
	// any executor works it; the first executor that declares it keeps its
	// limits (here against other limits in its code), and a queue declared
	// without limits takes those of the first executor.
	t.Run("DeclareQueue", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := ctxT(t)
		require.NoError(t, durable.Migrate(ctx, b.pool, b.schema))
		c := b.client(t, nil)
		limits := &durable.QueueOpts{GlobalConcurrency: 1, RateLimit: 100, RatePeriod: time.Second}
		require.NoError(t, c.DeclareQueue(ctx, "one-at-a-time", limits))
		require.NoError(t, c.DeclareQueue(ctx, "one-at-a-time", &durable.QueueOpts{GlobalConcurrency: 9}), "declaring again changes nothing")
		require.NoError(t, c.DeclareQueue(ctx, "open", nil))

		var ids []string
		for i := range 4 {
			id, err := c.Enqueue(ctx, "slow", "one-at-a-time", i, nil)
			require.NoError(t, err)
			ids = append(ids, id)
		}

		var running, most atomic.Int32
		eng := b.engine(t, nil, func(e *durable.Engine) {
			durable.RegisterQueue(e, "one-at-a-time", &durable.QueueOpts{GlobalConcurrency: 5})
			durable.RegisterQueue(e, "open", &durable.QueueOpts{WorkerConcurrency: 3})
			durable.Register(e, "slow", func(wctx durable.Context, in int) (int, error) {
				return durable.Step(wctx, "work", func(context.Context) (int, error) {
					n := running.Add(1)
					defer running.Add(-1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(20 * time.Millisecond)
					return in * 2, nil
				}, nil)
			}, nil)
		})
		st, err := eng.QueueRef("one-at-a-time").Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, *limits, st.Settings, "the first executor keeps the declared limits")
		st, err = eng.QueueRef("open").Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, durable.QueueOpts{WorkerConcurrency: 3}, st.Settings, "the executor sets the limits of a queue declared without")

		for i, id := range ids {
			raw, err := c.Result(ctx, id)
			require.NoError(t, err)
			require.JSONEq(t, fmt.Sprint(i*2), string(raw))
		}
		require.EqualValues(t, 1, most.Load(), "the declared global limit held")
	})

	// SameRowsAndNotifications: a client's start and enqueue write
	// the rows an engine's StartTx and EnqueueTx write, and send the same
	// notifications on commit.
	t.Run("SameRowsAndNotifications", func(t *testing.T) {
		t.Parallel()
		pgtest.SkipIfPooled(t, "no LISTEN through a pooler in transaction mode")
		b := setup(t)
		ctx := ctxT(t)
		require.NoError(t, durable.Migrate(ctx, b.pool, b.schema))
		e, err := durable.New(b.pool, b.cfg) // never launched: StartTx and EnqueueTx need no executor
		require.NoError(t, err)
		wf := durable.Register(e, "w", func(wctx durable.Context, in map[string]int) (int, error) { return 0, nil }, nil)
		c := b.client(t, nil)
		require.NoError(t, c.DeclareQueue(ctx, "q", nil))

		listen, err := pgx.Connect(ctx, pgtest.URL(t))
		require.NoError(t, err)
		defer listen.Close(context.Background())
		_, err = listen.Exec(ctx, "LISTEN "+pgx.Identifier{"durable:" + b.schema}.Sanitize())
		require.NoError(t, err)
		notified := func() []string {
			t.Helper()
			var got []string
			for {
				wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				n, err := listen.WaitForNotification(wctx)
				cancel()
				if err != nil {
					require.ErrorIs(t, err, context.DeadlineExceeded)
					return got
				}
				got = append(got, n.Payload)
			}
		}
		in := map[string]int{"a": 1}
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = wf.StartTx(ctx, tx, in, &durable.StartOpts{ID: "engine-start", Timeout: time.Hour})
		require.NoError(t, err)
		_, err = wf.EnqueueTx(ctx, tx, e.QueueRef("q"), in, &durable.EnqueueOpts{ID: "engine-queued", Priority: 2, DedupID: "e", PartitionKey: "p"})
		require.NoError(t, err)
		require.Empty(t, notified(), "nothing is notified before the commit")
		require.NoError(t, tx.Commit(ctx))
		require.ElementsMatch(t, []string{"n:engine-start", "q:q"}, notified())

		tx, err = b.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = c.StartTx(ctx, tx, "w", in, &durable.StartOpts{ID: "client-start", Timeout: time.Hour})
		require.NoError(t, err)
		_, err = c.EnqueueTx(ctx, tx, "w", "q", in, &durable.EnqueueOpts{ID: "client-queued", Priority: 2, DedupID: "c", PartitionKey: "p"})
		require.NoError(t, err)
		require.Empty(t, notified(), "nothing is notified before the commit")
		require.NoError(t, tx.Commit(ctx))
		require.ElementsMatch(t, []string{"n:client-start", "q:q"}, notified(), "the engine's notifications")

		row := func(id string) map[string]any {
			t.Helper()
			rows, err := b.pool.Query(ctx, fmt.Sprintf(`SELECT name, status, app_version, executor_id, epoch, recovery_attempts,
	notify, parent_id, input::text, output, error, queue_name, priority, partition_key, not_before, deadline IS NOT NULL AS deadline,
	started_at, wake_at, wait_topic, trace_context, rate_start
FROM %s.workflows WHERE id = $1`, b.schema), id)
			require.NoError(t, err)
			m, err := pgx.CollectExactlyOneRow(rows, pgx.RowToMap)
			require.NoError(t, err, id)
			return m
		}
		require.Equal(t, row("engine-start"), row("client-start"))
		require.Equal(t, row("engine-queued"), row("client-queued"))

		// Outside a transaction too.
		_, err = c.Start(ctx, "w", in, &durable.StartOpts{ID: "client-start-2"})
		require.NoError(t, err)
		_, err = c.Enqueue(ctx, "w", "q", in, &durable.EnqueueOpts{ID: "client-queued-2"})
		require.NoError(t, err)
		require.Equal(t, []string{"n:client-start-2", "q:q"}, notified())
	})

	// PickedUpAtOnce: an executor runs what a client starts or
	// enqueues as soon as it commits, woken by the notification: its own
	// polling (every 20s here) would take longer than the test waits.
	t.Run("PickedUpAtOnce", func(t *testing.T) {
		t.Parallel()
		pgtest.SkipIfPooled(t, "no LISTEN through a pooler in transaction mode")
		b := setup(t)
		clientEngine(t, b, func(c *durable.Config) { c.PollInterval, c.LeaseTTL = time.Minute, time.Minute })
		c := b.client(t, nil)
		ctx := ctxT(t)
		t.Cleanup(func() {
			if t.Failed() {
				t.Log(b.logs.String())
			}
		})

		// The takeover sweeper looks for unowned runs when it is woken and
		// every 20s. A run of a workflow nobody registers is reported by the
		// first pass that sees it: once it is, the sweeper has finished the
		// pass it made at Launch and sleeps until it is woken again.
		_, err := c.Start(ctx, "registered-nowhere", 1, nil)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			return strings.Contains(b.logs.String(), "workflow=registered-nowhere")
		}, 30*time.Second, 10*time.Millisecond)

		// Nothing waits for the runs (a Result would ask for a notification
		// of the finish, which wakes the executors itself): their status is
		// read until it says they ran.
		ran := func(h *durable.ClientHandle[string]) func() bool {
			return func() bool {
				st, err := h.Status(ctx)
				return err == nil && st == durable.StatusSuccess
			}
		}
		greet := durable.ClientWorkflow[string, string](c, "greet")
		h, err := greet.Start(ctx, "started", nil)
		require.NoError(t, err)
		require.Eventually(t, ran(h), 10*time.Second, 5*time.Millisecond, "the start did not wake the executor")
		out, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "hello started", out)

		h, err = greet.Enqueue(ctx, "jobs", "queued", nil)
		require.NoError(t, err)
		require.Eventually(t, ran(h), 10*time.Second, 5*time.Millisecond, "the enqueue did not wake the queue's dispatcher")
		out, err = h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "hello queued", out)
	})

	// ResultWaits: Result returns a run that finished before the
	// call at once, and one that finishes during it when its finish is
	// notified (the client polls only every minute here); the client holds a
	// LISTEN connection only while it waits.
	t.Run("ResultWaits", func(t *testing.T) {
		t.Parallel()
		pgtest.SkipIfPooled(t, "no LISTEN through a pooler in transaction mode")
		b := setup(t)
		eng := clientEngine(t, b, func(c *durable.Config) { c.PollInterval = time.Minute })
		c := b.client(t, func(c *durable.ClientConfig) { c.PollInterval = time.Minute })
		ctx := ctxT(t)
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		listening := func() int { // -1: unknown
			var n int
			if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query = $1`,
				"LISTEN "+pgx.Identifier{"durable:" + b.schema}.Sanitize()).Scan(&n); err != nil {
				return -1
			}
			return n
		}
		require.Equal(t, 1, listening(), "the engine's")

		// Finished before the call.
		id, err := c.Start(ctx, "greet", "early", nil)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			st, err := c.Status(ctx, id)
			return err == nil && st == durable.StatusSuccess
		}, 20*time.Second, 5*time.Millisecond)
		raw, err := c.Result(wctx, id)
		require.NoError(t, err)
		require.JSONEq(t, `"hello early"`, string(raw))
		require.Equal(t, 1, listening(), "starts, status reads and a finished run's result need no LISTEN")

		// Set and finishing during the calls: the run waits for a message,
		// sent once the client's GetEvent and Result wait.
		chat := durable.ClientWorkflow[int, string](c, "chat")
		h, err := chat.Start(ctx, 1, nil)
		require.NoError(t, err)
		gotEvent, gotResult := make(chan error, 1), make(chan error, 1)
		go func() {
			v, ok, err := c.GetEvent(wctx, h.ID(), "got", 20*time.Second)
			if err == nil && (!ok || string(v) != `"late"`) {
				err = fmt.Errorf("event %s, %v", v, ok)
			}
			gotEvent <- err
		}()
		// The client listens once a wait found nothing: GetEvent waits.
		require.Eventually(t, func() bool { return listening() == 2 }, 20*time.Second, 5*time.Millisecond)
		go func() {
			out, err := h.Result(wctx)
			if err == nil && out != "late" {
				err = fmt.Errorf("result %q", out)
			}
			gotResult <- err
		}()
		require.Eventually(t, func() bool { return watched(b, h.ID()) }, 20*time.Second, 5*time.Millisecond)
		require.NoError(t, durable.Send(ctx, eng, h.ID(), "in", "late", nil))
		require.NoError(t, <-gotEvent, "the event did not wake the client")
		require.NoError(t, <-gotResult, "the finish did not wake the client")
		c.Close()
		require.Eventually(t, func() bool { return listening() == 1 }, 20*time.Second, 5*time.Millisecond, "Close ends the client's LISTEN")
	})

	// ResultFinishBeforeListen: a run that finishes after the
	// client's Result read it unfinished, and before the client's LISTEN is in
	// place (its connection held up here), is still seen at once: every wait
	// looks again when the LISTEN is in place.
	t.Run("ResultFinishBeforeListen", func(t *testing.T) {
		t.Parallel()
		pgtest.SkipIfPooled(t, "no LISTEN through a pooler in transaction mode")
		b := setup(t)
		eng := clientEngine(t, b, func(c *durable.Config) { c.PollInterval = time.Minute })
		ctx := ctxT(t)

		// The client's pool holds up every new connection while gate is set;
		// its own connections are opened beforehand.
		var gate atomic.Pointer[chan struct{}]
		pcfg, err := pgxpool.ParseConfig(pgtest.URL(t))
		require.NoError(t, err)
		pcfg.ConnConfig.AfterConnect = func(ctx context.Context, _ *pgconn.PgConn) error {
			if g := gate.Load(); g != nil {
				select {
				case <-*g:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}
		pool, err := pgxpool.NewWithConfig(ctx, pcfg)
		require.NoError(t, err)
		defer pool.Close()
		var conns []*pgxpool.Conn
		for range 3 {
			conn, err := pool.Acquire(ctx)
			require.NoError(t, err)
			conns = append(conns, conn)
		}
		for _, conn := range conns {
			conn.Release()
		}
		cfg := b.clientConfig()
		cfg.PollInterval = time.Minute
		c, err := durable.NewClient(pool, cfg)
		require.NoError(t, err)
		defer c.Close()

		h, err := durable.ClientWorkflow[int, string](c, "chat").Start(ctx, 1, nil)
		require.NoError(t, err)
		open := make(chan struct{})
		gate.Store(&open)
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		got := make(chan error, 1)
		go func() {
			_, err := h.Result(wctx)
			got <- err
		}()
		require.Eventually(t, func() bool { return watched(b, h.ID()) }, 20*time.Second, 5*time.Millisecond)
		require.NoError(t, durable.Send(ctx, eng, h.ID(), "in", "now", nil))
		require.Eventually(t, func() bool {
			st, err := durable.ClientWorkflow[int, string](c, "chat").Handle(ctx, h.ID())
			if err != nil {
				return false
			}
			s, err := st.Status(ctx)
			return err == nil && s == durable.StatusSuccess
		}, 20*time.Second, 5*time.Millisecond)
		close(open) // the LISTEN goes in place after the finish was notified
		require.NoError(t, <-got, "the wait did not look again once listening")
	})

	// TypedDecodeError: a typed handle whose R does not match the
	// run's output gets a DecodeError, not a wrong value.
	t.Run("TypedDecodeError", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		clientEngine(t, b, nil)
		c := b.client(t, nil)
		ctx := ctxT(t)
		h, err := durable.ClientWorkflow[string, int](c, "greet").Start(ctx, "x", nil)
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.ErrorIs(t, err, durable.ErrDecode)
		raw, err := c.Result(ctx, h.ID())
		require.NoError(t, err)
		var s string
		require.NoError(t, json.Unmarshal(raw, &s))
		require.Equal(t, "hello x", s)
	})
}

// watched reports whether a waiter asked for the notification of run id's
// finish.
func watched(b *bundle, id string) bool {
	var w bool
	err := b.pool.QueryRow(context.Background(), fmt.Sprintf("SELECT notify FROM %s.workflows WHERE id = $1", b.schema), id).Scan(&w)
	return err == nil && w
}
