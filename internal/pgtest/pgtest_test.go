package pgtest

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

func TestPoolSelect1(t *testing.T) {
	pool := Pool(t)
	var one int
	if err := pool.QueryRow(context.Background(), "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v", one, err)
	}
}

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

func TestSchema(t *testing.T) {
	ctx := context.Background()
	pool := Pool(t)
	var name string
	t.Run("use", func(t *testing.T) {
		name = Schema(t)
		if !identRE.MatchString(name) || len(name) > 40 {
			t.Fatalf("schema name %q is not a short lowercase identifier", name)
		}
		if other := Schema(t); other == name {
			t.Fatalf("Schema returned %q twice", name)
		}
		tbl := pgx.Identifier{name, "items"}.Sanitize()
		for _, q := range []string{
			"CREATE TABLE " + tbl + " (id int PRIMARY KEY, v text NOT NULL)",
			"INSERT INTO " + tbl + " VALUES (1, 'a'), (2, 'b')",
		} {
			if _, err := pool.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+tbl).Scan(&n); err != nil || n != 2 {
			t.Fatalf("count = %d, %v", n, err)
		}
	})
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Fatalf("schema %s still exists after its test ended", name)
	}
}

func TestPgStatStatements(t *testing.T) {
	ctx := context.Background()
	pool := Pool(t)
	var preload string
	if err := pool.QueryRow(ctx, "SHOW shared_preload_libraries").Scan(&preload); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(preload, "pg_stat_statements") {
		if owned {
			t.Fatalf("our cluster does not preload pg_stat_statements (shared_preload_libraries=%q)", preload)
		}
		t.Skipf("server does not preload pg_stat_statements (shared_preload_libraries=%q)", preload)
	}
	if _, err := pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_statements").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("pg_stat_statements is empty")
	}
}

// TestFaults restarts and stops the server, so it only runs on a cluster that
// Main started for this test binary alone (or when explicitly asked with
// PGTEST_FAULTS=1), never on one shared with other packages.
func TestFaults(t *testing.T) {
	if !owned && os.Getenv("PGTEST_FAULTS") != "1" {
		t.Skip("the cluster may be shared with other packages; set PGTEST_FAULTS=1 to run anyway")
	}
	pool := Pool(t)
	select1 := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		var err error
		for {
			var one int
			if err = pool.QueryRow(ctx, "SELECT 1").Scan(&one); err == nil {
				return nil
			}
			if ctx.Err() != nil {
				return err
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := select1(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	for _, immediate := range []bool{true, false} {
		Restart(t, immediate)
		if err := select1(30 * time.Second); err != nil {
			t.Fatalf("after Restart(immediate=%v): %v", immediate, err)
		}
	}

	Stop(t, true)
	if err := select1(time.Second); err == nil {
		t.Fatal("SELECT 1 succeeded while the server was stopped")
	}
	Start(t)
	Start(t) // no-op when running
	if err := select1(30 * time.Second); err != nil {
		t.Fatalf("after Start: %v", err)
	}
}

// TestCancelFilter: connections through the filter work, and the cancel
// request pgx sends when a context ends mid-query never reaches the server:
// the query runs on.
func TestCancelFilter(t *testing.T) {
	url, f, err := newCancelFilter(URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.stop()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	qctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := conn.Exec(qctx, "SELECT pg_sleep(3)"); err == nil {
		t.Fatal("the query outlived its context")
	}
	// pgx sends a cancel request as it closes the connection: the filter
	// drops it, so the query still runs.
	for deadline := time.Now().Add(30 * time.Second); f.dropped.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no cancel request was dropped")
		}
	}
	var running bool
	if err := Pool(t).QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND query = 'SELECT pg_sleep(3)' AND state = 'active')", pid).Scan(&running); err != nil {
		t.Fatal(err)
	}
	if !running {
		t.Fatal("the query was cancelled: the cancel request went through")
	}
}
