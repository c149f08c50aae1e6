package agentkit

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/hooks"
)

// Defaults of [AgentConfig] and [Limits].
const (
	MaxTurnsDefault         = 20
	MaxParallelToolsDefault = 8
	BlobThresholdDefault    = 64 << 10
	DeltaIntervalDefault    = 50 * time.Millisecond
	SummaryPromptDefault    = "Summarize the conversation so far for your own later use: the task, what was done, the results obtained, and what remains to do. Keep every fact needed to finish the task."
	// WorkflowPrefix starts the workflow name of every agent.
	WorkflowPrefix = "agentkit:"
	// retryAfterMax caps the wait a provider may ask for inside one attempt.
	retryAfterMax = 30 * time.Second
	// eventResultMax bounds the tool result text copied into an event.
	eventResultMax = 4 << 10
)

// Limits bound a run. They are stored in the run's input when it starts,
// so a deploy that changes the agent's defaults does not change runs in
// flight, and they are checked against totals folded from the recorded
// model responses, so a resumed run, a run that continued as a new run,
// and a sub-agent run (see [AgentTool]) cannot exceed them. Reaching one
// ends the run with a typed [Outcome], not an error.
type Limits struct {
	// MaxTurns bounds the model calls. 0 means MaxTurnsDefault; negative
	// means no limit.
	MaxTurns int `json:"max_turns,omitempty"`
	// MaxTokens bounds input plus output tokens over all calls. A call
	// is not started once the total reaches it (so the last call may go
	// past it). 0 means no limit.
	MaxTokens int64 `json:"max_tokens,omitempty"`
	// MaxCostMicros bounds the cost (see Usage.CostMicros), like
	// MaxTokens. 0 means no limit.
	MaxCostMicros int64 `json:"max_cost_micros,omitempty"`
	// Reserve keeps the limits in a budget row (see [Budget]; create the
	// tables with [Migrate]) that holds across processes and runs: each
	// model call reserves its estimate (a turn, the request's tokens plus
	// its output tokens, their cost by AgentConfig.Pricing) before it is
	// made, under the row's lock, and is not made if that does not fit;
	// what it used is settled after, exactly once. Sub-agents, several
	// at once included, and agents and [BudgetStep] calls under a
	// workflow tool draw from the calling run's row too, so together they
	// never pass it (a sub-agent reserves when its caller does). Without
	// Reserve the limits are checked against what the run's recorded
	// responses used, and parallel sub-agents can each spend what their
	// caller had left when they started. Defaults to false.
	Reserve bool `json:"reserve,omitempty"`
}

func (l Limits) resolved() Limits {
	switch {
	case l.MaxTurns == 0:
		l.MaxTurns = MaxTurnsDefault
	case l.MaxTurns < 0:
		l.MaxTurns = -1
	}
	return l
}

// min returns the tighter of l and b for each limit (both resolved).
func (l Limits) min(b Limits) Limits {
	pick := func(x, y int64, unlimited func(int64) bool) int64 {
		switch {
		case unlimited(y):
			return x
		case unlimited(x):
			return y
		}
		return min(x, y)
	}
	none := func(v int64) bool { return v <= 0 }
	l.MaxTurns = int(pick(int64(l.MaxTurns), int64(b.MaxTurns), func(v int64) bool { return v < 0 }))
	l.MaxTokens = pick(l.MaxTokens, b.MaxTokens, none)
	l.MaxCostMicros = pick(l.MaxCostMicros, b.MaxCostMicros, none)
	l.Reserve = l.Reserve || b.Reserve
	return l
}

// Spent is what earlier runs of a chain used (see ContinuePolicy).
type Spent struct {
	Turns int   `json:"turns,omitempty"`
	Usage Usage `json:"usage"`
}

// ContinuePolicy makes a long run continue as a new run, with its history
// compacted into a summary by a model call, so no run's record grows
// without bound. The new run's ID is "<first run's ID>/cont-<n>"; it
// carries the limits and what the chain spent, and links back through
// Input.PreviousRunID. The old run ends with [OutcomeContinued] and
// Result.NextRunID. [Agent.Result] follows the chain.
type ContinuePolicy struct {
	// AfterTurns continues once a run took this many turns. 0 means never.
	AfterTurns int
	// AfterBytes continues once the history's text passes this many
	// bytes. 0 means never.
	AfterBytes int
	// KeepTurns is how many of the latest turns (an assistant message and
	// its tool results) are kept verbatim after the summary. Defaults to 0.
	KeepTurns int
	// SummaryPrompt asks the model for the summary. Defaults to
	// SummaryPromptDefault.
	SummaryPrompt string
}

// AgentConfig configures an agent. Model is required.
type AgentConfig struct {
	// Model answers each turn. It lives outside the durable state: a
	// replay never calls it for a recorded turn.
	Model Model
	// System is the system prompt, sent first on every call. Defaults to
	// none.
	System string
	// Tools the model may call. Their names must be unique.
	Tools []*Tool
	// MCP are servers whose tools the model may call too, listed at the
	// start of each run (see [MCPServer]).
	MCP []*MCPServer
	// Output, when set, is the shape of the final answer ([OutputOf]):
	// sent with every model call as the response format, and checked on
	// each answer without tool calls, as a recorded step. An answer that
	// does not match goes back to the model with what is wrong, up to
	// OutputRepairs times (each try a turn of its own); then the run ends
	// with OutcomeOutputInvalid. A valid answer is Result.Output.
	Output *Output
	// OutputRepairs bounds the answers sent back for not matching
	// Output. Defaults to OutputRepairsDefault; negative sends none back.
	OutputRepairs int
	// Limits are the defaults of runs that set no Input.Limits (a zero
	// Limits means MaxTurnsDefault turns and no token or cost limit).
	Limits Limits
	// Stream writes the run's lifecycle events, and the model's deltas
	// when Model is a [StreamingModel], to the run's stream (see [Events]).
	// Defaults to false.
	Stream bool
	// DeltaInterval coalesces the model's streamed fragments (each event
	// is a row): consecutive fragments of the same text or tool call that
	// arrive within this interval of the first are written as one event.
	// Negative writes every fragment as it comes. Defaults to
	// DeltaIntervalDefault.
	DeltaInterval time.Duration
	// MaxParallelTools bounds how many tool calls of one turn run at
	// once; 1 runs them one after the other. Their steps are ordered by
	// call, whatever the timing. Defaults to MaxParallelToolsDefault.
	MaxParallelTools int
	// MaxOutputTokens is sent with each request. Defaults to 0 (the
	// provider's default).
	MaxOutputTokens int
	// Temperature is sent with each request. Defaults to nil (the
	// provider's default).
	Temperature *float64
	// ModelRetry is the retry policy of model calls; errors marked not
	// retryable ([*ModelError], 4xx) are not retried. Defaults to the
	// engine's Config.StepRetry.
	ModelRetry *durable.RetryPolicy
	// ModelTimeout bounds each model call attempt. Defaults to none (the
	// model's own timeout).
	ModelTimeout time.Duration
	// Pricing fills Usage.CostMicros of responses whose provider did not
	// report a cost. Defaults to nil (cost 0).
	Pricing PricingFunc
	// Blobs stores tool outputs larger than BlobThreshold by reference
	// (see [NewPGBlobStore]). Defaults to nil: outputs are recorded inline.
	Blobs BlobStore
	// BlobThreshold is the size above which a tool output goes to Blobs.
	// Defaults to BlobThresholdDefault.
	BlobThreshold int
	// Continue makes long runs continue as new runs. Defaults to never.
	Continue ContinuePolicy
	// ReturnMessages puts the messages the run added (assistant and tool
	// messages) in Result.Messages, to carry a conversation into the next
	// run. Defaults to false.
	ReturnMessages bool
}

// Outcome is how a run ended. Limits, denials and timeouts are outcomes,
// not errors.
type Outcome string

// Outcomes.
const (
	OutcomeCompleted       Outcome = "completed"        // the model gave a final answer
	OutcomeLimitTurns      Outcome = "limit_turns"      // Limits.MaxTurns reached
	OutcomeLimitTokens     Outcome = "limit_tokens"     // Limits.MaxTokens reached
	OutcomeLimitCost       Outcome = "limit_cost"       // Limits.MaxCostMicros reached
	OutcomeDenied          Outcome = "denied"           // an approver denied a call of a tool with EndRunOnDeny
	OutcomeApprovalTimeout Outcome = "approval_timeout" // an approval deadline passed under TimeoutEnd
	OutcomeContinued       Outcome = "continued"        // the run continued as Result.NextRunID
	OutcomeOutputInvalid   Outcome = "output_invalid"   // no answer matched AgentConfig.Output within its repairs
)

// Input is the input of an agent run.
type Input struct {
	// Prompt is the user's message, appended to Messages.
	Prompt string `json:"prompt,omitempty"`
	// Messages is the conversation before Prompt (no system message: that
	// is AgentConfig.System).
	Messages []Message `json:"messages,omitempty"`
	// Limits of this run. [Agent.Start] fills it from AgentConfig.Limits
	// when nil.
	Limits *Limits `json:"limits,omitempty"`
	// Spent is what earlier runs of the chain used; it counts against
	// Limits. Set by continuation.
	Spent Spent `json:"spent"`
	// PreviousRunID links a continuation to the run it continues.
	PreviousRunID string `json:"previous_run_id,omitempty"`
	// Generation counts continuations: 0 for the first run of a chain.
	Generation int `json:"generation,omitempty"`
	// ChainID is the ID of the chain's first run. Set by continuation.
	ChainID string `json:"chain_id,omitempty"`
	// Metadata is opaque to agentkit.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Result is the result of an agent run.
type Result struct {
	Outcome Outcome `json:"outcome"`
	// Final is the text of the model's last answer.
	Final string `json:"final"`
	// Output is the final answer as JSON, with AgentConfig.Output and
	// OutcomeCompleted: it matched the output's schema. See [DecodeOutput].
	Output json.RawMessage `json:"output,omitempty"`
	// Turns is the number of model calls of this run.
	Turns int `json:"turns"`
	// Usage is what this run used, its sub-agents included.
	Usage Usage `json:"usage"`
	// Spent is what the chain used up to and including this run.
	Spent Spent  `json:"spent"`
	RunID string `json:"run_id"`
	// NextRunID is the run this one continued as (OutcomeContinued).
	NextRunID     string `json:"next_run_id,omitempty"`
	PreviousRunID string `json:"previous_run_id,omitempty"`
	// Unexecuted are the tool calls of the last answer that did not run
	// because the run ended (a limit, a denial, a timeout).
	Unexecuted []ToolCall `json:"unexecuted,omitempty"`
	// Messages are the messages the run added, with
	// AgentConfig.ReturnMessages.
	Messages []Message `json:"messages,omitempty"`
}

// Agent is a defined agent: a durable workflow running the agent loop.
type Agent struct {
	name      string
	cfg       AgentConfig
	e         *durable.Engine
	wf        *durable.Workflow[Input, Result]
	tools     map[string]*Tool
	specs     []ToolSpec
	mcp       []*mcpClient
	modelOpts *durable.StepOpts
	knobs     hooks.AgentKnobs // test knobs (hooks.SetAgent)
	budgets   budgetTables     // the tables of Limits.Reserve, in the engine's schema
}

// Define defines the agent name on engine e, registering the workflow
// WorkflowPrefix + name. Call it before e.Launch; runs in flight are
// resumed by the engine's recovery like any workflow. It panics on a
// programmer error (bad name, tool or config); [TryDefine] returns it.
func Define(e *durable.Engine, name string, cfg AgentConfig) *Agent {
	a, err := TryDefine(e, name, cfg)
	if err != nil {
		panic(err)
	}
	return a
}

// TryDefine is [Define] returning an error instead of panicking.
func TryDefine(e *durable.Engine, name string, cfg AgentConfig) (*Agent, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: agent %q: %s", durable.ErrInvalidArgument, name, fmt.Sprintf(format, args...))
	}
	switch {
	case e == nil:
		return nil, bad("nil engine")
	case name == "":
		return nil, bad("empty name")
	case cfg.Model == nil:
		return nil, bad("AgentConfig.Model is nil")
	case cfg.MaxParallelTools < 0:
		return nil, bad("AgentConfig.MaxParallelTools is negative")
	case cfg.BlobThreshold < 0:
		return nil, bad("AgentConfig.BlobThreshold is negative")
	case cfg.Limits.MaxTokens < 0 || cfg.Limits.MaxCostMicros < 0:
		return nil, bad("AgentConfig.Limits.MaxTokens and MaxCostMicros must not be negative")
	case cfg.Continue.AfterTurns < 0 || cfg.Continue.AfterBytes < 0 || cfg.Continue.KeepTurns < 0:
		return nil, bad("AgentConfig.Continue fields must not be negative")
	}
	cfg.MaxParallelTools = cmp.Or(cfg.MaxParallelTools, MaxParallelToolsDefault)
	cfg.BlobThreshold = cmp.Or(cfg.BlobThreshold, BlobThresholdDefault)
	cfg.DeltaInterval = cmp.Or(cfg.DeltaInterval, DeltaIntervalDefault)
	cfg.Continue.SummaryPrompt = cmp.Or(cfg.Continue.SummaryPrompt, SummaryPromptDefault)
	cfg.OutputRepairs = cmp.Or(cfg.OutputRepairs, OutputRepairsDefault)
	budgets, err := budgetTablesOf(e.Schema())
	if err != nil {
		return nil, err
	}
	a := &Agent{name: name, cfg: cfg, e: e, tools: map[string]*Tool{}, knobs: hooks.TakeAgent(e, name), budgets: budgets}
	for i, t := range cfg.Tools {
		if t == nil {
			return nil, bad("AgentConfig.Tools[%d] is nil", i)
		}
		if t.err != nil {
			return nil, fmt.Errorf("agent %q: %w", name, t.err)
		}
		if a.tools[t.spec.Name] != nil {
			return nil, bad("two tools are named %q", t.spec.Name)
		}
		a.tools[t.spec.Name] = t
		a.specs = append(a.specs, t.spec)
	}
	if err := checkMCP(cfg.MCP); err != nil {
		return nil, bad("%s", err)
	}
	for _, s := range cfg.MCP {
		a.mcp = append(a.mcp, &mcpClient{srv: s})
	}
	a.modelOpts = &durable.StepOpts{Retry: cfg.ModelRetry, Timeout: cfg.ModelTimeout}
	wf, err := durable.TryRegister(e, WorkflowPrefix+name, a.run, nil)
	if err != nil {
		return nil, err
	}
	a.wf = wf
	return a, nil
}

// Name returns the agent's name.
func (a *Agent) Name() string { return a.name }

// Workflow returns the agent's workflow, to enqueue, schedule, fork, or
// start runs as children of other workflows.
func (a *Agent) Workflow() *durable.Workflow[Input, Result] { return a.wf }

// Start starts a run. in.Limits defaults to AgentConfig.Limits; the run
// ID (opts.ID) is the run's idempotency key: starting it again with the
// same input returns the existing run, which keeps the limits it started
// with even if AgentConfig.Limits changed since; another input is a
// *durable.ConflictError matching durable.ErrInputMismatch.
func (a *Agent) Start(ctx context.Context, in Input, opts *durable.StartOpts) (*durable.Handle[Result], error) {
	if in.Prompt == "" && len(in.Messages) == 0 {
		return nil, fmt.Errorf("%w: agent %q: Input has neither Prompt nor Messages", durable.ErrInvalidArgument, a.name)
	}
	l, defaulted := a.cfg.Limits, in.Limits == nil
	if !defaulted {
		l = *in.Limits
	}
	if l.MaxTokens < 0 || l.MaxCostMicros < 0 {
		return nil, fmt.Errorf("%w: agent %q: Input.Limits.MaxTokens and MaxCostMicros must not be negative", durable.ErrInvalidArgument, a.name)
	}
	l = l.resolved() // stored resolved: a later change of the defaults does not reach it
	in.Limits = &l
	h, err := a.wf.Start(ctx, in, opts)
	if defaulted && opts != nil && errors.Is(err, durable.ErrInputMismatch) {
		// The caller gave no limits: the run's own, from the defaults of
		// its start, are the ones to compare with.
		if info, ierr := a.e.Inspect(ctx, opts.ID); ierr == nil {
			var stored Input
			if json.Unmarshal(info.Input, &stored) == nil && stored.Limits != nil && *stored.Limits != l {
				in.Limits = stored.Limits
				return a.wf.Start(ctx, in, opts)
			}
		}
	}
	return h, err
}

// Result waits for run runID and returns its result, following
// continuations to the last run of the chain.
func (a *Agent) Result(ctx context.Context, runID string) (Result, error) {
	for {
		h, err := a.wf.Handle(ctx, runID)
		if err != nil {
			return Result{}, err
		}
		res, err := h.Result(ctx)
		if err != nil || res.Outcome != OutcomeContinued || res.NextRunID == "" {
			return res, err
		}
		runID = res.NextRunID
	}
}

// runState is one execution of the loop.
type runState struct {
	a     *Agent
	wctx  durable.Context
	runID string
	in    Input
	lim   Limits
	hist  []Message
	start int // len(hist) before the run's own messages
	size  int // text bytes of hist
	turns int
	usage Usage
	seen  map[string]bool // call IDs used in the run
	// repairs counts the answers sent back for not matching the output.
	repairs int
	output  json.RawMessage // the valid answer, with AgentConfig.Output
	// The run's tools: the agent's and its MCP servers' (listMCP).
	tools map[string]*Tool
	specs []ToolSpec
}

// modelStepPrefix + the turn names a turn's model call step.
const modelStepPrefix = "agentkit.model:"

// modelStep is the name of turn's model call step.
func modelStep(turn int) string { return modelStepPrefix + strconv.Itoa(turn) }

var noRetry = &durable.StepOpts{Retry: &durable.RetryPolicy{MaxAttempts: 1}}

// run is the agent workflow.
func (a *Agent) run(wctx durable.Context, in Input) (Result, error) {
	rs := &runState{a: a, wctx: wctx, runID: wctx.WorkflowID(), in: in, seen: map[string]bool{}}
	if in.Limits != nil {
		rs.lim = in.Limits.resolved()
	} else {
		// Started without Limits (directly through the workflow): record
		// the defaults in force now, so later deploys do not change them.
		lim, err := durable.Step(wctx, "agentkit.limits", func(context.Context) (Limits, error) { return a.cfg.Limits.resolved(), nil }, noRetry)
		if err != nil {
			return Result{}, err
		}
		rs.lim = lim
	}
	for _, m := range in.Messages {
		rs.add(m)
		for _, c := range m.ToolCalls {
			rs.seen[c.ID] = true
		}
	}
	if in.Prompt != "" {
		rs.add(UserMessage(in.Prompt))
	}
	if len(rs.hist) == 0 {
		return Result{}, durable.Permanent(fmt.Errorf("%w: agent %q: Input has neither Prompt nor Messages", durable.ErrInvalidArgument, a.name))
	}
	rs.start = len(rs.hist)
	if err := rs.listMCP(); err != nil {
		return Result{}, err
	}
	rs.emit(Event{Type: EventRunStarted})

	for turn := 1; ; turn++ {
		if o := rs.limitReached(); o != "" {
			return rs.finish(o, "", nil), nil
		}
		if rs.shouldContinue() {
			return rs.continueAsNew(turn)
		}
		rs.emit(Event{Type: EventTurnStarted, Turn: turn})
		resp, refused, err := rs.call(turn, strconv.Itoa(turn), nil, true)
		if err != nil {
			return Result{}, err
		}
		if refused != "" {
			return rs.finish(refused, "", nil), nil
		}
		msg := resp.Message
		rs.normalize(&msg, turn)
		rs.add(msg)
		rs.turns++
		rs.usage = rs.usage.Add(resp.Usage)
		u := resp.Usage
		rs.emit(Event{Type: EventAssistant, Turn: turn, Message: &msg, Usage: &u})
		if len(msg.ToolCalls) == 0 {
			if a.cfg.Output == nil {
				return rs.finish(OutcomeCompleted, msg.Text(), nil), nil
			}
			done, res, err := rs.checkOutput(turn, msg.Text())
			if err != nil || done {
				return res, err
			}
			continue // the model answers again, told what was wrong
		}
		// Tools whose results no model call will read are not run.
		if o := rs.limitReached(); o != "" {
			return rs.finish(o, msg.Text(), msg.ToolCalls), nil
		}
		plans := rs.plan(turn, msg.ToolCalls)
		if o, err := rs.approve(turn, plans); err != nil || o != "" {
			if err != nil {
				return Result{}, err
			}
			return rs.finish(o, msg.Text(), msg.ToolCalls), nil
		}
		outs, err := rs.execute(turn, plans)
		if err != nil {
			return Result{}, err
		}
		for i, p := range plans {
			o := outs[i]
			if o.Usage != nil {
				rs.usage = rs.usage.Add(*o.Usage)
			}
			tm := Message{Role: RoleTool, ToolCallID: p.call.ID, Name: p.call.Name, IsError: o.IsError}
			if o.Content != "" || o.Ref == nil {
				tm.Parts = append(tm.Parts, TextPart(o.Content))
			}
			if o.Ref != nil {
				tm.Parts = append(tm.Parts, Part{Type: PartText, Ref: o.Ref})
			}
			rs.add(tm)
			call := p.call
			preview := o.Content
			if o.Ref != nil {
				preview = fmt.Sprintf("[%d bytes stored by reference, sha256 %s]", o.Ref.Size, o.Ref.SHA256)
			} else if len(preview) > eventResultMax {
				preview = preview[:eventResultMax] + "..."
			}
			rs.emit(Event{Type: EventToolResult, Turn: turn, Call: &call, Result: preview, IsError: o.IsError})
		}
	}
}

func (rs *runState) add(m Message) {
	rs.hist = append(rs.hist, m)
	rs.size += messageSize(m)
}

func messageSize(m Message) int {
	n := 0
	for _, p := range m.Parts {
		n += len(p.Text) + len(p.URL)
		if p.Ref != nil {
			n += p.Ref.Size
		}
	}
	for _, c := range m.ToolCalls {
		n += len(c.Name) + len(c.Arguments)
	}
	return n
}

// spent is what the chain used so far, this run included.
func (rs *runState) spent() Spent {
	return Spent{Turns: rs.in.Spent.Turns + rs.turns, Usage: rs.in.Spent.Usage.Add(rs.usage)}
}

// limitReached reports the limit that forbids another model call.
func (rs *runState) limitReached() Outcome {
	s := rs.spent()
	switch {
	case rs.lim.MaxTurns >= 0 && s.Turns >= rs.lim.MaxTurns:
		return OutcomeLimitTurns
	case rs.lim.MaxTokens > 0 && s.Usage.Tokens() >= rs.lim.MaxTokens:
		return OutcomeLimitTokens
	case rs.lim.MaxCostMicros > 0 && s.Usage.CostMicros >= rs.lim.MaxCostMicros:
		return OutcomeLimitCost
	}
	return ""
}

// budget is what a sub-agent may still use.
func (rs *runState) budget() Limits {
	s := rs.spent()
	b := Limits{MaxTurns: -1, Reserve: rs.lim.Reserve}
	if rs.lim.MaxTurns >= 0 {
		b.MaxTurns = max(rs.lim.MaxTurns-s.Turns, 1)
	}
	if rs.lim.MaxTokens > 0 {
		b.MaxTokens = max(rs.lim.MaxTokens-s.Usage.Tokens(), 1)
	}
	if rs.lim.MaxCostMicros > 0 {
		b.MaxCostMicros = max(rs.lim.MaxCostMicros-s.Usage.CostMicros, 1)
	}
	return b
}

func (rs *runState) finish(o Outcome, final string, unexecuted []ToolCall) Result {
	res := Result{Outcome: o, Final: final, Turns: rs.turns, Usage: rs.usage, Spent: rs.spent(), RunID: rs.runID,
		PreviousRunID: rs.in.PreviousRunID, Unexecuted: unexecuted}
	if o == OutcomeCompleted {
		res.Output = rs.output
	}
	if rs.a.cfg.ReturnMessages {
		res.Messages = rs.hist[rs.start:]
	}
	u := res.Usage
	rs.emit(Event{Type: EventDone, Outcome: o, Text: final, Usage: &u})
	rs.closeEvents()
	return res
}

var callIDRE = regexp.MustCompile(`^[A-Za-z0-9_.\-]{1,64}$`)

// normalize gives every call of msg an ID unique in the run and usable in
// step names, event keys and idempotency keys. It depends only on
// recorded data, so a replay makes the same IDs.
func (rs *runState) normalize(msg *Message, turn int) {
	if len(msg.ToolCalls) == 0 {
		return
	}
	calls := make([]ToolCall, len(msg.ToolCalls))
	copy(calls, msg.ToolCalls)
	for i := range calls {
		id := calls[i].ID
		if !callIDRE.MatchString(id) || rs.seen[id] {
			id = fmt.Sprintf("t%dc%d", turn, i)
			for rs.seen[id] {
				id += "x"
			}
		}
		rs.seen[id] = true
		calls[i].ID = id
	}
	msg.ToolCalls = calls
}

// emit writes a lifecycle event from workflow code (exactly once).
func (rs *runState) emit(ev Event) {
	if rs.a.cfg.Stream {
		// A side channel never fails the run.
		_ = durable.StreamWrite(rs.wctx, EventsKey, ev)
	}
}

// closeEvents ends the run's event stream. It returns once every event is
// stored, so a reader never misses the last ones.
func (rs *runState) closeEvents() {
	if rs.a.cfg.Stream {
		_ = durable.StreamClose(rs.wctx, EventsKey)
	}
}

// emitStep writes an event from inside a step (at least once).
func (rs *runState) emitStep(ctx context.Context, ev Event) {
	_ = durable.StreamWriteFromStep(ctx, EventsKey, ev)
}

// deltaBatch merges consecutive fragments of the same text or tool call
// into one event, written at most every `every`.
type deltaBatch struct {
	every   time.Duration
	write   func(*Delta)
	pending *Delta
	since   time.Time
}

func (b *deltaBatch) add(d Delta) {
	if p := b.pending; p != nil && p.Type == d.Type && p.Index == d.Index && d.ID == "" && d.Name == "" {
		p.Text += d.Text
		p.Arguments += d.Arguments
	} else {
		b.flush()
		b.pending, b.since = &d, time.Now()
	}
	if b.every < 0 || time.Since(b.since) >= b.every {
		b.flush()
	}
}

func (b *deltaBatch) flush() {
	if b.pending != nil {
		b.write(b.pending)
		b.pending = nil
	}
}
