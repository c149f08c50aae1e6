package durabletest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/internal/pgtest"
)

const (
	// EnvURL names the variable holding the URL of the Postgres server
	// of the tests. When it is unset, a private cluster is started.
	EnvURL = "DATABASE_URL"
	// EnvRequireDB names the variable that, set to 1, fails the tests
	// that find no Postgres instead of skipping them (set it in CI).
	EnvRequireDB = "DURABLE_TEST_REQUIRE_DB"
)

// modulePath is the module holding scripts/pg, the private cluster's
// script.
const modulePath = "github.com/durable-go/durable"

// installHint is the one line a test that finds no Postgres prints.
const installHint = "durabletest: no PostgreSQL for this test: set DATABASE_URL to a server, or install the PostgreSQL server " +
	"(Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql@17) for a private cluster"

// clusterState is the private cluster of this test binary, started on
// first use.
type clusterState struct {
	once    sync.Once
	url     string
	err     error
	release func()
}

var cluster = &clusterState{}

// Main runs the tests of a package, then stops and removes the private
// cluster if a test started one. Use it as
//
//	func TestMain(m *testing.M) { durabletest.Main(m) }
//
// Without Main the cluster is removed all the same when the test binary
// exits (a watchdog process sees it go), only later.
func Main(m *testing.M) {
	code := m.Run()
	if cluster.release != nil {
		cluster.release()
	}
	os.Exit(code)
}

// URL returns the URL of a Postgres server for the calling test:
// DATABASE_URL when set, else a private cluster that the first call in
// this test binary starts (when the PostgreSQL server binaries are found;
// see Main). With neither, it skips the test with a line saying what to
// install, or fails it when DURABLE_TEST_REQUIRE_DB=1.
func URL(t testing.TB) string {
	t.Helper()
	return url(t, false)
}

func url(t testing.TB, require bool) string {
	t.Helper()
	if u := os.Getenv(EnvURL); u != "" {
		return u
	}
	cluster.once.Do(func() { cluster.url, cluster.release, cluster.err = startCluster() })
	if cluster.err == nil {
		return cluster.url
	}
	msg := installHint
	if !errors.Is(cluster.err, errNoServer) {
		msg = "durabletest: could not start a private PostgreSQL cluster: " + cluster.err.Error()
	}
	if require || os.Getenv(EnvRequireDB) == "1" {
		t.Fatal(msg)
	} else {
		t.Skip(msg)
	}
	return ""
}

// Pool returns a pool on the test's Postgres (see URL), closed when the
// test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return poolOn(t, URL(t))
}

func poolOn(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("durabletest: the database URL: %v", err)
	}
	cfg.MaxConns = max(cfg.MaxConns, 20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("durabletest: %v", err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("durabletest: cannot reach PostgreSQL: %v", err)
	}
	return pool
}

// Schema creates a new, empty schema on the test's Postgres (see URL)
// and returns its name; the schema and all in it are dropped when the
// test ends. Pass it as Config.Schema: each test then has an engine of
// its own, and tests may run in parallel on one server.
func Schema(t testing.TB) string {
	t.Helper()
	return schemaOn(t, URL(t))
}

func schemaOn(t testing.TB, url string) string {
	t.Helper()
	return pgtest.SchemaOn(t, url, "durabletest")
}

// errNoServer: the PostgreSQL server binaries are not on this machine.
var errNoServer = errors.New("no PostgreSQL server binaries")

// startCluster starts a private cluster with the module's scripts/pg (run
// through bash: in the module cache it is not executable) in a new
// temporary folder, with a watchdog process that stops and removes it
// when this process ends or calls release.
func startCluster() (url string, release func(), err error) {
	script, err := findScript()
	if err != nil {
		return "", nil, err
	}
	if _, err := runScript(script, "bindir"); err != nil {
		return "", nil, errNoServer
	}
	dir, err := os.MkdirTemp("", "durabletest-pg-")
	if err != nil {
		return "", nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	watchdog := exec.Command("bash", "-c",
		`trap '' INT TERM HUP QUIT PIPE; read -r _ || true; bash "$0" stop "$1" >/dev/null 2>&1; rm -rf "$1"`, script, dir)
	watchdog.Stdin = r
	err = watchdog.Start()
	r.Close()
	if err != nil {
		w.Close()
		os.RemoveAll(dir)
		return "", nil, err
	}
	release = func() {
		w.Close()
		done := make(chan struct{})
		go func() { _ = watchdog.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
		}
	}
	url, err = runScript(script, "start", dir)
	if err != nil {
		release()
		return "", nil, err
	}
	return url, release, nil
}

func runScript(script string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("scripts/pg %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// findScript locates scripts/pg: beside this source file (a checkout, or
// the module cache), by walking up from the working directory (tests of
// this module built with -trimpath), or in the module cache folder of the
// version this binary was built with.
func findScript() (string, error) {
	rel := filepath.Join("scripts", "pg")
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		if p := filepath.Join(filepath.Dir(file), "..", rel); isFile(p) {
			return p, nil
		}
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			if p := filepath.Join(d, rel); isFile(p) && isFile(filepath.Join(d, "durabletest", "postgres.go")) {
				return p, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path != modulePath {
				continue
			}
			if m.Replace != nil {
				m = m.Replace
			}
			if filepath.IsAbs(m.Path) {
				return filepath.Join(m.Path, rel), nil
			}
			out, err := exec.Command("go", "env", "GOMODCACHE").Output()
			if err == nil {
				if p := filepath.Join(strings.TrimSpace(string(out)), m.Path+"@"+m.Version, rel); isFile(p) {
					return p, nil
				}
			}
		}
	}
	return "", errors.New("cannot find scripts/pg of " + modulePath + "; set DATABASE_URL to a PostgreSQL server")
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}
