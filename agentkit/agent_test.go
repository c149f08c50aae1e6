package agentkit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/agentkit/agentkittest"
)

type keyArgs struct {
	Key string `json:"key"`
}

type noteArgs struct {
	Note string `json:"note"`
}

type sleepArgs struct {
	MS int `json:"ms"`
}

// TestAgentLoop runs a three-turn agent with step, transaction and
// workflow tools, calls the model gets wrong (unknown tool, bad
// arguments), and parallel calls; then forks the finished run from its
// last step: the replay takes every answer from the record and asks the
// model nothing.
func TestAgentLoop(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	notes := pgx.Identifier{v.schema, "notes"}.Sanitize()
	_, err := v.pool.Exec(ctx, "CREATE TABLE "+notes+" (id serial PRIMARY KEY, note text, idem_key text UNIQUE)")
	require.NoError(t, err)

	srv := agentkittest.NewServer(agentkittest.Turns(
		agentkittest.Reply{Text: "Let me work.", ToolCalls: []agentkit.ToolCall{
			call("lookup", `{"key":"a"}`), call("record", `{"note":"hello"}`), call("double", `21`),
			call("nosuch", `{}`), call("lookup", `{"key":5}`),
		}},
		agentkittest.Reply{ToolCalls: []agentkit.ToolCall{call("sleep", `{"ms":300}`), call("sleep", `{"ms":10}`), call("sleep", `{"ms":10}`)}},
		agentkittest.Reply{Text: "All done."},
	))
	defer srv.Close()

	var mu sync.Mutex
	type span struct{ start, end time.Time }
	spans := map[string]span{}
	var keys []string
	var a *agentkit.Agent
	e := v.engine(t, nil, func(e *durable.Engine) {
		double := durable.Register(e, "double", func(wctx durable.Context, n int) (int, error) { return 2 * n, nil }, nil)
		a = agentkit.Define(e, "worker", agentkit.AgentConfig{
			Model:  openAI(t, srv),
			System: "You are a test agent.",
			Tools: []*agentkit.Tool{
				agentkit.StepTool("lookup", "Look a key up.", json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"}}}`),
					func(ctx context.Context, a keyArgs) (string, error) {
						mu.Lock()
						keys = append(keys, agentkit.ToolIdempotencyKey(ctx))
						mu.Unlock()
						return "value-of-" + a.Key, nil
					}, nil),
				agentkit.TxTool("record", "Write a note.", nil, func(ctx context.Context, tx pgx.Tx, a noteArgs) (map[string]int, error) {
					var id int
					err := tx.QueryRow(ctx, "INSERT INTO "+notes+" (note, idem_key) VALUES ($1, $2) RETURNING id", a.Note, agentkit.ToolIdempotencyKey(ctx)).Scan(&id)
					return map[string]int{"id": id}, err
				}, nil),
				agentkit.WorkflowTool("double", "Double a number.", json.RawMessage(`{"type":"integer"}`), double, nil),
				agentkit.StepTool("sleep", "Sleep.", nil, func(ctx context.Context, a sleepArgs) (string, error) {
					info, _ := agentkit.ToolCallFrom(ctx)
					s := span{start: time.Now()}
					time.Sleep(time.Duration(a.MS) * time.Millisecond)
					s.end = time.Now()
					mu.Lock()
					spans[info.Call.ID] = s
					mu.Unlock()
					return fmt.Sprintf("slept %dms", a.MS), nil
				}, nil),
			},
		})
	})
	h, err := a.Start(ctx, agentkit.Input{Prompt: "Do the thing."}, &durable.StartOpts{ID: "loop-1"})
	require.NoError(t, err)
	res, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentkit.OutcomeCompleted, res.Outcome)
	require.Equal(t, "All done.", res.Final)
	require.Equal(t, 3, res.Turns)
	require.Equal(t, int64(3), res.Usage.Requests)
	require.Equal(t, res.Usage, res.Spent.Usage)

	reqs := srv.Requests()
	require.Len(t, reqs, 3)
	require.Equal(t, map[int]int{1: 1, 2: 1, 3: 1}, srv.TurnCounts())
	require.Equal(t, "system", reqs[0].Messages[0].Role)
	require.Equal(t, "Do the thing.", reqs[0].LastUser())
	require.Equal(t, []string{"lookup", "record", "double", "sleep"}, reqs[0].Tools)
	results := reqs[1].ToolResults()
	require.Len(t, results, 5)
	require.Equal(t, "value-of-a", results[0])
	require.Equal(t, `{"id":1}`, results[1])
	require.Equal(t, "42", results[2])
	require.Equal(t, `There is no tool named "nosuch". The tools are: double, lookup, record, sleep.`, results[3])
	require.Equal(t, `The arguments of tool "lookup" are invalid: field "key" must be a string, not a number. You sent: {"key":5}`, results[4],
		"in JSON's terms, with what the model sent")
	require.Equal(t, []string{"slept 300ms", "slept 10ms", "slept 10ms"}, reqs[2].ToolResults()[5:])
	require.Equal(t, []string{"loop-1/1/call_1_0"}, keys, "the key is run/turn/call")

	var key string
	require.NoError(t, v.pool.QueryRow(ctx, "SELECT idem_key FROM "+notes).Scan(&key))
	require.Equal(t, "loop-1/1/call_1_1", key)

	// The three calls of turn 2 ran at once, but their steps are in call order.
	slow, fast := spans["call_2_0"], spans["call_2_1"]
	require.True(t, fast.start.Before(slow.end), "the calls of one turn run in parallel")
	steps, err := e.ListSteps(ctx, "loop-1")
	require.NoError(t, err)
	var names []string
	for _, s := range steps {
		names = append(names, s.Name)
	}
	require.Equal(t, []string{
		"agentkit.model:1",
		"agentkit.tool:lookup:call_1_0", "agentkit.tool:record:call_1_1", "child:double",
		"durable.patch:agentkit.await-children", "durable.await:loop-1/1/call_1_2", // the child's outcome, recorded
		"agentkit.model:2",
		"agentkit.tool:sleep:call_2_0", "agentkit.tool:sleep:call_2_1", "agentkit.tool:sleep:call_2_2",
		"agentkit.model:3",
	}, names)

	// A fork from the last step replays everything: no model request, no
	// tool call, the same result.
	fh, err := a.Workflow().Fork(ctx, "loop-1", len(steps), &durable.ForkOpts{ID: "loop-1-fork"})
	require.NoError(t, err)
	fres, err := fh.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, res.Final, fres.Final)
	require.Equal(t, res.Usage, fres.Usage)
	require.Len(t, srv.Requests(), 3, "a replay never asks the model again")
	require.Len(t, keys, 1)

	// Starting the same run ID again returns the recorded run.
	h2, err := a.Start(ctx, agentkit.Input{Prompt: "Do the thing."}, &durable.StartOpts{ID: "loop-1"})
	require.NoError(t, err)
	res2, err := h2.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, res, res2)
	require.Len(t, srv.Requests(), 3)
}

// TestToolFailures: failures the model should see are values; other
// errors retry; a call that fails for good is shown to the model or ends
// the run (FailRun); a transaction tool's failure rolls back its writes.
func TestToolFailures(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	tbl := pgx.Identifier{v.schema, "writes"}.Sanitize()
	_, err := v.pool.Exec(ctx, "CREATE TABLE "+tbl+" (note text)")
	require.NoError(t, err)
	srv := agentkittest.NewServer(func(r *agentkittest.Request) agentkittest.Reply {
		if r.Turn == 1 {
			return agentkittest.Reply{ToolCalls: []agentkit.ToolCall{call("visible", `{}`), call("flaky", `{}`), call("broken", `{}`), call("txfail", `{}`)}}
		}
		return agentkittest.Reply{Text: "finished: " + strings.Join(r.ToolResults(), " | ")}
	})
	defer srv.Close()
	var flaky, broken atomic.Int32
	retry := &durable.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Millisecond}
	tools := func(failRun bool) []*agentkit.Tool {
		return []*agentkit.Tool{
			agentkit.StepTool("visible", "", nil, func(context.Context, struct{}) (string, error) {
				return "", agentkit.ToolErrorf("the city %q is unknown", "Atlantis")
			}, nil),
			agentkit.StepTool("flaky", "", nil, func(context.Context, struct{}) (string, error) {
				if flaky.Add(1) < 3 {
					return "", errors.New("connection reset")
				}
				return "ok after retries", nil
			}, &agentkit.ToolOpts{Retry: retry}),
			agentkit.StepTool("broken", "", nil, func(context.Context, struct{}) (string, error) {
				broken.Add(1)
				return "", errors.New("service down")
			}, &agentkit.ToolOpts{Retry: retry, FailRun: failRun}),
			agentkit.TxTool("txfail", "", nil, func(ctx context.Context, tx pgx.Tx, _ struct{}) (string, error) {
				if _, err := tx.Exec(ctx, "INSERT INTO "+tbl+" VALUES ('must not stay')"); err != nil {
					return "", err
				}
				return "", agentkit.ToolErrorf("quota exceeded")
			}, nil),
		}
	}
	var soft, hard *agentkit.Agent
	v.engine(t, nil, func(e *durable.Engine) {
		soft = agentkit.Define(e, "soft", agentkit.AgentConfig{Model: openAI(t, srv), Tools: tools(false), MaxParallelTools: 1})
		hard = agentkit.Define(e, "hard", agentkit.AgentConfig{Model: openAI(t, srv), Tools: tools(true)})
	})
	h, err := soft.Start(ctx, agentkit.Input{Prompt: "go"}, nil)
	require.NoError(t, err)
	res, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentkit.OutcomeCompleted, res.Outcome)
	require.Contains(t, res.Final, `finished: the city "Atlantis" is unknown | ok after retries | The tool failed: service down | quota exceeded`)
	require.EqualValues(t, 3, flaky.Load())
	require.EqualValues(t, 3, broken.Load())
	var n int
	require.NoError(t, v.pool.QueryRow(ctx, "SELECT count(*) FROM "+tbl).Scan(&n))
	require.Zero(t, n, "the failed transaction tool's writes were rolled back")

	h, err = hard.Start(ctx, agentkit.Input{Prompt: "go"}, nil)
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.ErrorContains(t, err, `tool "broken"`)
	require.ErrorContains(t, err, "service down")
}

func TestModelErrorsRetryOrStop(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	srv := agentkittest.NewServer(func(r *agentkittest.Request) agentkittest.Reply {
		switch r.LastUser() {
		case "flaky":
			switch r.Attempt {
			case 1:
				return agentkittest.Reply{Status: 429, Header: map[string]string{"Retry-After": "0"}}
			case 2:
				return agentkittest.Reply{Raw: "{not json"}
			case 3:
				return agentkittest.Reply{Status: 502}
			}
			return agentkittest.Reply{Text: "made it"}
		default:
			return agentkittest.Reply{Status: 400, Raw: `{"error":{"message":"context length exceeded"}}`}
		}
	})
	defer srv.Close()
	var a *agentkit.Agent
	v.engine(t, nil, func(e *durable.Engine) {
		a = agentkit.Define(e, "retrier", agentkit.AgentConfig{Model: openAI(t, srv),
			ModelRetry: &durable.RetryPolicy{MaxAttempts: 5, BaseDelay: time.Millisecond}})
	})
	h, err := a.Start(ctx, agentkit.Input{Prompt: "flaky"}, nil)
	require.NoError(t, err)
	res, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "made it", res.Final)
	require.Len(t, srv.Requests(), 4)

	h, err = a.Start(ctx, agentkit.Input{Prompt: "bad request"}, nil)
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.ErrorIs(t, err, durable.ErrPermanent, "a 400 is not retried")
	require.ErrorContains(t, err, "context length exceeded")
	require.Len(t, srv.Requests(), 5)
}

func TestDefineRejectsBadConfig(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	e, err := durable.New(v.pool, v.config())
	require.NoError(t, err)
	m := agentkit.ModelFunc(func(context.Context, *agentkit.Request) (*agentkit.Response, error) { return nil, nil })
	noop := func(context.Context, struct{}) (string, error) { return "", nil }
	for name, cfg := range map[string]agentkit.AgentConfig{
		"nil model":      {},
		"bad tool name":  {Model: m, Tools: []*agentkit.Tool{agentkit.StepTool("no spaces", "", nil, noop, nil)}},
		"bad schema":     {Model: m, Tools: []*agentkit.Tool{agentkit.StepTool("t", "", json.RawMessage("{"), noop, nil)}},
		"duplicate tool": {Model: m, Tools: []*agentkit.Tool{agentkit.StepTool("t", "", nil, noop, nil), agentkit.StepTool("t", "", nil, noop, nil)}},
		"bad approval":   {Model: m, Tools: []*agentkit.Tool{agentkit.StepTool("t", "", nil, noop, &agentkit.ToolOpts{Approval: &agentkit.ApprovalPolicy{OnTimeout: "maybe"}})}},
		"negative limit": {Model: m, Limits: agentkit.Limits{MaxTokens: -1}},
	} {
		_, err := agentkit.TryDefine(e, "bad-"+strings.ReplaceAll(name, " ", "-"), cfg)
		require.ErrorIs(t, err, durable.ErrInvalidArgument, name)
	}
	a, err := agentkit.TryDefine(e, "ok", agentkit.AgentConfig{Model: m})
	require.NoError(t, err)
	_, err = agentkit.TryDefine(e, "ok", agentkit.AgentConfig{Model: m})
	require.ErrorIs(t, err, durable.ErrInvalidArgument, "a second agent of the same name")
	_, err = a.Start(context.Background(), agentkit.Input{}, nil)
	require.ErrorIs(t, err, durable.ErrInvalidArgument, "no prompt")
}

// TestChildToolsPark: a workflow tool whose child waits longer than the
// engine's ParkThreshold parks the agent run: pending, owned by no
// executor, waiting on the child; the child's end wakes it, and the run
// goes on with the child's result.
func TestChildToolsPark(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	srv := agentkittest.NewServer(agentkittest.Turns(
		agentkittest.Reply{ToolCalls: []agentkit.ToolCall{call("wait_for_go", `"x"`)}},
		agentkittest.Reply{Text: "Got it."},
	))
	defer srv.Close()
	var a *agentkit.Agent
	e := v.engine(t, func(c *durable.Config) { c.ParkThreshold = 50 * time.Millisecond }, func(e *durable.Engine) {
		slow := durable.Register(e, "wait_for_go", func(wctx durable.Context, s string) (string, error) {
			msg, _, err := durable.Recv[string](wctx, "go", time.Hour)
			return s + msg, err
		}, nil)
		a = agentkit.Define(e, "parker", agentkit.AgentConfig{
			Model: openAI(t, srv),
			Tools: []*agentkit.Tool{agentkit.WorkflowTool("wait_for_go", "Wait.", json.RawMessage(`{"type":"string"}`), slow, nil)},
		})
	})
	h, err := a.Start(ctx, agentkit.Input{Prompt: "Wait."}, &durable.StartOpts{ID: "park-1"})
	require.NoError(t, err)
	child := "park-1/1/call_1_0"
	require.Eventually(t, func() bool {
		info, err := e.Inspect(ctx, "park-1")
		return err == nil && info.Status == durable.StatusPending && info.Executor == "" && info.WaitTopic == "child:"+child
	}, 10*time.Second, 20*time.Millisecond, "the agent run parks on its child")
	require.NoError(t, durable.Send(ctx, e, child, "go", "!", nil))
	res, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "Got it.", res.Final)
	require.Equal(t, []string{"x!"}, srv.Requests()[1].ToolResults())
}
