package durable_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/sysdbtest"
)

// runUpdateChild: mode "update" registers "ledger", which handles one
// "credit" update by a step that logs each call in @calls (and, with
// DURABLE_HANG set, waits there until the process is killed), and starts
// run l1 when DURABLE_START is set.
func runUpdateChild(ctx context.Context, e *durable.Engine, pool *pgxpool.Pool, q func(string) string) error {
	hang := os.Getenv("DURABLE_HANG") != ""
	wf := durable.Register(e, "ledger", func(wctx durable.Context, _ int) (int, error) {
		var balance int
		_, err := durable.HandleUpdate(wctx, "credit", time.Hour, nil, func(wctx durable.Context, amount int) (int, error) {
			b, err := durable.Step(wctx, "credit", func(ctx context.Context) (int, error) {
				if _, err := pool.Exec(ctx, q("INSERT INTO @calls (pid) VALUES ($1)"), os.Getpid()); err != nil {
					return 0, err
				}
				if hang {
					select {} // until killed
				}
				return 100 + amount, nil
			}, nil)
			balance = b
			return b, err
		})
		return balance, err
	}, nil)
	if err := e.Launch(ctx); err != nil {
		return err
	}
	if os.Getenv("DURABLE_START") != "" {
		if _, err := wf.Start(ctx, 0, &durable.StartOpts{ID: "l1"}); err != nil {
			return err
		}
	}
	fmt.Println("ready")
	select {} // until killed
}

// TestUpdateSurvivesKill: the run's process is SIGKILLed after it took
// an update and before it replied (inside the handler's step); the
// caller, a client in another process, keeps waiting; the restarted
// process replays the receipt (the request is not taken twice), runs the
// step again and replies once, and the caller gets that reply.
func TestUpdateSurvivesKill(t *testing.T) {
	t.Parallel()
	pool, schema := sysdbtest.Migrated(t)
	q := waitsQ(schema)
	ctx := ctxT(t)
	_, err := pool.Exec(ctx, q("CREATE TABLE @calls (pid int)"))
	require.NoError(t, err)
	c := startReady(t, "update", schema, "ledger", "DURABLE_LEASE=30s", "DURABLE_START=1", "DURABLE_HANG=1")
	client, err := durable.NewClient(pool, &durable.ClientConfig{Schema: schema})
	require.NoError(t, err)
	defer client.Close()
	type reply struct {
		v   int
		err error
	}
	got := make(chan reply, 1)
	go func() {
		v, err := durable.ClientUpdate[int, int](ctx, client, "l1", "credit", 5, &durable.UpdateOpts{ID: "pay-1", Timeout: 45 * time.Second})
		got <- reply{v, err}
	}()
	count := func(sql string) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, q(sql)).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return count("SELECT count(*) FROM @calls") == 1 }, 30*time.Second, 5*time.Millisecond)
	c.Kill(t)
	select {
	case r := <-got:
		t.Fatalf("a reply before the run could give one: %v %v", r.v, r.err)
	default:
	}

	startReady(t, "update", schema, "ledger", "DURABLE_LEASE=30s")
	r := <-got
	require.NoError(t, r.err)
	require.Equal(t, 105, r.v)
	require.Equal(t, 2, count("SELECT count(*) FROM @calls"), "the step cut by the kill ran again")
	require.Equal(t, 1, count("SELECT count(*) FROM @messages WHERE workflow_id = 'l1'"), "one request")
	require.Equal(t, 1, count("SELECT count(*) FROM @steps WHERE workflow_id = 'l1' AND name LIKE 'durable.recv:%'"), "taken once")
	require.Equal(t, 1, count("SELECT count(*) FROM @steps WHERE workflow_id = 'l1' AND name LIKE 'durable.event:%'"), "replied once")
	var status string
	require.Eventually(t, func() bool {
		_ = pool.QueryRow(ctx, q("SELECT status FROM @workflows WHERE id = 'l1'")).Scan(&status)
		return status == "success"
	}, 30*time.Second, 5*time.Millisecond)
}
