package agentkit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/durable-go/durable"
)

// call makes the model call of turn: `of` is the turn's number (or
// "compact" for the summary asked before continuing, with extra appended
// to the history). With Limits.Reserve the call is reserved first and
// settled after; a reservation that does not fit returns the limit's
// outcome and makes no call.
func (rs *runState) call(turn int, of string, extra *Message, withTools bool) (*Response, Outcome, error) {
	name := modelStepPrefix + of
	if extra != nil {
		name = "agentkit." + of
	}
	var h hold
	if rs.lim.Reserve {
		var err error
		if h, err = rs.reserveCall(of, extra, withTools); err != nil || h.Refused != nil {
			if h.Refused != nil {
				return nil, h.Refused.Outcome, nil
			}
			return nil, "", err
		}
	}
	resp, live, err := rs.model(turn, name, extra, withTools, h.Output)
	if k := rs.a.knobs.AfterModel; err == nil && k != nil && extra == nil {
		k(rs.runID, turn, live)
	}
	if rs.lim.Reserve {
		var used Usage
		if err == nil {
			used = resp.Usage
		}
		// A failed call is settled too (using nothing), so its hold does
		// not keep budget from the run's next calls and its sub-agents.
		if serr := settleStep(rs.wctx, rs.a.budgets, of, h, rs.runID+"/"+of, used, err); serr != nil && err == nil {
			return nil, "", serr
		}
	}
	return resp, "", err
}

// model runs a model call as the step name. extra is appended to the
// history (the summary request). maxOut, when positive, is the call's
// maximum output tokens (what its reservation holds).
func (rs *runState) model(turn int, name string, extra *Message, withTools bool, maxOut int64) (*Response, bool, error) {
	a := rs.a
	hist := rs.hist
	live := false
	resp, err := durable.Step(rs.wctx, name, func(ctx context.Context) (*Response, error) {
		live = true
		req := &Request{MaxOutputTokens: a.cfg.MaxOutputTokens, Temperature: a.cfg.Temperature}
		if maxOut > 0 {
			req.MaxOutputTokens = int(maxOut)
		}
		if a.cfg.System != "" {
			req.Messages = append(req.Messages, SystemMessage(a.cfg.System))
		}
		req.Messages = append(req.Messages, hist...)
		if extra != nil {
			req.Messages = append(req.Messages, *extra)
		}
		if withTools {
			req.Tools = rs.specs
		}
		if out := a.cfg.Output; out != nil && withTools {
			req.ResponseFormat = &ResponseFormat{Name: out.name, Schema: out.schema}
		}
		if err := rs.hydrate(ctx, req.Messages); err != nil {
			return nil, err
		}
		var resp *Response
		var err error
		if sm, ok := a.cfg.Model.(StreamingModel); ok && a.cfg.Stream {
			info, _ := durable.StepInfoFrom(ctx)
			rs.emitStep(ctx, Event{Type: EventModelAttempt, Turn: turn, Attempt: info.Attempt})
			b := &deltaBatch{every: a.cfg.DeltaInterval, write: func(d *Delta) {
				rs.emitStep(ctx, Event{Type: EventDelta, Turn: turn, Delta: d})
			}}
			resp, err = sm.GenerateStream(ctx, req, b.add)
			b.flush()
		} else {
			resp, err = a.cfg.Model.Generate(ctx, req)
		}
		if err != nil {
			return nil, modelStepError(ctx, err)
		}
		if resp == nil {
			return nil, errors.New("agentkit: the model returned no response and no error")
		}
		resp.Message.Role = RoleAssistant
		resp.Usage.Requests = max(resp.Usage.Requests, 1)
		if a.cfg.Pricing != nil && resp.Usage.CostMicros == 0 {
			resp.Usage.CostMicros = a.cfg.Pricing(resp.Model, resp.Usage)
		}
		return resp, nil
	}, a.modelOpts)
	if err != nil {
		return nil, false, fmt.Errorf("agentkit: agent %q run %q turn %d: %w", a.name, rs.runID, turn, err)
	}
	return resp, live, nil
}

// modelStepError makes a model error fit the step's retry policy: a
// non-retryable one stops retries; a retryable one waits what the provider
// asked for first.
func modelStepError(ctx context.Context, err error) error {
	var me *ModelError
	if !errors.As(err, &me) {
		return err
	}
	if !me.Retryable {
		return durable.Permanent(err)
	}
	if me.RetryAfter > 0 {
		t := time.NewTimer(min(me.RetryAfter, retryAfterMax))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return err
}

// hydrate loads the parts stored by reference, in place (msgs is the
// request's own copy of the slice; parts slices are copied before change).
func (rs *runState) hydrate(ctx context.Context, msgs []Message) error {
	for i, m := range msgs {
		var parts []Part
		for j, p := range m.Parts {
			if p.Ref == nil || p.Text != "" {
				continue
			}
			if rs.a.cfg.Blobs == nil {
				return durable.Permanent(fmt.Errorf("agentkit: agent %q: the history refers to blob %s but AgentConfig.Blobs is nil", rs.a.name, p.Ref.SHA256))
			}
			data, err := rs.a.cfg.Blobs.Get(ctx, *p.Ref)
			if errors.Is(err, ErrBlobNotFound) {
				return durable.Permanent(err) // pruned: waiting will not bring it back
			}
			if err != nil {
				return err
			}
			if parts == nil {
				parts = append([]Part(nil), m.Parts...)
			}
			parts[j].Text = string(data)
		}
		if parts != nil {
			msgs[i].Parts = parts
		}
	}
	return nil
}
