package agentkit_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/durable-go/durable/internal/proctest"
	"github.com/durable-go/durable/internal/sysdbtest"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/agentkit/agentkittest"
	"github.com/durable-go/durable/internal/pgtest"
)

func TestMain(m *testing.M) {
	if runChildIfAsked() || serveMCPStdioIfAsked() {
		return
	}
	pgtest.Main(m)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// env is a database schema with an engine on it.
type env struct {
	pool   *pgxpool.Pool
	schema string
	logs   *proctest.Buffer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pool, schema := sysdbtest.Migrated(t) // a reused schema, already migrated
	return &env{pool: pool, schema: schema, logs: &proctest.Buffer{}}
}

func (v *env) config() *durable.Config {
	return &durable.Config{
		Schema:       v.schema,
		AppVersion:   "test",
		LeaseTTL:     time.Second,
		PollInterval: 200 * time.Millisecond,
		StepRetry:    durable.RetryPolicy{BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond},
		Logger:       slog.New(slog.NewTextHandler(v.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

// engine makes an engine; define registers agents before Launch. The
// engine shuts down at cleanup.
func (v *env) engine(t *testing.T, mutate func(*durable.Config), define func(*durable.Engine)) *durable.Engine {
	t.Helper()
	cfg := v.config()
	if mutate != nil {
		mutate(cfg)
	}
	e, err := durable.New(v.pool, cfg)
	require.NoError(t, err)
	if define != nil {
		define(e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, e.Launch(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
	})
	return e
}

func openAI(t *testing.T, srv *agentkittest.Server) *agentkit.OpenAI {
	t.Helper()
	m, err := agentkit.NewOpenAI(agentkit.OpenAIConfig{BaseURL: srv.URL, Model: "scripted", APIKey: "sk-test", Timeout: 10 * time.Second})
	require.NoError(t, err)
	return m
}

func call(name, args string) agentkit.ToolCall {
	return agentkit.ToolCall{Name: name, Arguments: []byte(args)}
}
