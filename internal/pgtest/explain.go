package pgtest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ExplainRows runs sql under EXPLAIN ANALYZE in a transaction it rolls
// back, with plan_cache_mode set to mode, and returns how many rows of the
// workflows table its plan nodes read (rows returned plus rows removed by
// a filter, times loops, and rows a join filter removed), with the plan's
// text. The plan tests bound it: a statement meant to find its rows by key
// must not read the history.
func ExplainRows(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, mode, sql string, args []any) (int, string) {
	tb.Helper()
	return ExplainTableRows(ctx, tb, pool, mode, "workflows", sql, args)
}

// ExplainTableRows is ExplainRows counting the rows read of table rel.
func ExplainTableRows(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, mode, rel, sql string, args []any) (int, string) {
	tb.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode); err != nil {
		tb.Fatal(err)
	}
	var raw []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&raw); err != nil {
		tb.Fatalf("explain %s: %v", sql, err)
	}
	var top []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &top); err != nil || len(top) != 1 {
		tb.Fatalf("explain output: %v: %s", err, raw)
	}
	return top[0].Plan.rowsOf(rel), string(raw)
}

type planNode struct {
	NodeType        string     `json:"Node Type"`
	Relation        string     `json:"Relation Name"`
	ActualRows      float64    `json:"Actual Rows"`
	ActualLoops     float64    `json:"Actual Loops"`
	RemovedByFilter float64    `json:"Rows Removed by Filter"`
	RemovedByJoin   float64    `json:"Rows Removed by Join Filter"`
	Plans           []planNode `json:"Plans"`
}

func (n *planNode) rowsOf(rel string) int {
	total := n.RemovedByJoin * n.ActualLoops
	if n.Relation == rel && strings.HasSuffix(n.NodeType, "Scan") {
		total += (n.ActualRows + n.RemovedByFilter) * n.ActualLoops
	}
	for i := range n.Plans {
		total += float64(n.Plans[i].rowsOf(rel))
	}
	return int(total)
}

// Scan is a node of a plan that reads a table.
type Scan struct {
	Relation  string // the table
	NodeType  string // "Seq Scan", "Index Scan", ...
	Index     string // the index, for index scans
	IndexCond string // the condition the index is searched with
	Filter    string // the condition rows are then tested with
}

// ExplainScans returns the nodes of sql's plan with args that read a
// table (EXPLAIN, in a transaction it rolls back) with sequential and
// bitmap scans disabled and the indexes named in without dropped first
// (an index that backs a constraint by dropping the constraint), so a
// caller can ask which other index the statement could be served by. A
// statement whose predicates allow an index search shows it; one that
// allows none shows a sequential scan anyway. An error is the server's
// (for example, an INSERT ... ON CONFLICT whose arbiter index was
// dropped).
func ExplainScans(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, schema, sql string, args []any, without []string) ([]Scan, string, error) {
	tb.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, set := range []string{"enable_seqscan = off", "enable_bitmapscan = off"} {
		if _, err := tx.Exec(ctx, "SET LOCAL "+set); err != nil {
			tb.Fatal(err)
		}
	}
	for _, idx := range without {
		// The index, or the constraint it backs.
		_, err := tx.Exec(ctx, `DO $$
DECLARE c record;
BEGIN
	SELECT con.conname, cl.relname INTO c FROM pg_constraint con
	JOIN pg_class cl ON cl.oid = con.conrelid JOIN pg_namespace n ON n.oid = cl.relnamespace
	WHERE n.nspname = `+quoteLiteral(schema)+` AND con.conindid = (`+quoteLiteral(schema+"."+idx)+`)::regclass;
	IF FOUND THEN
		EXECUTE format('ALTER TABLE %I.%I DROP CONSTRAINT %I', `+quoteLiteral(schema)+`, c.relname, c.conname);
	ELSE
		EXECUTE format('DROP INDEX %I.%I', `+quoteLiteral(schema)+`, `+quoteLiteral(idx)+`);
	END IF;
END $$`)
		if err != nil {
			tb.Fatalf("drop index %s: %v", idx, err)
		}
	}
	var raw []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+sql, args...).Scan(&raw); err != nil {
		return nil, "", err
	}
	var top []struct {
		Plan scanNode `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &top); err != nil || len(top) != 1 {
		tb.Fatalf("explain output: %v: %s", err, raw)
	}
	var out []Scan
	top[0].Plan.collect(&out)
	return out, string(raw), nil
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

type scanNode struct {
	NodeType  string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	Index     string     `json:"Index Name"`
	IndexCond string     `json:"Index Cond"`
	Filter    string     `json:"Filter"`
	Plans     []scanNode `json:"Plans"`
}

func (n *scanNode) collect(out *[]Scan) {
	if n.Relation != "" && strings.HasSuffix(n.NodeType, "Scan") {
		*out = append(*out, Scan{Relation: n.Relation, NodeType: n.NodeType, Index: n.Index, IndexCond: n.IndexCond, Filter: n.Filter})
	}
	for i := range n.Plans {
		n.Plans[i].collect(out)
	}
}
