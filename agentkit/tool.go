package agentkit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable"
)

// ToolKind says how a tool call is executed and recorded.
type ToolKind string

// Tool kinds.
const (
	// KindStep: the call is a recorded step. It may run again if the
	// process dies after its effect and before its checkpoint; hand
	// [ToolIdempotencyKey] to the provider so the effect happens once.
	KindStep ToolKind = "step"
	// KindTx: the call runs in a database transaction that also records
	// its result, so its writes happen exactly once.
	KindTx ToolKind = "tx"
	// KindWorkflow: the call is a child workflow (it can sleep, wait for
	// messages, call many steps, or be another agent). Its workflow ID is
	// the call's idempotency key, so a replay finds the same child.
	KindWorkflow ToolKind = "workflow"
)

// ToolOpts are options of a tool.
type ToolOpts struct {
	// Approval makes every call of the tool wait for a human decision
	// before it runs (see [ApprovalPolicy]). Defaults to nil: no approval.
	Approval *ApprovalPolicy
	// Retry is the retry policy of the tool's step (KindStep, KindTx).
	// Defaults to the engine's Config.StepRetry.
	Retry *durable.RetryPolicy
	// Timeout bounds each attempt (KindStep, KindTx). Defaults to none.
	Timeout time.Duration
	// FailRun makes a call that failed for good (retries exhausted, a
	// durable.Permanent error, a panic) end the run with an error. By
	// default the failure is shown to the model as an error result, and
	// the run goes on. Defaults to false.
	FailRun bool
}

// Tool is a tool the model can call, built by [StepTool], [TxTool],
// [WorkflowTool] or [AgentTool]. Its name is part of the durable record
// (step names, keys): keep it stable.
type Tool struct {
	spec ToolSpec
	kind ToolKind
	opts ToolOpts

	decode func(raw json.RawMessage) (any, error)
	step   func(ctx context.Context, args any) (any, error)
	tx     func(ctx context.Context, tx pgx.Tx, args any) (any, error)
	// start starts the child of a workflow tool (a recorded step) and
	// returns a function that waits for its outcome.
	start func(wctx durable.Context, id string, args any, budget Limits) (func(park bool) (toolOutcome, error), error)
	err   error // a construction error, reported by Define
}

// Spec returns what the model is told about the tool.
func (t *Tool) Spec() ToolSpec { return t.spec }

// Kind returns the tool's kind.
func (t *Tool) Kind() ToolKind { return t.kind }

// Name returns the tool's name.
func (t *Tool) Name() string { return t.spec.Name }

var toolNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// check returns what is wrong with the options of tool name, if anything.
func (o *ToolOpts) check(name string) error {
	if o.Approval != nil {
		if err := o.Approval.validate(name); err != nil {
			return err
		}
	}
	if o.Retry != nil && o.Retry.MaxAttempts < 0 {
		return fmt.Errorf("%w: tool %q: ToolOpts.Retry.MaxAttempts is negative", durable.ErrInvalidArgument, name)
	}
	return nil
}

func newTool[A any](name, description string, schema json.RawMessage, kind ToolKind, opts *ToolOpts) *Tool {
	t := &Tool{spec: ToolSpec{Name: name, Description: description, Parameters: schema}, kind: kind}
	if opts != nil {
		t.opts = *opts
	}
	if len(t.spec.Parameters) == 0 {
		t.spec.Parameters = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	switch {
	case !toolNameRE.MatchString(name):
		t.err = fmt.Errorf("%w: tool name %q must be 1 to 64 letters, digits, '_' or '-'", durable.ErrInvalidArgument, name)
	case !json.Valid(t.spec.Parameters):
		t.err = fmt.Errorf("%w: the parameters schema of tool %q is not valid JSON", durable.ErrInvalidArgument, name)
	default:
		t.err = t.opts.check(name)
	}
	t.decode = func(raw json.RawMessage) (any, error) {
		var a A
		if len(raw) == 0 {
			raw = json.RawMessage("{}")
		}
		if err := json.Unmarshal(raw, &a); err != nil {
			return nil, err
		}
		return a, nil
	}
	return t
}

// StepTool defines a tool run as a recorded step. schema is the JSON
// schema of the arguments (nil: an object with no properties); the model's
// arguments are decoded into A before the step, and arguments that do not
// decode are reported to the model without calling fn. fn's result is
// shown to the model: a string as is, anything else as JSON. Return a
// [*ToolError] (see [ToolErrorf]) for a failure the model should see;
// other errors are retried by the step's policy.
func StepTool[A, R any](name, description string, schema json.RawMessage, fn func(ctx context.Context, args A) (R, error), opts *ToolOpts) *Tool {
	t := newTool[A](name, description, schema, KindStep, opts)
	if fn == nil {
		t.err = fmt.Errorf("%w: tool %q has a nil function", durable.ErrInvalidArgument, name)
	}
	t.step = func(ctx context.Context, args any) (any, error) { return fn(ctx, args.(A)) }
	return t
}

// TxTool defines a tool run in a database transaction that also records
// its result (durable.TxStep): its writes and its checkpoint commit
// together, so they happen exactly once. fn must not commit or roll back
// tx. See [StepTool] for arguments, results and errors.
func TxTool[A, R any](name, description string, schema json.RawMessage, fn func(ctx context.Context, tx pgx.Tx, args A) (R, error), opts *ToolOpts) *Tool {
	t := newTool[A](name, description, schema, KindTx, opts)
	if fn == nil {
		t.err = fmt.Errorf("%w: tool %q has a nil function", durable.ErrInvalidArgument, name)
	}
	t.tx = func(ctx context.Context, tx pgx.Tx, args any) (any, error) { return fn(ctx, tx, args.(A)) }
	return t
}

// WorkflowTool defines a tool run as a child workflow of wf, started with
// the decoded arguments under the workflow ID of the call's idempotency key
// (so the child reads it with wctx.WorkflowID()). The child's result is
// shown to the model like a [StepTool]'s; a failed child is shown as an
// error result (or ends the run, with ToolOpts.FailRun). Retry and Timeout
// options do not apply: the child's steps have their own. Under a caller
// with Limits.Reserve, the child's model calls made with [BudgetStep], and
// its agents with Limits.Reserve, draw from the caller's budget.
func WorkflowTool[A, R any](name, description string, schema json.RawMessage, wf *durable.Workflow[A, R], opts *ToolOpts) *Tool {
	t := newTool[A](name, description, schema, KindWorkflow, opts)
	if wf == nil {
		t.err = fmt.Errorf("%w: tool %q has a nil workflow", durable.ErrInvalidArgument, name)
		return t
	}
	t.start = func(wctx durable.Context, id string, args any, _ Limits) (func(park bool) (toolOutcome, error), error) {
		h, err := wf.StartChild(wctx, args.(A), &durable.StartOpts{ID: id})
		if err != nil {
			return nil, err
		}
		return func(park bool) (toolOutcome, error) {
			out, err := awaitChild(wctx, h, park)
			return childOutcome(wctx, out, err)
		}, nil
	}
	return t
}

// AgentTool defines a tool that runs the agent sub as a child workflow:
// the model passes {"prompt": "..."}, the sub-agent's final answer is the
// tool's result, its usage is charged to the calling run, and it gets at
// most the calling run's remaining turns, tokens and cost. Under a caller
// with Limits.Reserve it reserves each call from its caller's budget row
// too, so sub-agents running at once share what the caller has left.
func AgentTool(name, description string, sub *Agent, opts *ToolOpts) *Tool {
	schema := json.RawMessage(`{"type":"object","properties":{"prompt":{"type":"string","description":"The task for the sub-agent."}},"required":["prompt"]}`)
	type args struct {
		Prompt string `json:"prompt"`
	}
	t := newTool[args](name, description, schema, KindWorkflow, opts)
	if sub == nil {
		t.err = fmt.Errorf("%w: tool %q has a nil agent", durable.ErrInvalidArgument, name)
		return t
	}
	t.start = func(wctx durable.Context, id string, a any, budget Limits) (func(park bool) (toolOutcome, error), error) {
		lim := sub.cfg.Limits.resolved().min(budget)
		h, err := sub.wf.StartChild(wctx, Input{Prompt: a.(args).Prompt, Limits: &lim}, &durable.StartOpts{ID: id})
		if err != nil {
			return nil, err
		}
		return func(park bool) (toolOutcome, error) {
			res, err := awaitChild(wctx, h, park)
			if err != nil {
				return childOutcome(wctx, res, err)
			}
			u := res.Usage
			o := toolOutcome{Content: res.Final, Usage: &u}
			if res.Outcome != OutcomeCompleted {
				o.IsError = true
				o.Content = fmt.Sprintf("the sub-agent stopped early (%s): %s", res.Outcome, res.Final)
			}
			return o, nil
		}, nil
	}
	return t
}

// awaitChild waits for the child h follows: with park, by h.Await (a
// recorded step; a long wait parks the run, holding no goroutine);
// without, by h.Result, as runs recorded before Await took over did.
func awaitChild[R any](wctx durable.Context, h *durable.Handle[R], park bool) (R, error) {
	if park {
		return h.Await(wctx)
	}
	return h.Result(wctx)
}

// childOutcome turns a child workflow's outcome into a tool outcome. An
// error of the calling run itself (shutdown, cancel) is passed on.
func childOutcome[R any](wctx durable.Context, out R, err error) (toolOutcome, error) {
	if err != nil {
		if wctx.Err() != nil {
			return toolOutcome{}, err
		}
		var te *ToolError
		if errors.As(err, &te) {
			return toolOutcome{Content: te.Message, IsError: true}, nil
		}
		return toolOutcome{}, &childFailed{err}
	}
	s, err := resultText(out)
	if err != nil {
		return toolOutcome{Content: "cannot encode the tool's result: " + err.Error(), IsError: true}, nil
	}
	return toolOutcome{Content: s}, nil
}

type childFailed struct{ err error }

func (c *childFailed) Error() string { return c.err.Error() }
func (c *childFailed) Unwrap() error { return c.err }

// resultText is what the model sees of a tool's result.
func resultText(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case []byte:
		return string(x), nil
	case json.RawMessage:
		return string(x), nil
	case fmt.Stringer:
		return x.String(), nil
	}
	b, err := json.Marshal(v)
	return string(b), err
}

// ToolError is a tool failure the model should see: the call is recorded
// as done, with Message as an error result, and the run goes on.
type ToolError struct {
	Message string
}

func (e *ToolError) Error() string { return e.Message }

// ToolErrorf returns a [*ToolError] with a formatted message.
func ToolErrorf(format string, args ...any) error {
	return &ToolError{Message: fmt.Sprintf(format, args...)}
}

// ToolCallInfo describes the tool call a context belongs to.
type ToolCallInfo struct {
	RunID string
	Turn  int
	// Call is the call as executed: its Arguments are the approver's
	// edited ones when an approver edited them.
	Call ToolCall
	// IdempotencyKey is "<run ID>/<turn>/<call ID>", plus
	// "/edit-<digest of the arguments>" when an approver edited the
	// arguments. It is the same on every retry and recovery of the call,
	// and different for every other call.
	IdempotencyKey string
}

type toolInfoKey struct{}

// ToolCallFrom returns the tool call info carried by the context of a
// step or transaction tool; ok is false elsewhere.
func ToolCallFrom(ctx context.Context) (info ToolCallInfo, ok bool) {
	info, ok = ctx.Value(toolInfoKey{}).(ToolCallInfo)
	return info, ok
}

// ToolIdempotencyKey returns the idempotency key of the tool call whose
// context ctx is, or "" outside a tool. Hand it to providers that dedupe
// (an Idempotency-Key header, a unique column). A workflow tool's child
// has it as its workflow ID.
func ToolIdempotencyKey(ctx context.Context) string {
	info, _ := ToolCallFrom(ctx)
	return info.IdempotencyKey
}

// toolOutcome is the recorded output of a tool call.
type toolOutcome struct {
	Content string   `json:"content,omitempty"`
	IsError bool     `json:"is_error,omitempty"`
	Ref     *BlobRef `json:"ref,omitempty"` // Content stored by reference
	Usage   *Usage   `json:"usage,omitempty"`
}
