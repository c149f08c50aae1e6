package pgtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	// EnvPooler names the environment variable saying that DATABASE_URL
	// goes through a connection pooler: "transaction" for PgBouncer in
	// transaction mode (scripts/test sets it for its pooler run).
	EnvPooler = "DURABLE_TEST_POOLER"
	// EnvDirectURL names the environment variable holding the server's own
	// URL when DATABASE_URL goes through a pooler.
	EnvDirectURL = "DURABLE_TEST_DIRECT_URL"
	// EnvRequirePooler, set to 1, makes PoolerURL fail instead of skipping
	// when PgBouncer is not installed (CI sets it).
	EnvRequirePooler = "DURABLE_REQUIRE_POOLER"
)

// Pooled reports whether DATABASE_URL goes through a pooler in transaction
// mode (DURABLE_TEST_POOLER=transaction). There, consecutive transactions
// of one client connection may run on different server connections: LISTEN
// delivers nothing, and session state (SET, session advisory locks,
// prepared statements) does not stay with the client. Main then puts a
// filter of cancel requests in front of it (see cancelFilter).
func Pooled() bool { return os.Getenv(EnvPooler) == "transaction" }

// SkipIfPooled skips the test, saying why, when DATABASE_URL goes through a
// pooler in transaction mode.
func SkipIfPooled(tb testing.TB, why string) {
	tb.Helper()
	if Pooled() {
		tb.Skipf("pgtest: through a transaction-mode pooler (%s=transaction): %s", EnvPooler, why)
	}
}

// DirectURL returns the URL of the server itself: DURABLE_TEST_DIRECT_URL
// when DATABASE_URL goes through a pooler, DATABASE_URL otherwise.
func DirectURL(tb testing.TB) string {
	tb.Helper()
	if Pooled() {
		url := os.Getenv(EnvDirectURL)
		if url == "" {
			tb.Fatalf("pgtest: %s=transaction needs %s, the server's own URL", EnvPooler, EnvDirectURL)
		}
		return url
	}
	return URL(tb)
}

// DirectPool returns a new pool (MaxConns 20) on DirectURL, closed when the
// test ends.
func DirectPool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	return poolOn(tb, DirectURL(tb))
}

var pooler struct {
	sync.Mutex
	url     string
	err     error
	skip    string
	started bool
	stop    func()
}

// PoolerURL returns the URL of a PgBouncer in transaction mode in front of
// the server: DATABASE_URL itself under DURABLE_TEST_POOLER=transaction;
// otherwise one that this test binary starts with scripts/pgbouncer on
// first use (in front of DirectURL) and stops when Main returns, or when
// the binary dies. Either way the URL goes through a filter of cancel
// requests (see cancelFilter). It skips the test when PgBouncer is not
// installed, unless DURABLE_REQUIRE_POOLER=1.
func PoolerURL(tb testing.TB) string {
	tb.Helper()
	if Pooled() {
		return URL(tb)
	}
	direct := URL(tb)
	pooler.Lock()
	defer pooler.Unlock()
	if !pooler.started {
		pooler.started = true
		pooler.url, pooler.skip, pooler.err = startPooler(direct)
	}
	switch {
	case pooler.err != nil:
		tb.Fatalf("pgtest: %v", pooler.err)
	case pooler.skip != "":
		if os.Getenv(EnvRequirePooler) == "1" {
			tb.Fatalf("pgtest: %s (and %s=1)", pooler.skip, EnvRequirePooler)
		}
		tb.Skipf("pgtest: %s", pooler.skip)
	}
	return pooler.url
}

// startPooler starts the binary's PgBouncer in a temporary folder.
func startPooler(direct string) (url, skip string, err error) {
	pg, err := scriptPath()
	if err != nil {
		return "", "", err
	}
	script := filepath.Join(filepath.Dir(pg), "pgbouncer")
	dir, err := os.MkdirTemp("", "durable-pgbouncer-")
	if err != nil {
		return "", "", err
	}
	release, err := startWatchdog(script, dir)
	if err != nil {
		os.RemoveAll(dir)
		return "", "", fmt.Errorf("starting cleanup watchdog: %v", err)
	}
	url, err = runScript(script, "start", dir, direct, "transaction")
	if err != nil {
		release()
		if strings.Contains(err.Error(), "pgbouncer not found") {
			return "", "PgBouncer is not installed (Debian/Ubuntu: apt-get install -y pgbouncer)", nil
		}
		return "", "", err
	}
	url, stopFilter, err := filterCancels(url)
	if err != nil {
		release()
		return "", "", err
	}
	pooler.stop = func() { stopFilter(); release() }
	return url, "", nil
}

// stopPooler stops the binary's PgBouncer, if it started one.
func stopPooler() {
	pooler.Lock()
	defer pooler.Unlock()
	if pooler.stop != nil {
		pooler.stop()
		pooler.stop = nil
	}
	pooler.started = false
}
