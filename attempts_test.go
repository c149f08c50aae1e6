package durable_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// attemptLog records the StepInfo of every attempt of the attempt tests.
type attemptLog struct {
	mu    sync.Mutex
	calls []string // "engine:attempt:resumed:key"
}

func (l *attemptLog) add(engine string, ctx context.Context) {
	info := durable.StepInfoMust(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, fmt.Sprintf("%s:%d:%v:%s", engine, info.Attempt, info.Resumed, info.IdempotencyKey()))
}

func (l *attemptLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.calls...)
}

// TestStepAttemptsCarryAcrossExecutions: a step (plain, and transaction)
// with MaxAttempts 3 fails twice, then its engine shuts down during the
// retry's backoff. The engine that resumes the run makes attempt 3, told
// it is resumed, and no more: the step fails after 3 attempts in all,
// with one idempotency key throughout. A step that succeeds at once
// records no attempt.
func TestStepAttemptsCarryAcrossExecutions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := ctxT(t)
	log := &attemptLog{}
	// A short wait after the first attempt, and after the second one long
	// enough that the first engine is sure to stop in it.
	policy := &durable.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Millisecond, Factor: float64(time.Hour / time.Millisecond),
		MaxDelay: time.Hour, Jitter: -1}
	wfs := map[string]*durable.Workflow[int, int]{}
	register := func(engine string) func(e *durable.Engine) {
		return func(e *durable.Engine) {
			wfs["plain"] = durable.Register(e, "plain", func(wctx durable.Context, _ int) (int, error) {
				if _, err := durable.Step(wctx, "ok", func(ctx context.Context) (int, error) { return 1, nil }, nil); err != nil {
					return 0, err
				}
				return durable.Step(wctx, "flaky", func(ctx context.Context) (int, error) {
					log.add(engine, ctx)
					return 0, errors.New("provider down")
				}, &durable.StepOpts{Retry: policy})
			}, nil)
			wfs["tx"] = durable.Register(e, "tx", func(wctx durable.Context, _ int) (int, error) {
				return durable.TxStep(wctx, "flaky-tx", func(ctx context.Context, tx pgx.Tx) (int, error) {
					log.add(engine, ctx)
					return 0, errors.New("rule violated")
				}, &durable.TxStepOpts{Retry: policy})
			}, nil)
		}
	}
	first := b.engine(t, func(c *durable.Config) { c.ExecutorID = "first" }, register("first"))
	for _, name := range []string{"plain", "tx"} {
		_, err := wfs[name].Start(ctx, 0, &durable.StartOpts{ID: name + "-run"})
		require.NoError(t, err)
	}
	// Both steps failed twice and wait for their third attempt.
	require.Eventually(t, func() bool {
		var n int
		err := b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.schema+".step_attempts WHERE attempts = 2").Scan(&n)
		return err == nil && n == 2
	}, 30*time.Second, 10*time.Millisecond, "logs:\n%s", b.logs.String())
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, first.Shutdown(sctx))

	b.engine(t, func(c *durable.Config) { c.ExecutorID = "second" }, register("second"))
	for _, name := range []string{"plain", "tx"} {
		id := name + "-run"
		h, err := wfs[name].Handle(ctx, id)
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.ErrorContains(t, err, "failed after 3 attempt(s)", id)
	}
	require.Equal(t, map[string]int{"plain-run": 3, "tx-run": 3},
		queryMap[string, int](t, b.pool, "SELECT workflow_id, attempts FROM "+b.schema+".steps WHERE status = 'error'"))
	calls := log.list()
	for _, key := range []string{"plain-run/1", "tx-run/0"} {
		var mine []string
		for _, c := range calls {
			if c[len(c)-len(key):] == key {
				mine = append(mine, c)
			}
		}
		require.Equal(t, []string{"first:1:false:" + key, "first:2:false:" + key, "second:3:true:" + key}, mine)
	}
	// The step that succeeded at once wrote nothing but its checkpoint.
	require.Empty(t, queryMap[int, int](t, b.pool, "SELECT pos, attempts FROM "+b.schema+".step_attempts WHERE workflow_id = 'plain-run' AND pos = 0"))
}

// TestIntentStepResumed: an IntentStep cut short (its engine stopped
// without waiting for it, as in a crash) is resumed by the next engine:
// its resolve call and the attempt after it are told so.
func TestIntentStepResumed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := ctxT(t)
	log := &attemptLog{}
	var wf *durable.Workflow[int, int]
	inCall := make(chan struct{}, 1)
	register := func(engine string) func(e *durable.Engine) {
		return func(e *durable.Engine) {
			wf = durable.Register(e, "pay", func(wctx durable.Context, _ int) (int, error) {
				return durable.IntentStep(wctx, "pay", func(ctx context.Context) (int, error) {
					log.add(engine, ctx)
					if engine == "first" {
						inCall <- struct{}{}
						<-ctx.Done() // cut short by the stop
						return 0, ctx.Err()
					}
					return 7, nil
				}, func(ctx context.Context) (int, error) {
					log.add(engine+"-resolve", ctx)
					return 0, durable.ErrRunAgain
				}, nil)
			}, nil)
		}
	}
	cfg := func(c *durable.Config) { c.ExecutorID = "intent-exec" }
	first := b.engine(t, cfg, register("first"))
	_, err := wf.Start(ctx, 0, &durable.StartOpts{ID: "pay-run"})
	require.NoError(t, err)
	<-inCall
	sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	require.Error(t, first.Shutdown(sctx), "the stop cut the step short")

	b.engine(t, cfg, register("second"))
	h, err := wf.Handle(ctx, "pay-run")
	require.NoError(t, err)
	got, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 7, got)
	require.Equal(t, []string{"first:1:false:pay-run/0", "second-resolve:0:true:pay-run/0", "second:1:true:pay-run/0"}, log.list())
}
