package agentkit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/agentkit/agentkittest"
)

type refundArgs struct {
	Amount int `json:"amount"`
}

type ran struct {
	Amount int
	Key    string
}

// approvalRig is an engine with agents whose refund tool needs approval
// under different policies. The model asks for a refund (and a harmless
// lookup) in turn 1 and then answers with the tool results it saw.
type approvalRig struct {
	e      *durable.Engine
	srv    *agentkittest.Server
	agents map[string]*agentkit.Agent
	mu     sync.Mutex
	ran    []ran
	looked int
}

func newApprovalRig(t *testing.T, mutate func(*durable.Config)) *approvalRig {
	v := newEnv(t)
	rig := &approvalRig{agents: map[string]*agentkit.Agent{}}
	rig.srv = agentkittest.NewServer(func(r *agentkittest.Request) agentkittest.Reply {
		if r.Turn == 1 {
			return agentkittest.Reply{ToolCalls: []agentkit.ToolCall{call("refund", `{"amount":100}`), call("lookup", `{"key":"x"}`)}}
		}
		return agentkittest.Reply{Text: "saw: " + strings.Join(r.ToolResults(), " | ")}
	})
	t.Cleanup(rig.srv.Close)
	policies := map[string]agentkit.ApprovalPolicy{
		"plain":       {Timeout: time.Hour},
		"end-on-deny": {Timeout: time.Hour, EndRunOnDeny: true},
		"to-deny":     {Timeout: 300 * time.Millisecond},
		"to-approve":  {Timeout: 300 * time.Millisecond, OnTimeout: agentkit.TimeoutApprove},
		"to-end":      {Timeout: 300 * time.Millisecond, OnTimeout: agentkit.TimeoutEnd},
		"two-days":    {Timeout: 48 * time.Hour},
	}
	rig.e = v.engine(t, mutate, func(e *durable.Engine) {
		for name, pol := range policies {
			rig.agents[name] = agentkit.Define(e, name, agentkit.AgentConfig{
				Model:  openAI(t, rig.srv),
				Stream: true,
				Tools: []*agentkit.Tool{
					agentkit.StepTool("refund", "Refund the customer.", nil, func(ctx context.Context, a refundArgs) (string, error) {
						rig.mu.Lock()
						defer rig.mu.Unlock()
						rig.ran = append(rig.ran, ran{a.Amount, agentkit.ToolIdempotencyKey(ctx)})
						return fmt.Sprintf("refunded %d", a.Amount), nil
					}, &agentkit.ToolOpts{Approval: &pol}),
					agentkit.StepTool("lookup", "", nil, func(ctx context.Context, a keyArgs) (string, error) {
						rig.mu.Lock()
						defer rig.mu.Unlock()
						rig.looked++
						return "found " + a.Key, nil
					}, nil),
				},
			})
		}
	})
	return rig
}

func (rig *approvalRig) start(t *testing.T, agent, id string) *durable.Handle[agentkit.Result] {
	h, err := rig.agents[agent].Start(ctxT(t), agentkit.Input{Prompt: "refund please"}, &durable.StartOpts{ID: id})
	require.NoError(t, err)
	return h
}

func (rig *approvalRig) ranCalls() []ran {
	rig.mu.Lock()
	defer rig.mu.Unlock()
	return append([]ran(nil), rig.ran...)
}

func waitPending(t *testing.T, e *durable.Engine, runID string) agentkit.PendingApproval {
	t.Helper()
	ctx := ctxT(t)
	var p []agentkit.PendingApproval
	require.Eventually(t, func() bool {
		var err error
		p, err = agentkit.Pending(ctx, e, runID)
		return err == nil && len(p) > 0
	}, 20*time.Second, 5*time.Millisecond)
	return p[0]
}

func TestApprovalDecisions(t *testing.T) {
	t.Parallel()
	rig := newApprovalRig(t, nil)
	ctx := ctxT(t)

	// Approve: the call runs as proposed, under its plain key. The other
	// call of the turn waits for the decision too.
	h := rig.start(t, "plain", "approve-1")
	p := waitPending(t, rig.e, "approve-1")
	require.Equal(t, "refund", p.Call.Name)
	require.JSONEq(t, `{"amount":100}`, string(p.Call.Arguments))
	require.Equal(t, "approve-1/1/call_1_0", p.IdempotencyKey)
	require.Equal(t, agentkit.ApprovalPending, p.Status)
	require.Equal(t, agentkit.TimeoutDeny, p.OnTimeout)
	require.WithinDuration(t, time.Now().Add(time.Hour), p.Deadline, time.Minute)
	require.Empty(t, rig.ranCalls())
	require.Zero(t, rig.looked, "no call of the turn runs before its approvals are settled")
	require.ErrorIs(t, agentkit.Decide(ctx, rig.e, "approve-1", "no-such-call", agentkit.Decision{Action: agentkit.ActionApprove}), agentkit.ErrNoPendingApproval)
	require.ErrorIs(t, agentkit.Decide(ctx, rig.e, "approve-1", p.Call.ID, agentkit.Decision{Action: "maybe"}), durable.ErrInvalidArgument)
	require.ErrorIs(t, agentkit.Decide(ctx, rig.e, "approve-1", p.Call.ID, agentkit.Decision{Action: agentkit.ActionEdit, Arguments: json.RawMessage("{")}), durable.ErrInvalidArgument)
	require.NoError(t, agentkit.Decide(ctx, rig.e, "approve-1", p.Call.ID, agentkit.Decision{Action: agentkit.ActionApprove, By: "ann"}))
	res, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "saw: refunded 100 | found x", res.Final)
	require.Equal(t, []ran{{100, "approve-1/1/call_1_0"}}, rig.ranCalls())
	got, ok, err := agentkit.Approval(ctx, rig.e, "approve-1", p.Call.ID)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, agentkit.ApprovalApproved, got.Status)
	require.Equal(t, "ann", got.Decision.By)
	require.ErrorIs(t, agentkit.Decide(ctx, rig.e, "approve-1", p.Call.ID, agentkit.Decision{Action: agentkit.ActionApprove}), agentkit.ErrNoPendingApproval, "single use")
	pend, err := agentkit.Pending(ctx, rig.e, "approve-1")
	require.NoError(t, err)
	require.Empty(t, pend)

	// Edit: the call runs with the edited arguments, under another key;
	// the model is told.
	h = rig.start(t, "plain", "edit-1")
	p = waitPending(t, rig.e, "edit-1")
	require.NoError(t, agentkit.Decide(ctx, rig.e, "edit-1", p.Call.ID, agentkit.Decision{Action: agentkit.ActionEdit, Arguments: json.RawMessage(`{"amount":40}`)}))
	res, err = h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "saw: (An approver changed the arguments to {\"amount\":40}.)\nrefunded 40 | found x", res.Final)
	last := rig.ranCalls()[1]
	require.Equal(t, 40, last.Amount)
	require.True(t, strings.HasPrefix(last.Key, "edit-1/1/call_1_0/edit-"), last.Key)

	// Deny: the call does not run; the model sees the reason.
	h = rig.start(t, "plain", "deny-1")
	p = waitPending(t, rig.e, "deny-1")
	require.NoError(t, agentkit.Decide(ctx, rig.e, "deny-1", p.Call.ID, agentkit.Decision{Action: agentkit.ActionDeny, Reason: "over the limit"}))
	res, err = h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentkit.OutcomeCompleted, res.Outcome)
	require.Equal(t, "saw: The user denied this call. Reason: over the limit | found x", res.Final)
	require.Len(t, rig.ranCalls(), 2)

	// Deny with EndRunOnDeny: the run ends, no call of the turn runs.
	looked := rig.looked
	h = rig.start(t, "end-on-deny", "deny-2")
	p = waitPending(t, rig.e, "deny-2")
	require.NoError(t, agentkit.Decide(ctx, rig.e, "deny-2", p.Call.ID, agentkit.Decision{Action: agentkit.ActionDeny}))
	res, err = h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentkit.OutcomeDenied, res.Outcome)
	require.Len(t, res.Unexecuted, 2)
	require.Len(t, rig.ranCalls(), 2)
	require.Equal(t, looked, rig.looked)

	// The run's events tell a UI the same story.
	var evs []agentkit.Event
	for ent, err := range agentkit.Events(ctx, rig.e, "deny-2", 0) {
		require.NoError(t, err)
		evs = append(evs, ent.Value)
	}
	require.Equal(t, []agentkit.EventType{agentkit.EventRunStarted, agentkit.EventTurnStarted,
		agentkit.EventAssistant, agentkit.EventApprovalPending, agentkit.EventApprovalResolved, agentkit.EventDone}, lifecycle(evs))
	require.Equal(t, agentkit.OutcomeDenied, evs[len(evs)-1].Outcome)
}

func TestApprovalTimeoutPolicies(t *testing.T) {
	t.Parallel()
	rig := newApprovalRig(t, nil)
	ctx := ctxT(t)
	hDeny := rig.start(t, "to-deny", "to-deny-1")
	hApprove := rig.start(t, "to-approve", "to-approve-1")
	hEnd := rig.start(t, "to-end", "to-end-1")

	res, err := hDeny.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentkit.OutcomeCompleted, res.Outcome)
	require.Equal(t, "saw: The call was not approved before its deadline, so it did not run. | found x", res.Final)

	res, err = hApprove.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "saw: refunded 100 | found x", res.Final)
	require.Equal(t, []ran{{100, "to-approve-1/1/call_1_0"}}, rig.ranCalls(), "only the approve-on-timeout call ran")

	res, err = hEnd.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentkit.OutcomeApprovalTimeout, res.Outcome)
	require.Len(t, res.Unexecuted, 2)

	p, ok, err := agentkit.Approval(ctx, rig.e, "to-end-1", "call_1_0")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, agentkit.ApprovalTimedOut, p.Status)
	require.ErrorIs(t, agentkit.Decide(ctx, rig.e, "to-end-1", "call_1_0", agentkit.Decision{Action: agentkit.ActionApprove}), agentkit.ErrNoPendingApproval)
}

// TestApprovalWaitParks: a two-day approval wait holds no goroutine and
// no executor: the run is parked as rows, and the decision wakes it.
func TestApprovalWaitParks(t *testing.T) {
	t.Parallel()
	var schema string
	rig := newApprovalRig(t, func(c *durable.Config) { c.ParkThreshold = 100 * time.Millisecond; schema = c.Schema })
	ctx := ctxT(t)
	h := rig.start(t, "two-days", "park-1")
	p := waitPending(t, rig.e, "park-1")
	require.WithinDuration(t, time.Now().Add(48*time.Hour), p.Deadline, time.Minute)
	pool := newEnv(t).pool
	q := "SELECT executor_id IS NULL FROM " + pgx.Identifier{schema, "workflows"}.Sanitize() + " WHERE id = 'park-1'"
	require.Eventually(t, func() bool {
		var parked bool
		return pool.QueryRow(ctx, q).Scan(&parked) == nil && parked
	}, 10*time.Second, 10*time.Millisecond, "the waiting run is parked, owned by no executor")
	require.NoError(t, agentkit.Decide(ctx, rig.e, "park-1", p.Call.ID, agentkit.Decision{Action: agentkit.ActionApprove}))
	res, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "saw: refunded 100 | found x", res.Final)
}
