package agentkit_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/agentkit/agentkittest"
)

// storedBytes sums the size of every row that belongs to run id, in every
// table of the schema (workflows by id; steps, events, messages, streams...
// by workflow_id), per table.
func storedBytes(t *testing.T, v *env, id string) map[string]int64 {
	ctx := ctxT(t)
	rows, err := v.pool.Query(ctx, `SELECT table_name, column_name FROM information_schema.columns
		WHERE table_schema = $1 AND ((table_name = 'workflows' AND column_name = 'id') OR column_name = 'workflow_id')`, v.schema)
	require.NoError(t, err)
	type col struct{ table, column string }
	var cols []col
	for rows.Next() {
		var c col
		require.NoError(t, rows.Scan(&c.table, &c.column))
		cols = append(cols, c)
	}
	require.NoError(t, rows.Err())
	total := map[string]int64{}
	for _, c := range cols {
		var n int64
		q := fmt.Sprintf("SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM %s t WHERE %s = $1",
			pgx.Identifier{v.schema, c.table}.Sanitize(), pgx.Identifier{c.column}.Sanitize())
		require.NoError(t, v.pool.QueryRow(ctx, q, id).Scan(&n))
		total[c.table] += n
		total[""] += n
	}
	return total
}

// TestStorageGrowsLinearly runs agents of N = 10, 50 and 100 turns (one
// tool call per turn) and measures the bytes stored per run: a design
// that recorded each model request would store O(N²) (the requests' total
// size is shown for comparison); agentkit records responses and tool
// results only, so the bytes per turn stay flat.
func TestStorageGrowsLinearly(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	filler := strings.Repeat("lorem ipsum ", 8) // ~100 bytes of assistant text per turn
	srv := agentkittest.NewServer(func(r *agentkittest.Request) agentkittest.Reply {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.Messages[0].Content, "turns "))
		if r.Turn == n {
			return agentkittest.Reply{Text: "final answer", InputTokens: 1000, OutputTokens: 10}
		}
		return agentkittest.Reply{Text: fmt.Sprintf("turn %03d: %s", r.Turn-1, filler), InputTokens: 1000, OutputTokens: 10,
			ToolCalls: []agentkit.ToolCall{call("lookup", fmt.Sprintf(`{"key":"item-%03d"}`, r.Turn-1))}}
	})
	defer srv.Close()
	var a *agentkit.Agent
	v.engine(t, nil, func(e *durable.Engine) {
		a = agentkit.Define(e, "long", agentkit.AgentConfig{Model: openAI(t, srv), Limits: agentkit.Limits{MaxTurns: 200}, Stream: true,
			Tools: []*agentkit.Tool{agentkit.StepTool("lookup", "", nil, func(_ context.Context, a keyArgs) (string, error) {
				return fmt.Sprintf("%s: %s", a.Key, strings.Repeat("x", 200)), nil // ~200 bytes of tool output
			}, nil)}})
	})
	perTurn := map[int]float64{}
	for _, n := range []int{10, 50, 100} {
		id := fmt.Sprintf("long-%03d", n) // IDs of one length: row sizes are padded
		before := len(srv.Requests())
		h, err := a.Start(ctx, agentkit.Input{Prompt: fmt.Sprintf("turns %d", n)}, &durable.StartOpts{ID: id})
		require.NoError(t, err)
		res, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, agentkit.OutcomeCompleted, res.Outcome)
		require.Equal(t, n, res.Turns)
		var requestBytes int
		for _, r := range srv.Requests()[before:] {
			requestBytes += len(r.Body)
		}
		stored := storedBytes(t, v, id)
		perTurn[n] = float64(stored[""]) / float64(n)
		t.Logf("N=%3d turns: %7d bytes stored, %4.0f per turn (steps %4.0f, event stream %4.0f, run row %d); the model requests total %8d bytes (%6.0f per turn)",
			n, stored[""], perTurn[n], float64(stored["steps"])/float64(n), float64(stored["streams"])/float64(n), stored["workflows"],
			requestBytes, float64(requestBytes)/float64(n))
	}
	require.Less(t, perTurn[100], perTurn[10]*1.15, "bytes per turn must not grow with the number of turns")
	require.Less(t, perTurn[50], perTurn[10]*1.15)
}
