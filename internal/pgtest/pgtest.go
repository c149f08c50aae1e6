package pgtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	// EnvURL names the environment variable holding the server URL.
	EnvURL = "DATABASE_URL"
	// EnvDir names the environment variable holding the scripts/pg cluster
	// folder, set only when the cluster may be restarted by tests.
	EnvDir = "DURABLE_PG_DIR"
)

// owned reports whether Main started the cluster in this process.
var owned bool

// Main runs the tests of a package against Postgres. Use it as
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// If DATABASE_URL is set, Main just runs the tests. Otherwise it starts a
// private cluster with scripts/pg in a temporary folder, exports
// DATABASE_URL and DURABLE_PG_DIR (child processes inherit them), runs the
// tests, then stops and removes the cluster. The cluster is also removed if
// the test binary dies abruptly (panic, timeout, signal): a watchdog process
// cleans up when this process goes away.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	defer stopPooler()
	if os.Getenv(EnvURL) != "" {
		if Pooled() { // child processes inherit the filtered URL
			url, stop, err := filterCancels(os.Getenv(EnvURL))
			if err != nil {
				fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
				return 1
			}
			defer stop()
			os.Setenv(EnvURL, url)
		}
		return runTests(m)
	}
	script, err := scriptPath()
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "durable-pg-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		return 1
	}
	release, err := startWatchdog(script, dir)
	if err != nil {
		os.RemoveAll(dir)
		fmt.Fprintf(os.Stderr, "pgtest: starting cleanup watchdog: %v\n", err)
		return 1
	}
	defer release()

	url, err := runScript(script, "start", dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: could not start a private PostgreSQL cluster: %v\n", err)
		return 1
	}
	os.Setenv(EnvURL, url)
	os.Setenv(EnvDir, dir)
	defer func() {
		os.Unsetenv(EnvURL)
		os.Unsetenv(EnvDir)
	}()
	owned = true
	defer func() { owned = false }()
	return runTests(m)
}

// runTests runs the tests, then drops the schemas Reused kept for reuse
// (unless the cluster is ours: it goes away with them).
func runTests(m *testing.M) int {
	mainRunning.Store(true)
	defer func() {
		mainRunning.Store(false)
		if statsOn {
			fmt.Printf("pgtest: Reused prepared %d schemas, reused %d, dropped %d after their test\n",
				reuseStats.prepared.Load(), reuseStats.reused.Load(), reuseStats.dropped.Load())
		}
		closeShared()
		if !owned {
			dropFree()
		}
	}()
	return m.Run()
}

// startWatchdog starts a process that stops the cluster and removes dir as
// soon as this process closes its end of a pipe: explicitly through the
// returned release func, or implicitly when the process dies.
func startWatchdog(script, dir string) (release func(), err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("bash", "-c",
		`trap '' INT TERM HUP QUIT PIPE; read -r _ || true; "$0" stop "$1" >/dev/null 2>&1; rm -rf "$1"`,
		script, dir)
	cmd.Stdin = r // stdout/stderr: /dev/null, so `go test` never waits on it
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, err
	}
	return func() {
		w.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Minute):
			fmt.Fprintf(os.Stderr, "pgtest: cluster cleanup in %s is taking too long; giving up waiting\n", dir)
		}
	}, nil
}

// scriptPath locates scripts/pg: relative to this source file, or (when
// built with -trimpath) by walking up from the working directory.
func scriptPath() (string, error) {
	rel := filepath.Join("scripts", "pg")
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		p := filepath.Join(filepath.Dir(file), "..", "..", rel)
		if isFile(p) {
			return p, nil
		}
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			if p := filepath.Join(d, rel); isFile(p) {
				return p, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", errors.New("cannot find scripts/pg of the durable repository; set DATABASE_URL to a PostgreSQL server instead")
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// runScript runs scripts/pg (or scripts/pgbouncer) and returns its stdout (trimmed). Its stderr is
// only reported on failure.
func runScript(script string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, script, args...)
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("scripts/%s %s: %v\n%s", filepath.Base(script), strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// URL returns the database URL from DATABASE_URL, failing the test if unset.
func URL(tb testing.TB) string {
	tb.Helper()
	url := os.Getenv(EnvURL)
	if url == "" {
		tb.Fatal("pgtest: DATABASE_URL is not set: run the tests with scripts/test or scripts/with-postgres, " +
			"set DATABASE_URL to a PostgreSQL server, or add `func TestMain(m *testing.M) { pgtest.Main(m) }` to the package")
	}
	return url
}

// Pool returns a pgx pool on URL. Under Main it is the pool every test of
// the process shares (MaxConns 64), closed when the tests end: on a
// virtual machine a new server connection costs tens of milliseconds of
// server CPU, and the tests of a package would open thousands. A test must
// not close it nor leave session state on its connections (use SET LOCAL,
// or a pool of its own). Outside Main it is a new pool (MaxConns 20),
// closed when the test ends.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	if mainRunning.Load() {
		return sharedPool(tb, URL(tb))
	}
	return poolOn(tb, URL(tb))
}

var schemaSeq atomic.Uint64

// Schema creates a fresh, uniquely named schema (a valid lowercase
// identifier of at most 40 characters, like t_1234_1_a3f0) and returns its
// name. The schema and everything in it are dropped when the test ends.
func Schema(tb testing.TB) string {
	tb.Helper()
	return SchemaOn(tb, URL(tb), "t")
}

// SchemaOn is Schema on the server at url, with names starting with
// prefix and an underscore (prefix: a lowercase identifier of at most 16
// characters).
func SchemaOn(tb testing.TB, url, prefix string) string {
	tb.Helper()
	name := createSchema(tb, url, prefix)
	tb.Cleanup(func() { dropSchema(tb, url, name) })
	return name
}

// createSchema creates a new schema on the server at url and returns its
// name; the caller drops it.
func createSchema(tb testing.TB, url, prefix string) string {
	tb.Helper()
	var b [2]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	name := fmt.Sprintf("%s_%d_%d_%s", prefix, os.Getpid(), schemaSeq.Add(1), hex.EncodeToString(b[:]))
	ident := pgx.Identifier{name}.Sanitize()
	if err := execOnce(url, "CREATE SCHEMA IF NOT EXISTS "+ident); err != nil {
		tb.Fatalf("pgtest: creating schema %s: %v", name, err)
	}
	return name
}

// dropSchema drops schema name and everything in it, failing tb on an
// error.
func dropSchema(tb testing.TB, url, name string) {
	if err := drop(url, name); err != nil {
		tb.Errorf("pgtest: dropping schema %s: %v", name, err)
	}
}

// DropSchema drops schema name on the server at url and everything in it,
// failing tb on an error, for a test that names its own schemas: as for
// the schemas of Schema, a drop that deadlocked is tried again (see drop).
func DropSchema(tb testing.TB, url, name string) {
	tb.Helper()
	dropSchema(tb, url, name)
}

// drop drops schema name on the server at url.
//
// A process the test killed may still have a statement running on the
// server: its backend learns of the kill only when the statement ends.
// DROP ... CASCADE takes its locks one object at a time, so such a
// statement can deadlock with it; the server then aborts one side, and
// when that is the DROP, it is tried again (the other side is gone).
func drop(url, name string) error {
	var err error
	for try := 1; try <= 5; try++ {
		// SET LOCAL, not SET: through a transaction-mode pooler a session
		// setting would stay on a server connection other clients get.
		err = execTx(url, "SET LOCAL lock_timeout = '30s'", "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
			return err
		}
		time.Sleep(time.Duration(try) * 100 * time.Millisecond)
	}
	return err
}

// execOnce runs statements on a short-lived connection.
func execOnce(url string, stmts ...string) error {
	return onConn(url, false, stmts)
}

// execTx runs statements in one transaction on a short-lived connection.
func execTx(url string, stmts ...string) error {
	return onConn(url, true, stmts)
}

func onConn(url string, inTx bool, stmts []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return withConn(ctx, url, func(conn *pgx.Conn) error { return onConnDo(ctx, conn, inTx, stmts) })
}

// withConn calls fn with a connection to url: one of the shared pool's
// under Main (see Pool), a new one otherwise.
func withConn(ctx context.Context, url string, fn func(*pgx.Conn) error) error {
	if p := existingShared(url); p != nil {
		c, err := p.Acquire(ctx)
		if err != nil {
			return err
		}
		defer c.Release()
		return fn(c.Conn())
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return fn(conn)
}

func onConnDo(ctx context.Context, conn *pgx.Conn, inTx bool, stmts []string) error {
	run := func(db interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	}) error {
		for _, s := range stmts {
			if _, err := db.Exec(ctx, s); err != nil {
				return err
			}
		}
		return nil
	}
	if !inTx {
		return run(conn)
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return run(tx) })
}

// Restart stops the server (mode fast, or immediate: a crash without a
// shutdown checkpoint, so the restart runs crash recovery) and starts it
// again on the same URL. Existing connections are broken. It skips the test
// unless the server is a scripts/pg cluster (DURABLE_PG_DIR set).
func Restart(tb testing.TB, immediate bool) {
	tb.Helper()
	dir := clusterDir(tb)
	pg(tb, withMode([]string{"restart", dir}, immediate)...)
}

// Stop stops the server (mode fast or immediate) for outage tests; use Start
// to bring it back. If the test ends with the server still down, it is
// started again during cleanup. It skips the test unless the server is a
// scripts/pg cluster (DURABLE_PG_DIR set).
func Stop(tb testing.TB, immediate bool) {
	tb.Helper()
	dir := clusterDir(tb)
	pg(tb, withMode([]string{"stop", dir}, immediate)...)
	tb.Cleanup(func() {
		script, err := scriptPath()
		if err == nil {
			_, err = runScript(script, "start", dir)
		}
		if err != nil {
			tb.Errorf("pgtest: restarting the server after the test: %v", err)
		}
	})
}

// Start starts the server after Stop, on the same URL. It is a no-op if the
// server is running. It skips the test unless the server is a scripts/pg
// cluster (DURABLE_PG_DIR set).
func Start(tb testing.TB) {
	tb.Helper()
	dir := clusterDir(tb)
	if got := pg(tb, "start", dir); got != URL(tb) {
		tb.Fatalf("pgtest: server came back as %s, want %s", got, URL(tb))
	}
}

func withMode(args []string, immediate bool) []string {
	if immediate {
		return append(args, "immediate")
	}
	return args
}

// clusterDir returns DURABLE_PG_DIR, skipping the test unless it names the
// scripts/pg cluster that DATABASE_URL points to.
func clusterDir(tb testing.TB) string {
	tb.Helper()
	dir := os.Getenv(EnvDir)
	if dir == "" {
		tb.Skip("pgtest: DURABLE_PG_DIR is not set: the PostgreSQL server is not a scripts/pg cluster of ours, so it cannot be stopped or restarted")
	}
	recorded, err := os.ReadFile(filepath.Join(dir, "url"))
	if err != nil || strings.TrimSpace(string(recorded)) != URL(tb) {
		tb.Skipf("pgtest: DATABASE_URL does not point to the scripts/pg cluster in DURABLE_PG_DIR=%s; not touching it", dir)
	}
	return dir
}

func pg(tb testing.TB, args ...string) string {
	tb.Helper()
	script, err := scriptPath()
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	out, err := runScript(script, args...)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	return out
}
