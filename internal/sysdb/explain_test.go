package sysdb

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// explainRows runs sql under EXPLAIN ANALYZE, in plan_cache_mode mode, in
// a transaction it rolls back, and returns how many rows of the workflows
// table its plan nodes read (rows returned plus rows removed by a filter,
// times loops, and rows a join filter removed), with the plan's text.
func explainRows(tb testing.TB, pool *pgxpool.Pool, mode, sql string, args ...any) (int, string) {
	tb.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(tb, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode)
	require.NoError(tb, err)
	var raw []byte
	require.NoError(tb, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&raw), sql)
	var top []struct {
		Plan planNode `json:"Plan"`
	}
	require.NoError(tb, json.Unmarshal(raw, &top))
	require.Len(tb, top, 1)
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

// planModes are the plan cache modes a plan check tries: a statement must
// read few rows with a custom plan and with a generic one.
var planModes = []string{"force_custom_plan", "force_generic_plan"}
