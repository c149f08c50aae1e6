// Package agentkit runs the agent loop (model call, tool calls, repeat) as
// a durable workflow of package durable: an agent that runs for an hour
// over forty tool calls survives a deploy mid-run, never re-samples a
// recorded model answer, never charges a card twice, and can wait two days
// for a human approval without holding anything.
//
//	model, _ := agentkit.NewOpenAI(agentkit.OpenAIConfig{BaseURL: url, APIKey: key, Model: "gpt-4.1"})
//	support := agentkit.Define(eng, "support", agentkit.AgentConfig{
//		Model:  model,
//		System: "You are a support agent.",
//		Tools: []*agentkit.Tool{
//			agentkit.StepTool("lookup_order", "...", schema, lookupOrder, nil),
//			agentkit.TxTool("add_note", "...", schema, addNote, nil),                  // pgx.Tx, exactly once
//			agentkit.StepTool("refund", "...", schema, refund, &agentkit.ToolOpts{    // waits for a human
//				Approval: &agentkit.ApprovalPolicy{Timeout: 48 * time.Hour, OnTimeout: agentkit.TimeoutDeny}}),
//		},
//		Limits: agentkit.Limits{MaxTurns: 40, MaxCostMicros: 5_000_000},
//		Stream: true,
//	})
//	err = eng.Launch(ctx)
//	h, err := support.Start(ctx, agentkit.Input{Prompt: "Where is order 42?"}, &durable.StartOpts{ID: "ticket-981"})
//	res, err := h.Result(ctx) // res.Outcome, res.Final, res.Usage
//
// # What is recorded
//
// Each model call is a step whose output is the response only (the
// assistant message and its usage), never the request: the request of
// turn k is rebuilt in workflow code from the run's input and the recorded
// responses and tool results, so the record grows linearly with the
// conversation, not quadratically. A replay takes every recorded answer
// from the database; the [Model] lives outside the durable state and is
// only called for turns that were never recorded. Each tool call is its
// own step. The steps of a run, in order:
//
//	agentkit.limits                      once, only for runs started without Input.Limits
//	agentkit.reserve:<turn>              with Limits.Reserve: the call's reservation, before it
//	agentkit.model:<turn>                the model's answer (a *Response)
//	agentkit.settle:<turn>               with Limits.Reserve: what the call used, charged after it
//	agentkit.tool:<tool>:<call ID>       a step or transaction tool's result
//	child:<workflow>                     the start of a workflow tool's child (or a sub-agent, or a continuation)
//	durable.patch:agentkit.await-children   once per turn with children, before their outcomes
//	durable.await:<child ID>             a child's outcome, in call order after the turn's step tools;
//	                                     a long wait parks the run (no goroutine) until the child ends
//	agentkit.mcp:<server>                an MCP server's tool list, once per run
//	agentkit.output:<turn>               the check of a final answer against AgentConfig.Output
//	durable.now, durable.event:..., durable.recv...   approval deadlines, requests and decisions
//	agentkit.compact                     the summary made before continuing as a new run
//
// Tool, agent and workflow names are part of this record: keep them stable
// (use durable.Patched to change the loop's shape for runs in flight).
//
// # Models
//
// [NewOpenAI] speaks the Chat Completions API of OpenAI and compatible
// servers over net/http, streaming included. Other providers plug in
// through [Model] (and [StreamingModel]); the types map one to one onto
// the common SDKs, so an adapter is a few lines of field copying:
//
//	agentkit            openai-go                     anthropic-sdk-go         langchaingo / eino
//	Message.Role        message param union           MessageParam.Role        MessageContent.Role / Message.Role
//	Part (text, image)  content parts                 content blocks           Parts / MultiContent
//	ToolCall.Arguments  Function.Arguments (string)   ToolUseBlock.Input (raw) FunctionCall.Arguments (string)
//	Message.ToolCallID  tool message tool_call_id     ToolResultBlock.ToolUseID ToolCallResponse.ToolCallID
//	Usage               CompletionUsage               Usage (+cache tokens)    GenerationInfo / ResponseMeta.Usage
//
// Set the SDK's own retries to zero: the model step retries, and a
// [*ModelError] with Retryable false stops it.
//
// # Structured output
//
// With AgentConfig.Output ([OutputOf]) the final answer is JSON of a Go
// type: the schema goes with every model call, each answer is checked as
// a recorded step, one that does not match is sent back with what is
// wrong (AgentConfig.OutputRepairs times at most), and [DecodeOutput]
// reads Result.Output.
//
// # Tools
//
// Tools come from AgentConfig.Tools and from MCP servers
// (AgentConfig.MCP, [MCPServer]): a run lists each server's tools once,
// as a recorded step, and calls them as steps whose idempotency key
// travels in the call's _meta ([MCPMetaKey]).
//
// A tool is a plain step ([StepTool]), a transaction step ([TxTool]: its
// writes and its checkpoint commit together), a child workflow
// ([WorkflowTool]) or another agent ([AgentTool]). Each call gets an
// idempotency key, "<run ID>/<turn>/<call ID>" ([ToolIdempotencyKey];
// turns count from 1 there as everywhere in agentkit: Event.Turn,
// ToolCallInfo.Turn and the model steps' names, agentkit.model:<turn>),
// stable across retries and recoveries and different for every other call
// (and for arguments an approver edited): hand it to the provider, and a
// step that runs again after a crash has its effect once. An HTTP tool
// gets it without code: an http.Client whose Transport is
// [NewTransport] stamps the call's key on each request it makes (the
// n-th after the first as "<call key>/<n>"). Failures the
// model should see are values ([ToolErrorf]); other errors are retried by
// the step's policy, and a call that fails for good is shown to the model
// as an error result (or ends the run, with ToolOpts.FailRun). Unknown
// tools and arguments that do not decode are reported to the model too,
// in JSON's terms (the field and the JSON type it needs, or where the JSON
// breaks) with the arguments it sent, so it can correct them.
//
// The calls of one turn run in parallel (AgentConfig.MaxParallelTools),
// each as its own step; each call takes its step position before the next
// one starts, so the record is the same whatever the timing.
//
// # Approvals
//
// A tool with ToolOpts.Approval publishes each call as a pending request
// (see [Pending] and [Approval]; the events are readable from any process)
// and waits durably for a [Decision] sent with [Decide]: approve, deny (the
// model is told why) or edit the arguments. The deadline is recorded; on
// timeout the policy denies, approves or ends the run. A wait longer than
// the engine's Config.ParkThreshold parks the run: no goroutine, no
// memory, woken by the decision or the deadline on any executor.
//
// # Limits and outcomes
//
// [Limits] (turns, tokens, cost) are stored in the run's input and checked
// against totals folded from recorded responses, so a resumed run, a
// continuation and a sub-agent all stay within them. How a run ends is an
// [Outcome], not an error:
//
//	outcome            when
//	-----------------  ------------------------------------------------------
//	completed          the model answered without tool calls
//	limit_turns        MaxTurns model calls were made
//	limit_tokens       the tokens used reached MaxTokens (with Reserve: the next call's estimate did not fit)
//	limit_cost         the cost reached MaxCostMicros (with Reserve: likewise)
//	denied             an approver denied a call of a tool with EndRunOnDeny
//	approval_timeout   an approval deadline passed under TimeoutEnd
//	continued          the run continued as Result.NextRunID (ContinuePolicy)
//
// With Limits.Reserve the limits are also a row of agentkit_budgets (run
// [Migrate] first), which every model call reserves from before it is
// made and settles after, each a transaction step: the call is made only
// if its estimate (a turn; the request's text at four bytes a token plus
// its output tokens, which are then sent as its maximum; their cost by
// AgentConfig.Pricing) fits in what the row has left after what was used
// and what calls in flight hold. A sub-agent's row, and the row of a
// workflow tool's workflow that calls [BudgetStep], draw from the caller's
// row as well, under its lock: sub-agents started together, on any
// executors, share what their caller has left and together never pass
// it. A hold of a run that ended without settling (cancelled) lapses.
// [ReadBudget] shows a row: its limits, what was used, what is held.
//
// Errors are for failures: a model call that failed for good (a 4xx is not
// retried, see [ModelError] and [ClassifyHTTP]), a tool with FailRun that
// failed, or the durable errors of the run itself.
//
// # Streaming
//
// With AgentConfig.Stream, the run writes [Event]s to its durable stream
// (key [EventsKey]; read with [Events]): lifecycle events from workflow
// code, exactly once and in order even across crashes (run and turn
// started, the recorded answer, tool called and result, approval pending
// and resolved, done), and the model's deltas from inside the model step,
// at least once per attempt, each attempt announced by a model_attempt
// event ([Transcript] folds them). A UI follows a run live and re-joins
// after a reconnect from the next offset.
//
// # Long runs
//
// Tool outputs larger than AgentConfig.BlobThreshold can be stored by
// reference in a [BlobStore] ([NewPGBlobStore], after [Migrate]): the step
// records a hash, the model step loads the content. Blobs are shared
// between runs and outlive them: [PGBlobStore.Prune] deletes those no run
// refers to any more (call it after pruning runs). With a
// [ContinuePolicy], a long run summarises its history with a model call
// and continues as a new run ("<first run>/cont-<n>"), linked to the
// previous one and carrying what the chain spent; [Agent.Result] follows
// the chain.
//
// # Cron agents
//
// [Schedule] runs an agent on a cron schedule with a prompt built from the
// tick, once per tick whatever the number of replicas.
//
// # Determinism
//
// The loop is deterministic given its record. What it reads besides the
// record (AgentConfig.System, the tool list and specs, ApprovalPolicy.When)
// is read again on replay: changing them affects the turns not yet
// recorded. Tool and model code runs inside steps and may do any I/O. A
// fork of a run (Agent.Workflow().Fork) replays the steps before the fork
// point and has a new run ID, so the tool calls after it run again, under
// new idempotency keys.
//
// # Testing
//
// Package agentkittest has a scripted OpenAI-compatible server (replies
// chosen per turn, malformed replies, errors, slow and held replies,
// streaming) that logs every request, and an idempotent provider that
// counts the keys it saw. Nothing reaches the network.
package agentkit
