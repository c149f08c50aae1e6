package sysdb

import (
	"context"
	"strings"
	"testing"
	"testing/fstest"
	"unicode/utf8"

	"github.com/durable-go/durable/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// storable reports whether Postgres (UTF-8) can hold s as text.
func storable(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// FuzzLikePrefix: ListParams.IDPrefix matches exactly the IDs that start
// with it, whatever LIKE wildcards or escapes it holds.
func FuzzLikePrefix(f *testing.F) {
	for _, s := range [][2]string{{"run", "run-1"}, {"%", "x"}, {"_", "a"}, {`\`, `\x`}, {`a\%`, `a\%b`}, {`\_`, "_"},
		{"%_%", "%_%x"}, {"é", "é%"}, {`'`, `''`}, {"", "x"}} {
		f.Add(s[0], s[1])
	}
	pool := pgtest.Pool(f)
	f.Fuzz(func(t *testing.T, prefix, id string) {
		if !storable(prefix) || !storable(id) {
			return
		}
		var match bool
		if err := pool.QueryRow(context.Background(), `SELECT $1::text LIKE $2 ESCAPE '\'`, id, likePrefix(prefix)).Scan(&match); err != nil {
			t.Fatalf("prefix %q: %v", prefix, err)
		}
		if want := strings.HasPrefix(id, prefix); match != want {
			t.Fatalf("%q LIKE likePrefix(%q) = %v, want %v", id, prefix, match, want)
		}
	})
}

// FuzzQuoteLiteral: a migration name quoted into MigrationSQL reads back
// as itself in Postgres.
func FuzzQuoteLiteral(f *testing.F) {
	for _, s := range []string{"baseline", "it's", `\`, `'; DROP TABLE x; --`, "", "''", `\'`, "ünï"} {
		f.Add(s)
	}
	pool := pgtest.Pool(f)
	f.Fuzz(func(t *testing.T, s string) {
		if !storable(s) {
			return
		}
		var got string
		if err := pool.QueryRow(context.Background(), "SELECT "+quoteLiteral(s)).Scan(&got); err != nil || got != s {
			t.Fatalf("quoteLiteral(%q) reads back as %q (%v)", s, got, err)
		}
	})
}

// FuzzChannelName: every schema gets a channel Postgres accepts (at most
// 63 bytes), the same one on every executor, "durable:<schema>" whenever
// it fits.
func FuzzChannelName(f *testing.F) {
	for _, s := range []string{"durable", "", strings.Repeat("s", 55), strings.Repeat("s", 56), strings.Repeat("é", 40)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, schema string) {
		c := ChannelName(schema)
		if len(c) > maxChannelLen || !strings.HasPrefix(c, "durable:") || c != ChannelName(schema) {
			t.Fatalf("ChannelName(%q) = %q", schema, c)
		}
		if len("durable:"+schema) <= maxChannelLen && c != "durable:"+schema {
			t.Fatalf("ChannelName(%q) = %q, want durable:%s", schema, c, schema)
		}
	})
}

// FuzzLoadMigrations: any set of file names in the migrations folder
// loads as versions in strictly increasing order from the baseline
// (version 1), or fails with an error naming the bad file or the missing
// baseline.
func FuzzLoadMigrations(f *testing.F) {
	f.Add("001_baseline.sql\n002_queues.sql\n003_schedules.sql\nREADME.md")
	f.Add("001_baseline.sql\n002_a.sql\n002_b.sql")
	f.Add("002_queues.sql")
	f.Add("001_x.sql")
	f.Add("000_x.sql\n001_x.sql")
	f.Add("abc.sql\n_.sql\n-1_x.sql\n99999999999999999999_x.sql\n0002_x.sql")
	f.Fuzz(func(t *testing.T, names string) {
		fsys := fstest.MapFS{}
		for _, n := range strings.Split(names, "\n") {
			if n == "" || strings.ContainsAny(n, "/\\") || n == "." || n == ".." {
				continue
			}
			fsys["m/"+n] = &fstest.MapFile{Data: []byte("SELECT 1;")}
		}
		migs, err := LoadMigrations(fsys, "m")
		if err != nil {
			return
		}
		if migs[0].Version != 1 {
			t.Fatalf("first migration is %d", migs[0].Version)
		}
		for i := 1; i < len(migs); i++ {
			if migs[i].Version <= migs[i-1].Version {
				t.Fatalf("versions not increasing: %+v", migs)
			}
		}
	})
}
