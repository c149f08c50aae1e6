package durable_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
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

// streamProbe is a workflow whose step writes to a stream: it tells
// whether step contexts carry their run (the engine hook streams need from
// step code).
func registerStreamProbe(e *durable.Engine) *durable.Workflow[int, bool] {
	return durable.Register(e, "stream-probe", func(wctx durable.Context, _ int) (bool, error) {
		return durable.Step(wctx, "probe", func(ctx context.Context) (bool, error) {
			err := durable.StreamWriteFromStep(ctx, "probe", 1)
			if errors.Is(err, durable.ErrInvalidArgument) {
				return false, nil
			}
			return err == nil, err
		}, nil)
	}, nil)
}

// stepStreamsWired reports whether stream writes from steps work, and with
// them the flushes at step and run ends wired together with them.
func stepStreamsWired(t *testing.T, probe *durable.Workflow[int, bool]) bool {
	t.Helper()
	h, err := probe.Start(ctxT(t), 0, nil)
	require.NoError(t, err)
	ok, err := h.Result(ctxT(t))
	require.NoError(t, err)
	return ok
}

// readAll drains a stream reader.
func readAll[T any](ctx context.Context, e *durable.Engine, id, key string, from int64) ([]durable.StreamEntry[T], error) {
	var out []durable.StreamEntry[T]
	for ent, err := range durable.StreamRead[T](ctx, e, id, key, from) {
		if err != nil {
			return out, err
		}
		out = append(out, ent)
	}
	return out, nil
}

// requireRun checks entries are exactly offsets from..from+len-1 with value
// equal to the offset.
func requireRun(t *testing.T, entries []durable.StreamEntry[int], from, n int) {
	t.Helper()
	require.Len(t, entries, n)
	for i, ent := range entries {
		if ent.Offset != int64(from+i) || ent.Value != from+i {
			t.Fatalf("entry %d: offset %d value %d, want %d", i, ent.Offset, ent.Value, from+i)
		}
	}
}

// TestStream covers streams: writes from workflow and step code, live
// reads, replays, the end of a stream, bad input, fencing and waits.
func TestStream(t *testing.T) {
	t.Parallel()

	t.Run("WriteAndRead", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		n := 10000
		if v := getenvInt("DURABLE_STREAM_ENTRIES"); v > 0 {
			n = v
		}
		var fromStep atomic.Int64 // entries written by a step, when steps can write
		release := make(chan struct{})
		closedAt := make(chan time.Time, 1)
		var wf *durable.Workflow[int, int]
		var probe *durable.Workflow[int, bool]
		e := b.engine(t, nil, func(e *durable.Engine) {
			probe = registerStreamProbe(e)
			wf = durable.Register(e, "stream-writer", func(wctx durable.Context, n int) (int, error) {
				k, err := durable.Step(wctx, "tokens", func(ctx context.Context) (int, error) {
					k := int(fromStep.Load())
					for i := range k {
						if err := durable.StreamWriteFromStep(ctx, "tokens", i); err != nil {
							return 0, err
						}
					}
					return k, nil
				}, nil)
				if err != nil {
					return 0, err
				}
				for i := k; i < n; i++ {
					if err := durable.StreamWrite(wctx, "tokens", i); err != nil {
						return 0, err
					}
				}
				if err := durable.StreamClose(wctx, "tokens"); err != nil {
					return 0, err
				}
				closedAt <- time.Now()
				select { // stay running: readers must end on the close alone
				case <-release:
				case <-wctx.Done():
					return 0, wctx.Err()
				}
				return n, nil
			}, nil)
		})
		remote := b.engine(t, nil, nil) // a reader in another engine
		if stepStreamsWired(t, probe) {
			fromStep.Store(int64(n * 7 / 10))
		} else {
			t.Log("step contexts do not carry their run yet: all entries are written by workflow code")
		}

		ctx := ctxT(t)
		started := time.Now()
		h, err := wf.Start(ctx, n, &durable.StartOpts{ID: "stream-10k"})
		require.NoError(t, err)

		type result struct {
			name    string
			from    int
			entries []durable.StreamEntry[int]
			err     error
			took    time.Duration
		}
		results := make(chan result, 3)
		read := func(name string, e *durable.Engine, from int) {
			entries, err := readAll[int](ctx, e, h.ID(), "tokens", int64(from))
			results <- result{name, from, entries, err, time.Since(started)}
		}
		go read("from 0", e, 0)
		go read("late, from half", e, n/2)
		go read("other engine, from 0", remote, 0)
		for range 3 {
			res := <-results
			require.NoError(t, res.err, res.name)
			requireRun(t, res.entries, res.from, n-res.from)
			t.Logf("reader %s: %d entries in %v", res.name, len(res.entries), res.took)
		}
		took := (<-closedAt).Sub(started)
		t.Logf("writer: %d entries (%d from a step) written and closed in %v: %.0f entries/s", n, fromStep.Load(), took, float64(n)/took.Seconds())

		// The readers ended on the close while the run still runs.
		st, err := h.Status(ctx)
		require.NoError(t, err)
		require.Equal(t, durable.StatusPending, st)

		entries, done, err := durable.StreamEntries[int](ctx, e, h.ID(), "tokens", int64(n-5), 10)
		require.NoError(t, err)
		requireRun(t, entries, n-5, 5)
		require.True(t, done)
		entries, done, err = durable.StreamEntries[int](ctx, e, h.ID(), "tokens", 0, 100)
		require.NoError(t, err)
		requireRun(t, entries, 0, 100)
		require.False(t, done)
		for _, from := range []int64{int64(n), int64(n) + 1000} {
			entries, done, err = durable.StreamEntries[int](ctx, e, h.ID(), "tokens", from, 0)
			require.NoError(t, err)
			require.Empty(t, entries)
			require.True(t, done, "past the close")
		}

		close(release)
		out, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, n, out)

		// A reader that comes after the run finished reads the tail and ends.
		start := time.Now()
		got, err := readAll[int](ctx, remote, h.ID(), "tokens", 0)
		require.NoError(t, err)
		requireRun(t, got, 0, n)
		t.Logf("late reader: %d entries in %v: %.0f entries/s", n, time.Since(start), float64(n)/time.Since(start).Seconds())
	})

	// A replayed workflow does not write its workflow-code entries again.
	t.Run("ReplayWritesOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var executions atomic.Int32
		started := make(chan struct{}, 1)
		register := func(dst **durable.Workflow[int, int]) func(e *durable.Engine) {
			return func(e *durable.Engine) {
				*dst = durable.Register(e, "stream-replay", func(wctx durable.Context, _ int) (int, error) {
					for i := range 3 {
						if err := durable.StreamWrite(wctx, "events", fmt.Sprintf("before-%d", i)); err != nil {
							return 0, err
						}
					}
					if _, err := durable.Step(wctx, "wait", func(ctx context.Context) (int, error) {
						if executions.Add(1) == 1 {
							started <- struct{}{}
							<-ctx.Done() // the first executor dies here
							return 0, ctx.Err()
						}
						return 0, nil
					}, nil); err != nil {
						return 0, err
					}
					for i := range 2 {
						if err := durable.StreamWrite(wctx, "events", fmt.Sprintf("after-%d", i)); err != nil {
							return 0, err
						}
					}
					if err := durable.StreamClose(wctx, "events"); err != nil {
						return 0, err
					}
					return int(executions.Load()), nil
				}, nil)
			}
		}
		sameExecutor := func(c *durable.Config) { c.ExecutorID = "stream-replay-exec" }
		var wf1, wf2 *durable.Workflow[int, int]
		first := b.engine(t, sameExecutor, register(&wf1))
		ctx := ctxT(t)
		h, err := wf1.Start(ctx, 0, &durable.StartOpts{ID: "replay-1"})
		require.NoError(t, err)
		<-started
		require.Eventually(t, func() bool {
			entries, _, err := durable.StreamEntries[string](ctx, first, h.ID(), "events", 0, 0)
			return err == nil && len(entries) == 3
		}, 10*time.Second, 5*time.Millisecond)
		hardStop(t, first)

		second := b.engine(t, sameExecutor, register(&wf2)) // resumes the run at Launch
		got, err := readAll[string](ctx, second, h.ID(), "events", 0)
		require.NoError(t, err)
		var values []string
		for i, ent := range got {
			require.Equal(t, int64(i), ent.Offset)
			values = append(values, ent.Value)
		}
		require.Equal(t, []string{"before-0", "before-1", "before-2", "after-0", "after-1"}, values)
		h2, err := wf2.Handle(ctx, h.ID())
		require.NoError(t, err)
		out, err := h2.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, out)
	})

	// Without a close, a stream ends when its workflow finishes; entries
	// written by a step are stored before the step's outcome.
	t.Run("EndsWithWorkflow", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var probe *durable.Workflow[int, bool]
		var wf *durable.Workflow[int, int]
		var attempts atomic.Int32
		e := b.engine(t, nil, func(e *durable.Engine) {
			probe = registerStreamProbe(e)
			wf = durable.Register(e, "stream-unclosed", func(wctx durable.Context, n int) (int, error) {
				if err := durable.StreamWrite(wctx, "log", -1); err != nil {
					return 0, err
				}
				// The first attempt writes 10 entries and fails: entries of a
				// step are written at least once per attempt.
				if _, err := durable.Step(wctx, "work", func(ctx context.Context) (int, error) {
					k := n
					if attempts.Add(1) == 1 {
						k = 10
					}
					for i := range k {
						if err := durable.StreamWriteFromStep(ctx, "log", i); err != nil {
							return 0, err
						}
					}
					if k < n {
						return 0, errors.New("first attempt fails")
					}
					return k, nil
				}, nil); err != nil {
					return 0, err
				}
				if _, err := durable.TxStep(wctx, "tx", func(ctx context.Context, tx pgx.Tx) (int, error) {
					return 0, durable.StreamWriteFromStep(ctx, "tx", "in a transaction step")
				}, nil); err != nil {
					return 0, err
				}
				return n, durable.StreamWrite(wctx, "log", n)
			}, nil)
		})
		if !stepStreamsWired(t, probe) {
			t.Skip("step contexts do not carry their run yet (engine hooks not wired)")
		}
		ctx := ctxT(t)
		h, err := wf.Start(ctx, 100, nil)
		require.NoError(t, err)
		got, err := readAll[int](ctx, e, h.ID(), "log", 0)
		require.NoError(t, err)
		want := []int{-1}
		for i := range 10 {
			want = append(want, i)
		}
		for i := range 100 {
			want = append(want, i)
		}
		want = append(want, 100)
		require.Len(t, got, len(want))
		for i, ent := range got {
			require.Equal(t, int64(i), ent.Offset)
			require.Equal(t, want[i], ent.Value, "offset %d", i)
		}
		st, err := h.Status(ctx)
		require.NoError(t, err)
		require.Equal(t, durable.StatusSuccess, st, "the reader ended because the run finished")
		entries, done, err := durable.StreamEntries[int](ctx, e, h.ID(), "log", int64(len(want)-1), 0)
		require.NoError(t, err)
		require.True(t, done)
		require.Len(t, entries, 1)
		tx, done, err := durable.StreamEntries[string](ctx, e, h.ID(), "tx", 0, 0)
		require.NoError(t, err)
		require.True(t, done)
		require.Len(t, tx, 1)
		// A stream never written to ends at once when its run finished.
		got, err = readAll[int](ctx, e, h.ID(), "other", 0)
		require.NoError(t, err)
		require.Empty(t, got)
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		type check struct {
			name string
			err  error
		}
		var mu sync.Mutex
		var checks []check
		record := func(name string, err error) {
			mu.Lock()
			defer mu.Unlock()
			checks = append(checks, check{name, err})
		}
		var wf *durable.Workflow[int, int]
		e := b.engine(t, func(c *durable.Config) { c.MaxPayloadBytes = 1024 }, func(e *durable.Engine) {
			wf = durable.Register(e, "stream-bad", func(wctx durable.Context, _ int) (int, error) {
				record("empty key", durable.StreamWrite(wctx, "", 1))
				record("long key", durable.StreamWrite(wctx, strings.Repeat("k", 256), 1))
				record("close empty key", durable.StreamClose(wctx, ""))
				record("unencodable", durable.StreamWrite(wctx, "k", make(chan int)))
				record("too large", durable.StreamWrite(wctx, "k", strings.Repeat("x", 2000)))
				record("write", durable.StreamWrite(wctx, "k", "a"))
				record("close", durable.StreamClose(wctx, "k"))
				record("close again", durable.StreamClose(wctx, "k"))
				record("write after close", durable.StreamWrite(wctx, "k", "b"))
				record("from step, in workflow code", durable.StreamWriteFromStep(wctx, "k", 1))
				return 0, nil
			}, nil)
		})
		ctx := ctxT(t)
		h, err := wf.Start(ctx, 0, nil)
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.NoError(t, err)
		want := map[string]error{
			"empty key": durable.ErrInvalidArgument, "long key": durable.ErrInvalidArgument,
			"close empty key": durable.ErrInvalidArgument, "unencodable": durable.ErrPermanent,
			"too large": durable.ErrPayloadTooLarge, "write": nil, "close": nil, "close again": nil,
			"write after close": durable.ErrStreamClosed, "from step, in workflow code": durable.ErrInvalidArgument,
		}
		require.Len(t, checks, len(want))
		for _, c := range checks {
			if want[c.name] == nil {
				require.NoError(t, c.err, c.name)
			} else {
				require.ErrorIs(t, c.err, want[c.name], c.name)
			}
		}
		got, err := readAll[string](ctx, e, h.ID(), "k", 0)
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Equal(t, "a", got[0].Value)

		// Outside a workflow.
		err = durable.StreamWriteFromStep(ctx, "k", 1)
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		require.Contains(t, err.Error(), "step function")
		require.ErrorIs(t, durable.StreamWrite[int](nil, "k", 1), durable.ErrInvalidArgument)
		require.ErrorIs(t, durable.StreamClose(nil, "k"), durable.ErrInvalidArgument)

		// Readers.
		_, _, err = durable.StreamEntries[int](ctx, e, "no-such-run", "k", 0, 0)
		require.ErrorIs(t, err, durable.ErrWorkflowNotFound)
		_, err = readAll[int](ctx, e, "no-such-run", "k", 0)
		require.ErrorIs(t, err, durable.ErrWorkflowNotFound)
		for name, call := range map[string]func() error{
			"empty key":      func() error { _, _, err := durable.StreamEntries[int](ctx, e, h.ID(), "", 0, 0); return err },
			"long key":       func() error { _, err := readAll[int](ctx, e, h.ID(), strings.Repeat("k", 300), 0); return err },
			"empty id":       func() error { _, err := readAll[int](ctx, e, "", "k", 0); return err },
			"negative from":  func() error { _, err := readAll[int](ctx, e, h.ID(), "k", -1); return err },
			"negative limit": func() error { _, _, err := durable.StreamEntries[int](ctx, e, h.ID(), "k", 0, -1); return err },
			"huge limit": func() error {
				_, _, err := durable.StreamEntries[int](ctx, e, h.ID(), "k", 0, durable.StreamEntriesLimitMax+1)
				return err
			},
		} {
			require.ErrorIs(t, call(), durable.ErrInvalidArgument, name)
		}
		_, err = readAll[int](ctx, e, h.ID(), "k", 0) // strings read as ints
		require.ErrorIs(t, err, durable.ErrDecode)

		// An error is yielded once and ends the iteration.
		var n int
		for _, err := range durable.StreamRead[int](ctx, e, "no-such-run-either", "k", 0) {
			require.ErrorIs(t, err, durable.ErrWorkflowNotFound)
			n++
		}
		require.Equal(t, 1, n)
	})

	// A reader waiting on a running workflow ends with its context.
	t.Run("ReadContext", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var wf *durable.Workflow[int, int]
		release := make(chan struct{})
		defer close(release)
		e := b.engine(t, nil, func(e *durable.Engine) {
			wf = durable.Register(e, "stream-idle", func(wctx durable.Context, _ int) (int, error) {
				if err := durable.StreamWrite(wctx, "k", 7); err != nil {
					return 0, err
				}
				<-release
				return 0, nil
			}, nil)
		})
		ctx := ctxT(t)
		h, err := wf.Start(ctx, 0, nil)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			entries, _, err := durable.StreamEntries[int](ctx, e, h.ID(), "k", 0, 0)
			return err == nil && len(entries) == 1
		}, 10*time.Second, 5*time.Millisecond)
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		var got []int
		var last error
		for ent, err := range durable.StreamRead[int](short, e, h.ID(), "k", 0) {
			if err != nil {
				last = err
				continue
			}
			got = append(got, ent.Value)
		}
		require.Equal(t, []int{7}, got)
		require.ErrorIs(t, last, context.DeadlineExceeded)
		// Breaking out of the loop is fine too.
		for range durable.StreamRead[int](ctx, e, h.ID(), "k", 0) {
			break
		}
	})

	// The entries of an executor that lost the run are rejected, like its
	// checkpoints.
	t.Run("FencedWriter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		proceed := make(chan struct{})
		closeErr := make(chan error, 1)
		var wf *durable.Workflow[int, int]
		e := b.engine(t, nil, func(e *durable.Engine) {
			wf = durable.Register(e, "stream-fenced", func(wctx durable.Context, _ int) (int, error) {
				if err := durable.StreamWrite(wctx, "k", 1); err != nil {
					return 0, err
				}
				<-proceed
				_ = durable.StreamWrite(wctx, "k", 2) // queued; rejected when written
				err := durable.StreamClose(wctx, "k")
				closeErr <- err
				return 0, err
			}, nil)
		})
		ctx := ctxT(t)
		h, err := wf.Start(ctx, 0, nil)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			entries, _, err := durable.StreamEntries[int](ctx, e, h.ID(), "k", 0, 0)
			return err == nil && len(entries) == 1
		}, 10*time.Second, 5*time.Millisecond)
		// Another executor takes the run over (as after a lease expiry).
		_, err = b.pool.Exec(ctx, "UPDATE "+pgx.Identifier{b.schema, "workflows"}.Sanitize()+" SET epoch = epoch + 1 WHERE id = $1", h.ID())
		require.NoError(t, err)
		close(proceed)
		require.ErrorIs(t, <-closeErr, durable.ErrFenced)
		entries, done, err := durable.StreamEntries[int](ctx, e, h.ID(), "k", 0, 0)
		require.NoError(t, err)
		require.False(t, done)
		require.Len(t, entries, 1)
		require.Equal(t, 1, entries[0].Value)
	})

	// WaitsEnd: stream calls that wait for the database (the stream
	// table locked by another transaction) return when the step's timeout
	// passes or the run is cancelled, while the lock is still held: the flush
	// of a step's entries, and a workflow's first write to a stream, which
	// reads where the stream stands.
	t.Run("WaitsEnd", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const (
			flushTimeout = iota // a step with a timeout whose entry cannot be stored
			flushCancel         // the same without a timeout; the run is cancelled
			loadCancel          // a first write to a stream; the run is cancelled
		)
		ready := make(chan struct{})    // the run is about to block, once the test locked the table
		proceed := make(chan struct{})  // the table is locked
		blocked := make(chan struct{})  // the stream call is under way
		returned := make(chan error, 1) // what the stream call (or its step) returned
		var wf *durable.Workflow[int, int]
		e := b.engine(t, nil, func(e *durable.Engine) {
			wf = durable.Register(e, "stream-wait", func(wctx durable.Context, mode int) (int, error) {
				if mode != loadCancel { // the stream's state is loaded, the table not locked yet
					if _, err := durable.Step(wctx, "first", func(ctx context.Context) (int, error) {
						return 0, durable.StreamWriteFromStep(ctx, "s", 0)
					}, nil); err != nil {
						return 0, err
					}
				}
				ready <- struct{}{}
				<-proceed
				var err error
				write := func(ctx context.Context) (int, error) {
					err := durable.StreamWriteFromStep(ctx, "s", 1)
					blocked <- struct{}{}
					return 1, err
				}
				switch mode {
				case flushTimeout:
					_, err = durable.Step(wctx, "blocked", write,
						&durable.StepOpts{Timeout: 300 * time.Millisecond, Retry: &durable.RetryPolicy{MaxAttempts: 1}})
				case flushCancel:
					_, err = durable.Step(wctx, "blocked", write, nil)
				case loadCancel:
					blocked <- struct{}{}
					err = durable.StreamWrite(wctx, "s", 0)
				}
				returned <- err
				return 0, err
			}, nil)
		})
		ctx := ctxT(t)
		for _, c := range []struct {
			name   string
			mode   int
			cancel bool
			want   error
		}{
			{"step timeout ends a flush", flushTimeout, false, context.DeadlineExceeded},
			{"cancel ends a flush", flushCancel, true, durable.ErrCancelled},
			{"cancel ends a stream state read", loadCancel, true, durable.ErrCancelled},
		} {
			id := fmt.Sprintf("stream-wait-%d", c.mode)
			_, err := wf.Start(ctx, c.mode, &durable.StartOpts{ID: id})
			require.NoError(t, err)
			<-ready
			lock, err := b.pool.Begin(ctx)
			require.NoError(t, err)
			_, err = lock.Exec(ctx, "LOCK TABLE "+pgx.Identifier{b.schema, "streams"}.Sanitize()+" IN ACCESS EXCLUSIVE MODE")
			require.NoError(t, err)
			proceed <- struct{}{}
			<-blocked
			if c.cancel {
				require.NoError(t, e.Cancel(ctx, id, nil))
			}
			select {
			case err := <-returned:
				require.ErrorIs(t, err, c.want, c.name)
			case <-time.After(30 * time.Second):
				_ = lock.Rollback(ctx)
				t.Fatalf("%s: the stream call still waits for the locked table", c.name)
			}
			require.NoError(t, lock.Rollback(ctx))
			h, err := wf.Handle(ctx, id)
			require.NoError(t, err)
			_, err = h.Result(ctx)
			require.True(t, errors.Is(err, c.want), "%s: the run ends with %v", c.name, err)
		}
	})
}

// A workflow streams tokens to a reader that follows them live; the
// reader ends at the close.
func ExampleStreamRead() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS example_stream CASCADE")
	eng, err := durable.New(pool, &durable.Config{Schema: "example_stream", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	answer := durable.Register(eng, "answer", func(wctx durable.Context, question string) (int, error) {
		// In a real agent, the model call is a step that writes each token
		// as it arrives, with durable.StreamWriteFromStep.
		for _, tok := range []string{"Durable", " execution", " on", " Postgres"} {
			if err := durable.StreamWrite(wctx, "tokens", tok); err != nil {
				return 0, err
			}
		}
		return 4, durable.StreamClose(wctx, "tokens")
	}, nil)
	if err := eng.Launch(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = eng.Shutdown(ctx) }()

	h, err := answer.Start(ctx, "what is this?", &durable.StartOpts{ID: "answer-1"})
	if err != nil {
		panic(err)
	}
	var got []string
	for ent, err := range durable.StreamRead[string](ctx, eng, h.ID(), "tokens", 0) {
		if err != nil {
			panic(err)
		}
		got = append(got, fmt.Sprintf("%d:%q", ent.Offset, ent.Value))
	}
	fmt.Println(strings.Join(got, " "))
	// A late reader resumes from any offset.
	tail, done, err := durable.StreamEntries[string](ctx, eng, h.ID(), "tokens", 2, 0)
	fmt.Println(len(tail), tail[0].Value, done, err)
	// Output:
	// 0:"Durable" 1:" execution" 2:" on" 3:" Postgres"
	// 2  on true <nil>
}
