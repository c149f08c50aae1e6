package agentkit_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/agentkit/agentkittest"
)

// TestFixture: a run exported as a fixture replays offline against the
// agent's code (the model is never called); a changed system prompt, and
// a tool that now returns something else, are reported at the turn where
// the run leaves the recording.
func TestFixture(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	srv := agentkittest.NewServer(agentkittest.Turns(
		agentkittest.Reply{Text: "Looking.", ToolCalls: []agentkit.ToolCall{call("lookup", `{"key":"a"}`)}},
		agentkittest.Reply{Text: "The value is value-of-a."},
	))
	defer srv.Close()
	lookup := func(prefix string) *agentkit.Tool {
		return agentkit.StepTool("lookup", "Look a key up.", nil, func(_ context.Context, a keyArgs) (string, error) {
			return prefix + a.Key, nil
		}, nil)
	}
	file := filepath.Join(t.TempDir(), "run.json")
	var recorded *agentkit.Agent
	var fx *agentkit.Fixture
	var same, prompt, tool *agentkit.Agent
	v.engine(t, nil, func(e *durable.Engine) {
		recorded = agentkit.Define(e, "recorded", agentkit.AgentConfig{Model: openAI(t, srv), System: "Be brief.", Tools: []*agentkit.Tool{lookup("value-of-")}})
		model := fixtureModel{&fx}
		same = agentkit.Define(e, "same", agentkit.AgentConfig{Model: model, System: "Be brief.", Tools: []*agentkit.Tool{lookup("value-of-")}})
		prompt = agentkit.Define(e, "prompt", agentkit.AgentConfig{Model: model, System: "Be verbose.", Tools: []*agentkit.Tool{lookup("value-of-")}})
		tool = agentkit.Define(e, "tool", agentkit.AgentConfig{Model: model, System: "Be brief.", Tools: []*agentkit.Tool{lookup("v2-")}})
	})
	h, err := recorded.Start(ctx, agentkit.Input{Prompt: "What is a?"}, &durable.StartOpts{ID: "rec-1"})
	require.NoError(t, err)
	want, err := h.Result(ctx)
	require.NoError(t, err)

	exported, err := agentkit.ExportFixture(ctx, recorded, "rec-1")
	require.NoError(t, err)
	require.NoError(t, exported.WriteFile(file))
	fx, err = agentkit.ReadFixture(file)
	require.NoError(t, err)
	require.Equal(t, "What is a?", fx.Input.Prompt)
	require.Len(t, fx.Turns, 2)
	require.Equal(t, []agentkit.FixtureResult{{CallID: "call_1_0", Tool: "lookup", Content: "value-of-a"}}, fx.Turns[0].Results)
	asked := len(srv.Requests())

	res, err := fx.Replay(ctx, same, "replay-1")
	require.NoError(t, err)
	require.Equal(t, want.Final, res.Final)
	require.Equal(t, asked, len(srv.Requests()), "the model is not called")

	_, err = fx.Replay(ctx, prompt, "replay-2")
	var d *agentkit.DivergenceError
	require.ErrorAs(t, err, &d)
	require.Equal(t, 1, d.Turn)
	require.Contains(t, d.Reason, `the system prompt is "Be verbose."`)

	_, err = fx.Replay(ctx, tool, "replay-3")
	require.ErrorAs(t, err, &d)
	require.Equal(t, 2, d.Turn)
	require.Contains(t, d.Reason, `tool lookup (call call_1_0 of turn 1) returned "v2-a"`)
}

// fixtureModel defers to the fixture read after Define.
type fixtureModel struct{ f **agentkit.Fixture }

func (m fixtureModel) Generate(ctx context.Context, req *agentkit.Request) (*agentkit.Response, error) {
	return (*m.f).Model().Generate(ctx, req)
}

// TestForkAt: a run of one agent forked at turn 2 into an agent with
// another prompt and model: turn 1 (its answer and its tool's result) is
// reused, not asked again, and the new model answers from turn 2 on,
// with the new prompt.
func TestForkAt(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	old := agentkittest.NewServer(agentkittest.Turns(
		agentkittest.Reply{ToolCalls: []agentkit.ToolCall{call("lookup", `{"key":"a"}`)}},
		agentkittest.Reply{Text: "a is value-of-a."},
	))
	defer old.Close()
	candidate := agentkittest.NewServer(func(r *agentkittest.Request) agentkittest.Reply {
		return agentkittest.Reply{Text: "The value of a is value-of-a, as looked up."}
	})
	defer candidate.Close()
	var ran atomic.Int32
	lookup := agentkit.StepTool("lookup", "Look a key up.", nil, func(_ context.Context, a keyArgs) (string, error) {
		ran.Add(1)
		return "value-of-" + a.Key, nil
	}, nil)
	var prod, eval *agentkit.Agent
	v.engine(t, nil, func(e *durable.Engine) {
		prod = agentkit.Define(e, "prod", agentkit.AgentConfig{Model: openAI(t, old), System: "Be brief.", Tools: []*agentkit.Tool{lookup}})
		eval = agentkit.Define(e, "eval", agentkit.AgentConfig{Model: openAI(t, candidate), System: "Be thorough.", Tools: []*agentkit.Tool{lookup}})
	})
	h, err := prod.Start(ctx, agentkit.Input{Prompt: "What is a?"}, &durable.StartOpts{ID: "prod-1"})
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, ran.Load())

	f, err := eval.ForkAt(ctx, "prod-1", 2, &durable.ForkOpts{ID: "eval-1"})
	require.NoError(t, err)
	res, err := f.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "The value of a is value-of-a, as looked up.", res.Final)
	require.EqualValues(t, 1, ran.Load(), "turn 1's tool result is reused")
	require.Len(t, old.Requests(), 2, "the old model is not asked again")
	reqs := candidate.Requests()
	require.Len(t, reqs, 1)
	require.Equal(t, 2, reqs[0].Turn, "the candidate answers from turn 2")
	require.Equal(t, "Be thorough.", reqs[0].Messages[0].Content)
	require.Equal(t, []string{"value-of-a"}, reqs[0].ToolResults())

	_, err = eval.ForkAt(ctx, "prod-1", 9, nil)
	require.ErrorIs(t, err, durable.ErrInvalidArgument)
}
