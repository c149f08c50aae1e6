package durable_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/proctest"
)

// TestLaunchWaitsForDatabase boots engines while their Postgres is down (a
// cluster of its own, really stopped): a Launch whose ctx ends first
// fails with a clear error matching ctx's; a Launch with time to spare
// waits, and succeeds once the server is started, after which the engine
// runs workflows.
func TestLaunchWaitsForDatabase(t *testing.T) {
	t.Parallel()
	pgtest.SkipIfPooled(t, "its cluster of its own has no pooler in front; the direct run covers it")
	c, err := pgtest.Private(t)
	if err != nil {
		t.Skipf("no database outage test: %v", err)
	}
	pool := c.Pool(t) // made while the server is up; its connections die with it
	c.Stop(t, false)

	newEngine := func(logs *proctest.Buffer) (*durable.Engine, *durable.Workflow[int, int]) {
		e, err := durable.New(pool, &durable.Config{Schema: "boot", AppVersion: "test", LeaseTTL: time.Second,
			Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		require.NoError(t, err)
		wf := durable.Register(e, "double", func(wctx durable.Context, n int) (int, error) {
			return durable.Step(wctx, "double", func(ctx context.Context) (int, error) { return 2 * n, nil }, nil)
		}, nil)
		return e, wf
	}

	// The caller's ctx ends while the database is still away.
	e, _ := newEngine(&proctest.Buffer{})
	short, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	err = e.Launch(short)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "database unreachable")

	// Launch waits; the server comes back; Launch returns and the engine works.
	logs := &proctest.Buffer{}
	e, wf := newEngine(logs)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	launched := make(chan error, 1)
	go func() { launched <- e.Launch(ctx) }()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "database unreachable, waiting for it") },
		time.Minute, 10*time.Millisecond, "Launch must wait for the database; logs:\n%s", logs.String())
	select {
	case err := <-launched:
		t.Fatalf("Launch returned while the database was down: %v", err)
	default:
	}
	c.Start(t)
	select {
	case err := <-launched:
		require.NoError(t, err, "logs:\n%s", logs.String())
	case <-ctx.Done():
		t.Fatalf("Launch did not return after the database came back; logs:\n%s", logs.String())
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
	})
	h, err := wf.Start(ctx, 21, nil)
	require.NoError(t, err)
	got, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 42, got)
}

// TestLaunchFailsAtOnceWhenWaitingCannotHelp: an error that is not about
// reaching the server (here an unknown role, refused at login) fails
// Launch at once, long before its ctx ends.
func TestLaunchFailsAtOnceWhenWaitingCannotHelp(t *testing.T) {
	t.Parallel()
	pgtest.SkipIfPooled(t, "a pooler answers an unknown role with its own error")
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	cfg.ConnConfig.User = "durable_no_such_role"
	cfg.ConnConfig.Password = ""
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	e, err := durable.New(pool, &durable.Config{Schema: pgtest.Schema(t), AppVersion: "test"})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a refusal takes a round trip
	defer cancel()
	err = e.Launch(ctx)
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "Launch waited for its ctx to end: %v", err)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "the server's refusal is returned: %v", err)
	require.True(t, strings.HasPrefix(pgErr.Code, "28"), "invalid authorization, got %s", pgErr.Code)
}
