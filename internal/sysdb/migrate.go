package sysdb

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Migration is one numbered schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string // with the schema marker
}

// LoadMigrations returns the numbered files NNN_name.sql found in dir of
// fsys, in version order, starting with the baseline 001_baseline.sql.
func LoadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	var migs []Migration
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	seen := map[int]string{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		num, rest, ok := strings.Cut(strings.TrimSuffix(e.Name(), ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("migration file %q: want NNN_name.sql with NNN >= 1", e.Name())
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migration version %d used by %q and %q", v, prev, e.Name())
		}
		seen[v] = e.Name()
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		if strings.Contains(string(b), scriptDoTag) || strings.Contains(string(b), scriptBodyTag) {
			return nil, fmt.Errorf("migration file %q: contains %s or %s, which Script quotes it with", e.Name(), scriptDoTag, scriptBodyTag)
		}
		migs = append(migs, Migration{Version: v, Name: rest, SQL: string(b)})
	}
	sort.Slice(migs, func(i, j int) bool { return migs[i].Version < migs[j].Version })
	if len(migs) == 0 || migs[0].Version != 1 {
		return nil, fmt.Errorf("no baseline migration 001_*.sql in %s", dir)
	}
	return migs, nil
}

const versionTable = `CREATE TABLE IF NOT EXISTS {{schema}}.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
`

// The dollar-quote tags of Script's guard around each migration; no
// migration may contain them (LoadMigrations checks).
const (
	scriptDoTag   = "$durable_migration$"
	scriptBodyTag = "$durable_body$"
)

// Script renders the whole migration script for schema, as a DBA would run
// it by hand: schema, version table, then each migration and its version
// row. Each migration runs only where the schema lacks it, as Migrate
// does: its SQL is the string of an EXECUTE, in a DO block that reads the
// version table first. So the script can be applied again, after an
// upgrade or twice, whatever a migration does: an earlier migration never
// meets the objects of a later one (migration 015's column changes would
// fail on the columns that 018's views use).
func Script(migs []Migration, schema string) string {
	var b strings.Builder
	ident := pgx.Identifier{schema}.Sanitize()
	b.WriteString(Render("CREATE SCHEMA IF NOT EXISTS {{schema}};\n", schema))
	b.WriteString(Render(versionTable, schema))
	for _, m := range migs {
		fmt.Fprintf(&b, "\n-- migration %03d %s\nBEGIN;\nDO %s BEGIN\nIF NOT EXISTS (SELECT FROM %s.schema_migrations WHERE version = %d) THEN\nEXECUTE %s\n",
			m.Version, m.Name, scriptDoTag, ident, m.Version, scriptBodyTag)
		b.WriteString(Render(m.SQL, schema))
		fmt.Fprintf(&b, "\n%s;\nEND IF;\nEND %s;\nINSERT INTO %s.schema_migrations (version, name) VALUES (%d, %s) ON CONFLICT DO NOTHING;\nCOMMIT;\n",
			scriptBodyTag, scriptDoTag, ident, m.Version, quoteLiteral(m.Name))
	}
	return b.String()
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// LockKey is the advisory lock key that serialises migrations of one schema.
func LockKey(schema string) string { return "durable.migrate:" + schema }

// lockStmt takes the migration lock of a schema for the rest of the
// transaction. A transaction lock, not a session lock: through a pooler in
// transaction mode, consecutive statements of one client may run on
// different server connections, so a session lock could be released on
// another connection than the one holding it (and stay held there, for
// whoever gets that connection next), or be granted again to another
// client that lands on the holder's connection.
const lockStmt = "SELECT pg_advisory_xact_lock(hashtext($1))"

// Migrate applies every migration newer than the schema's version, each in
// its own transaction that first takes the schema's migration lock (see
// lockStmt) and checks again that the migration is still missing, so
// concurrent boots wait for each other instead of racing, and the one that
// waited skips what the other applied. It returns the versions it applied.
func Migrate(ctx context.Context, conn *pgx.Conn, migs []Migration, schema string) ([]int, error) {
	// Nothing to apply means no DDL and no lock at all, so a role with only
	// DML grants on a schema a DBA migrated still launches.
	missing, err := Missing(ctx, conn, migs, schema)
	if err != nil || len(missing) == 0 {
		return nil, err
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, lockStmt, LockKey(schema)); err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
		// CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even
		// when the schema exists; a role that owns only its schema has none.
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
			return fmt.Errorf("look up schema: %w", err)
		}
		if !exists {
			if _, err := tx.Exec(ctx, Render("CREATE SCHEMA IF NOT EXISTS {{schema}}", schema)); err != nil {
				return fmt.Errorf("create schema: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, Render(versionTable, schema)); err != nil {
			return fmt.Errorf("create version table: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	isApplied := Render("SELECT EXISTS (SELECT FROM {{schema}}.schema_migrations WHERE version = $1)", schema)
	record := Render("INSERT INTO {{schema}}.schema_migrations (version, name) VALUES ($1, $2)", schema)
	var applied []int
	for _, m := range migs {
		if !slices.Contains(missing, m.Version) {
			continue // applied; a missing lower version is still applied
		}
		did := false
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, lockStmt, LockKey(schema)); err != nil {
				return fmt.Errorf("take migration lock: %w", err)
			}
			var done bool
			if err := tx.QueryRow(ctx, isApplied, m.Version).Scan(&done); err != nil || done {
				return err // done: applied by another process meanwhile
			}
			if _, err := tx.Exec(ctx, Render(m.SQL, schema)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, record, m.Version, m.Name)
			did = err == nil
			return err
		})
		if err != nil {
			return applied, fmt.Errorf("apply migration %03d %s: %w", m.Version, m.Name, err)
		}
		if did {
			applied = append(applied, m.Version)
		}
	}
	return applied, nil
}

func appliedVersions(ctx context.Context, conn *pgx.Conn, schema string) (map[int]bool, error) {
	rows, err := conn.Query(ctx, Render("SELECT version FROM {{schema}}.schema_migrations", schema))
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	done := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return nil, err
		}
		done[v] = true
	}
	return done, rows.Err()
}

// Missing returns the versions of migs not applied to schema (nil when the
// version table does not exist yet means all of them).
func Missing(ctx context.Context, conn *pgx.Conn, migs []Migration, schema string) ([]int, error) {
	v, err := Version(ctx, conn, schema)
	if err != nil {
		return nil, err
	}
	var done map[int]bool
	if v > 0 {
		if done, err = appliedVersions(ctx, conn, schema); err != nil {
			return nil, err
		}
	}
	var missing []int
	for _, m := range migs {
		if !done[m.Version] {
			missing = append(missing, m.Version)
		}
	}
	return missing, nil
}

// Version returns the highest applied migration version of schema, 0 when
// the schema or its version table does not exist.
func Version(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, schema string) (int, error) {
	var v int
	err := q.QueryRow(ctx, `SELECT CASE WHEN to_regclass($1) IS NULL THEN 0 ELSE -1 END`,
		pgx.Identifier{schema, "schema_migrations"}.Sanitize()).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if v == 0 {
		return 0, nil
	}
	if err := q.QueryRow(ctx, Render("SELECT coalesce(max(version), 0) FROM {{schema}}.schema_migrations", schema)).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}
