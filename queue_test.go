package durable_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// TestQueue covers queues within one process: enqueues, limits, priorities,
// pauses, dedup, delays and deadlines, and the slots of parked and
// cancelled runs. Their limits across processes are tested in
// queue_child_test.go.
func TestQueue(t *testing.T) {
	t.Parallel()

	t.Run("Basics", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var wf *durable.Workflow[int, int]
		var q *durable.Queue
		e := b.engine(t, nil, func(e *durable.Engine) {
			q = durable.RegisterQueue(e, "basic", &durable.QueueOpts{WorkerConcurrency: 4})
			wf = durable.Register(e, "double", func(wctx durable.Context, in int) (int, error) {
				return durable.Step(wctx, "double", func(ctx context.Context) (int, error) { return in * 2, nil }, nil)
			}, nil)
		})
		ctx := ctxT(t)
		hs := enqueueDoubles(ctx, t, wf, q, 20, nil)
		st, err := q.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, durable.QueueStats{Name: "basic", Settings: durable.QueueOpts{WorkerConcurrency: 4}}, st)

		// Same ID and input again: the existing run. Another input is refused
		// (TestWorkflow/StartIDInputMismatch), unless the options accept it.
		h, err := wf.Enqueue(ctx, q, 3, &durable.EnqueueOpts{ID: hs[3].ID()})
		require.NoError(t, err)
		v, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 6, v)
		_, err = wf.Enqueue(ctx, q, 99, &durable.EnqueueOpts{ID: hs[3].ID()})
		require.ErrorIs(t, err, durable.ErrInputMismatch)
		h, err = wf.Enqueue(ctx, q, 99, &durable.EnqueueOpts{ID: hs[3].ID(), AcceptDifferentInput: true})
		require.NoError(t, err)
		v, err = h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 6, v)

		// Bad input: clear errors at the call.
		_, err = wf.Enqueue(ctx, e.QueueRef("nowhere"), 1, nil)
		require.ErrorIs(t, err, durable.ErrQueueNotFound)
		_, err = wf.Enqueue(ctx, q, 1, &durable.EnqueueOpts{Timeout: -time.Second})
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		_, err = e.QueueRef("nowhere").Stats(ctx)
		require.ErrorIs(t, err, durable.ErrQueueNotFound)
		require.ErrorIs(t, e.QueueRef("nowhere").Pause(ctx), durable.ErrQueueNotFound)
	})

	t.Run("InvalidDeclarations", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		e, err := durable.New(b.pool, b.cfg)
		require.NoError(t, err)
		for _, opts := range []durable.QueueOpts{
			{GlobalConcurrency: -1}, {WorkerConcurrency: -2}, {PartitionConcurrency: -1},
			{RateLimit: 5}, {RatePeriod: time.Second}, {RateLimit: -1, RatePeriod: time.Second},
		} {
			_, err := durable.TryRegisterQueue(e, "q", &opts)
			require.ErrorIs(t, err, durable.ErrInvalidArgument, "%+v", opts)
			require.ErrorContains(t, err, "QueueOpts.")
			err = e.QueueRef("q").Update(context.Background(), &opts)
			require.ErrorIs(t, err, durable.ErrInvalidArgument, "Update %+v", opts)
			require.ErrorContains(t, err, "QueueOpts.")
		}
		_, err = durable.TryRegisterQueue(e, "", nil)
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		durable.RegisterQueue(e, "ok", nil)
		_, err = durable.TryRegisterQueue(e, "ok", nil)
		require.ErrorContains(t, err, "already registered")
	})

	// PriorityPauseAndLiveSettings: a paused queue starts nothing;
	// on resume it starts runs in priority order; settings change live.
	t.Run("PriorityPauseAndLiveSettings", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var mu sync.Mutex
		var order []int
		var wf *durable.Workflow[int, int]
		var q *durable.Queue
		b.engine(t, nil, func(e *durable.Engine) {
			q = durable.RegisterQueue(e, "prio", &durable.QueueOpts{WorkerConcurrency: 1})
			wf = durable.Register(e, "record", func(wctx durable.Context, in int) (int, error) {
				mu.Lock()
				order = append(order, in)
				mu.Unlock()
				return in, nil
			}, nil)
		})
		ctx := ctxT(t)
		require.NoError(t, q.Pause(ctx))
		prios := []int{5, 1, 9, 3, 7, 0, 2}
		var hs []*durable.Handle[int]
		for _, p := range prios {
			h, err := wf.Enqueue(ctx, q, p, &durable.EnqueueOpts{Priority: p})
			require.NoError(t, err)
			hs = append(hs, h)
		}
		st, err := q.Stats(ctx)
		require.NoError(t, err)
		require.True(t, st.Paused)
		require.Equal(t, len(prios), st.Ready)
		require.Zero(t, st.Running)

		require.NoError(t, q.Update(ctx, &durable.QueueOpts{WorkerConcurrency: 1, GlobalConcurrency: 7}))
		st, err = q.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, 7, st.Settings.GlobalConcurrency)

		require.NoError(t, q.Resume(ctx))
		for _, h := range hs {
			_, err := h.Result(ctx)
			require.NoError(t, err)
		}
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []int{0, 1, 2, 3, 5, 7, 9}, order)

		require.NoError(t, q.Update(ctx, nil), "nil removes every limit")
		st, err = q.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, durable.QueueOpts{}, st.Settings)
	})

	// RateLimitCountsStartsWhileLimited: a rate limit counts the starts
	// made while it is in place (only those runs enter the rate index), not the
	// ones before it was set; raising it lets the held-back runs start.
	t.Run("RateLimitCountsStartsWhileLimited", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var wf *durable.Workflow[int, int]
		var q *durable.Queue
		b.engine(t, func(c *durable.Config) { c.PollInterval = 50 * time.Millisecond }, func(e *durable.Engine) {
			q = durable.RegisterQueue(e, "rl", nil)
			wf = durable.Register(e, "rl-run", func(wctx durable.Context, in int) (int, error) { return in, nil }, nil)
		})
		ctx := ctxT(t)
		run := func(from, n int) []*durable.Handle[int] {
			var hs []*durable.Handle[int]
			for i := from; i < from+n; i++ {
				h, err := wf.Enqueue(ctx, q, i, nil)
				require.NoError(t, err)
				hs = append(hs, h)
			}
			return hs
		}
		for _, h := range run(0, 3) { // unlimited: these starts never count
			_, err := h.Result(ctx)
			require.NoError(t, err)
		}
		require.NoError(t, q.Update(ctx, &durable.QueueOpts{RateLimit: 2, RatePeriod: time.Hour}))
		hs := run(3, 4)
		finished := 0
		for finished < 2 {
			finished = 0
			for _, h := range hs {
				st, err := h.Status(ctx)
				require.NoError(t, err)
				if st == durable.StatusSuccess {
					finished++
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond) // a few dispatch passes
		st, err := q.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, st.Ready, "the limit holds back the other two for the hour")
		require.Zero(t, st.Running)

		require.NoError(t, q.Update(ctx, &durable.QueueOpts{RateLimit: 4, RatePeriod: time.Hour}))
		for _, h := range hs {
			_, err := h.Result(ctx)
			require.NoError(t, err)
		}
	})

	// DedupUnderConcurrentEnqueues: many enqueues race with one dedup
	// ID; exactly one run exists; the others are refused or get that run.
	t.Run("DedupUnderConcurrentEnqueues", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		release := make(chan struct{})
		var runs atomic.Int32
		var wf *durable.Workflow[int, int]
		var q *durable.Queue
		b.engine(t, nil, func(e *durable.Engine) {
			q = durable.RegisterQueue(e, "dedup", nil)
			wf = durable.Register(e, "once", func(wctx durable.Context, in int) (int, error) {
				runs.Add(1)
				<-release
				return in, nil
			}, nil)
		})
		ctx := ctxT(t)
		const n = 16
		ids := make([]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				policy := durable.DedupReject
				if i%2 == 1 {
					policy = durable.DedupReturnExisting
				}
				h, err := wf.Enqueue(ctx, q, i, &durable.EnqueueOpts{DedupID: "customer-7", OnDuplicate: policy})
				errs[i] = err
				if h != nil {
					ids[i] = h.ID()
				}
			}()
		}
		wg.Wait()
		var holder string
		created := 0
		for i := 0; i < n; i++ {
			var de *durable.DuplicateError
			switch {
			case errs[i] == nil && (holder == "" || ids[i] == holder):
				holder = ids[i]
			case errors.As(errs[i], &de):
				require.ErrorIs(t, errs[i], durable.ErrDuplicate)
				require.Equal(t, 0, i%2, "only DedupReject enqueues are refused")
				if holder == "" {
					holder = de.ExistingID
				}
				require.Equal(t, holder, de.ExistingID)
			default:
				t.Fatalf("enqueue %d: id %q err %v (holder %q)", i, ids[i], errs[i], holder)
			}
		}
		for i := 0; i < n; i++ {
			if errs[i] == nil && ids[i] == holder {
				created++
			}
		}
		require.NotZero(t, created)
		close(release)
		h, err := wf.Handle(ctx, holder)
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 1, runs.Load())

		// Once it finished, the dedup ID is free again.
		h2, err := wf.Enqueue(ctx, q, 100, &durable.EnqueueOpts{DedupID: "customer-7"})
		require.NoError(t, err)
		v, err := h2.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 100, v)
	})

	t.Run("EnqueueTxCommitAndRollback", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var wf *durable.Workflow[string, string]
		var q *durable.Queue
		b.engine(t, nil, func(e *durable.Engine) {
			q = durable.RegisterQueue(e, "outbox", nil)
			wf = durable.Register(e, "greet", func(wctx durable.Context, in string) (string, error) { return "hi " + in, nil }, nil)
		})
		ctx := ctxT(t)
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = wf.EnqueueTx(ctx, tx, q, "ghost", &durable.EnqueueOpts{ID: "rolled"})
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))
		_, err = wf.Handle(ctx, "rolled")
		require.ErrorIs(t, err, durable.ErrWorkflowNotFound)
		st, err := q.Stats(ctx)
		require.NoError(t, err)
		require.Zero(t, st.Ready+st.Running+st.Delayed)

		tx, err = b.pool.Begin(ctx)
		require.NoError(t, err)
		h, err := wf.EnqueueTx(ctx, tx, q, "ada", &durable.EnqueueOpts{ID: "kept"})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		out, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "hi ada", out)
	})

	t.Run("DelayAndDeadline", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var wf *durable.Workflow[int, time.Time]
		var q, paused, far *durable.Queue
		var ran atomic.Int32
		b.engine(t, nil, func(e *durable.Engine) {
			q = durable.RegisterQueue(e, "later", nil)
			paused = durable.RegisterQueue(e, "paused", nil)
			far = durable.RegisterQueue(e, "far", nil)
			wf = durable.Register(e, "when", func(wctx durable.Context, in int) (time.Time, error) {
				ran.Add(1)
				return durable.Now(wctx)
			}, nil)
		})
		ctx := ctxT(t)
		// Stats counts a run not yet due as delayed (an hour away, so a
		// loaded machine cannot make it due before Stats reads it).
		_, err := wf.Enqueue(ctx, far, 0, &durable.EnqueueOpts{NotBefore: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		st, err := far.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, st.Delayed)
		notBefore := time.Now().Add(400 * time.Millisecond)
		h, err := wf.Enqueue(ctx, q, 1, &durable.EnqueueOpts{NotBefore: notBefore})
		require.NoError(t, err)
		startedAt, err := h.Result(ctx)
		require.NoError(t, err)
		require.False(t, startedAt.Before(notBefore), "started %v, not before %v", startedAt, notBefore)

		// A run still queued at its deadline fails without running.
		require.NoError(t, paused.Pause(ctx))
		h2, err := wf.Enqueue(ctx, paused, 2, &durable.EnqueueOpts{Timeout: time.Millisecond})
		require.NoError(t, err)
		time.Sleep(5 * time.Millisecond) // let the deadline pass
		require.NoError(t, paused.Resume(ctx))
		_, err = h2.Result(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.EqualValues(t, 1, ran.Load())
	})

	// ParkedRunsAndSlots: by default a parked run keeps its slot; with
	// ReleaseSlotWhileParked it gives it back and takes one again to go on.
	t.Run("ParkedRunsAndSlots", func(t *testing.T) {
		t.Parallel()
		for _, release := range []bool{false, true} {
			t.Run(fmt.Sprintf("release=%v", release), func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				var waiter, quick *durable.Workflow[int, string]
				var q *durable.Queue
				e := b.engine(t, func(c *durable.Config) { c.ParkThreshold = time.Millisecond }, func(e *durable.Engine) {
					q = durable.RegisterQueue(e, "one-slot", &durable.QueueOpts{GlobalConcurrency: 1, ReleaseSlotWhileParked: release})
					waiter = durable.Register(e, "approval", func(wctx durable.Context, in int) (string, error) {
						d, ok, err := durable.Recv[string](wctx, "decision", time.Hour)
						if err != nil || !ok {
							return "", fmt.Errorf("recv: %v %v", ok, err)
						}
						return d, nil
					}, nil)
					quick = durable.Register(e, "quick", func(wctx durable.Context, in int) (string, error) { return "quick", nil }, nil)
				})
				ctx := ctxT(t)
				hw, err := waiter.Enqueue(ctx, q, 1, &durable.EnqueueOpts{ID: "waiter"})
				require.NoError(t, err)
				parked := fmt.Sprintf(`SELECT count(*) FROM %q.workflows WHERE id = 'waiter' AND executor_id IS NULL AND wait_topic = 'decision'`, b.schema)
				require.Eventually(t, func() bool {
					var n int
					_ = b.pool.QueryRow(ctx, parked).Scan(&n)
					return n == 1
				}, 10*time.Second, 2*time.Millisecond)
				hq, err := quick.Enqueue(ctx, q, 2, nil)
				require.NoError(t, err)
				if release {
					out, err := hq.Result(ctx) // the parked run gave its slot back
					require.NoError(t, err)
					require.Equal(t, "quick", out)
				} else {
					waitCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
					_, err := hq.Result(waitCtx)
					cancel()
					require.ErrorIs(t, err, context.DeadlineExceeded, "the parked run holds the only slot")
				}
				require.NoError(t, durable.Send(ctx, e, "waiter", "decision", "approved", nil))
				out, err := hw.Result(ctx)
				require.NoError(t, err)
				require.Equal(t, "approved", out)
				out, err = hq.Result(ctx)
				require.NoError(t, err)
				require.Equal(t, "quick", out)
				var attempts int
				require.NoError(t, b.pool.QueryRow(ctx, fmt.Sprintf(`SELECT recovery_attempts FROM %q.workflows WHERE id = 'waiter'`, b.schema)).Scan(&attempts))
				require.Zero(t, attempts, "parking is not a recovery")
			})
		}
	})

	// DeclaredVersusLiveSettings: a restart with the same declaration
	// keeps limits changed at run time; a deploy that declares other limits
	// replaces them.
	t.Run("DeclaredVersusLiveSettings", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := ctxT(t)
		launch := func(opts durable.QueueOpts) (*durable.Engine, *durable.Queue) {
			var q *durable.Queue
			e := b.engine(t, nil, func(e *durable.Engine) { q = durable.RegisterQueue(e, "limits", &opts) })
			return e, q
		}
		declared := durable.QueueOpts{GlobalConcurrency: 3}
		e1, q1 := launch(declared)
		require.NoError(t, q1.Update(ctx, &durable.QueueOpts{GlobalConcurrency: 9}))
		require.NoError(t, e1.Shutdown(ctx))

		e2, q2 := launch(declared) // same code restarted
		st, err := q2.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, 9, st.Settings.GlobalConcurrency, "the live change survives a restart of the same code")
		require.NoError(t, e2.Shutdown(ctx))

		_, q3 := launch(durable.QueueOpts{GlobalConcurrency: 5}) // a deploy declaring other limits
		st, err = q3.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, 5, st.Settings.GlobalConcurrency, "the new declaration wins")
	})

	// CancelledRunHoldsSlotUntilItStops: a cancelled run whose step
	// code ignores its context still holds its queue slot until that code
	// returns, so a limit of 1 (global, or per partition key) never sees two
	// runs' code at once; a Resume of it waits for that too.
	t.Run("CancelledRunHoldsSlotUntilItStops", func(t *testing.T) {
		t.Parallel()
		for name, opts := range map[string]durable.QueueOpts{"global": {GlobalConcurrency: 1}, "partition": {PartitionConcurrency: 1}} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				var running, peak atomic.Int32
				started := make(chan string, 4)
				release := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
				var wf *durable.Workflow[string, string]
				var q *durable.Queue
				e := b.engine(t, func(c *durable.Config) { c.PollInterval = 50 * time.Millisecond }, func(e *durable.Engine) {
					q = durable.RegisterQueue(e, "one", &opts)
					wf = durable.Register(e, "stubborn", func(wctx durable.Context, in string) (string, error) {
						return durable.Step(wctx, "hold", func(context.Context) (string, error) {
							n := running.Add(1)
							for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
							}
							started <- in
							<-release[in] // ignores its context, as code calling a slow API may
							running.Add(-1)
							return in, nil
						}, nil)
					}, nil)
				})
				ctx := ctxT(t)
				ha, err := wf.Enqueue(ctx, q, "a", &durable.EnqueueOpts{ID: "a", PartitionKey: "k"})
				require.NoError(t, err)
				require.Equal(t, "a", <-started)
				hb, err := wf.Enqueue(ctx, q, "b", &durable.EnqueueOpts{ID: "b", PartitionKey: "k"})
				require.NoError(t, err)
				require.NoError(t, e.Cancel(ctx, "a", nil))
				_, err = ha.Result(ctx)
				require.ErrorIs(t, err, durable.ErrCancelled)
				resumed := make(chan error, 1)
				go func() { resumed <- e.Resume(ctx, "a", nil) }()
				select { // many dispatch polls while a's step still runs
				case id := <-started:
					t.Fatalf("%s started while the cancelled run's step was still running", id)
				case err := <-resumed:
					t.Fatalf("Resume returned (%v) while the cancelled run's step was still running", err)
				case <-time.After(500 * time.Millisecond):
				}
				st, err := q.Stats(ctx)
				require.NoError(t, err)
				require.Equal(t, 1, st.Running, "the stopping run holds the slot")

				close(release["a"]) // the resumed a replays nothing and passes its step at once
				require.NoError(t, <-resumed)
				first := <-started
				if first == "b" {
					close(release["b"])
				}
				second := <-started
				require.ElementsMatch(t, []string{"a", "b"}, []string{first, second})
				if first == "a" {
					close(release["b"])
				}
				for _, h := range []*durable.Handle[string]{ha, hb} {
					out, err := h.Result(ctx)
					require.NoError(t, err)
					require.Equal(t, h.ID(), out)
				}
				require.EqualValues(t, 1, peak.Load())
			})
		}
	})
}

// enqueueDoubles enqueues runs 0..n-1 of wf, a workflow that doubles its
// input, on q (with the options opts(i) returns, when opts is not nil),
// checks each result and returns the handles.
func enqueueDoubles(ctx context.Context, t *testing.T, wf *durable.Workflow[int, int], q *durable.Queue, n int,
	opts func(i int) *durable.EnqueueOpts) []*durable.Handle[int] {
	t.Helper()
	var hs []*durable.Handle[int]
	for i := 0; i < n; i++ {
		var o *durable.EnqueueOpts
		if opts != nil {
			o = opts(i)
		}
		h, err := wf.Enqueue(ctx, q, i, o)
		require.NoError(t, err)
		hs = append(hs, h)
	}
	for i, h := range hs {
		v, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 2*i, v)
	}
	return hs
}
