package pgtest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Cluster is a scripts/pg cluster that one test owns alone, so it may stop
// and restart it without disturbing tests of other packages running in
// parallel on the shared one.
type Cluster struct {
	Dir string // the scripts/pg folder
	URL string // postgres://... on 127.0.0.1
}

// Private starts a cluster for the calling test alone in a temporary
// folder; it is stopped and removed when the test ends (or when the test
// binary dies). It returns an error saying why not when the database of
// this run is a server the tests did not start (DATABASE_URL set without
// DURABLE_PG_DIR): faults must then not be injected, and such a server may
// not even be on this machine.
func Private(tb testing.TB) (*Cluster, error) {
	tb.Helper()
	if os.Getenv(EnvURL) != "" && os.Getenv(EnvDir) == "" {
		return nil, errors.New("DATABASE_URL points to a server these tests did not start (DURABLE_PG_DIR is unset), so it is never stopped; " +
			"run with scripts/test or without DATABASE_URL to inject database outages")
	}
	script, err := scriptPath()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "durable-pg-private-")
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	release, err := startWatchdog(script, dir)
	if err != nil {
		os.RemoveAll(dir)
		tb.Fatalf("pgtest: starting cleanup watchdog: %v", err)
	}
	tb.Cleanup(release)
	url, err := runScript(script, "start", dir)
	if err != nil {
		tb.Fatalf("pgtest: could not start a private PostgreSQL cluster: %v", err)
	}
	return &Cluster{Dir: dir, URL: url}, nil
}

// Stop stops the server: mode immediate is a crash (no shutdown
// checkpoint; the next start runs crash recovery), otherwise fast.
func (c *Cluster) Stop(tb testing.TB, immediate bool) {
	tb.Helper()
	c.script(tb, withMode([]string{"stop", c.Dir}, immediate)...)
}

// Crash stops the server the hardest way Postgres can be stopped short of
// the host dying: SIGQUIT to the postmaster, sent directly (no script in
// between, so it lands within a millisecond of the call), which ends every
// process without writing the WAL still in shared buffers. It returns once
// the postmaster is gone; Start brings it back through crash recovery.
func (c *Cluster) Crash(tb testing.TB) {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(c.Dir, "data", "postmaster.pid"))
	if err != nil {
		tb.Fatalf("pgtest: crash: %v", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		tb.Fatalf("pgtest: crash: postmaster.pid: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil {
		tb.Fatalf("pgtest: crash: SIGQUIT %d: %v", pid, err)
	}
	for deadline := time.Now().Add(time.Minute); syscall.Kill(pid, 0) == nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("pgtest: crash: postmaster %d still runs a minute after SIGQUIT", pid)
		}
	}
}

// Start starts the server again on the same URL; a no-op if it runs.
func (c *Cluster) Start(tb testing.TB) {
	tb.Helper()
	if got := c.script(tb, "start", c.Dir); got != c.URL {
		tb.Fatalf("pgtest: server came back as %s, want %s", got, c.URL)
	}
}

// Restart stops the server (immediate or fast) and starts it again.
func (c *Cluster) Restart(tb testing.TB, immediate bool) {
	tb.Helper()
	c.Stop(tb, immediate)
	c.Start(tb)
}

// Exec runs statements on a short-lived connection to the cluster.
func (c *Cluster) Exec(tb testing.TB, stmts ...string) {
	tb.Helper()
	if err := execOnce(c.URL, stmts...); err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
}

// Pool returns a new pool (MaxConns 20) on the cluster, closed when the
// test ends.
func (c *Cluster) Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	return poolOn(tb, c.URL)
}

func (c *Cluster) script(tb testing.TB, args ...string) string {
	tb.Helper()
	return pg(tb, args...)
}

func poolOn(tb testing.TB, url string) *pgxpool.Pool {
	tb.Helper()
	pool := newPool(tb, url, 20)
	tb.Cleanup(pool.Close)
	return pool
}

// newPool returns a new pool of at most maxConns connections on url, once
// it reached the server.
func newPool(tb testing.TB, url string, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatalf("pgtest: parsing the database URL: %v", err)
	}
	cfg.MaxConns = maxConns
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatalf("pgtest: creating pool: %v", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		tb.Fatalf("pgtest: cannot reach PostgreSQL at %s: %v", url, err)
	}
	return pool
}
