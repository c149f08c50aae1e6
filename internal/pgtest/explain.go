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
	return top[0].Plan.rowsOf("workflows"), string(raw)
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
