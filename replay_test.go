package durable_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// hardStop shuts e down at once, as a crash would leave its runs: pending
// and owned by e until its lease expires. The Shutdown fails when runs were
// in flight; with none (they all finished before it) it may succeed.
func hardStop(t *testing.T, e *durable.Engine) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.Shutdown(ctx); err != nil {
		require.ErrorIs(t, err, context.Canceled)
	}
}

// blockUntilStopped waits in workflow code until the engine hard-stops.
func blockUntilStopped(wctx durable.Context, started chan<- string) error {
	started <- wctx.WorkflowID()
	<-wctx.Done()
	return wctx.Err()
}

// TestReplay covers the replay of a resumed run: recorded values and
// errors come back as recorded, code that no longer matches its records is
// refused or takes its patched branch, and a run waits for an executor
// that can replay it.
func TestReplay(t *testing.T) {
	t.Parallel()

	t.Run("NonDeterministic", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		started := make(chan string, 1)
		var v1 *durable.Workflow[int, int]
		e1 := b.engine(t, func(c *durable.Config) { c.ExecutorID = "v1" }, func(e *durable.Engine) {
			v1 = durable.Register(e, "evolving", func(wctx durable.Context, in int) (int, error) {
				if _, err := durable.Step(wctx, "alpha", func(ctx context.Context) (int, error) { return 1, nil }, nil); err != nil {
					return 0, err
				}
				return 0, blockUntilStopped(wctx, started)
			}, nil)
		})
		ctx := ctxT(t)
		_, err := v1.Start(ctx, 1, &durable.StartOpts{ID: "evolving-1"})
		require.NoError(t, err)
		<-started
		hardStop(t, e1)

		// The new code renamed the first step: replay must stop, not re-run.
		var betaRuns atomic.Int32
		var v2, other *durable.Workflow[int, int]
		b.engine(t, func(c *durable.Config) { c.ExecutorID = "v2" }, func(e *durable.Engine) {
			v2 = durable.Register(e, "evolving", func(wctx durable.Context, in int) (int, error) {
				return durable.Step(wctx, "beta", func(ctx context.Context) (int, error) { betaRuns.Add(1); return 2, nil }, nil)
			}, nil)
			other = durable.Register(e, "other", func(wctx durable.Context, in int) (int, error) { return in, nil }, nil)
		})
		h, err := v2.Handle(ctx, "evolving-1")
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.ErrorIs(t, err, durable.ErrNonDeterministic)
		require.Contains(t, err.Error(), `step 0 is recorded as "alpha" but the code called "beta"`)
		require.Zero(t, betaRuns.Load())
		st, err := h.Status(ctx)
		require.NoError(t, err)
		require.Equal(t, durable.StatusError, st)

		h2, err := other.Start(ctx, 7, nil)
		require.NoError(t, err)
		n, err := h2.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 7, n)
	})

	t.Run("UnregisteredWorkflowOnRecovery", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		started := make(chan string, 2)
		var ghost, real1 *durable.Workflow[int, string]
		body := func(name string) func(wctx durable.Context, in int) (string, error) {
			return func(wctx durable.Context, in int) (string, error) {
				if in == 0 {
					return "", blockUntilStopped(wctx, started)
				}
				return name + " done", nil
			}
		}
		e1 := b.engine(t, func(c *durable.Config) { c.ExecutorID = "x" }, func(e *durable.Engine) {
			ghost = durable.Register(e, "ghost", body("ghost"), nil)
			real1 = durable.Register(e, "real", body("real"), nil)
		})
		ctx := ctxT(t)
		_, err := ghost.Start(ctx, 0, &durable.StartOpts{ID: "ghost-1"})
		require.NoError(t, err)
		_, err = real1.Start(ctx, 0, &durable.StartOpts{ID: "real-1"})
		require.NoError(t, err)
		<-started
		<-started
		hardStop(t, e1)

		// The same executor restarts with a binary that lacks "ghost", and
		// its input now makes "real" finish.
		var real2 *durable.Workflow[int, string]
		b.engine(t, func(c *durable.Config) { c.ExecutorID = "x" }, func(e *durable.Engine) {
			real2 = durable.Register(e, "real", func(wctx durable.Context, in int) (string, error) { return "real done", nil }, nil)
		})
		h, err := real2.Handle(ctx, "real-1")
		require.NoError(t, err)
		out, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "real done", out)
		require.Contains(t, b.logs.String(), "not registered in this binary")
		require.Contains(t, b.logs.String(), "ghost-1")

		// An executor that has "ghost" registered picks it up.
		var ghost3 *durable.Workflow[int, string]
		b.engine(t, func(c *durable.Config) { c.ExecutorID = "y" }, func(e *durable.Engine) {
			ghost3 = durable.Register(e, "ghost", func(wctx durable.Context, in int) (string, error) { return "ghost done", nil }, nil)
		})
		h3, err := ghost3.Handle(ctx, "ghost-1")
		require.NoError(t, err)
		out, err = h3.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "ghost done", out)
	})

	t.Run("ReturnsRecordedValues", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		started := make(chan string, 1)
		type seen struct {
			Now time.Time
			ID  string
		}
		var mu sync.Mutex
		var firstSeen seen
		var effectRuns atomic.Int32
		var resolved atomic.Int32
		body := func(block bool) func(wctx durable.Context, in int) (seen, error) {
			return func(wctx durable.Context, in int) (seen, error) {
				now, err := durable.Now(wctx)
				if err != nil {
					return seen{}, err
				}
				id, err := durable.NewID(wctx)
				if err != nil {
					return seen{}, err
				}
				mu.Lock()
				if firstSeen.ID == "" {
					firstSeen = seen{now, id}
				}
				mu.Unlock()
				// An effect whose provider cannot dedupe: the first run dies
				// in the middle of it.
				_, err = durable.IntentStep(wctx, "wire-money", func(ctx context.Context) (string, error) {
					effectRuns.Add(1)
					if block {
						started <- "x"
						<-ctx.Done()
						return "", ctx.Err()
					}
					return "sent", nil
				}, func(ctx context.Context) (string, error) {
					resolved.Add(1)
					return "confirmed by provider", nil
				}, nil)
				if err != nil {
					return seen{}, err
				}
				return seen{now, id}, nil
			}
		}
		var wf1 *durable.Workflow[int, seen]
		e1 := b.engine(t, func(c *durable.Config) { c.ExecutorID = "first" }, func(e *durable.Engine) {
			wf1 = durable.Register(e, "recorded", body(true), nil)
		})
		ctx := ctxT(t)
		_, err := wf1.Start(ctx, 1, &durable.StartOpts{ID: "rec-1"})
		require.NoError(t, err)
		<-started
		hardStop(t, e1)

		var wf2 *durable.Workflow[int, seen]
		b.engine(t, func(c *durable.Config) { c.ExecutorID = "second" }, func(e *durable.Engine) {
			wf2 = durable.Register(e, "recorded", body(false), nil)
		})
		h, err := wf2.Handle(ctx, "rec-1")
		require.NoError(t, err)
		got, err := h.Result(ctx)
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		require.True(t, firstSeen.Now.Equal(got.Now), "Now replays the recorded time")
		require.Equal(t, firstSeen.ID, got.ID, "NewID replays the recorded ID")
		require.EqualValues(t, 1, effectRuns.Load(), "the interrupted effect is resolved, not blindly repeated")
		require.EqualValues(t, 1, resolved.Load())
	})

	t.Run("RecordedErrorsKeepTheirCause", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		causes := map[string]error{
			"deadline":  fmt.Errorf("model call: %w", context.DeadlineExceeded),
			"cancelled": fmt.Errorf("user gave up: %w", context.Canceled),
			"permanent": durable.Permanent(errors.New("invalid card")),
			"plain":     errors.New("plain failure"),
		}
		var wf *durable.Workflow[string, int]
		b.engine(t, nil, func(e *durable.Engine) {
			wf = durable.Register(e, "fails", func(wctx durable.Context, in string) (int, error) { return 0, causes[in] }, nil)
		})
		ctx := ctxT(t)
		for name := range causes {
			h, err := wf.Start(ctx, name, &durable.StartOpts{ID: "fail-" + name})
			require.NoError(t, err)
			_, err = h.Result(ctx)
			require.Error(t, err)
		}
		// A second engine (another process, as far as the database knows)
		// reads the errors back.
		var reader *durable.Workflow[string, int]
		b.engine(t, func(c *durable.Config) { c.ExecutorID = "reader" }, func(e *durable.Engine) {
			reader = durable.Register(e, "fails", func(wctx durable.Context, in string) (int, error) { return 0, nil }, nil)
		})
		get := func(name string) error {
			h, err := reader.Handle(ctx, "fail-"+name)
			require.NoError(t, err)
			_, err = h.Result(ctx)
			return err
		}
		require.ErrorIs(t, get("deadline"), context.DeadlineExceeded)
		require.ErrorIs(t, get("cancelled"), context.Canceled)
		require.ErrorIs(t, get("cancelled"), durable.ErrCancelled)
		require.ErrorIs(t, get("permanent"), durable.ErrPermanent)
		require.Equal(t, "invalid card", get("permanent").Error())
		plain := get("plain")
		require.NotErrorIs(t, plain, durable.ErrPermanent)
		require.Equal(t, "plain failure", plain.Error())
	})

	t.Run("PatchedBranches", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		started := make(chan string, 1)
		var v1 *durable.Workflow[int, string]
		e1 := b.engine(t, func(c *durable.Config) { c.ExecutorID = "old-code" }, func(e *durable.Engine) {
			v1 = durable.Register(e, "patchy", func(wctx durable.Context, in int) (string, error) {
				a, err := durable.Step(wctx, "old-step", func(ctx context.Context) (string, error) { return "old", nil }, nil)
				if err != nil {
					return "", err
				}
				return a, blockUntilStopped(wctx, started)
			}, nil)
		})
		ctx := ctxT(t)
		_, err := v1.Start(ctx, 1, &durable.StartOpts{ID: "in-flight"})
		require.NoError(t, err)
		<-started
		hardStop(t, e1)

		var v2 *durable.Workflow[int, string]
		b.engine(t, func(c *durable.Config) { c.ExecutorID = "new-code" }, func(e *durable.Engine) {
			v2 = durable.Register(e, "patchy", func(wctx durable.Context, in int) (string, error) {
				patched, err := durable.Patched(wctx, "use-new-step")
				if err != nil {
					return "", err
				}
				name := "old-step"
				if patched {
					name = "new-step"
				}
				return durable.Step(wctx, name, func(ctx context.Context) (string, error) { return name, nil }, nil)
			}, nil)
		})
		h, err := v2.Handle(ctx, "in-flight")
		require.NoError(t, err)
		out, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "old", out, "the in-flight run replays the old path")
		h2, err := v2.Start(ctx, 1, nil)
		require.NoError(t, err)
		out, err = h2.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "new-step", out, "a new run takes the patched path")
	})

	// AppVersionGatesRecovery: an executor only resumes runs of its own
	// application version.
	t.Run("AppVersionGatesRecovery", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		started := make(chan string, 1)
		var v1 *durable.Workflow[int, string]
		e1 := b.engine(t, func(c *durable.Config) { c.AppVersion = "v1"; c.ExecutorID = "old" }, func(e *durable.Engine) {
			v1 = durable.Register(e, "versioned", func(wctx durable.Context, in int) (string, error) {
				return "", blockUntilStopped(wctx, started)
			}, nil)
		})
		ctx := ctxT(t)
		_, err := v1.Start(ctx, 1, &durable.StartOpts{ID: "v1-run"})
		require.NoError(t, err)
		<-started
		hardStop(t, e1)

		var ran atomic.Int32
		var v2 *durable.Workflow[int, string]
		b.engine(t, func(c *durable.Config) { c.AppVersion = "v2"; c.ExecutorID = "new" }, func(e *durable.Engine) {
			v2 = durable.Register(e, "versioned", func(wctx durable.Context, in int) (string, error) { ran.Add(1); return "v2", nil }, nil)
		})
		// v2 sees the orphan (its lease is gone after 1s) but leaves it alone.
		h, err := v2.Handle(ctx, "v1-run")
		require.NoError(t, err)
		waitCtx, cancel := context.WithTimeout(ctx, 2500*1e6)
		defer cancel()
		_, err = h.Result(waitCtx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Zero(t, ran.Load())
		require.Contains(t, b.logs.String(), "wait for an executor of their application version")

		// An executor of v1 finishes it.
		var v1b *durable.Workflow[int, string]
		b.engine(t, func(c *durable.Config) { c.AppVersion = "v1"; c.ExecutorID = "old-again" }, func(e *durable.Engine) {
			v1b = durable.Register(e, "versioned", func(wctx durable.Context, in int) (string, error) { return "v1", nil }, nil)
		})
		h1, err := v1b.Handle(ctx, "v1-run")
		require.NoError(t, err)
		out, err := h1.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "v1", out)
	})

	// ChildStartKeepsChild: a parent that crashed after its child's
	// insert but before the start's checkpoint starts the child again on
	// replay. If the code now computes another input (a new deploy, a changed
	// default), the parent still gets its own child back, as the recorded
	// start would have given it, not an ErrInputMismatch.
	t.Run("ChildStartKeepsChild", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		started := make(chan string, 1)
		var keeper *durable.Workflow[int, int]
		register := func(gen int) func(e *durable.Engine) {
			return func(e *durable.Engine) {
				child := durable.Register(e, "kept", func(wctx durable.Context, in int) (int, error) { return in * 10, nil }, nil)
				keeper = durable.Register(e, "keeper", func(wctx durable.Context, _ int) (int, error) {
					h, err := child.StartChild(wctx, gen, &durable.StartOpts{ID: "kept-child"})
					if err != nil {
						return 0, err
					}
					if gen == 1 {
						return 0, blockUntilStopped(wctx, started)
					}
					return h.Await(wctx)
				}, nil)
			}
		}
		e1 := b.engine(t, func(c *durable.Config) { c.ExecutorID = "gen-1" }, register(1))
		ctx := ctxT(t)
		_, err := keeper.Start(ctx, 0, &durable.StartOpts{ID: "keeper-1"})
		require.NoError(t, err)
		<-started
		hardStop(t, e1)
		// The crash came before the start's checkpoint.
		tag, err := b.pool.Exec(ctx, "DELETE FROM "+pgx.Identifier{b.schema, "steps"}.Sanitize()+
			" WHERE workflow_id = 'keeper-1' AND name = 'child:kept'")
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected())

		b.engine(t, func(c *durable.Config) { c.ExecutorID = "gen-2" }, register(2))
		h, err := keeper.Handle(ctx, "keeper-1")
		require.NoError(t, err)
		out, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 10, out, "the child started by the first execution, with its input")
	})

	// LiveStepValueIsTheReplayedOne checks that a step returns, live, the
	// value its replay returns: the decoded record. Outputs of predeclared
	// scalar types skip the decoding when live (their JSON round trip is
	// exact), so the edge cases of that claim are here: HTML characters that
	// JSON escapes, non-ASCII text, invalid UTF-8 (replaced when encoded, so
	// decoded live too), extreme integers, floats that print short or long,
	// negative zero, an int returned as any (by a plain, a transaction and an
	// intent step). The run records them, parks in Recv, and is replayed from
	// its records when the message comes.
	t.Run("LiveStepValueIsTheReplayedOne", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		type seen struct {
			S             []string
			I64           int64
			U64           uint64
			F64, F64b, NZ float64
			F32           float32
			B             bool
			Named         level
			Struct        pair
			Any           any
			TxAny         any    // the same through a transaction step
			IntentBad     string // and through an intent step
		}
		var mu sync.Mutex
		var execs []seen
		strs := []string{"<a href=\"x\">&amp;</a>", "naïve — ☃ \u2028", "bad \xff\xfe utf8", ""}
		var wf *durable.Workflow[int, int]
		e := b.engine(t, func(c *durable.Config) { c.ParkThreshold = time.Millisecond }, func(e *durable.Engine) {
			wf = durable.Register(e, "values", func(wctx durable.Context, _ int) (int, error) {
				var s seen
				for i, v := range strs {
					got, err := durable.Step(wctx, fmt.Sprint("s", i), func(context.Context) (string, error) { return v, nil }, nil)
					if err != nil {
						return 0, err
					}
					s.S = append(s.S, got)
				}
				var err error
				step := func(f func() error) {
					if err == nil {
						err = f()
					}
				}
				step(func() (e error) {
					s.I64, e = durable.Step(wctx, "i64", func(context.Context) (int64, error) { return math.MinInt64, nil }, nil)
					return e
				})
				step(func() (e error) {
					s.U64, e = durable.Step(wctx, "u64", func(context.Context) (uint64, error) { return math.MaxUint64, nil }, nil)
					return e
				})
				step(func() (e error) {
					s.F64, e = durable.Step(wctx, "f64", func(context.Context) (float64, error) { return 0.1 + 0.2, nil }, nil)
					return e
				})
				step(func() (e error) {
					s.F64b, e = durable.Step(wctx, "f64b", func(context.Context) (float64, error) { return 1e300 * 3.3, nil }, nil)
					return e
				})
				step(func() (e error) {
					s.NZ, e = durable.Step(wctx, "nz", func(context.Context) (float64, error) { return math.Copysign(0, -1), nil }, nil)
					return e
				})
				step(func() (e error) {
					s.F32, e = durable.Step(wctx, "f32", func(context.Context) (float32, error) { return 16777217.5, nil }, nil)
					return e
				})
				step(func() (e error) {
					s.B, e = durable.Step(wctx, "b", func(context.Context) (bool, error) { return true, nil }, nil)
					return e
				})
				step(func() (e error) { // a named type with its own encoding: decoded
					s.Named, e = durable.Step(wctx, "named", func(context.Context) (level, error) { return 7, nil }, nil)
					return e
				})
				step(func() (e error) { // an int in an interface comes back a float64, live too
					s.Any, e = durable.Step(wctx, "any", func(context.Context) (any, error) { return 42, nil }, nil)
					return e
				})
				step(func() (e error) {
					s.TxAny, e = durable.TxStep(wctx, "tx-any", func(context.Context, pgx.Tx) (any, error) { return 42, nil }, nil)
					return e
				})
				step(func() (e error) {
					s.IntentBad, e = durable.IntentStep(wctx, "intent-bad", func(context.Context) (string, error) { return "bad \xff", nil }, nil, nil)
					return e
				})
				step(func() (e error) { // an unexported field is lost by the record, live too
					s.Struct, e = durable.Step(wctx, "struct", func(context.Context) (pair, error) { return pair{A: 1, b: 2}, nil }, nil)
					return e
				})
				if err != nil {
					return 0, err
				}
				mu.Lock()
				execs = append(execs, s)
				mu.Unlock()
				if _, ok, err := durable.Recv[int](wctx, "go", time.Hour); err != nil || !ok {
					return 0, fmt.Errorf("recv: %v %v", ok, err)
				}
				return 1, nil
			}, nil)
		})
		h, err := wf.Start(ctxT(t), 0, nil)
		require.NoError(t, err)
		// Send once the run is parked (a message there before would be
		// received without parking, and nothing would be replayed).
		parked := fmt.Sprintf(`SELECT count(*) FROM %q.workflows WHERE id = $1 AND status = 'pending' AND executor_id IS NULL AND wait_topic = 'go'`, b.schema)
		require.Eventually(t, func() bool {
			var n int
			_ = b.pool.QueryRow(ctxT(t), parked, h.ID()).Scan(&n)
			return n == 1
		}, 20*time.Second, 5*time.Millisecond)
		require.NoError(t, durable.Send(ctxT(t), e, h.ID(), "go", 1, nil))
		_, err = h.Result(ctxT(t))
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, execs, 2, "the run parked and was replayed")
		live, replayed := execs[0], execs[1]
		require.Equal(t, replayed, live)
		require.Equal(t, math.Signbit(replayed.NZ), math.Signbit(live.NZ), "negative zero")
		require.Equal(t, "bad \ufffd\ufffd utf8", live.S[2], "invalid UTF-8 comes back replaced, live as on replay")
		require.Equal(t, level(7+100), live.Named, "a named type's own encoding applies live")
		require.Equal(t, pair{A: 1}, live.Struct)
		require.Equal(t, any(float64(42)), live.Any)
		require.Equal(t, any(float64(42)), live.TxAny)
		require.Equal(t, "bad \ufffd", live.IntentBad)
	})

	// GoParallelSteps: steps started with Go run
	// concurrently, are recorded at the positions of their Go calls whatever
	// order they finish in, and replay without running again.
	t.Run("GoParallelSteps", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		started := make(chan string, 1)
		var inFlight, maxInFlight atomic.Int32
		var mu sync.Mutex
		runs := map[int]int{}
		body := func(block bool) func(wctx durable.Context, n int) (string, error) {
			return func(wctx durable.Context, n int) (string, error) {
				var fs []*durable.Future[string]
				for i := 0; i < n; i++ {
					fs = append(fs, durable.Go(wctx, fmt.Sprintf("call-%d", i), func(ctx context.Context) (string, error) {
						mu.Lock()
						runs[i]++
						mu.Unlock()
						cur := inFlight.Add(1)
						for {
							m := maxInFlight.Load()
							if cur <= m || maxInFlight.CompareAndSwap(m, cur) {
								break
							}
						}
						time.Sleep(time.Duration(n-i) * 15 * time.Millisecond) // later calls finish first
						inFlight.Add(-1)
						return fmt.Sprintf("r%d@%d", i, durable.StepInfoMust(ctx).Pos), nil
					}, nil))
				}
				out := ""
				for _, f := range fs {
					v, err := f.Wait()
					if err != nil {
						return "", err
					}
					out += v + " "
				}
				if block {
					return out, blockUntilStopped(wctx, started)
				}
				return out, nil
			}
		}
		var wf *durable.Workflow[int, string]
		e1 := b.engine(t, func(c *durable.Config) { c.ExecutorID = "first" }, func(e *durable.Engine) {
			wf = durable.Register(e, "fan-out", body(true), nil)
		})
		ctx := ctxT(t)
		_, err := wf.Start(ctx, 5, &durable.StartOpts{ID: "fan"})
		require.NoError(t, err)
		<-started
		hardStop(t, e1)
		require.Greater(t, maxInFlight.Load(), int32(1), "the steps ran concurrently")

		b.engine(t, func(c *durable.Config) { c.ExecutorID = "second" }, func(e *durable.Engine) {
			wf = durable.Register(e, "fan-out", body(false), nil)
		})
		h, err := wf.Handle(ctx, "fan")
		require.NoError(t, err)
		out, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "r0@0 r1@1 r2@2 r3@3 r4@4 ", out)
		mu.Lock()
		defer mu.Unlock()
		for i := 0; i < 5; i++ {
			require.Equal(t, 1, runs[i], "call %d ran once, replayed after the restart", i)
		}
	})
}

// level encodes itself (plus 100 on the way in), unlike its underlying int.
type level int

func (l level) MarshalJSON() ([]byte, error) { return []byte(strconv.Itoa(int(l))), nil }

func (l *level) UnmarshalJSON(b []byte) error {
	n, err := strconv.Atoi(string(b))
	*l = level(n + 100)
	return err
}

type pair struct {
	A int
	b int
}
