package durable_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/sysdbtest"
)

// runRetryChild: mode "retry" registers "down" (one step that always
// fails, each call logged in @calls; three attempts 2 s apart by the
// workflow's retry policy) and starts run r1 when DURABLE_START is set.
func runRetryChild(ctx context.Context, e *durable.Engine, pool *pgxpool.Pool, q func(string) string) error {
	wf := durable.Register(e, "down", func(wctx durable.Context, _ int) (string, error) {
		return durable.Step(wctx, "call", func(ctx context.Context) (string, error) {
			if _, err := pool.Exec(ctx, q("INSERT INTO @calls (pid) VALUES ($1)"), os.Getpid()); err != nil {
				return "", err
			}
			return "", errors.New("provider down")
		}, &durable.StepOpts{Retry: &durable.RetryPolicy{MaxAttempts: 1}})
	}, &durable.WorkflowOpts{Retry: &durable.RetryPolicy{MaxAttempts: 3, BaseDelay: 2 * time.Second, Jitter: -1}})
	if err := e.Launch(ctx); err != nil {
		return err
	}
	if os.Getenv("DURABLE_START") != "" {
		if _, err := wf.Start(ctx, 0, &durable.StartOpts{ID: "r1"}); err != nil {
			return err
		}
	}
	fmt.Println("ready")
	select {} // until killed
}

// TestWorkflowRetrySurvivesKill: the process is SIGKILLed while the run
// waits for its first retry; a new process makes the remaining attempts
// only (the count is stored with the run), each after its backoff (the
// wake-up time is stored too), and fails the run saying how many attempts
// were made.
func TestWorkflowRetrySurvivesKill(t *testing.T) {
	t.Parallel()
	pool, schema := sysdbtest.Migrated(t)
	q := waitsQ(schema)
	ctx := ctxT(t)
	_, err := pool.Exec(ctx, q("CREATE TABLE @calls (pid int, at timestamptz DEFAULT clock_timestamp())"))
	require.NoError(t, err)
	c := startReady(t, "retry", schema, "retrier", "DURABLE_LEASE=30s", "DURABLE_START=1")
	require.Eventually(t, func() bool {
		var retries int
		err := pool.QueryRow(ctx, q("SELECT coalesce(retries, 0) FROM @workflows WHERE id = 'r1'")).Scan(&retries)
		return err == nil && retries == 1
	}, 30*time.Second, 5*time.Millisecond)
	c.Kill(t)

	startReady(t, "retry", schema, "retrier", "DURABLE_LEASE=30s")
	var status, errText string
	var retries int
	require.Eventually(t, func() bool {
		_ = pool.QueryRow(ctx, q("SELECT status, coalesce(error::text, ''), coalesce(retries, 0) FROM @workflows WHERE id = 'r1'")).Scan(&status, &errText, &retries)
		return status != "pending"
	}, 30*time.Second, 5*time.Millisecond)
	require.Equal(t, "error", status)
	require.Contains(t, errText, "failed after 3 attempts")
	require.Equal(t, 2, retries)
	var calls int
	var gaps []float64
	require.NoError(t, pool.QueryRow(ctx, q(`SELECT count(*), coalesce(array_agg(gap) FILTER (WHERE gap IS NOT NULL), '{}') FROM (
	SELECT extract(epoch FROM at - lag(at) OVER (ORDER BY at))::float8 AS gap FROM @calls) g`)).Scan(&calls, &gaps))
	require.Equal(t, 3, calls, "three attempts in all, across the kill")
	require.Len(t, gaps, 2)
	require.GreaterOrEqual(t, gaps[0], 1.9, "the second attempt waited for the stored wake-up time (2 s), across the kill")
	require.GreaterOrEqual(t, gaps[1], 3.9, "the third waited the doubled backoff (4 s)")
}
