package durable_test

import (
	"cmp"
	"context"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/durable-go/durable/internal/proctest"
	"github.com/durable-go/durable/internal/sysdbtest"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
)

func TestMain(m *testing.M) {
	if maybeRunChild() {
		return
	}
	pgtest.Main(m)
}

// bundle is what most tests need: a pool, a fresh schema, and a config
// pointing at it.
type bundle struct {
	pool   *pgxpool.Pool
	schema string
	cfg    *durable.Config
	logs   *proctest.Buffer
}

// setup returns a bundle on a migrated schema with empty tables, reused
// by a later test once this one ends (pgtest.Reused).
func setup(t testing.TB) *bundle {
	t.Helper()
	pool, schema := sysdbtest.Migrated(t)
	return setupOn(pool, schema)
}

// setupFresh is setup on a new schema, which the first engine migrates:
// for the tests of what a new schema looks like, vacuum statistics of
// tables never vacuumed included.
func setupFresh(t *testing.T) *bundle {
	t.Helper()
	return setupOn(pgtest.Pool(t), pgtest.Schema(t))
}

func setupOn(pool *pgxpool.Pool, schema string) *bundle {
	logs := &proctest.Buffer{}
	b := &bundle{
		pool:   pool,
		schema: schema,
		logs:   logs,
		cfg: &durable.Config{
			Schema:       schema,
			AppVersion:   "test",
			LeaseTTL:     time.Second,
			PollInterval: time.Second,
			StepRetry:    durable.RetryPolicy{BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond},
			Logger:       slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		},
	}
	forPooler(b.cfg)
	return b
}

// forPooler sets c up for a pooler in transaction mode when the tests run
// through one (pgtest.Pooled), as docs/poolers.md says: PollOnly, polling
// every 50ms at most. (An engine without it works there too, once
// Launch's check of LISTEN has given up: 2s.) It returns c.
func forPooler(c *durable.Config) *durable.Config {
	if pgtest.Pooled() {
		c.PollOnly = true
		c.PollInterval = min(cmp.Or(c.PollInterval, durable.PollIntervalDefault), 50*time.Millisecond)
	}
	return c
}

// engine makes an engine on the bundle's schema; register is called
// before Launch. The engine is shut down at cleanup.
func (b *bundle) engine(t testing.TB, mutate func(*durable.Config), register func(*durable.Engine)) *durable.Engine {
	t.Helper()
	cfg := *b.cfg
	if mutate != nil {
		mutate(&cfg)
	}
	e, err := durable.New(b.pool, &cfg)
	require.NoError(t, err)
	if register != nil {
		register(e)
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

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// queryMap reads a two-column query into a map from the first column to
// the second.
func queryMap[K comparable, V any](t *testing.T, pool *pgxpool.Pool, sql string, args ...any) map[K]V {
	t.Helper()
	rows, err := pool.Query(ctxT(t), sql, args...)
	require.NoError(t, err)
	out := map[K]V{}
	for rows.Next() {
		var k K
		var v V
		require.NoError(t, rows.Scan(&k, &v))
		out[k] = v
	}
	require.NoError(t, rows.Err())
	return out
}

func getenvInt(name string) int {
	v, _ := strconv.Atoi(os.Getenv(name))
	return v
}
