package agentkit_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/agentkit/agentkittest"
	"github.com/durable-go/durable/internal/hooks"
	"github.com/durable-go/durable/internal/proctest"
)

type verdict struct {
	Approve bool   `json:"approve"`
	Reason  string `json:"reason" jsonschema:"why, in one sentence"`
	Score   int    `json:"score"`
	Note    string `json:"note,omitempty"`
}

// TestStructuredOutput: an agent whose answer is a Go type sends its
// schema as the response format; an answer that does not match goes back
// with what is wrong (a turn of its own), a matching one (even in a code
// fence) is the run's Output; past OutputRepairs the run ends with
// OutcomeOutputInvalid. Each check is a recorded step.
func TestStructuredOutput(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	out, err := agentkit.OutputOf[verdict]()
	require.NoError(t, err)
	answers := map[string][]string{
		"fixed": {`{"approve": "yes"}`, "```json\n{\"approve\": true, \"reason\": \"fine\", \"score\": 3}\n```"},
		"never": {`not json`, `{"approve": true}`, `{"approve": true, "reason": "x", "score": 1}`},
	}
	srv := agentkittest.NewServer(func(r *agentkittest.Request) agentkittest.Reply {
		a := answers[strings.Fields(r.Messages[0].Content)[0]]
		return agentkittest.Reply{Text: a[min(r.Turn, len(a))-1]}
	})
	defer srv.Close()
	var fixed, never *agentkit.Agent
	e := v.engine(t, nil, func(e *durable.Engine) {
		fixed = agentkit.Define(e, "fixed", agentkit.AgentConfig{Model: openAI(t, srv), Output: out})
		never = agentkit.Define(e, "never", agentkit.AgentConfig{Model: openAI(t, srv), Output: out, OutputRepairs: 1})
	})

	h, err := fixed.Start(ctx, agentkit.Input{Prompt: "fixed"}, &durable.StartOpts{ID: "out-1"})
	require.NoError(t, err)
	res, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentkit.OutcomeCompleted, res.Outcome)
	require.Equal(t, 2, res.Turns)
	got, err := agentkit.DecodeOutput[verdict](res)
	require.NoError(t, err)
	require.Equal(t, verdict{Approve: true, Reason: "fine", Score: 3}, got)

	reqs := srv.Requests()
	require.Len(t, reqs, 2)
	var rf struct {
		Type       string `json:"type"`
		JSONSchema struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	require.NoError(t, json.Unmarshal(reqs[0].ResponseFormat, &rf))
	require.Equal(t, "json_schema", rf.Type)
	require.Equal(t, "verdict", rf.JSONSchema.Name)
	require.JSONEq(t, string(out.Schema()), string(rf.JSONSchema.Schema))
	require.Contains(t, string(out.Schema()), `"required":["approve","reason","score"]`)
	require.Contains(t, string(out.Schema()), "why, in one sentence")
	repair := reqs[1].LastUser()
	require.Contains(t, repair, "does not match the required JSON schema")
	require.Contains(t, repair, "approve", "it says what is wrong")

	steps, err := e.ListSteps(ctx, "out-1")
	require.NoError(t, err)
	var checks []string
	for _, s := range steps {
		if strings.HasPrefix(s.Name, "agentkit.output:") {
			checks = append(checks, s.Name)
		}
	}
	require.Equal(t, []string{"agentkit.output:1", "agentkit.output:2"}, checks, "each check recorded")

	h, err = never.Start(ctx, agentkit.Input{Prompt: "never"}, &durable.StartOpts{ID: "out-2"})
	require.NoError(t, err)
	res, err = h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentkit.OutcomeOutputInvalid, res.Outcome)
	require.Equal(t, 2, res.Turns, "one repair, then the run ends")
	require.Empty(t, res.Output)
	_, err = agentkit.DecodeOutput[verdict](res)
	require.Error(t, err)

	_, err = agentkit.OutputOf[struct{ C chan int }]()
	require.ErrorIs(t, err, durable.ErrInvalidArgument)
}

// runOutputChild runs the agent of TestStructuredOutputThroughSIGKILL,
// killing itself once the first answer is recorded, before its check.
func runOutputChild(ctx context.Context, e *durable.Engine, model agentkit.Model) error {
	out, err := agentkit.OutputOf[verdict]()
	if err != nil {
		return err
	}
	hooks.SetAgent(e, "verdict", hooks.AgentKnobs{AfterModel: func(_ string, turn int, live bool) {
		if live && turn == 1 && os.Getenv("AGENTKIT_KILL") != "" {
			killSelf()
		}
	}})
	a := agentkit.Define(e, "verdict", agentkit.AgentConfig{Model: model, Output: out})
	return runToResult(ctx, e, a, "verdict-run", "fixed", func(res agentkit.Result) string { return string(res.Output) })
}

// TestStructuredOutputThroughSIGKILL: the process dies once the model's
// first answer (which does not match) is recorded, before it is checked.
// The restarted process checks the recorded answer, sends it back and
// asks the second turn: the first is never asked again.
func TestStructuredOutputThroughSIGKILL(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	srv := agentkittest.NewServer(agentkittest.Turns(
		agentkittest.Reply{Text: `{"approve": "yes"}`},
		agentkittest.Reply{Text: `{"approve": true, "reason": "fine", "score": 3}`},
	))
	defer srv.Close()
	env := []string{"AGENTKIT_CHILD=output", "AGENTKIT_SCHEMA=" + v.schema, "AGENTKIT_MODEL_URL=" + srv.URL}
	first := proctest.Start(t, append(env, "AGENTKIT_KILL=1")...)
	require.True(t, proctest.KilledBySIGKILL(first.Wait(t)), "the first process killed itself")
	second := proctest.Start(t, env...)
	require.Equal(t, `result {"approve":true,"reason":"fine","score":3}`, second.WaitLine(t, "result"))
	require.NoError(t, second.Wait(t))
	require.Equal(t, map[int]int{1: 1, 2: 1}, srv.TurnCounts(), "no turn asked twice")
	require.Contains(t, srv.Requests()[1].LastUser(), "does not match the required JSON schema")
}
