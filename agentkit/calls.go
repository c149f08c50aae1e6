package agentkit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable"
)

// callPlan is one tool call of a turn, settled in workflow code before it
// runs: tool lookup, argument decoding and approval are all derived from
// recorded data.
type callPlan struct {
	call     ToolCall
	tool     *Tool
	args     any
	key      string
	approval bool
	edited   bool
	preset   *toolOutcome // the result, known without running the tool
}

func (rs *runState) plan(turn int, calls []ToolCall) []*callPlan {
	plans := make([]*callPlan, len(calls))
	for i, c := range calls {
		p := &callPlan{call: c, key: fmt.Sprintf("%s/%d/%s", rs.runID, turn, c.ID)}
		plans[i] = p
		t := rs.tools[c.Name]
		if t == nil {
			names := make([]string, 0, len(rs.tools))
			for n := range rs.tools {
				names = append(names, n)
			}
			sort.Strings(names)
			p.preset = &toolOutcome{Content: fmt.Sprintf("There is no tool named %q. The tools are: %s.", c.Name, strings.Join(names, ", ")), IsError: true}
			continue
		}
		p.tool = t
		args, err := t.decode(c.Arguments)
		if err != nil {
			p.preset = &toolOutcome{Content: fmt.Sprintf("The arguments of tool %q are invalid: %s", c.Name, argsError(c.Arguments, err)), IsError: true}
			continue
		}
		p.args = args
		if ap := t.opts.Approval; ap != nil && (ap.When == nil || ap.When(c)) {
			p.approval = true
		}
	}
	return plans
}

// approve publishes the turn's calls that need approval and waits for
// their decisions, with one deadline per call computed from one recorded
// time. It returns an outcome when a decision ends the run.
func (rs *runState) approve(turn int, plans []*callPlan) (Outcome, error) {
	var waiting []*callPlan
	for _, p := range plans {
		if p.approval && p.preset == nil {
			waiting = append(waiting, p)
		}
	}
	if len(waiting) == 0 {
		return "", nil
	}
	now, err := durable.Now(rs.wctx)
	if err != nil {
		return "", err
	}
	pend := make([]PendingApproval, len(waiting))
	for i, p := range waiting {
		pol := p.tool.opts.Approval
		pend[i] = PendingApproval{RunID: rs.runID, Turn: turn, Call: p.call, IdempotencyKey: p.key,
			Deadline: now.Add(pol.timeout()), OnTimeout: cmp.Or(pol.OnTimeout, TimeoutDeny), Status: ApprovalPending}
		if err := durable.SetEvent(rs.wctx, approvalPrefix+p.call.ID, pend[i]); err != nil {
			return "", err
		}
		pa := pend[i]
		rs.emit(Event{Type: EventApprovalPending, Turn: turn, Approval: &pa})
	}
	if err := durable.SetEvent(rs.wctx, pendingEvent, pend); err != nil {
		return "", err
	}
	var end Outcome
	for i, p := range waiting {
		pol := p.tool.opts.Approval
		pa := &pend[i]
		// Each call's deadline, on the engine's clock (a test's clock too),
		// is recorded by RecvUntil when its wait first runs.
		d, ok, err := durable.RecvUntil[Decision](rs.wctx, approvalPrefix+p.call.ID, pa.Deadline)
		if err != nil {
			return "", err
		}
		switch {
		case !ok:
			pa.Status = ApprovalTimedOut
			switch pa.OnTimeout {
			case TimeoutApprove:
			case TimeoutEnd:
				end = cmp.Or(end, OutcomeApprovalTimeout)
				p.preset = &toolOutcome{Content: "The call was not approved before its deadline; the run ended.", IsError: true}
			default:
				p.preset = &toolOutcome{Content: "The call was not approved before its deadline, so it did not run.", IsError: true}
			}
		case d.Action == ActionApprove:
			pa.Status, pa.Decision = ApprovalApproved, &d
		case d.Action == ActionEdit:
			pa.Status, pa.Decision = ApprovalEdited, &d
			args, err := p.tool.decode(d.Arguments)
			if err != nil {
				p.preset = &toolOutcome{Content: fmt.Sprintf("The approver's edited arguments are invalid (%s), so the call did not run.", argsError(d.Arguments, err)), IsError: true}
				break
			}
			p.args, p.call.Arguments, p.edited = args, d.Arguments, true
			p.key = editedKey(p.key, d.Arguments)
		default: // deny, or a malformed decision
			pa.Status, pa.Decision = ApprovalDenied, &d
			msg := "The user denied this call."
			if d.Reason != "" {
				msg += " Reason: " + d.Reason
			}
			p.preset = &toolOutcome{Content: msg, IsError: true}
			if pol.EndRunOnDeny {
				end = cmp.Or(end, OutcomeDenied)
			}
		}
		if err := durable.SetEvent(rs.wctx, approvalPrefix+p.call.ID, *pa); err != nil {
			return "", err
		}
		resolved := *pa
		rs.emit(Event{Type: EventApprovalResolved, Turn: turn, Approval: &resolved})
		if err := durable.SetEvent(rs.wctx, pendingEvent, pend[i+1:]); err != nil {
			return "", err
		}
	}
	return end, nil
}

// execute runs the turn's calls and returns their outcomes in call order.
// Calls run in parallel (up to MaxParallelTools) as separate steps; each
// call's step position is taken before the next call starts, so the
// positions follow the call order whatever the timing, and a replay lines
// up with the record.
func (rs *runState) execute(turn int, plans []*callPlan) ([]toolOutcome, error) {
	outs := make([]toolOutcome, len(plans))
	errs := make([]error, len(plans))
	for _, p := range plans {
		if p.preset == nil {
			call := p.call
			rs.emit(Event{Type: EventToolCalled, Turn: turn, Call: &call})
		}
	}
	sem := make(chan struct{}, rs.a.cfg.MaxParallelTools)
	var wg sync.WaitGroup
	var children []int // the calls of workflow tools (children), in order
	waits := make([]func(park bool) (toolOutcome, error), len(plans))
	for i, p := range plans {
		if p.preset != nil {
			outs[i] = *p.preset
			continue
		}
		if p.tool.kind == KindWorkflow {
			// Starting the child is a step of this run: do it here, in order.
			wait, err := p.tool.start(rs.wctx, p.key, p.args, rs.budget())
			if err != nil {
				errs[i] = err
				break
			}
			children = append(children, i)
			waits[i] = wait
			continue
		}
		sem <- struct{}{}
		began := make(chan struct{})
		var once sync.Once
		signal := func() { once.Do(func() { close(began) }) }
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer signal() // replayed, or failed before running
			o, err := rs.runStep(turn, p, signal)
			outs[i], errs[i] = rs.settle(p, o, err)
		}()
		<-began
	}
	wg.Wait()
	if err := rs.awaitChildren(plans, children, waits, outs, errs); err != nil {
		return nil, err
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	for i, p := range plans {
		if p.edited {
			outs[i].Content = fmt.Sprintf("(An approver changed the arguments to %s.)\n%s", p.call.Arguments, outs[i].Content)
		}
	}
	return outs, nil
}

// awaitChildren waits, once the turn's step tools are done, for the
// children its workflow and agent tools started, one after the other in
// call order (they run meanwhile all the same): each wait is a recorded
// step (Handle.Await), and one longer than the engine's ParkThreshold
// parks the run, which then holds no goroutine until the child finishes.
// Runs that reached this point before waits were recorded wait as they
// did then (the patch marker tells them apart).
func (rs *runState) awaitChildren(plans []*callPlan, children []int, waits []func(bool) (toolOutcome, error), outs []toolOutcome, errs []error) error {
	if len(children) == 0 {
		return nil
	}
	for _, err := range errs {
		if err != nil {
			return err // a child failed to start, or a tool step failed
		}
	}
	park, err := durable.Patched(rs.wctx, "agentkit.await-children")
	if err != nil {
		return err
	}
	for _, i := range children {
		o, err := waits[i](park)
		if h := durable.Halted(rs.wctx); h != nil {
			return h // parked (or stopping): the run resumes here by replay
		}
		outs[i], errs[i] = rs.settle(plans[i], o, err)
	}
	return nil
}

// runStep runs a step or transaction tool call. began is called once the
// call holds its step position (its function started).
func (rs *runState) runStep(turn int, p *callPlan, began func()) (toolOutcome, error) {
	t := p.tool
	info := ToolCallInfo{RunID: rs.runID, Turn: turn, Call: p.call, IdempotencyKey: p.key}
	name := "agentkit.tool:" + p.call.Name + ":" + p.call.ID
	if t.kind == KindTx {
		return durable.TxStep(rs.wctx, name, func(ctx context.Context, tx pgx.Tx) (toolOutcome, error) {
			began()
			ctx = context.WithValue(ctx, toolInfoKey{}, info)
			// A savepoint, so a failure shown to the model undoes the
			// tool's writes but still records the call.
			sp, err := tx.Begin(ctx)
			if err != nil {
				return toolOutcome{}, err
			}
			v, err := t.tx(ctx, sp, p.args)
			if err != nil {
				_ = sp.Rollback(ctx)
				var te *ToolError
				if errors.As(err, &te) {
					return toolOutcome{Content: te.Message, IsError: true}, nil
				}
				return toolOutcome{}, err
			}
			if err := sp.Commit(ctx); err != nil {
				return toolOutcome{}, err
			}
			return rs.outcome(ctx, tx, v)
		}, &durable.TxStepOpts{Retry: t.opts.Retry, Timeout: t.opts.Timeout})
	}
	return durable.Step(rs.wctx, name, func(ctx context.Context) (toolOutcome, error) {
		began()
		ctx = context.WithValue(ctx, toolInfoKey{}, info)
		v, err := t.step(ctx, p.args)
		if err != nil {
			var te *ToolError
			if errors.As(err, &te) {
				return toolOutcome{Content: te.Message, IsError: true}, nil
			}
			return toolOutcome{}, err
		}
		return rs.outcome(ctx, nil, v)
	}, &durable.StepOpts{Retry: t.opts.Retry, Timeout: t.opts.Timeout})
}

// outcome turns a tool's result into what is recorded: inline text, or a
// reference to the blob store for a large one.
func (rs *runState) outcome(ctx context.Context, tx pgx.Tx, v any) (toolOutcome, error) {
	s, err := resultText(v)
	if err != nil {
		return toolOutcome{Content: "The tool's result could not be encoded: " + err.Error(), IsError: true}, nil
	}
	store := rs.a.cfg.Blobs
	if store == nil || len(s) <= rs.a.cfg.BlobThreshold {
		return toolOutcome{Content: s}, nil
	}
	var ref BlobRef
	if ts, ok := store.(TxBlobStore); ok && tx != nil {
		ref, err = ts.PutTx(ctx, tx, []byte(s))
	} else {
		ref, err = store.Put(ctx, []byte(s))
	}
	if err != nil {
		return toolOutcome{}, err
	}
	return toolOutcome{Ref: &ref}, nil
}

// settle turns a call that failed for good into a result the model sees,
// unless the tool says FailRun. Errors of the run itself (shutdown,
// fencing, cancellation) pass through.
func (rs *runState) settle(p *callPlan, o toolOutcome, err error) (toolOutcome, error) {
	if err == nil {
		return o, nil
	}
	var se *durable.StepError
	var cf *childFailed
	var cause error
	switch {
	case errors.As(err, &se):
		cause = se.Err
	case errors.As(err, &cf):
		cause = cf.err
	default:
		return o, err
	}
	if p.tool.opts.FailRun {
		return o, fmt.Errorf("agentkit: agent %q run %q: tool %q call %q failed: %w", rs.a.name, rs.runID, p.call.Name, p.call.ID, err)
	}
	return toolOutcome{Content: "The tool failed: " + cause.Error(), IsError: true}, nil
}

// continueAsNew ends the run and starts its continuation with a compacted
// history.
func (rs *runState) continueAsNew(turn int) (Result, error) {
	c := rs.a.cfg.Continue
	ask := UserMessage(c.SummaryPrompt)
	resp, refused, err := rs.call(turn, "compact", &ask, false)
	if err != nil {
		return Result{}, err
	}
	if refused != "" {
		return rs.finish(refused, "", nil), nil
	}
	rs.usage = rs.usage.Add(resp.Usage)
	summary := resp.Message.Text()
	msgs := []Message{rs.hist[0], UserMessage(fmt.Sprintf("Summary of the work so far (run %s):\n%s", rs.runID, summary))}
	msgs = append(msgs, keepTurns(rs.hist[rs.start:], c.KeepTurns)...)
	gen := rs.in.Generation + 1
	chain := cmp.Or(rs.in.ChainID, rs.runID)
	lim := rs.lim
	next := Input{Messages: msgs, Limits: &lim, Spent: rs.spent(), PreviousRunID: rs.runID, Generation: gen,
		ChainID: chain, Metadata: rs.in.Metadata}
	h, err := rs.a.wf.StartChild(rs.wctx, next, &durable.StartOpts{ID: fmt.Sprintf("%s/cont-%d", chain, gen)})
	if err != nil {
		return Result{}, err
	}
	rs.emit(Event{Type: EventCompacted, Turn: turn, Text: summary, NextRunID: h.ID()})
	return rs.finishNext(h.ID()), nil
}

func (rs *runState) finishNext(next string) Result {
	res := Result{Outcome: OutcomeContinued, Turns: rs.turns, Usage: rs.usage, Spent: rs.spent(), RunID: rs.runID,
		PreviousRunID: rs.in.PreviousRunID, NextRunID: next}
	if rs.a.cfg.ReturnMessages {
		res.Messages = rs.hist[rs.start:]
	}
	u := res.Usage
	rs.emit(Event{Type: EventDone, Outcome: OutcomeContinued, Usage: &u, NextRunID: next})
	rs.closeEvents()
	return res
}

func (rs *runState) shouldContinue() bool {
	c := rs.a.cfg.Continue
	if rs.turns == 0 {
		return false // every run makes progress
	}
	return (c.AfterTurns > 0 && rs.turns >= c.AfterTurns) || (c.AfterBytes > 0 && rs.size >= c.AfterBytes)
}

// keepTurns returns the last k turns of msgs (each an assistant message
// and the tool messages after it).
func keepTurns(msgs []Message, k int) []Message {
	if k <= 0 {
		return nil
	}
	var starts []int
	for i, m := range msgs {
		if m.Role == RoleAssistant {
			starts = append(starts, i)
		}
	}
	if len(starts) == 0 {
		return nil
	}
	from := starts[max(len(starts)-k, 0)]
	return append([]Message(nil), msgs[from:]...)
}
