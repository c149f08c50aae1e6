package durable_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
)

// execModes are pgx's query exec modes: the default (prepared statements
// cached per connection), the two that cache descriptions or describe each
// time, and the two that poolers without prepared statements need.
var execModes = []pgx.QueryExecMode{
	pgx.QueryExecModeCacheStatement,
	pgx.QueryExecModeCacheDescribe,
	pgx.QueryExecModeDescribeExec,
	pgx.QueryExecModeExec,
	pgx.QueryExecModeSimpleProtocol,
}

// stmtErrors records the statements that failed on a pool, except the
// failures the engine expects and handles (a step already recorded, a
// fenced transaction step, a statement cancelled by its context): a batch
// statement that fails on a payload's encoding is retried row by row, so
// only such a record shows it.
type stmtErrors struct {
	mu   sync.Mutex
	errs []string
}

type stmtKey struct{}

func (s *stmtErrors) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, stmtKey{}, d.SQL)
}

func (s *stmtErrors) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	sql, _ := ctx.Value(stmtKey{}).(string)
	s.note(sql, d.Err)
}

func (s *stmtErrors) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (s *stmtErrors) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	s.note(d.SQL, d.Err)
}

func (s *stmtErrors) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (s *stmtErrors) note(sql string, err error) {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505", "DU001", "57014": // recorded already, fenced, cancelled
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, fmt.Sprintf("%v\n    in: %.300s", err, strings.Join(strings.Fields(sql), " ")))
}

func (s *stmtErrors) check(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Empty(t, s.errs, "statements failed:\n%s", strings.Join(s.errs, "\n"))
}

// poolWithMode returns a pool on url whose connections run statements in
// mode, recording failed statements in errs.
func poolWithMode(t *testing.T, url string, mode pgx.QueryExecMode, errs *stmtErrors) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = 20
	cfg.ConnConfig.DefaultQueryExecMode = mode
	cfg.ConnConfig.Tracer = errs
	pool, err := pgxpool.NewWithConfig(ctxT(t), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// poolerPool returns a pool through PgBouncer in transaction mode (see
// pgtest.PoolerURL) in exec mode mode; errs, if not nil, records failed
// statements.
func poolerPool(t *testing.T, mode pgx.QueryExecMode, errs *stmtErrors) *pgxpool.Pool {
	t.Helper()
	if errs == nil {
		errs = &stmtErrors{}
	}
	return poolWithMode(t, pgtest.PoolerURL(t), mode, errs)
}

// TestPoolers covers every pgx exec mode and PgBouncer in transaction
// mode, as docs/poolers.md describes.
func TestPoolers(t *testing.T) {
	t.Parallel()

	// ExecModes: a representative workload (starts, steps, parallel steps,
	// a transaction step, group commits with and without deferred step
	// checkpoints, queues, messages, events, streams, children, a failure,
	// cancel and resume, fork, listings, prune) gives the same results in
	// every pgx exec mode, without a statement failing on the way: payloads
	// reach their json columns as JSON, not as bytea, whatever the mode.
	t.Run("ExecModes", func(t *testing.T) {
		t.Parallel()
		url := pgtest.DirectURL(t)
		for _, mode := range execModes {
			t.Run(mode.String(), func(t *testing.T) {
				t.Parallel()
				errs := &stmtErrors{}
				b := setup(t)
				b.pool = poolWithMode(t, url, mode, errs)
				runWorkload(t, b, nil)
				errs.check(t)
			})
		}
	})

	// PollOnlySendsNoNotifications: with Config.PollOnly the workload
	// sends no notification at all (a NOTIFY takes a server-wide lock at
	// commit, for nobody when nobody listens); without it, the same workload
	// is heard on the engine's channel.
	t.Run("PollOnlySendsNoNotifications", func(t *testing.T) {
		t.Parallel()
		for _, pollOnly := range []bool{true, false} {
			t.Run(fmt.Sprintf("PollOnly=%v", pollOnly), func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				errs := &stmtErrors{}
				b.pool = poolWithMode(t, pgtest.DirectURL(t), pgx.QueryExecModeCacheDescribe, errs)
				ctx := ctxT(t)
				conn, err := pgx.Connect(ctx, pgtest.DirectURL(t))
				require.NoError(t, err)
				defer conn.Close(context.Background())
				_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{"durable:" + b.schema}.Sanitize())
				require.NoError(t, err)
				heard := make(chan string, 10000)
				lctx, stop := context.WithCancel(ctx)
				go func() {
					defer close(heard)
					for {
						n, err := conn.WaitForNotification(lctx)
						if err != nil {
							return
						}
						heard <- n.Payload
					}
				}()
				runWorkload(t, b, func(c *durable.Config) {
					c.PollOnly = pollOnly
					c.PollInterval = 20 * time.Millisecond
				})
				errs.check(t)
				// A last notification, sent after the workload's, tells that
				// the listener has read everything before it.
				_, err = b.pool.Exec(ctx, "SELECT pg_notify($1, 'end')", "durable:"+b.schema)
				require.NoError(t, err)
				var got []string
				for p := range heard {
					if p == "end" {
						break
					}
					got = append(got, p)
				}
				stop()
				for range heard {
				}
				if pollOnly {
					require.Empty(t, got, "notifications sent with PollOnly")
				} else {
					require.NotEmpty(t, got)
				}
			})
		}
	})

	// LaunchChecksListen: Launch checks that LISTEN delivers. Through
	// PgBouncer in transaction mode it does not (LISTEN succeeds, nothing
	// arrives): Launch says so in a warning and the engine polls every 100ms
	// instead of waiting on notifications that never come, so its Result of a
	// run that another engine finishes returns long before the configured 30s
	// poll would. On a direct connection the check passes without a word, and
	// the finish's notification ends the wait. Either way B's lease is live
	// when Launch returns.
	t.Run("LaunchChecksListen", func(t *testing.T) {
		t.Parallel()
		for _, through := range []string{"direct", "pooler"} {
			t.Run(through, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				errs := &stmtErrors{}
				direct := poolWithMode(t, pgtest.DirectURL(t), pgx.QueryExecModeCacheDescribe, errs)
				register := func(w **durable.Workflow[string, string]) func(*durable.Engine) {
					return func(e *durable.Engine) {
						*w = durable.Register(e, "w", func(wctx durable.Context, in string) (string, error) {
							msg, ok, err := durable.Recv[string](wctx, "go", time.Minute)
							if err != nil || !ok {
								return "", fmt.Errorf("recv: %v, %w", ok, err)
							}
							return in + msg, nil
						}, nil)
					}
				}
				// A runs the workflow on a direct connection; B, the engine
				// checked, waits for its result.
				var wA, wB *durable.Workflow[string, string]
				b.pool = direct
				eA := b.engine(t, func(c *durable.Config) { c.PollOnly = false }, register(&wA))
				if through == "pooler" {
					b.pool = poolerPool(t, pgx.QueryExecModeExec, errs)
				}
				eB := b.engine(t, func(c *durable.Config) {
					c.PollOnly = false
					c.PollInterval = 30 * time.Second
					c.LeaseTTL = time.Second
				}, register(&wB))
				// The check's wait outlasted the lease registered before it:
				// Launch renewed it (the first heartbeat is LeaseTTL/3 away).
				var live bool
				require.NoError(t, direct.QueryRow(ctxT(t), "SELECT lease_expires_at > now() FROM "+pgx.Identifier{b.schema, "executors"}.Sanitize()+
					" WHERE id = $1", eB.ExecutorID()).Scan(&live))
				require.True(t, live, "B's lease expired during its Launch")
				const warning = "LISTEN delivers no notifications"
				if through == "pooler" {
					require.Contains(t, b.logs.String(), warning)
					require.Contains(t, b.logs.String(), "PgBouncer")
					require.Contains(t, b.logs.String(), "Config.PollOnly")
				} else {
					require.NotContains(t, b.logs.String(), warning)
				}

				ctx := ctxT(t)
				h, err := wA.Start(ctx, "a", nil)
				require.NoError(t, err)
				hB, err := wB.Handle(ctx, h.ID())
				require.NoError(t, err)
				type result struct {
					out string
					err error
				}
				res := make(chan result, 1)
				go func() {
					out, err := hB.Result(ctx)
					res <- result{out, err}
				}()
				// B waits: it asked for the finish's notification.
				wf := pgx.Identifier{b.schema, "workflows"}.Sanitize()
				require.Eventually(t, func() bool {
					var asked bool
					err := direct.QueryRow(ctx, "SELECT notify FROM "+wf+" WHERE id = $1", h.ID()).Scan(&asked)
					return err == nil && asked
				}, 30*time.Second, 10*time.Millisecond)
				require.NoError(t, durable.Send(ctx, eA, h.ID(), "go", "b", nil))
				select {
				case r := <-res:
					require.NoError(t, r.err)
					require.Equal(t, "ab", r.out)
				case <-time.After(10 * time.Second):
					t.Fatalf("the result did not arrive within 10s; log:\n%s", b.logs.String())
				}
				errs.check(t)
			})
		}
	})
}

// wlPayload is a payload with what text encodings and array literals
// quote or escape: quotes, backslashes, braces, commas, a NULL word, a
// bytea-looking prefix, unicode.
type wlPayload struct {
	N    int            `json:"n"`
	S    string         `json:"s"`
	Tags []string       `json:"tags"`
	M    map[string]any `json:"m"`
}

func wlIn(n int) wlPayload {
	return wlPayload{
		N:    n,
		S:    `he said "hi", {x} \x41 NULL 'q' ü 😀` + fmt.Sprint(n),
		Tags: []string{"a,b", `c"d`, "{e}", "NULL", ""},
		M:    map[string]any{"nested": map[string]any{"k": []any{1.5, "two", nil, true}}, "back\\slash": "\\"},
	}
}

// runWorkload runs the representative workload on an engine of b's (on
// its pool and schema), mutate adjusting its config, and checks every
// result. It returns the engine's log.
func runWorkload(t *testing.T, b *bundle, mutate func(*durable.Config)) string {
	t.Helper()
	pool := b.pool
	ctx := ctxT(t)
	app := pgx.Identifier{b.schema, "app"}.Sanitize()
	_, err := pool.Exec(ctx, "CREATE TABLE "+app+" (id text PRIMARY KEY, n int NOT NULL)")
	require.NoError(t, err)

	var (
		child, main, one, deferred, fail *durable.Workflow[wlPayload, wlPayload]
		blocked                          *durable.Workflow[string, string]
		q                                *durable.Queue
	)
	step := func(wctx durable.Context, name string, v wlPayload) (wlPayload, error) {
		return durable.Step(wctx, name, func(ctx context.Context) (wlPayload, error) { return v, nil }, nil)
	}
	e := b.engine(t, mutate, func(e *durable.Engine) {
		child = durable.Register(e, "child", func(wctx durable.Context, in wlPayload) (wlPayload, error) {
			in.N++
			return step(wctx, "c", in)
		}, nil)
		main = durable.Register(e, "main", func(wctx durable.Context, in wlPayload) (wlPayload, error) {
			out, err := step(wctx, "a", in)
			if err != nil {
				return out, err
			}
			f1 := durable.Go(wctx, "g1", func(ctx context.Context) (wlPayload, error) { return in, nil }, nil)
			f2 := durable.Go(wctx, "g2", func(ctx context.Context) (string, error) { return in.S, nil }, nil)
			if _, err := f1.Wait(); err != nil {
				return out, err
			}
			if _, err := f2.Wait(); err != nil {
				return out, err
			}
			n, err := durable.TxStep(wctx, "tx", func(ctx context.Context, tx pgx.Tx) (int, error) {
				var n int
				err := tx.QueryRow(ctx, "INSERT INTO "+app+" VALUES ($1, $2) RETURNING n", wctx.WorkflowID(), in.N).Scan(&n)
				return n, err
			}, nil)
			if err != nil || n != in.N {
				return out, fmt.Errorf("tx step: %d, %w", n, err)
			}
			if err := durable.SetEvent(wctx, "ev", in); err != nil {
				return out, err
			}
			for _, v := range []wlPayload{in, out} {
				if err := durable.StreamWrite(wctx, "st", v); err != nil {
					return out, err
				}
			}
			if err := durable.StreamClose(wctx, "st"); err != nil {
				return out, err
			}
			h, err := child.StartChild(wctx, in, nil)
			if err != nil {
				return out, err
			}
			c, err := h.Await(wctx)
			if err != nil {
				return out, err
			}
			msg, ok, err := durable.Recv[wlPayload](wctx, "topic", time.Minute)
			if err != nil || !ok {
				return out, fmt.Errorf("recv: %v, %w", ok, err)
			}
			if err := durable.Sleep(wctx, time.Millisecond); err != nil {
				return out, err
			}
			out.N = c.N + msg.N
			return out, nil
		}, nil)
		one = durable.Register(e, "one", func(wctx durable.Context, in wlPayload) (wlPayload, error) {
			return step(wctx, "s", in)
		}, nil)
		deferred = durable.Register(e, "deferred", func(wctx durable.Context, in wlPayload) (wlPayload, error) {
			return step(wctx, "s", in)
		}, &durable.WorkflowOpts{DeferStepCheckpoints: true})
		fail = durable.Register(e, "fail", func(wctx durable.Context, in wlPayload) (wlPayload, error) {
			_, err := step(wctx, "s", in)
			if err != nil {
				return in, err
			}
			return in, durable.Permanent(errors.New("failed: " + in.S))
		}, nil)
		blocked = durable.Register(e, "blocked", func(wctx durable.Context, in string) (string, error) {
			msg, ok, err := durable.Recv[string](wctx, "go", time.Hour)
			if err != nil || !ok {
				return "", fmt.Errorf("recv: %v, %w", ok, err)
			}
			return in + msg, nil
		}, nil)
		q = durable.RegisterQueue(e, "q", &durable.QueueOpts{GlobalConcurrency: 2}) // finishes hand slots on
	})

	// The whole tour in one run, fed by a message.
	in := wlIn(1)
	hm, err := main.Start(ctx, in, &durable.StartOpts{ID: "main-1"})
	require.NoError(t, err)
	require.NoError(t, durable.Send(ctx, e, "main-1", "topic", wlIn(10), nil))
	out, err := hm.Result(ctx)
	require.NoError(t, err)
	want := in
	want.N = 2 + 10
	require.Equal(t, jsonRoundTrip(t, want), out)
	ev, ok, err := durable.GetEvent[wlPayload](ctx, e, "main-1", "ev", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, jsonRoundTrip(t, in), ev)
	ents, err := readAll[wlPayload](ctx, e, "main-1", "st", 0)
	require.NoError(t, err)
	require.Len(t, ents, 2)
	require.Equal(t, jsonRoundTrip(t, in), ents[1].Value)
	page, done, err := durable.StreamEntries[wlPayload](ctx, e, "main-1", "st", 1, 0)
	require.NoError(t, err)
	require.True(t, done)
	require.Len(t, page, 1)

	// Concurrent starts and finishes (group commits), with step
	// checkpoints written alone or with the finish.
	var wg sync.WaitGroup
	results := make([]error, 60)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := one
			if i%2 == 1 {
				w = deferred
			}
			h, err := w.Start(ctx, wlIn(i), nil)
			if err == nil {
				var got wlPayload
				if got, err = h.Result(ctx); err == nil && got.S != wlIn(i).S {
					err = fmt.Errorf("run %d returned %q", i, got.S)
				}
			}
			results[i] = err
		}()
	}
	wg.Wait()
	for _, err := range results {
		require.NoError(t, err)
	}

	// Queues, and starts, enqueues and sends in the caller's transaction.
	var hs []*durable.Handle[wlPayload]
	for i := range 10 {
		h, err := one.Enqueue(ctx, q, wlIn(i), &durable.EnqueueOpts{DedupID: fmt.Sprint(i), Priority: i % 3})
		require.NoError(t, err)
		hs = append(hs, h)
	}
	hb, err := blocked.Start(ctx, "b", &durable.StartOpts{ID: "blocked-1"})
	require.NoError(t, err)
	var htx, hqtx *durable.Handle[wlPayload]
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		if htx, err = one.StartTx(ctx, tx, wlIn(100), nil); err != nil {
			return err
		}
		if hqtx, err = one.EnqueueTx(ctx, tx, q, wlIn(101), nil); err != nil {
			return err
		}
		return durable.SendTx(ctx, e, tx, "blocked-1", "unused", wlIn(102), nil)
	}))
	for i, h := range append(hs, htx, hqtx) {
		got, err := h.Result(ctx)
		require.NoError(t, err, "run %d", i)
		require.Equal(t, h.ID(), h.ID())
		require.NotEmpty(t, got.S)
	}
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Ready+st.Running)
	qs, err := e.ListQueues(ctx)
	require.NoError(t, err)
	require.Len(t, qs, 1)

	// A failure's error is stored and read back.
	hf, err := fail.Start(ctx, in, nil)
	require.NoError(t, err)
	_, err = hf.Result(ctx)
	require.ErrorContains(t, err, "failed: "+in.S)

	// Cancel a waiting run, then resume it and let it finish.
	require.Eventually(t, func() bool {
		runs, _, err := e.ListWorkflows(ctx, &durable.ListParams{IDs: []string{"blocked-1"}})
		return err == nil && len(runs) == 1 && runs[0].WaitTopic == "go"
	}, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, e.Cancel(ctx, "blocked-1", nil))
	_, err = hb.Result(ctx)
	require.ErrorIs(t, err, durable.ErrCancelled)
	require.NoError(t, e.Resume(ctx, "blocked-1", nil))
	require.NoError(t, durable.Send(ctx, e, "blocked-1", "go", "!", nil))
	gotB, err := hb.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "b!", gotB)

	// Fork a finished run from its first step.
	hfork, err := one.Fork(ctx, htx.ID(), 0, &durable.ForkOpts{ID: "fork-1"})
	require.NoError(t, err)
	gotF, err := hfork.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, jsonRoundTrip(t, wlIn(100)), gotF)

	// Listings read back what was written.
	runs, _, err := e.ListWorkflows(ctx, &durable.ListParams{IDs: []string{"main-1"}})
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.JSONEq(t, mustJSON(t, in), string(runs[0].Input))
	require.JSONEq(t, mustJSON(t, want), string(runs[0].Output))
	failed, _, err := e.ListWorkflows(ctx, &durable.ListParams{Statuses: []durable.Status{durable.StatusError}})
	require.NoError(t, err)
	require.Len(t, failed, 1)
	require.ErrorContains(t, failed[0].Error, "failed: "+in.S)
	steps, err := e.ListSteps(ctx, "main-1")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(steps), 8)
	require.JSONEq(t, mustJSON(t, in), string(steps[0].Output))
	window, total, err := e.ListStepWindow(ctx, "main-1", -1, 2)
	require.NoError(t, err)
	require.Len(t, window, 2)
	require.Equal(t, len(steps), total)
	evs, err := e.ListEvents(ctx, "main-1")
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.JSONEq(t, mustJSON(t, in), string(evs[0].Value))
	info, err := e.Inspect(ctx, "main-1")
	require.NoError(t, err)
	require.Equal(t, durable.StatusSuccess, info.Status)
	children, _, err := e.ListWorkflows(ctx, &durable.ListParams{Parent: "main-1"})
	require.NoError(t, err)
	require.Len(t, children, 1)

	pr, err := e.Prune(ctx, time.Now().Add(time.Hour), nil)
	require.NoError(t, err)
	require.NotZero(t, pr)
	return b.logs.String()
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
