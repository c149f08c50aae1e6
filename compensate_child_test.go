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

// sagaDeadline is the Timeout of the "saga" child's run in its deadline
// case.
const sagaDeadline = 3 * time.Second

// runSagaChild: mode "saga" registers "saga" (reserve, charge, confirm,
// with an undo after each of the first two; every undo call is logged in
// @undo_calls) and starts it with ID DURABLE_RUN when DURABLE_START is set:
// "fail" (confirm fails for good), "deadline" (confirm waits for the
// run's deadline) or "cancel" (it waits for a message before confirm,
// until cancelled). DURABLE_HANG names an undo that waits until the process
// is killed.
func runSagaChild(ctx context.Context, e *durable.Engine, pool *pgxpool.Pool, q func(string) string) error {
	hang := os.Getenv("DURABLE_HANG")
	undo := func(name string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			if _, err := pool.Exec(ctx, q("INSERT INTO @undo_calls (name, idem_key, pid) VALUES ($1, $2, $3)"),
				name, durable.IdempotencyKey(ctx), os.Getpid()); err != nil {
				return err
			}
			if name == hang {
				select {} // until killed
			}
			return nil
		}
	}
	wf := durable.Register(e, "saga", func(wctx durable.Context, mode string) (string, error) {
		if _, err := durable.Step(wctx, "reserve", func(context.Context) (string, error) { return "seat-1", nil }, nil); err != nil {
			return "", err
		}
		if err := durable.Compensate(wctx, "release", undo("release"), nil); err != nil {
			return "", err
		}
		if _, err := durable.Step(wctx, "charge", func(context.Context) (int, error) { return 42, nil }, nil); err != nil {
			return "", err
		}
		if err := durable.Compensate(wctx, "refund", undo("refund"), nil); err != nil {
			return "", err
		}
		if mode == "cancel" {
			if _, _, err := durable.Recv[string](wctx, "go", time.Hour); err != nil { // until cancelled
				return "", err
			}
		}
		_, err := durable.Step(wctx, "confirm", func(ctx context.Context) (string, error) {
			if mode == "deadline" {
				<-ctx.Done()
				return "", ctx.Err()
			}
			return "", durable.Permanent(errors.New("no seats"))
		}, &durable.StepOpts{Retry: &durable.RetryPolicy{MaxAttempts: 1}})
		return "booked", err
	}, nil)
	if err := e.Launch(ctx); err != nil {
		return err
	}
	if mode := os.Getenv("DURABLE_START"); mode != "" {
		opts := &durable.StartOpts{ID: os.Getenv("DURABLE_RUN")}
		if mode == "deadline" {
			opts.Timeout = sagaDeadline
		}
		if _, err := wf.Start(ctx, mode, opts); err != nil {
			return err
		}
	}
	fmt.Println("ready")
	select {} // until killed
}

// TestCompensationsSurviveKill: a saga's process is SIGKILLed half-way
// through its compensations (the refund recorded, the release under way);
// the restarted process replays the run, does not refund again, makes the
// release again under the same idempotency key, and records the failure.
// In the deadline case the process dies before the run's deadline, with
// nothing compensated; the restart comes after the deadline, replays what
// was recorded (registering the undos again) and compensates.
func TestCompensationsSurviveKill(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, start, hang string }{
		{"half-way", "fail", "release"},
		{"deadline-passed-while-down", "deadline", ""},
		{"cancelled-half-way", "cancel", "release"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, schema := sysdbtest.Migrated(t)
			q := waitsQ(schema)
			ctx := ctxT(t)
			_, err := pool.Exec(ctx, q("CREATE TABLE @undo_calls (name text, idem_key text, pid int)"))
			require.NoError(t, err)
			c := startReady(t, "saga", schema, "sagas", "DURABLE_LEASE=30s", "DURABLE_START="+tc.start, "DURABLE_RUN=s1", "DURABLE_HANG="+tc.hang)
			count := func(sql string) int {
				var n int
				require.NoError(t, pool.QueryRow(ctx, q(sql)).Scan(&n))
				return n
			}
			if tc.start == "cancel" {
				require.Eventually(t, func() bool {
					return count("SELECT count(*) FROM @steps WHERE workflow_id = 's1' AND name LIKE 'durable.recv-deadline:%'") == 1
				}, 30*time.Second, 5*time.Millisecond)
				// Another process cancels it, asking for its compensations.
				ctl, err := durable.New(pool, &durable.Config{Schema: schema, AppVersion: "crash"})
				require.NoError(t, err)
				require.NoError(t, ctl.Cancel(ctx, "s1", &durable.CancelOpts{Compensate: true}))
			}
			if tc.hang != "" {
				require.Eventually(t, func() bool {
					return count("SELECT count(*) FROM @undo_calls WHERE name = 'release'") == 1
				}, 30*time.Second, 5*time.Millisecond)
				require.Equal(t, 1, count("SELECT count(*) FROM @steps WHERE workflow_id = 's1' AND name = 'undo:refund'"), "the refund is recorded before the kill")
			} else {
				require.Eventually(t, func() bool {
					return count("SELECT count(*) FROM @steps WHERE workflow_id = 's1' AND name = 'charge'") == 1
				}, 30*time.Second, 5*time.Millisecond)
			}
			c.Kill(t)
			if tc.start == "deadline" {
				var deadline time.Time
				require.NoError(t, pool.QueryRow(ctx, q("SELECT deadline FROM @workflows WHERE id = 's1'")).Scan(&deadline))
				time.Sleep(time.Until(deadline.Add(200 * time.Millisecond)))
				require.Zero(t, count("SELECT count(*) FROM @undo_calls"), "nothing compensated before the deadline")
			}

			startReady(t, "saga", schema, "sagas", "DURABLE_LEASE=30s") // the same executor ID: resumed at Launch
			var status, errText string
			require.Eventually(t, func() bool {
				_ = pool.QueryRow(ctx, q("SELECT status, coalesce(error::text, '') FROM @workflows WHERE id = 's1'")).Scan(&status, &errText)
				return status != "pending"
			}, 30*time.Second, 5*time.Millisecond)
			if tc.start == "cancel" {
				require.Equal(t, "cancelled", status)
				require.Contains(t, errText, "was cancelled and ran its compensations")
			} else {
				require.Equal(t, "error", status)
			}
			require.Contains(t, errText, "2 undone")
			rows, err := pool.Query(ctx, q("SELECT name || ':' || idem_key FROM @undo_calls ORDER BY name, pid"))
			require.NoError(t, err)
			var calls []string
			for rows.Next() {
				var s string
				require.NoError(t, rows.Scan(&s))
				calls = append(calls, s)
			}
			require.NoError(t, rows.Err())
			if tc.start == "cancel" {
				require.Len(t, calls, 3)
				require.Equal(t, []string{"refund", "release", "release"}, []string{calls[0][:6], calls[1][:7], calls[2][:7]})
				require.Equal(t, calls[1], calls[2], "the release cut by the kill is made again with the same key")
			} else if tc.hang != "" {
				require.Equal(t, []string{"refund:s1/3", "release:s1/4", "release:s1/4"}, calls,
					"the recorded refund is not made again; the release cut by the kill is, with the same key")
			} else {
				require.Contains(t, errText, "deadline")
				require.Equal(t, []string{"refund:s1/3", "release:s1/4"}, calls)
			}
		})
	}
}
