package agentkit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/agentkit/agentkittest"
	"github.com/durable-go/durable/internal/hooks"
	"github.com/durable-go/durable/internal/proctest"
)

// budgetEnv is an env whose schema has agentkit's tables.
func budgetEnv(t *testing.T) *env {
	t.Helper()
	v := newEnv(t)
	require.NoError(t, agentkit.Migrate(ctxT(t), v.pool, v.schema))
	return v
}

// greedy is a model that asks for one more lookup on every call and uses
// all the output it may: 1 input token, and MaxOutputTokens (or out when
// the request sets none) output tokens. It records the requests' maximum.
type greedy struct {
	out  int64
	mu   sync.Mutex
	maxs []int
}

func (g *greedy) Generate(_ context.Context, req *agentkit.Request) (*agentkit.Response, error) {
	g.mu.Lock()
	g.maxs = append(g.maxs, req.MaxOutputTokens)
	n := len(g.maxs)
	g.mu.Unlock()
	out := g.out
	if req.MaxOutputTokens > 0 {
		out = min(out, int64(req.MaxOutputTokens))
	}
	return &agentkit.Response{Model: "greedy", Message: agentkit.Message{ToolCalls: []agentkit.ToolCall{call("lookup", fmt.Sprintf(`{"key":"k%d"}`, n))}},
		Usage: agentkit.Usage{InputTokens: 1, OutputTokens: out}}, nil
}

func (g *greedy) sent() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.maxs...)
}

var lookupTool = agentkit.StepTool("lookup", "Look a key up.", nil, func(_ context.Context, a keyArgs) (string, error) { return "v-" + a.Key, nil }, nil)

// TestBudgetReserve: with Limits.Reserve every call reserves before it is
// made: a call whose estimate does not fit is not made (the run ends at
// its limit before passing it), the reserved output is sent as the
// call's maximum, and what each call used is settled in the run's row.
func TestBudgetReserve(t *testing.T) {
	t.Parallel()
	v := budgetEnv(t)
	ctx := ctxT(t)
	tokens := &greedy{out: 150}
	cost := &greedy{out: 300}
	var byTokens, byCost *agentkit.Agent
	v.engine(t, nil, func(e *durable.Engine) {
		byTokens = agentkit.Define(e, "reserve-tokens", agentkit.AgentConfig{Model: tokens, Tools: []*agentkit.Tool{lookupTool},
			Limits: agentkit.Limits{MaxTokens: 1000, MaxTurns: -1, Reserve: true}})
		byCost = agentkit.Define(e, "reserve-cost", agentkit.AgentConfig{Model: cost, Tools: []*agentkit.Tool{lookupTool},
			MaxOutputTokens: 300, Pricing: agentkit.PerMillionTokens(1_000_000, 1_000_000), // a micro per token
			Limits: agentkit.Limits{MaxCostMicros: 1000, MaxTurns: -1, Reserve: true}})
	})
	run := func(a *agentkit.Agent, id string) agentkit.Result {
		h, err := a.Start(ctx, agentkit.Input{Prompt: "go"}, &durable.StartOpts{ID: id})
		require.NoError(t, err)
		res, err := h.Result(ctx)
		require.NoError(t, err)
		return res
	}

	// Tokens: each call uses 151; its reservation is its input estimate
	// plus what is left (OutputReserveDefault at most), sent as the call's
	// maximum. After five calls 245 tokens are left, less than the least
	// output a call reserves (256): the sixth call is not made, where
	// checking the recorded usage alone would have made two more and used
	// 1057.
	res := run(byTokens, "reserve-tokens-1")
	require.Equal(t, agentkit.OutcomeLimitTokens, res.Outcome)
	require.Equal(t, 5, res.Turns, "the run stops before a call that does not fit")
	require.EqualValues(t, 5*151, res.Usage.Tokens())
	sent := tokens.sent()
	require.Len(t, sent, 5)
	used := 0
	for i, m := range sent {
		require.Positive(t, m, "call %d: the reserved output is sent as the maximum", i+1)
		require.LessOrEqual(t, used+m, 1000, "call %d: what it may use fits in what is left", i+1)
		used += 151
	}
	b, err := agentkit.ReadBudget(ctx, v.pool, v.schema, "reserve-tokens-1")
	require.NoError(t, err)
	require.Equal(t, agentkit.Amount{Turns: 5, Tokens: 5 * 151}, b.Used, "each call settled once, with what it used")
	require.Equal(t, agentkit.Amount{}, b.Held)
	require.Equal(t, agentkit.Limits{MaxTokens: 1000, MaxTurns: -1, Reserve: true}, b.Limits)
	require.Empty(t, b.ParentID)

	// Cost: each call reserves its input estimate plus MaxOutputTokens at
	// a micro per token (about 330), and uses 301. The third call fits
	// (about 340 of 398 left), the fourth (about 360 of 97) does not.
	res = run(byCost, "reserve-cost-1")
	require.Equal(t, agentkit.OutcomeLimitCost, res.Outcome)
	require.Equal(t, 3, res.Turns)
	require.EqualValues(t, 3*301, res.Usage.CostMicros)
	require.Equal(t, []int{300, 300, 300}, cost.sent(), "without a token limit, MaxOutputTokens is sent as configured")
	b, err = agentkit.ReadBudget(ctx, v.pool, v.schema, "reserve-cost-1")
	require.NoError(t, err)
	require.Equal(t, agentkit.Amount{Turns: 3, Tokens: 3 * 301, CostMicros: 3 * 301}, b.Used)

	_, err = agentkit.ReadBudget(ctx, v.pool, v.schema, "no-such-run")
	require.ErrorIs(t, err, agentkit.ErrNoBudget)
}

// TestBudgetParallelSubAgents: sub-agents started in one turn run in
// parallel and reserve from their caller's row; the reservations are
// forced to meet (each waits in its transaction for the others), and
// still, under the rows' locks, parents and children together never pass
// the caller's limit.
func TestBudgetParallelSubAgents(t *testing.T) {
	t.Parallel()
	v := budgetEnv(t)
	ctx := ctxT(t)
	const limit = 2000
	boss := agentkit.ModelFunc(func(_ context.Context, req *agentkit.Request) (*agentkit.Response, error) {
		if len(req.Messages) > 1 {
			return &agentkit.Response{Message: agentkit.AssistantMessage("done"), Usage: agentkit.Usage{InputTokens: 1, OutputTokens: 1}}, nil
		}
		var calls []agentkit.ToolCall
		for i := range 3 {
			calls = append(calls, call("helper", fmt.Sprintf(`{"prompt":"part %d"}`, i)))
		}
		return &agentkit.Response{Message: agentkit.Message{ToolCalls: calls}, Usage: agentkit.Usage{InputTokens: 1, OutputTokens: 10}}, nil
	})
	helperModel := &greedy{out: 300}
	// Each reservation of a helper waits, in its transaction, until the
	// three helpers are in one or a while passed.
	var (
		mu      sync.Mutex
		waiting int
		arrived = make(chan struct{})
	)
	knob := func(string) {
		mu.Lock()
		waiting++
		if waiting == 3 {
			close(arrived)
			arrived, waiting = make(chan struct{}), 0
		}
		ch := arrived
		mu.Unlock()
		select {
		case <-ch:
		case <-time.After(150 * time.Millisecond):
			mu.Lock()
			if ch == arrived {
				waiting--
			}
			mu.Unlock()
		}
	}
	var a *agentkit.Agent
	v.engine(t, nil, func(e *durable.Engine) {
		hooks.SetAgent(e, "helper", hooks.AgentKnobs{InReserve: knob})
		helper := agentkit.Define(e, "helper", agentkit.AgentConfig{Model: helperModel, MaxOutputTokens: 300, Tools: []*agentkit.Tool{lookupTool},
			Limits: agentkit.Limits{MaxTurns: -1}}) // Reserve comes from the caller
		a = agentkit.Define(e, "boss-reserve", agentkit.AgentConfig{Model: boss, Limits: agentkit.Limits{MaxTokens: limit, Reserve: true},
			Tools: []*agentkit.Tool{agentkit.AgentTool("helper", "Help.", helper, nil)}})
	})
	h, err := a.Start(ctx, agentkit.Input{Prompt: "split the work"}, &durable.StartOpts{ID: "boss-r"})
	require.NoError(t, err)
	res, err := h.Result(ctx)
	require.NoError(t, err)

	b, err := agentkit.ReadBudget(ctx, v.pool, v.schema, "boss-r")
	require.NoError(t, err)
	require.LessOrEqual(t, b.Used.Tokens, int64(limit), "parents and children together stay within the limit")
	require.Equal(t, agentkit.Amount{}, b.Held)
	require.EqualValues(t, b.Used.Tokens, res.Usage.Tokens(), "the row and the recorded usage agree")
	require.Greater(t, b.Used.Tokens, int64(limit-400), "the budget was used, not refused early")
	var childTokens int64
	for i := range 3 {
		id := fmt.Sprintf("boss-r/1/t1c%d", i)
		sub, err := agentkit.ReadBudget(ctx, v.pool, v.schema, id)
		require.NoError(t, err)
		require.Equal(t, "boss-r", sub.ParentID, "a sub-agent's row draws from its caller's")
		childTokens += sub.Used.Tokens
	}
	own := int64(11) // the boss's first call; its second, if it fit, used 2
	if res.Turns == 2 {
		own += 2
	}
	require.Equal(t, b.Used.Tokens-own, childTokens, "the caller's row counts its own calls and its children's")
}

// delegating is a caller's model: its first call asks for n calls of
// tool, its next answers "done". Each call uses 1 input and 1 output token.
func delegating(tool string, n int) agentkit.Model {
	return agentkit.ModelFunc(func(_ context.Context, req *agentkit.Request) (*agentkit.Response, error) {
		u := agentkit.Usage{InputTokens: 1, OutputTokens: 1}
		if len(req.Messages) > 1 {
			return &agentkit.Response{Message: agentkit.AssistantMessage("done"), Usage: u}, nil
		}
		var calls []agentkit.ToolCall
		for i := range n {
			calls = append(calls, call(tool, fmt.Sprintf(`{"prompt":"part %d"}`, i)))
		}
		return &agentkit.Response{Message: agentkit.Message{ToolCalls: calls}, Usage: u}, nil
	})
}

// TestBudgetTurns: a sub-agent gets at most its caller's remaining turns
// (MaxTurns 4, one used: 3); with Reserve, two sub-agents in parallel
// share those 3 turns through the caller's row, and the caller, whose
// row's turns are then used up, takes no other turn.
func TestBudgetTurns(t *testing.T) {
	t.Parallel()
	v := budgetEnv(t)
	ctx := ctxT(t)
	var local, shared *agentkit.Agent
	e := v.engine(t, nil, func(e *durable.Engine) {
		helper := agentkit.Define(e, "turns-helper", agentkit.AgentConfig{Model: &greedy{out: 5}, Tools: []*agentkit.Tool{lookupTool},
			Limits: agentkit.Limits{MaxTurns: 20}})
		tool := agentkit.AgentTool("helper", "Help.", helper, nil)
		local = agentkit.Define(e, "turns-local", agentkit.AgentConfig{Model: delegating("helper", 1), Tools: []*agentkit.Tool{tool},
			Limits: agentkit.Limits{MaxTurns: 4}})
		shared = agentkit.Define(e, "turns-shared", agentkit.AgentConfig{Model: delegating("helper", 2), Tools: []*agentkit.Tool{tool},
			Limits: agentkit.Limits{MaxTurns: 4, Reserve: true}})
	})
	// helperTurns sums the turns of the sub-agents run by id's first turn.
	helperTurns := func(id string, n int) int {
		sum := 0
		for i := range n {
			info, err := e.Inspect(ctx, fmt.Sprintf("%s/1/t1c%d", id, i))
			require.NoError(t, err)
			var res agentkit.Result
			require.NoError(t, json.Unmarshal(info.Output, &res))
			sum += res.Turns
		}
		return sum
	}
	h, err := local.Start(ctx, agentkit.Input{Prompt: "go"}, &durable.StartOpts{ID: "turns-local-1"})
	require.NoError(t, err)
	res, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentkit.OutcomeCompleted, res.Outcome)
	require.Equal(t, 3, helperTurns("turns-local-1", 1), "the sub-agent got the caller's 3 remaining turns")

	h, err = shared.Start(ctx, agentkit.Input{Prompt: "go"}, &durable.StartOpts{ID: "turns-shared-1"})
	require.NoError(t, err)
	res, err = h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentkit.OutcomeLimitTurns, res.Outcome, "the sub-agents used the caller's turns")
	require.Equal(t, 1, res.Turns)
	require.Equal(t, 3, helperTurns("turns-shared-1", 2), "two sub-agents in parallel share the 3 remaining turns")
	b, err := agentkit.ReadBudget(ctx, v.pool, v.schema, "turns-shared-1")
	require.NoError(t, err)
	require.EqualValues(t, 4, b.Used.Turns)
}

// TestBudgetCancelledChild: a sub-agent cancelled during its model call
// never settles its hold; the hold lapses with the run, so the caller's
// next call still fits.
func TestBudgetCancelledChild(t *testing.T) {
	t.Parallel()
	v := budgetEnv(t)
	ctx := ctxT(t)
	calling := make(chan string, 1)
	stuck := agentkit.ModelFunc(func(ctx context.Context, _ *agentkit.Request) (*agentkit.Response, error) {
		info, _ := durable.StepInfoFrom(ctx)
		calling <- info.WorkflowID
		<-ctx.Done()
		return nil, ctx.Err()
	})
	var a *agentkit.Agent
	e := v.engine(t, nil, func(e *durable.Engine) {
		helper := agentkit.Define(e, "stuck-helper", agentkit.AgentConfig{Model: stuck, MaxOutputTokens: 1700})
		a = agentkit.Define(e, "stale-boss", agentkit.AgentConfig{Model: delegating("helper", 1),
			Tools:  []*agentkit.Tool{agentkit.AgentTool("helper", "Help.", helper, nil)},
			Limits: agentkit.Limits{MaxTokens: 2000, Reserve: true}})
	})
	h, err := a.Start(ctx, agentkit.Input{Prompt: "go"}, &durable.StartOpts{ID: "stale-1"})
	require.NoError(t, err)
	child := <-calling
	b, err := agentkit.ReadBudget(ctx, v.pool, v.schema, "stale-1")
	require.NoError(t, err)
	require.Greater(t, b.Held.Tokens, int64(1700), "the sub-agent's call holds its reservation in the caller's row")
	require.NoError(t, e.Cancel(ctx, child, nil))
	res, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentkit.OutcomeCompleted, res.Outcome, "the cancelled sub-agent's hold does not keep the caller from its next call")
	require.Equal(t, 2, res.Turns)
	b, err = agentkit.ReadBudget(ctx, v.pool, v.schema, "stale-1")
	require.NoError(t, err)
	require.Equal(t, agentkit.Amount{}, b.Held)
	require.Equal(t, agentkit.Amount{Turns: 2, Tokens: 4}, b.Used)
}

// TestBudgetStep: a workflow tool's workflow charges its own model calls
// to the calling agent's budget with BudgetStep; a call that does not fit
// is refused with a *BudgetError, and not made.
func TestBudgetStep(t *testing.T) {
	t.Parallel()
	v := budgetEnv(t)
	ctx := ctxT(t)
	var calls atomic.Int32
	var refused atomic.Pointer[agentkit.BudgetError]
	var a *agentkit.Agent
	e := v.engine(t, nil, func(e *durable.Engine) {
		helper := agentkit.Define(e, "budget-helper", agentkit.AgentConfig{Model: delegating("none", 0), MaxOutputTokens: 50,
			Pricing: agentkit.PerMillionTokens(1_000_000, 1_000_000)})
		research := durable.Register(e, "budget-research", func(wctx durable.Context, in struct {
			Prompt string `json:"prompt"`
		}) (string, error) {
			for i := range 3 {
				_, err := agentkit.BudgetStep(wctx, e, fmt.Sprintf("ask-%d", i), agentkit.Usage{InputTokens: 10, CostMicros: 400},
					func(context.Context) (string, agentkit.Usage, error) {
						calls.Add(1)
						return "answer", agentkit.Usage{InputTokens: 10, OutputTokens: 5, CostMicros: 390}, nil
					}, nil)
				var be *agentkit.BudgetError
				if errors.As(err, &be) {
					refused.Store(be)
					// An agent the workflow starts draws from the same rows.
					h, err := helper.Workflow().StartChild(wctx, agentkit.Input{Prompt: "sum up",
						Limits: &agentkit.Limits{MaxTurns: -1, Reserve: true}}, nil)
					if err != nil {
						return "", err
					}
					if _, err := h.Await(wctx); err != nil {
						return "", err
					}
					return fmt.Sprintf("%d answers", i), nil
				}
				if err != nil {
					return "", err
				}
			}
			return "3 answers", nil
		}, nil)
		a = agentkit.Define(e, "budget-boss", agentkit.AgentConfig{Model: delegating("research", 1),
			Tools:  []*agentkit.Tool{agentkit.WorkflowTool("research", "Research.", nil, research, nil)},
			Limits: agentkit.Limits{MaxCostMicros: 1000, Reserve: true}})
		_, err := agentkit.BudgetStep(nil, nil, "x", agentkit.Usage{}, func(context.Context) (int, agentkit.Usage, error) { return 0, agentkit.Usage{}, nil }, nil)
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
	})
	h, err := a.Start(ctx, agentkit.Input{Prompt: "go"}, &durable.StartOpts{ID: "bstep-1"})
	require.NoError(t, err)
	res, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentkit.OutcomeCompleted, res.Outcome)
	require.EqualValues(t, 2, calls.Load(), "the third call did not fit (1000 - 780 < 400) and was not made")
	be := refused.Load()
	require.NotNil(t, be)
	require.ErrorIs(t, be, agentkit.ErrBudgetExhausted)
	require.Equal(t, agentkit.BudgetError{Budget: "bstep-1", Outcome: agentkit.OutcomeLimitCost, Need: 400, Left: 220}, *be)

	b, err := agentkit.ReadBudget(ctx, v.pool, v.schema, "bstep-1")
	require.NoError(t, err)
	require.Equal(t, agentkit.Amount{Turns: 5, Tokens: 2*15 + 4 + 2, CostMicros: 782}, b.Used,
		"the boss's two calls, the workflow's two and its agent's one")
	w, err := agentkit.ReadBudget(ctx, v.pool, v.schema, "bstep-1/1/t1c0")
	require.NoError(t, err)
	require.Equal(t, "bstep-1", w.ParentID, "the workflow's row draws from the calling agent's")
	require.Equal(t, agentkit.Amount{Turns: 3, Tokens: 32, CostMicros: 782}, w.Used)
	runs, _, err := e.ListWorkflows(ctx, &durable.ListParams{Parent: "bstep-1/1/t1c0"})
	require.NoError(t, err)
	require.Len(t, runs, 1)
	sub, err := agentkit.ReadBudget(ctx, v.pool, v.schema, runs[0].ID)
	require.NoError(t, err)
	require.Equal(t, "bstep-1/1/t1c0", sub.ParentID, "the workflow's agent draws from the workflow's row")
}

// runBudgetChild runs the agent of TestBudgetThroughSIGKILL in a child
// process; AGENTKIT_KILL_AFTER_MODEL kills it once that turn's answer is
// recorded, before its reservation is settled.
func runBudgetChild(ctx context.Context, e *durable.Engine, pool *pgxpool.Pool, model agentkit.Model) error {
	if err := agentkit.Migrate(ctx, pool, e.Schema()); err != nil {
		return err
	}
	killAfter, _ := strconv.Atoi(os.Getenv("AGENTKIT_KILL_AFTER_MODEL"))
	hooks.SetAgent(e, "budgeted", hooks.AgentKnobs{AfterModel: func(_ string, turn int, live bool) {
		if live && turn == killAfter {
			killSelf()
		}
	}})
	a := agentkit.Define(e, "budgeted", agentkit.AgentConfig{Model: model, Tools: []*agentkit.Tool{lookupTool},
		Limits: agentkit.Limits{MaxTokens: 100_000, Reserve: true}})
	return runToResult(ctx, e, a, "budget-run", "look six keys up", func(res agentkit.Result) string {
		b, _ := json.Marshal(res)
		return string(b)
	})
}

// TestBudgetThroughSIGKILL: the process dies between a call's
// reservation and its settlement twice: once the answer of turn 2 is
// recorded (the settlement was not), and during the call of turn 4. The
// run ends with every call settled exactly once in its row: the turns
// and tokens the recorded answers report, nothing held.
func TestBudgetThroughSIGKILL(t *testing.T) {
	t.Parallel()
	v := budgetEnv(t)
	ctx := ctxT(t)
	held := make(chan struct{})
	var once sync.Once
	never := make(chan struct{})
	srv := agentkittest.NewServer(func(r *agentkittest.Request) agentkittest.Reply {
		rep := agentkittest.Reply{Text: "done", InputTokens: 100, OutputTokens: 50}
		if r.Turn <= 5 {
			rep.Text, rep.ToolCalls = fmt.Sprintf("turn %d", r.Turn), []agentkit.ToolCall{call("lookup", fmt.Sprintf(`{"key":"k%d"}`, r.Turn))}
		}
		if r.Turn == 4 && r.Attempt == 1 {
			once.Do(func() { close(held) })
			rep.Hold = never // answered only after the kill, which hangs up
		}
		return rep
	})
	defer srv.Close()
	env := []string{"AGENTKIT_CHILD=budget", "AGENTKIT_SCHEMA=" + v.schema, "AGENTKIT_MODEL_URL=" + srv.URL}

	c := proctest.Start(t, append(env, "AGENTKIT_KILL_AFTER_MODEL=2")...)
	require.True(t, proctest.KilledBySIGKILL(c.Wait(t)), "stderr:\n%s", c.Stderr.String())
	b, err := agentkit.ReadBudget(ctx, v.pool, v.schema, "budget-run")
	require.NoError(t, err)
	require.EqualValues(t, 1, b.Used.Turns, "turn 2 was answered, not settled")
	require.EqualValues(t, 1, b.Held.Turns, "turn 2 still holds its reservation")

	c = proctest.Start(t, env...)
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatalf("turn 4 was never requested; stderr:\n%s", c.Stderr.String())
	}
	c.Kill(t)

	c = proctest.Start(t, env...)
	line := c.WaitLine(t, "result ")
	require.NoError(t, c.Wait(t))
	var res agentkit.Result
	require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "result ")), &res))
	require.Equal(t, agentkit.OutcomeCompleted, res.Outcome)
	require.Equal(t, 6, res.Turns)
	require.Equal(t, map[int]int{1: 1, 2: 1, 3: 1, 4: 2, 5: 1, 6: 1}, srv.TurnCounts(), "no recorded turn was asked again")

	b, err = agentkit.ReadBudget(ctx, v.pool, v.schema, "budget-run")
	require.NoError(t, err)
	require.Equal(t, agentkit.Amount{Turns: 6, Tokens: 6 * 150}, b.Used, "every call settled once")
	require.Equal(t, agentkit.Amount{}, b.Held)
	var holds int
	require.NoError(t, v.pool.QueryRow(ctx, "SELECT count(*) FROM "+v.schema+".agentkit_budget_holds WHERE run_id = 'budget-run'").Scan(&holds))
	require.Zero(t, holds, "no hold is left behind")
}

// TestBudgetContinuationAndFork: a chain of continuations draws from its
// first run's row (each continuation's row points at it), so the chain's
// turns, the summaries' calls included, stop at the first run's limit; a
// fork at a turn reserves that turn again in a row of its own and leaves
// the source's row alone.
func TestBudgetContinuationAndFork(t *testing.T) {
	t.Parallel()
	v := budgetEnv(t)
	ctx := ctxT(t)
	var a *agentkit.Agent
	e := v.engine(t, nil, func(e *durable.Engine) {
		a = agentkit.Define(e, "chain-reserve", agentkit.AgentConfig{Model: &greedy{out: 5}, Tools: []*agentkit.Tool{lookupTool},
			Continue: agentkit.ContinuePolicy{AfterTurns: 2}, Limits: agentkit.Limits{MaxTurns: 7, Reserve: true}})
	})
	h, err := a.Start(ctx, agentkit.Input{Prompt: "go"}, &durable.StartOpts{ID: "chain-1"})
	require.NoError(t, err)
	res, err := a.Result(ctx, h.ID())
	require.NoError(t, err)
	require.Equal(t, agentkit.OutcomeLimitTurns, res.Outcome)
	require.NotEmpty(t, res.PreviousRunID, "the chain continued")
	b, err := agentkit.ReadBudget(ctx, v.pool, v.schema, "chain-1")
	require.NoError(t, err)
	require.EqualValues(t, 7, b.Used.Turns, "the chain's calls, summaries included, stop at the first run's limit")
	require.Equal(t, agentkit.Amount{}, b.Held)
	cont, err := agentkit.ReadBudget(ctx, v.pool, v.schema, "chain-1/cont-1")
	require.NoError(t, err)
	require.Equal(t, "chain-1", cont.ParentID, "a continuation draws from its chain's row")
	require.Positive(t, cont.Used.Turns)

	f, err := a.ForkAt(ctx, "chain-1", 2, &durable.ForkOpts{ID: "chain-fork"})
	require.NoError(t, err)
	_, err = a.Result(ctx, f.ID()) // the whole chain the fork starts, not only its first run
	require.NoError(t, err)
	fb, err := agentkit.ReadBudget(ctx, v.pool, v.schema, "chain-fork")
	require.NoError(t, err)
	require.Empty(t, fb.ParentID)
	// Every model call the fork's chain made is charged to the fork's
	// row, its turn 2 included (the fork starts at that turn's
	// reservation, not with a copy of it).
	calls := 0
	for _, id := range []string{"chain-fork", "chain-fork/cont-1", "chain-fork/cont-2", "chain-fork/cont-3"} {
		steps, err := e.ListSteps(ctx, id)
		if errors.Is(err, durable.ErrWorkflowNotFound) {
			continue
		}
		require.NoError(t, err)
		from := 0
		for _, st := range steps {
			if id == "chain-fork" && st.Name == "agentkit.reserve:2" && from == 0 {
				from = st.Pos
			}
		}
		for _, st := range steps {
			if st.Pos >= from && (strings.HasPrefix(st.Name, "agentkit.model:") || st.Name == "agentkit.compact") {
				calls++
			}
		}
	}
	require.Positive(t, calls)
	require.EqualValues(t, calls, fb.Used.Turns, "each of the fork's calls is charged to its own row")
	after, err := agentkit.ReadBudget(ctx, v.pool, v.schema, "chain-1")
	require.NoError(t, err)
	require.Equal(t, b.Used, after.Used, "the source's row is left alone")
}
