package pgtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Prepare readies a new schema for Reused, for example by migrating it.
type Prepare func(ctx context.Context, conn *pgx.Conn, schema string) error

// Creating and migrating a schema costs the server about half a second of
// CPU, and dropping it more: most of what a test of the engine costs
// Postgres. Emptying a schema's tables costs a few milliseconds. So a
// schema that Reused handed out goes back to a free list when its test
// ends, emptied, for the next test of this process that asks for the same
// kind; Main drops the free schemas when the tests end.
var reuse struct {
	sync.Mutex
	free map[string][]*reusable // by URL and kind
}

// mainRunning is set while Main runs the tests: only then are free
// schemas dropped at the end, so only then does Reused reuse them.
var mainRunning atomic.Bool

// reuseStats counts the schemas Reused prepared and reused (printed by
// Main when PGTEST_STATS is set).
var reuseStats struct{ prepared, reused, dropped atomic.Int64 }

var statsOn = os.Getenv("PGTEST_STATS") != ""

// reusable is a prepared schema and what it looked like once prepared.
type reusable struct {
	name, url string
	// print is the schema's fingerprint once prepared: its objects,
	// their definitions and grants, and the content of the tables that
	// prepare filled (kept).
	print   string
	kept    []string // tables prepare filled: never emptied
	emptied []string // the other tables: emptied between tests
}

// Reused returns a schema that prepare made ready (once per schema, for
// example migrated), its tables as prepare left them.
// When the test ends, the schema goes back to a free list for the next
// test of this process that asks for this kind, provided the test passed
// and left the schema as prepare made it (no table, column, index, grant
// or function added, changed or removed; the tables prepare filled
// unchanged); otherwise it is dropped. The test must stop everything that
// uses the schema (engines, child processes) by its cleanup, as for
// Schema. Outside Main, every schema is new and dropped at the end.
func Reused(tb testing.TB, kind string, prepare Prepare) string {
	tb.Helper()
	url := URL(tb)
	key := url + "\x00" + kind
	if mainRunning.Load() {
		reuse.Lock()
		var s *reusable
		if n := len(reuse.free[key]); n > 0 {
			s = reuse.free[key][n-1]
			reuse.free[key] = reuse.free[key][:n-1]
		}
		reuse.Unlock()
		if s != nil {
			reuseStats.reused.Add(1)
			tb.Cleanup(func() { s.giveBack(tb, key) })
			return s.name
		}
	}
	name := createSchema(tb, url, "t")
	reuseStats.prepared.Add(1)
	s := &reusable{name: name, url: url}
	tb.Cleanup(func() { s.giveBack(tb, key) }) // drops it unless surveyed
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := withConn(ctx, url, func(conn *pgx.Conn) error {
		if err := prepare(ctx, conn, name); err != nil {
			return fmt.Errorf("preparing schema %s (%s): %w", name, kind, err)
		}
		if mainRunning.Load() {
			if err := s.survey(ctx, conn); err != nil {
				return fmt.Errorf("surveying schema %s: %w", name, err)
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	return name
}

// survey records which tables prepare filled and the schema's
// fingerprint.
func (s *reusable) survey(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, `SELECT c.relname FROM pg_class c
		WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r', 'p') ORDER BY c.relname`, s.name)
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, t := range tables {
		var filled bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM "+s.ident(t)+")").Scan(&filled); err != nil {
			return err
		}
		if filled {
			s.kept = append(s.kept, t)
		} else {
			s.emptied = append(s.emptied, t)
		}
	}
	s.print, err = s.fingerprint(ctx, conn)
	return err
}

func (s *reusable) ident(table string) string { return pgx.Identifier{s.name, table}.Sanitize() }

// fingerprintSQL describes a schema: every object in it with its
// definition, owner and grants. $1 is the schema's name.
const fingerprintSQL = `SELECT coalesce(md5(string_agg(item, E'\n' ORDER BY item)), '') FROM (
	SELECT 'n ' || n.nspowner::regrole::text || ' ' || coalesce(n.nspacl::text, '') AS item
		FROM pg_namespace n WHERE n.oid = $1::regnamespace
	UNION ALL
	SELECT 'c ' || c.relname || ' ' || c.relkind::text || ' ' || c.relowner::regrole::text || ' ' || coalesce(c.relacl::text, '')
			|| ' ' || c.relpersistence::text || ' ' || c.relrowsecurity || ' ' || c.relforcerowsecurity
			|| ' ' || coalesce(array_to_string(c.reloptions, ','), '')
		FROM pg_class c WHERE c.relnamespace = $1::regnamespace
	UNION ALL
	SELECT 'a ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull
			|| ' ' || a.attcollation || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '') || ' ' || coalesce(a.attacl::text, '')
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE c.relnamespace = $1::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
	UNION ALL
	SELECT 'k ' || k.conrelid::regclass::text || ' ' || k.conname || ' ' || pg_get_constraintdef(k.oid)
		FROM pg_constraint k WHERE k.connamespace = $1::regnamespace
	UNION ALL
	SELECT 'i ' || pg_get_indexdef(i.indexrelid)
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace = $1::regnamespace
	UNION ALL
	SELECT 't ' || pg_get_triggerdef(t.oid)
		FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE c.relnamespace = $1::regnamespace AND NOT t.tgisinternal
	UNION ALL
	SELECT 'v ' || c.relname || ' ' || pg_get_viewdef(c.oid)
		FROM pg_class c WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('v', 'm')
	UNION ALL
	SELECT 'p ' || p.oid::regprocedure::text || ' ' || p.proowner::regrole::text || ' ' || md5(p.prosrc)
			|| ' ' || p.provolatile::text || ' ' || p.prosecdef || ' ' || coalesce(p.proacl::text, '') || ' ' || coalesce(array_to_string(p.proconfig, ','), '')
		FROM pg_proc p WHERE p.pronamespace = $1::regnamespace
	UNION ALL
	SELECT 'y ' || t.typname FROM pg_type t WHERE t.typnamespace = $1::regnamespace
	UNION ALL
	SELECT 'd ' || d.defaclrole::regrole::text || ' ' || d.defaclobjtype::text || ' ' || d.defaclacl::text
		FROM pg_default_acl d WHERE d.defaclnamespace = $1::regnamespace
	UNION ALL
	SELECT 'o ' || o.oprname FROM pg_operator o WHERE o.oprnamespace = $1::regnamespace
) s`

// fingerprint describes the schema and the content of its kept tables.
func (s *reusable) fingerprint(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (string, error) {
	var b strings.Builder
	var print string
	if err := db.QueryRow(ctx, fingerprintSQL, s.name).Scan(&print); err != nil {
		return "", err
	}
	b.WriteString(print)
	for _, t := range s.kept {
		var content string
		if err := db.QueryRow(ctx, "SELECT coalesce(md5(string_agg(r::text, E'\\n' ORDER BY r::text)), '') FROM "+
			s.ident(t)+" r").Scan(&content); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, " %s=%s", t, content)
	}
	return b.String(), nil
}

// giveBack empties the schema and puts it on the free list, if it was
// surveyed and its test passed and left it as prepared; otherwise it drops
// it.
func (s *reusable) giveBack(tb testing.TB, key string) {
	// print is set only under Main, which drops the free list at the end.
	if s.print == "" || tb.Failed() || s.empty() != nil {
		reuseStats.dropped.Add(1)
		if statsOn {
			fmt.Printf("pgtest: %s: dropping schema %s, not reusing it\n", tb.Name(), s.name)
		}
		dropSchema(tb, s.url, s.name)
		return
	}
	reuse.Lock()
	if reuse.free == nil {
		reuse.free = map[string][]*reusable{}
	}
	reuse.free[key] = append(reuse.free[key], s)
	reuse.Unlock()
}

// errChanged reports a schema its test changed: it is not reused.
var errChanged = fmt.Errorf("pgtest: the test changed the schema")

// empty checks the schema is as prepared and empties the other tables, in
// one transaction.
func (s *reusable) empty() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return withConn(ctx, s.url, func(conn *pgx.Conn) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			// A connection the test left in a transaction holds its locks:
			// give up on reuse rather than wait.
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '5s'"); err != nil {
				return err
			}
			print, err := s.fingerprint(ctx, tx)
			if err != nil {
				return err
			}
			if print != s.print {
				return errChanged
			}
			if len(s.emptied) == 0 {
				return nil
			}
			idents := make([]string, len(s.emptied))
			for i, t := range s.emptied {
				idents[i] = s.ident(t)
			}
			_, err = tx.Exec(ctx, "TRUNCATE "+strings.Join(idents, ", ")+" RESTART IDENTITY")
			return err
		})
	})
}

// dropFree drops the schemas on the free list (Main, when the tests end).
func dropFree() {
	reuse.Lock()
	defer reuse.Unlock()
	for key, list := range reuse.free {
		for _, s := range list {
			if err := drop(s.url, s.name); err != nil {
				fmt.Printf("pgtest: dropping schema %s: %v\n", s.name, err)
			}
		}
		delete(reuse.free, key)
	}
}

// shared holds the pool of each URL that the tests of the process share
// (Pool under Main).
var shared struct {
	sync.Mutex
	pools map[string]*pgxpool.Pool
}

func sharedPool(tb testing.TB, url string) *pgxpool.Pool {
	tb.Helper()
	shared.Lock()
	defer shared.Unlock()
	if p := shared.pools[url]; p != nil {
		return p
	}
	p := newPool(tb, url, 64)
	if shared.pools == nil {
		shared.pools = map[string]*pgxpool.Pool{}
	}
	shared.pools[url] = p
	return p
}

// existingShared returns the shared pool of url, if there is one.
func existingShared(url string) *pgxpool.Pool {
	shared.Lock()
	defer shared.Unlock()
	return shared.pools[url]
}

// closeShared closes the shared pools (Main, when the tests end).
func closeShared() {
	shared.Lock()
	defer shared.Unlock()
	for url, p := range shared.pools {
		p.Close()
		delete(shared.pools, url)
	}
}
