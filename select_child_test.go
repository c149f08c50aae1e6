package durable_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/sysdbtest"
)

// runSelectChild: mode "select" registers "picker", which selects between
// messages on topics "a" and "b" and an hour-long timer, then logs the
// choice in @calls by a step (with DURABLE_HANG set, waiting there until
// the process is killed); it starts run p1 when DURABLE_START is set.
func runSelectChild(ctx context.Context, e *durable.Engine, pool *pgxpool.Pool, q func(string) string) error {
	hang := os.Getenv("DURABLE_HANG") != ""
	wf := durable.Register(e, "picker", func(wctx durable.Context, _ int) (string, error) {
		a, b := durable.OnMessage[string]("a"), durable.OnMessage[string]("b")
		i, err := durable.Select(wctx, a, b, durable.After(time.Hour))
		if err != nil {
			return "", err
		}
		var v string
		switch i {
		case 0:
			v, err = a.Value()
		case 1:
			v, err = b.Value()
		}
		if err != nil {
			return "", err
		}
		choice := fmt.Sprintf("%d %s", i, v)
		return durable.Step(wctx, "act", func(ctx context.Context) (string, error) {
			if _, err := pool.Exec(ctx, q("INSERT INTO @calls (choice) VALUES ($1)"), choice); err != nil {
				return "", err
			}
			if hang {
				select {} // until killed
			}
			return choice, nil
		}, nil)
	}, nil)
	if err := e.Launch(ctx); err != nil {
		return err
	}
	if os.Getenv("DURABLE_START") != "" {
		if _, err := wf.Start(ctx, 0, &durable.StartOpts{ID: "p1"}); err != nil {
			return err
		}
	}
	fmt.Println("ready")
	select {} // until killed
}

// TestSelectSurvivesKill: a run parked in a Select is woken in its own
// process by a message on its second topic, sent from another process;
// the process is SIGKILLed after the choice was recorded, in the step
// that acts on it. A message on the first topic (the one a fresh Select
// would prefer) then arrives; the restarted process replays the recorded
// choice, acts on it again, and leaves the new message unconsumed.
func TestSelectSurvivesKill(t *testing.T) {
	t.Parallel()
	pool, schema := sysdbtest.Migrated(t)
	q := waitsQ(schema)
	ctx := ctxT(t)
	_, err := pool.Exec(ctx, q("CREATE TABLE @calls (choice text)"))
	require.NoError(t, err)
	c := startReady(t, "select", schema, "picker", "DURABLE_LEASE=30s", "DURABLE_PARK=1ms", "DURABLE_START=1", "DURABLE_HANG=1")
	count := func(sql string) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, q(sql)).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool {
		return count("SELECT count(*) FROM @workflows WHERE id = 'p1' AND executor_id IS NULL AND wait_any IS NOT NULL") == 1
	}, 30*time.Second, 5*time.Millisecond, "the Select parks")
	client, err := durable.NewClient(pool, &durable.ClientConfig{Schema: schema})
	require.NoError(t, err)
	defer client.Close()
	require.NoError(t, client.Send(ctx, "p1", "b", "second", nil))
	require.Eventually(t, func() bool { return count("SELECT count(*) FROM @calls") == 1 }, 30*time.Second, 5*time.Millisecond)
	c.Kill(t)

	require.NoError(t, client.Send(ctx, "p1", "a", "first", nil))
	startReady(t, "select", schema, "picker", "DURABLE_LEASE=30s", "DURABLE_PARK=1ms")
	var out json.RawMessage
	require.Eventually(t, func() bool {
		out, err = client.Result(ctx, "p1")
		return err == nil
	}, 45*time.Second, 10*time.Millisecond)
	require.JSONEq(t, `"1 second"`, string(out), "the recorded choice, not the message that came later")
	require.Equal(t, 2, count("SELECT count(*) FROM @calls WHERE choice = '1 second'"), "the step cut by the kill ran again, on the same choice")
	require.Equal(t, 1, count("SELECT count(*) FROM @steps WHERE workflow_id = 'p1' AND name = 'durable.select'"), "chosen once")
	require.Equal(t, 1, count("SELECT count(*) FROM @messages WHERE workflow_id = 'p1' AND topic = 'a' AND consumed_at IS NULL"),
		"the later message is left for a later wait")
}
