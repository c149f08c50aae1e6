package agentkit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/durable-go/durable"
)

// ApprovalTimeoutDefault is the default of ApprovalPolicy.Timeout.
const ApprovalTimeoutDefault = 24 * time.Hour

// TimeoutAction is what happens to a call whose approval deadline passed.
type TimeoutAction string

// Timeout actions.
const (
	// TimeoutDeny: the call does not run; the model is told it was not
	// approved in time, and the run goes on.
	TimeoutDeny TimeoutAction = "deny"
	// TimeoutApprove: the call runs with its arguments as proposed.
	TimeoutApprove TimeoutAction = "approve"
	// TimeoutEnd: the run ends with [OutcomeApprovalTimeout]; no call of
	// the turn runs.
	TimeoutEnd TimeoutAction = "end"
)

// ApprovalPolicy makes a tool's calls wait for a human decision. The run
// publishes each pending call (see [Pending]) and waits durably, with a
// deadline recorded in the database, for a [Decision] sent with [Decide].
// A wait longer than the engine's Config.ParkThreshold holds no goroutine:
// the run is parked as rows until the decision or the deadline. The calls
// of one turn are all settled before any of them runs.
type ApprovalPolicy struct {
	// Timeout is how long a call waits for its decision. Defaults to
	// ApprovalTimeoutDefault.
	Timeout time.Duration
	// OnTimeout is what happens when the deadline passes. Defaults to
	// TimeoutDeny.
	OnTimeout TimeoutAction
	// EndRunOnDeny makes a denial end the run with [OutcomeDenied]. By
	// default the model is told the call was denied (with the approver's
	// reason) and the run goes on. Defaults to false.
	EndRunOnDeny bool
	// When, if set, says which calls need approval (for example only
	// refunds over a threshold). It must be deterministic: it is called
	// again on replay. Defaults to nil: every call needs approval.
	When func(call ToolCall) bool
}

func (p *ApprovalPolicy) validate(tool string) error {
	switch {
	case p.Timeout < 0:
		return fmt.Errorf("%w: tool %q: ApprovalPolicy.Timeout is negative", durable.ErrInvalidArgument, tool)
	case p.OnTimeout != "" && p.OnTimeout != TimeoutDeny && p.OnTimeout != TimeoutApprove && p.OnTimeout != TimeoutEnd:
		return fmt.Errorf("%w: tool %q: ApprovalPolicy.OnTimeout %q is not deny, approve or end", durable.ErrInvalidArgument, tool, p.OnTimeout)
	}
	return nil
}

func (p *ApprovalPolicy) timeout() time.Duration {
	if p.Timeout == 0 {
		return ApprovalTimeoutDefault
	}
	return p.Timeout
}

// DecisionAction is an approver's verdict.
type DecisionAction string

// Decision actions.
const (
	ActionApprove DecisionAction = "approve"
	ActionDeny    DecisionAction = "deny"
	// ActionEdit approves the call with other arguments. The call's
	// idempotency key changes with them.
	ActionEdit DecisionAction = "edit"
)

// Decision is an approver's answer to a pending call.
type Decision struct {
	Action DecisionAction `json:"action"`
	// Arguments replace the call's arguments (ActionEdit only).
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Reason is shown to the model when the call is denied.
	Reason string `json:"reason,omitempty"`
	// By names the approver, for the record.
	By string `json:"by,omitempty"`
}

// ApprovalStatus is the state of an approval request.
type ApprovalStatus string

// Approval statuses.
const (
	ApprovalPending  ApprovalStatus = "pending"
	ApprovalApproved ApprovalStatus = "approved"
	ApprovalEdited   ApprovalStatus = "edited"
	ApprovalDenied   ApprovalStatus = "denied"
	ApprovalTimedOut ApprovalStatus = "timed_out"
)

// PendingApproval is a call waiting for (or given) a decision, as
// published by the run.
type PendingApproval struct {
	RunID string   `json:"run_id"`
	Turn  int      `json:"turn"`
	Call  ToolCall `json:"call"`
	// IdempotencyKey is the key the call runs under if approved as is.
	IdempotencyKey string         `json:"idempotency_key"`
	Deadline       time.Time      `json:"deadline"`
	OnTimeout      TimeoutAction  `json:"on_timeout"`
	Status         ApprovalStatus `json:"status"`
	Decision       *Decision      `json:"decision,omitempty"`
}

// ErrNoPendingApproval: the call is not waiting for a decision (unknown
// call, or already decided or timed out).
var ErrNoPendingApproval = errors.New("agentkit: no pending approval for this call")

const (
	pendingEvent   = "agentkit.pending"
	approvalPrefix = "agentkit.approval:" // event key and message topic, per call
)

// Pending returns the calls of run runID waiting for a decision now.
func Pending(ctx context.Context, e *durable.Engine, runID string) ([]PendingApproval, error) {
	list, _, err := durable.GetEvent[[]PendingApproval](ctx, e, runID, pendingEvent, 0)
	return list, err
}

// Approval returns the latest state of the approval of call callID of run
// runID; ok is false when the call never asked for one.
func Approval(ctx context.Context, e *durable.Engine, runID, callID string) (p PendingApproval, ok bool, err error) {
	return durable.GetEvent[PendingApproval](ctx, e, runID, approvalPrefix+callID, 0)
}

// Decide sends the decision d on call callID of run runID, from any
// process. It checks that the call is pending, and is single-use: the
// first decision wins and later ones are ignored. The run consumes it
// even if it is down now (it is stored). It fails with
// [ErrNoPendingApproval], or with durable.ErrInvalidArgument for a bad
// decision.
func Decide(ctx context.Context, e *durable.Engine, runID, callID string, d Decision) error {
	switch d.Action {
	case ActionApprove, ActionDeny:
	case ActionEdit:
		if !json.Valid(d.Arguments) {
			return fmt.Errorf("%w: the edited arguments of call %q are not valid JSON", durable.ErrInvalidArgument, callID)
		}
	default:
		return fmt.Errorf("%w: decision action %q is not approve, deny or edit", durable.ErrInvalidArgument, d.Action)
	}
	p, ok, err := Approval(ctx, e, runID, callID)
	if err != nil {
		return err
	}
	if !ok || p.Status != ApprovalPending {
		return fmt.Errorf("%w: run %q call %q", ErrNoPendingApproval, runID, callID)
	}
	return durable.Send(ctx, e, runID, approvalPrefix+callID, d, &durable.SendOpts{IdempotencyKey: "agentkit.decision:" + callID})
}

// editedKey is the idempotency key of a call whose arguments an approver
// changed.
func editedKey(base string, args json.RawMessage) string {
	sum := sha256.Sum256(args)
	return base + "/edit-" + hex.EncodeToString(sum[:6])
}
