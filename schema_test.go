package durable_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/sysdb"
)

// TestSchemaSQL: schema.sql, the whole current schema written out for a
// DBA to read, builds the same catalog as the migrations that actually
// install it: the same relations, columns (position, type, nullability,
// default, collation), constraints, indexes, functions, triggers,
// sequences and view definitions, and the same recorded version. A migration added without
// updating schema.sql, or an edit of schema.sql alone, fails here.
func TestSchemaSQL(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := ctxT(t)

	migrated := pgtest.Schema(t)
	require.NoError(t, durable.Migrate(ctx, pool, migrated))

	written := pgtest.Schema(t)
	sql, err := os.ReadFile("schema.sql")
	require.NoError(t, err)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = conn.Conn().PgConn().Exec(ctx, sysdb.Render(string(sql), written)).ReadAll()
	conn.Release()
	require.NoError(t, err, "applying schema.sql")

	want, got := schemaCatalog(ctx, t, pool, migrated), schemaCatalog(ctx, t, pool, written)
	for _, section := range []string{"relation", "column", "constraint", "index", "function", "sequence", "view", "version"} {
		require.Equal(t, want[section], got[section], "%s: schema.sql (+) differs from what the migrations build (-)", section)
	}
	require.Equal(t, want, got)

	// The comparison is not vacuous: it saw what the engine relies on.
	require.Contains(t, want["relation"], "table workflows")
	require.Contains(t, want["sequence"], "messages_id_seq: bigint start 1 increment 1 min 1 max 9223372036854775807 cache 1 owned by messages.id")
	require.Contains(t, want["index"], "workflows_queue_dedup_idx: CREATE UNIQUE INDEX workflows_queue_dedup_idx ON {{schema}}.workflows USING btree (queue_name, dedup_id) WHERE ((dedup_id IS NOT NULL) AND (status = ANY (ARRAY['enqueued'::text, 'pending'::text])))")
	require.Contains(t, want["column"], `workflows.id #1: text not null default - collation "C"`)
	require.Contains(t, strings.Join(want["function"], "\n"), "FUNCTION {{schema}}.checkpoint_refused()")
	require.Contains(t, want["relation"], "view runs_v1")
	require.Contains(t, strings.Join(want["view"], "\n"), "steps_v1: ")
	files, err := filepath.Glob("migrations/*.sql")
	require.NoError(t, err)
	require.Len(t, want["version"], len(files), "one version per migration file (numbers may skip one)")
	require.Contains(t, want["version"], fmt.Sprintf("%d ", durable.SchemaVersion())+strings.TrimSuffix(strings.SplitN(filepath.Base(files[len(files)-1]), "_", 2)[1], ".sql"))
}

// schemaCatalog describes what schema holds, one line per object, by
// section, with the schema's own name replaced by {{schema}}.
func schemaCatalog(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string) map[string][]string {
	t.Helper()
	queries := map[string]string{
		"relation": `SELECT CASE c.relkind WHEN 'r' THEN 'table' WHEN 'i' THEN 'index' WHEN 'S' THEN 'sequence'
				WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' WHEN 'p' THEN 'partitioned table'
				ELSE 'relkind ' || c.relkind::text END || ' ' || c.relname
				|| CASE WHEN c.relpersistence <> 'p' THEN ' persistence ' || c.relpersistence::text ELSE '' END
				|| coalesce(' options ' || array_to_string(c.reloptions, ','), '')
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1`,
		// Position among the live columns: a dropped column leaves a gap in
		// attnum that a schema written out afresh has not.
		"column": `SELECT c.relname || '.' || a.attname || ' #' || row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum)
				|| ': ' || format_type(a.atttypid, a.atttypmod)
				|| CASE WHEN a.attnotnull THEN ' not null' ELSE ' null' END
				|| ' default ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '-')
				|| ' collation ' || coalesce(quote_ident(co.collname), '-')
				|| CASE WHEN a.attidentity <> '' THEN ' identity ' || a.attidentity::text ELSE '' END
				|| CASE WHEN a.attgenerated <> '' THEN ' generated ' || a.attgenerated::text ELSE '' END
			FROM pg_attribute a
			JOIN pg_class c ON c.oid = a.attrelid
			JOIN pg_namespace n ON n.oid = c.relnamespace
			LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
			LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 0
			WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND a.attnum > 0 AND NOT a.attisdropped`,
		"constraint": `SELECT c.relname || '.' || k.conname || ' ' || k.contype::text || ': ' || pg_get_constraintdef(k.oid)
				|| CASE WHEN k.condeferrable THEN ' deferrable' ELSE '' END
				|| CASE WHEN k.convalidated THEN '' ELSE ' not valid' END
			FROM pg_constraint k
			JOIN pg_class c ON c.oid = k.conrelid
			JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1`,
		"index": `SELECT i.relname || ': ' || pg_get_indexdef(x.indexrelid)
				|| CASE WHEN x.indisprimary THEN ' (primary key)' ELSE '' END
			FROM pg_index x
			JOIN pg_class i ON i.oid = x.indexrelid
			JOIN pg_namespace n ON n.oid = i.relnamespace
			WHERE n.nspname = $1`,
		"function": `SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')' || E'\n' || pg_get_functiondef(p.oid)
			FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
			WHERE n.nspname = $1
			UNION ALL
			SELECT 'trigger ' || g.tgname || ': ' || pg_get_triggerdef(g.oid)
			FROM pg_trigger g
			JOIN pg_class c ON c.oid = g.tgrelid
			JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND NOT g.tgisinternal`,
		"sequence": `SELECT c.relname || ': ' || format_type(s.seqtypid, NULL)
				|| ' start ' || s.seqstart || ' increment ' || s.seqincrement || ' min ' || s.seqmin
				|| ' max ' || s.seqmax || ' cache ' || s.seqcache || CASE WHEN s.seqcycle THEN ' cycle' ELSE '' END
				|| coalesce(' owned by ' || (SELECT t.relname || '.' || a.attname
					FROM pg_depend dep
					JOIN pg_class t ON t.oid = dep.refobjid
					JOIN pg_attribute a ON a.attrelid = dep.refobjid AND a.attnum = dep.refobjsubid
					WHERE dep.classid = 'pg_class'::regclass AND dep.objid = c.oid
						AND dep.refclassid = 'pg_class'::regclass AND dep.deptype IN ('a', 'i')), '')
			FROM pg_sequence s
			JOIN pg_class c ON c.oid = s.seqrelid
			JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1`,
		"view": `SELECT c.relname || ': ' || pg_get_viewdef(c.oid)
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relkind = 'v'`,
		"version": `SELECT version || ' ' || name FROM ` + sysdb.Render("{{schema}}.schema_migrations", schema),
	}
	out := map[string][]string{}
	for section, q := range queries {
		var args []any
		if strings.Contains(q, "$1") {
			args = append(args, schema)
		}
		rows, err := pool.Query(ctx, q, args...)
		require.NoError(t, err, section)
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line), section)
			out[section] = append(out[section], strings.ReplaceAll(line, schema, "{{schema}}"))
		}
		require.NoError(t, rows.Err(), section)
		slices.Sort(out[section])
	}
	return out
}
