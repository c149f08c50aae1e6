package durable_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/proctest"
)

// runAttemptsChild runs the workflow of TestStepAttemptsSurviveSIGKILL: a
// step with MaxAttempts 3 that always fails, logging each attempt's
// StepInfo in an app table. It waits a moment after its first attempt,
// and an hour after its second: the test kills the process there.
func runAttemptsChild(ctx context.Context, e *durable.Engine, pool *pgxpool.Pool, schema string) error {
	table := pgx.Identifier{schema, "attempts"}.Sanitize()
	policy := &durable.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Millisecond, Factor: float64(time.Hour / time.Millisecond),
		MaxDelay: time.Hour, Jitter: -1}
	wf := durable.Register(e, "flaky", func(wctx durable.Context, _ int) (int, error) {
		return durable.Step(wctx, "charge", func(ctx context.Context) (int, error) {
			info := durable.StepInfoMust(ctx)
			if _, err := pool.Exec(ctx, "INSERT INTO "+table+" (pid, attempt, resumed, key) VALUES ($1, $2, $3, $4)",
				os.Getpid(), info.Attempt, info.Resumed, info.IdempotencyKey()); err != nil {
				return 0, err
			}
			return 0, errors.New("card declined")
		}, &durable.StepOpts{Retry: policy})
	}, nil)
	if err := e.Launch(ctx); err != nil {
		return err
	}
	h, err := wf.Start(ctx, 0, &durable.StartOpts{ID: "attempts-run"})
	if err != nil {
		return err
	}
	_, err = h.Result(ctx)
	fmt.Println("result", err)
	return e.Shutdown(ctx)
}

// TestStepAttemptsSurviveSIGKILL: a step with MaxAttempts 3 fails twice,
// and its process is SIGKILLed during the wait before the third attempt.
// The restarted process makes attempt 3, told it follows an interruption,
// and no more; the idempotency key is the same for all three.
func TestStepAttemptsSurviveSIGKILL(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	ctx := ctxT(t)
	_, err := pool.Exec(ctx, "CREATE TABLE "+pgx.Identifier{schema, "attempts"}.Sanitize()+
		" (pid int, attempt int, resumed bool, key text, at timestamptz DEFAULT clock_timestamp())")
	require.NoError(t, err)

	first := startChild(t, "attempts", schema, "attempts-exec", "DURABLE_LEASE=30s")
	require.Eventually(t, func() bool {
		var n int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "step_attempts"}.Sanitize()+" WHERE attempts = 2").Scan(&n)
		return err == nil && n == 1
	}, proctest.Timeout, 10*time.Millisecond, "the step failed twice; child stderr:\n%s", first.Stderr.String())
	first.Kill(t)

	second := startChild(t, "attempts", schema, "attempts-exec", "DURABLE_LEASE=30s")
	require.Contains(t, second.WaitLine(t, "result"), "failed after 3 attempt(s): card declined")
	require.NoError(t, second.Wait(t))

	rows, err := pool.Query(ctx, "SELECT pid = $1, attempt, resumed, key FROM "+pgx.Identifier{schema, "attempts"}.Sanitize()+" ORDER BY at",
		first.Cmd.Process.Pid)
	require.NoError(t, err)
	var got []string
	for rows.Next() {
		var byFirst, resumed bool
		var attempt int
		var key string
		require.NoError(t, rows.Scan(&byFirst, &attempt, &resumed, &key))
		got = append(got, fmt.Sprintf("first=%v attempt=%d resumed=%v key=%s", byFirst, attempt, resumed, key))
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{
		"first=true attempt=1 resumed=false key=attempts-run/0",
		"first=true attempt=2 resumed=false key=attempts-run/0",
		"first=false attempt=3 resumed=true key=attempts-run/0",
	}, got, strings.Join(got, "\n"))
}
