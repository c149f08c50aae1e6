package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/agentkit/agentkittest"
)

// TestApproveAndDeny: an agent's refund tool waits for a human; the
// operator lists the pending call, approves it (or denies it) with the
// CLI, and the run finishes accordingly.
func TestApproveAndDeny(t *testing.T) {
	t.Parallel()
	srv := agentkittest.NewServer(func(r *agentkittest.Request) agentkittest.Reply {
		if r.Turn == 1 {
			return agentkittest.Reply{ToolCalls: []agentkit.ToolCall{{Name: "refund", Arguments: json.RawMessage(`{"amount":4999}`)}}}
		}
		return agentkittest.Reply{Text: "tool said: " + strings.Join(r.ToolResults(), " | ")}
	})
	t.Cleanup(srv.Close)
	model, err := agentkit.NewOpenAI(agentkit.OpenAIConfig{BaseURL: srv.URL, Model: "scripted", APIKey: "sk-test", Timeout: 10 * time.Second})
	require.NoError(t, err)
	var mu sync.Mutex
	refunds := 0
	var agent *agentkit.Agent
	e := newEnv(t, func(eng *durable.Engine) {
		refund := agentkit.StepTool("refund", "Refund, in cents.", nil, func(ctx context.Context, a struct {
			Amount int `json:"amount"`
		}) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			refunds++
			return fmt.Sprintf("refunded %d", a.Amount), nil
		}, &agentkit.ToolOpts{Approval: &agentkit.ApprovalPolicy{Timeout: time.Hour}})
		agent = agentkit.Define(eng, "support", agentkit.AgentConfig{Model: model, Tools: []*agentkit.Tool{refund}})
	})
	ctx := ctxT(t)

	start := func(id string) *durable.Handle[agentkit.Result] {
		h, err := agent.Start(ctx, agentkit.Input{Prompt: "refund order 42"}, &durable.StartOpts{ID: id})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			p, err := agentkit.Pending(ctx, e.eng, id)
			return err == nil && len(p) == 1
		}, 30*time.Second, 10*time.Millisecond, "the refund call waits for approval")
		return h
	}

	h := start("ticket-1")
	out := e.ok("approvals", "ticket-1")
	require.Regexp(t, `(?m)^CALL\s+TOOL\s+ARGUMENTS\s+DEADLINE\s+ON TIMEOUT$`, out)
	require.Regexp(t, `(?m)^\S+\s+refund\s+\{"amount":4999\}\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ\s+deny$`, out)
	var pending []struct {
		Status string `json:"status"`
		Call   struct {
			ID   string `json:"id"`
			Name string `json:"name"`
		} `json:"call"`
	}
	e.okJSON(&pending, "approvals", "ticket-1")
	require.Len(t, pending, 1)
	require.Equal(t, "refund", pending[0].Call.Name)
	require.Equal(t, "pending", pending[0].Status)

	// approve without naming the call: it is the only one pending.
	var decided struct {
		ID     string `json:"id"`
		Call   string `json:"call"`
		Action string `json:"action"`
	}
	e.okJSON(&decided, "approve", "ticket-1", "--by", "alice")
	require.Equal(t, pending[0].Call.ID, decided.Call)
	require.Equal(t, "approve", decided.Action)
	res, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentkit.OutcomeCompleted, res.Outcome)
	require.Contains(t, res.Final, "refunded 4999")
	r := e.run("approve", "ticket-1", pending[0].Call.ID)
	require.Equal(t, 1, r.code, "a second decision is refused")
	require.Contains(t, r.stderr, "no pending approval")
	require.Contains(t, e.ok("approvals", "ticket-1"), "no tool call of ticket-1 is waiting")

	// deny, naming the call, with a reason the model sees.
	h = start("ticket-2")
	p, err := agentkit.Pending(ctx, e.eng, "ticket-2")
	require.NoError(t, err)
	out = e.ok("deny", "ticket-2", p[0].Call.ID, "--reason", "over the limit")
	require.Contains(t, out, "deny: call "+p[0].Call.ID+" of ticket-2")
	res, err = h.Result(ctx)
	require.NoError(t, err)
	require.Contains(t, res.Final, "over the limit")
	mu.Lock()
	require.Equal(t, 1, refunds, "only the approved refund ran")
	mu.Unlock()

	r = e.run("approve", "no-such-run")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "workflow not found")
	require.Equal(t, 2, e.run("approve", "ticket-2", "c", "--args", "{bad").code)
}
