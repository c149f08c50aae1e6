package agentkit_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/agentkit/agentkittest"
)

// endless is a model that always asks for one more lookup, reporting 100
// input and 50 output tokens and $0.01 per call.
func endless() *agentkittest.Server {
	return agentkittest.NewServer(func(r *agentkittest.Request) agentkittest.Reply {
		return agentkittest.Reply{Text: fmt.Sprintf("step %d", r.Turn-1), ToolCalls: []agentkit.ToolCall{call("lookup", fmt.Sprintf(`{"key":"k%d"}`, r.Turn-1))},
			InputTokens: 100, OutputTokens: 50, Cost: 0.01}
	})
}

func TestLimits(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	srv := endless()
	defer srv.Close()
	var lookups atomic.Int32
	lookup := agentkit.StepTool("lookup", "", nil, func(_ context.Context, a keyArgs) (string, error) {
		lookups.Add(1)
		return "v-" + a.Key, nil
	}, nil)
	agents := map[string]*agentkit.Agent{}
	e := v.engine(t, nil, func(e *durable.Engine) {
		for name, lim := range map[string]agentkit.Limits{
			"turns":  {MaxTurns: 3},
			"tokens": {MaxTokens: 400},
			"cost":   {MaxCostMicros: 25_000},
		} {
			agents[name] = agentkit.Define(e, "limit-"+name, agentkit.AgentConfig{Model: openAI(t, srv), Tools: []*agentkit.Tool{lookup}, Limits: lim})
		}
		agents["priced"] = agentkit.Define(e, "limit-priced", agentkit.AgentConfig{
			Model: agentkit.ModelFunc(func(ctx context.Context, req *agentkit.Request) (*agentkit.Response, error) {
				return &agentkit.Response{Model: "m", Message: agentkit.Message{ToolCalls: []agentkit.ToolCall{call("lookup", `{"key":"p"}`)}},
					Usage: agentkit.Usage{InputTokens: 1000, OutputTokens: 1000}}, nil
			}),
			Tools:   []*agentkit.Tool{lookup},
			Pricing: agentkit.PerMillionTokens(3_000_000, 15_000_000), // 18_000 micros per call
			Limits:  agentkit.Limits{MaxCostMicros: 50_000, MaxTurns: -1},
		})
	})
	run := func(name, id string) agentkit.Result {
		h, err := agents[name].Start(ctx, agentkit.Input{Prompt: "go"}, &durable.StartOpts{ID: id})
		require.NoError(t, err)
		res, err := h.Result(ctx)
		require.NoError(t, err)
		return res
	}

	before := len(srv.Requests())
	res := run("turns", "turns-1")
	require.Equal(t, agentkit.OutcomeLimitTurns, res.Outcome)
	require.Equal(t, 3, res.Turns)
	require.Equal(t, "step 2", res.Final)
	require.Len(t, res.Unexecuted, 1, "the calls of the last allowed turn do not run")
	require.EqualValues(t, 2, lookups.Load())
	require.Len(t, srv.Requests(), before+3)

	// The run ID is an idempotency key: the same input gets the run back,
	// another prompt or other limits are refused.
	again, err := agents["turns"].Start(ctx, agentkit.Input{Prompt: "go"}, &durable.StartOpts{ID: "turns-1"})
	require.NoError(t, err)
	require.Equal(t, "turns-1", again.ID())
	_, err = agents["turns"].Start(ctx, agentkit.Input{Prompt: "stop"}, &durable.StartOpts{ID: "turns-1"})
	require.ErrorIs(t, err, durable.ErrInputMismatch)
	_, err = agents["turns"].Start(ctx, agentkit.Input{Prompt: "go", Limits: &agentkit.Limits{MaxTurns: 5}}, &durable.StartOpts{ID: "turns-1"})
	require.ErrorIs(t, err, durable.ErrInputMismatch)

	// Restarted from its record (a fork of every step, as after a crash
	// right before it finished), the run takes no other turn.
	steps, err := e.ListSteps(ctx, "turns-1")
	require.NoError(t, err)
	fh, err := agents["turns"].Workflow().Fork(ctx, "turns-1", len(steps), &durable.ForkOpts{ID: "turns-1-again"})
	require.NoError(t, err)
	fres, err := fh.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentkit.OutcomeLimitTurns, fres.Outcome)
	require.Len(t, srv.Requests(), before+3)
	require.EqualValues(t, 2, lookups.Load())

	// A fork from before the last model call asks for that turn again,
	// and stops there: the limit is folded from the record, not counted
	// per execution.
	fh, err = agents["turns"].Workflow().Fork(ctx, "turns-1", len(steps)-1, &durable.ForkOpts{ID: "turns-1-retry"})
	require.NoError(t, err)
	fres, err = fh.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentkit.OutcomeLimitTurns, fres.Outcome)
	require.Equal(t, 3, fres.Turns)
	require.Len(t, srv.Requests(), before+4)

	res = run("tokens", "tokens-1")
	require.Equal(t, agentkit.OutcomeLimitTokens, res.Outcome)
	require.Equal(t, 3, res.Turns, "150 tokens per call: the third call reaches 400")
	require.EqualValues(t, 450, res.Usage.Tokens())

	res = run("cost", "cost-1")
	require.Equal(t, agentkit.OutcomeLimitCost, res.Outcome)
	require.Equal(t, 3, res.Turns)
	require.EqualValues(t, 30_000, res.Usage.CostMicros)

	res = run("priced", "priced-1")
	require.Equal(t, agentkit.OutcomeLimitCost, res.Outcome)
	require.Equal(t, 3, res.Turns)
	require.EqualValues(t, 54_000, res.Usage.CostMicros)
}

// TestSubAgentBudget: a sub-agent's usage is charged to the caller, and it
// gets only what the caller has left.
func TestSubAgentBudget(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	srv := agentkittest.NewServer(func(r *agentkittest.Request) agentkittest.Reply {
		if r.LastUser() == "research" && r.Turn == 1 {
			return agentkittest.Reply{ToolCalls: []agentkit.ToolCall{call("researcher", `{"prompt":"dig"}`)}, InputTokens: 100, OutputTokens: 100}
		}
		if r.LastUser() == "research" {
			return agentkittest.Reply{Text: "report: " + r.ToolResults()[0], InputTokens: 100, OutputTokens: 100}
		}
		// The sub-agent digs forever, 300 tokens a call.
		return agentkittest.Reply{Text: fmt.Sprintf("dug %d", r.Turn-1), ToolCalls: []agentkit.ToolCall{call("dig", `{}`)}, InputTokens: 200, OutputTokens: 100}
	})
	defer srv.Close()
	var boss, sub *agentkit.Agent
	v.engine(t, nil, func(e *durable.Engine) {
		sub = agentkit.Define(e, "researcher", agentkit.AgentConfig{Model: openAI(t, srv), Limits: agentkit.Limits{MaxTurns: 50},
			Tools: []*agentkit.Tool{agentkit.StepTool("dig", "", nil, func(context.Context, struct{}) (string, error) { return "dirt", nil }, nil)}})
		boss = agentkit.Define(e, "boss", agentkit.AgentConfig{Model: openAI(t, srv), Limits: agentkit.Limits{MaxTokens: 1200},
			Tools: []*agentkit.Tool{agentkit.AgentTool("researcher", "Research a question.", sub, nil)}})
	})
	h, err := boss.Start(ctx, agentkit.Input{Prompt: "research"}, &durable.StartOpts{ID: "boss-1"})
	require.NoError(t, err)
	res, err := h.Result(ctx)
	require.NoError(t, err)
	// The boss spent 200, leaving 1000 for the sub-agent: it stops after
	// 4 calls (1200 >= 1000). Then the boss has 1200+200 >= 1200 spent and
	// takes no further turn.
	require.Equal(t, agentkit.OutcomeLimitTokens, res.Outcome)
	require.Equal(t, 1, res.Turns)
	require.EqualValues(t, 200+1200, res.Usage.Tokens())
	require.EqualValues(t, 5, res.Usage.Requests)
	// The sub-agent's run ID is the call's idempotency key.
	subRes, err := sub.Result(ctx, "boss-1/1/call_1_0")
	require.NoError(t, err)
	require.Equal(t, agentkit.OutcomeLimitTokens, subRes.Outcome)
	require.Equal(t, 4, subRes.Turns)
}
