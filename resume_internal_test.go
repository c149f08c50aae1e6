package durable

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/hooks"
	"github.com/durable-go/durable/internal/sysdbtest"
)

// TestResumeBounded: a restart with many pending runs whose recorded
// steps are large resumes every one of them, each once, replaying its
// steps; no query loads more than the byte budget of recorded outputs
// (unless it loads a single run), and no more than RecoveryConcurrency of
// the runs execute at once. The runs beyond it at Launch are handed back
// and claimed by the sweeper as the first ones end.
func TestResumeBounded(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	pool, schema := sysdbtest.Migrated(t)
	const (
		runs      = 24
		limit     = 4
		budget    = 1 << 20
		stepBytes = 100 << 10 // three steps: ~300 KiB a run, three runs to a load
	)
	// Incompressible, so that the stored size the load budget reads is the
	// size loaded.
	big := func(id string, _ int) string {
		b := make([]byte, stepBytes*3/4)
		_, _ = rand.Read(b)
		return base64.StdEncoding.EncodeToString(b) + id
	}

	var (
		started   = make(chan string, runs)
		executed  atomic.Int32 // step executions after the restart
		executing atomic.Int32
		peak      atomic.Int32
		over      = make(chan struct{}) // closed when more than limit runs execute at once
		overOnce  sync.Once
	)
	register := func(e *Engine, resumed bool) *Workflow[int, string] {
		return Register(e, "big", func(wctx Context, n int) (string, error) {
			if resumed {
				cur := executing.Add(1)
				defer executing.Add(-1)
				for p := peak.Load(); cur > p && !peak.CompareAndSwap(p, cur); p = peak.Load() {
				}
				if cur > limit {
					overOnce.Do(func() { close(over) })
				}
			}
			var got string
			for i := 0; i < 3; i++ {
				out, err := Step(wctx, fmt.Sprintf("big-%d", i), func(context.Context) (string, error) {
					if resumed {
						executed.Add(1)
					}
					return big(wctx.WorkflowID(), i), nil
				}, nil)
				if err != nil {
					return "", err
				}
				got += out[stepBytes:]
			}
			if !resumed {
				started <- wctx.WorkflowID()
				<-wctx.Done() // until the hard stop
				return "", wctx.Err()
			}
			// A while, so that runs overlap unless the limit keeps them apart.
			t := time.NewTimer(200 * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
			case <-over:
			}
			return got, nil
		}, nil)
	}
	cfg := &Config{Schema: schema, AppVersion: "test", ExecutorID: "resume", LeaseTTL: time.Second, PollInterval: 100 * time.Millisecond}

	e1, err := New(pool, cfg)
	require.NoError(t, err)
	wf := register(e1, false)
	require.NoError(t, e1.Launch(ctx))
	for i := 0; i < runs; i++ {
		_, err := wf.Start(ctx, i, &StartOpts{ID: fmt.Sprintf("big-%02d", i)})
		require.NoError(t, err)
	}
	for i := 0; i < runs; i++ {
		<-started
	}
	stopped, stop := context.WithCancel(ctx)
	stop()
	require.Error(t, e1.Shutdown(stopped)) // a hard stop: the runs stay pending and ours

	var mu sync.Mutex
	type load struct{ runs, bytes int }
	var loads []load
	cfg.RecoveryConcurrency = limit
	hooks.Set(cfg, hooks.Knobs{ResumeLoadBytes: budget, OnResumeLoad: func(runs, bytes int) {
		mu.Lock()
		loads = append(loads, load{runs, bytes})
		mu.Unlock()
	}})
	e2, err := New(pool, cfg)
	require.NoError(t, err)
	wf = register(e2, true)
	launchUntilCleanup(ctx, t, e2)
	for i := 0; i < runs; i++ {
		id := fmt.Sprintf("big-%02d", i)
		h, err := wf.Handle(ctx, id)
		require.NoError(t, err)
		out, err := h.Result(ctx)
		require.NoError(t, err, id)
		require.Equal(t, id+id+id, out, "%s replayed its own steps", id)
	}
	require.Zero(t, executed.Load(), "recorded steps are replayed, not executed again")
	require.LessOrEqual(t, peak.Load(), int32(limit), "runs executing at once")

	mu.Lock()
	defer mu.Unlock()
	total, multi := 0, false
	for _, l := range loads {
		total += l.runs
		multi = multi || l.runs > 1
		if l.runs > 1 {
			require.LessOrEqual(t, l.bytes, budget, "a load of %d runs", l.runs)
		}
	}
	require.Equal(t, runs, total, "each run's steps loaded once: %v", loads)
	require.True(t, multi, "loads take several runs when they fit: %v", loads)
	var maxAttempts int
	require.NoError(t, pool.QueryRow(ctx, "SELECT max(recovery_attempts) FROM "+pgx.Identifier{schema, "workflows"}.Sanitize()).Scan(&maxAttempts))
	require.Equal(t, 1, maxAttempts, "each run was recovered once")
}

// TestResumeWindowed: a resumed run holds one window of its recorded steps
// at a time. The replay of a run with many steps reads them window by
// window as it reaches them, replays every one (none executes again), and
// never holds more than a window.
func TestResumeWindowed(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	pool, schema := sysdbtest.Migrated(t)
	const steps, window = 60, 8
	var executed atomic.Int32
	started := make(chan struct{}, 1)
	register := func(e *Engine, resumed bool) *Workflow[int, int] {
		return Register(e, "long", func(wctx Context, _ int) (int, error) {
			sum := 0
			for i := 0; i < steps; i++ {
				n, err := Step(wctx, fmt.Sprintf("s-%d", i), func(context.Context) (int, error) {
					if resumed {
						executed.Add(1)
					}
					return i, nil
				}, nil)
				if err != nil {
					return 0, err
				}
				sum += n
			}
			if !resumed {
				started <- struct{}{}
				<-wctx.Done() // until the hard stop
				return 0, wctx.Err()
			}
			return sum, nil
		}, nil)
	}
	cfg := &Config{Schema: schema, AppVersion: "test", ExecutorID: "window", LeaseTTL: time.Second, PollInterval: 100 * time.Millisecond}
	e1, err := New(pool, cfg)
	require.NoError(t, err)
	wf := register(e1, false)
	require.NoError(t, e1.Launch(ctx))
	_, err = wf.Start(ctx, 0, &StartOpts{ID: "long"})
	require.NoError(t, err)
	<-started
	require.Eventually(t, func() bool { // the last checkpoint is written just after its step
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "steps"}.Sanitize()).Scan(&n))
		return n == steps
	}, 10*time.Second, 5*time.Millisecond)
	stopped, stop := context.WithCancel(ctx)
	stop()
	require.Error(t, e1.Shutdown(stopped)) // a hard stop: the run stays pending and ours

	var mu sync.Mutex
	var held []int
	hooks.Set(cfg, hooks.Knobs{ResumeWindow: window, OnResumeWindow: func(n int) {
		mu.Lock()
		held = append(held, n)
		mu.Unlock()
	}})
	e2, err := New(pool, cfg)
	require.NoError(t, err)
	wf = register(e2, true)
	launchUntilCleanup(ctx, t, e2)
	h, err := wf.Handle(ctx, "long")
	require.NoError(t, err)
	out, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, steps*(steps-1)/2, out, "every step's recorded output replayed")
	require.Zero(t, executed.Load(), "recorded steps are replayed, not executed again")
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, len(held), steps/window, "windows read: %v", held)
	for _, n := range held {
		require.LessOrEqual(t, n, window, "steps held at once: %v", held)
	}
}
