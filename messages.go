package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/sysdb"
)

// ErrWorkflowFinished: the workflow already finished, so it can no longer
// receive messages.
var ErrWorkflowFinished = errors.New("durable: workflow already finished")

// SendOpts are options of one message send.
type SendOpts struct {
	// IdempotencyKey makes a retried send deliver once: a second send with
	// the same key to the same workflow is a no-op. Inside a workflow, use
	// [SendStep], which derives it from the step.
	IdempotencyKey string
}

// Send sends msg to the workflow id on topic. The message is stored, so it
// is received even if the receiver's process is down now. It fails with
// [ErrWorkflowNotFound] or [ErrWorkflowFinished].
func Send[T any](ctx context.Context, e *Engine, id, topic string, msg T, opts *SendOpts) error {
	return send(ctx, e.q, e.wq, e.cfg.MaxPayloadBytes, e.pool, id, topic, msg, opts)
}

// SendTx is [Send] inside the caller's transaction: the message exists if
// and only if tx commits.
func SendTx[T any](ctx context.Context, e *Engine, tx pgx.Tx, id, topic string, msg T, opts *SendOpts) error {
	if tx == nil {
		return fmt.Errorf("%w: SendTx needs a transaction", ErrInvalidArgument)
	}
	return send(ctx, e.q, e.wq, e.cfg.MaxPayloadBytes, tx, id, topic, msg, opts)
}

// SendStep sends a message from workflow code, as a recorded step whose
// idempotency key makes the send happen once across retries and replays.
func SendStep[T any](wctx Context, id, topic string, msg T) error {
	if err := checkName("workflow ID", id); err != nil {
		return err
	}
	if err := checkName("topic", topic); err != nil {
		return err
	}
	r := wctx.workflowRun()
	_, err := step(wctx, "durable.send:"+topic, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, send(ctx, r.e.q, r.e.wq, r.e.cfg.MaxPayloadBytes, r.e.pool, id, topic, msg, &SendOpts{IdempotencyKey: IdempotencyKey(ctx)})
	}, nil)
	return err
}

// send stores msg for run id on topic through db (an engine's or a
// client's), with the statements qs and wq; limit bounds its encoding.
func send(ctx context.Context, qs *sysdb.Queries, wq *sysdb.WaitQueries, limit int, db sysdb.DBTX, id, topic string, msg any, opts *SendOpts) error {
	if err := checkName("workflow ID", id); err != nil {
		return err
	}
	if err := checkName("topic", topic); err != nil {
		return err
	}
	var key string
	if opts != nil && opts.IdempotencyKey != "" {
		if err := checkName("idempotency key", opts.IdempotencyKey); err != nil {
			return err
		}
		key = opts.IdempotencyKey
	}
	payload, err := encodeArg(msg, limit, "message on topic %q", topic)
	if err != nil {
		return err
	}
	sent, err := wq.Send(ctx, db, sysdb.SendParams{WorkflowID: id, Topic: topic, Payload: payload, IdempotencyKey: key})
	if err != nil {
		return fmt.Errorf("durable: send to workflow %q topic %q: %w", id, topic, err)
	}
	if !sent.Found {
		if _, err := readRun(ctx, qs, db, id); err != nil {
			return err
		}
		return fmt.Errorf("%w: cannot send to %q on topic %q", ErrWorkflowFinished, id, topic)
	}
	return nil
}

type received struct {
	OK  bool            `json:"ok"`
	Msg json.RawMessage `json:"msg,omitempty"`
}

// Recv waits up to timeout for the next message on topic sent to the
// calling workflow, and consumes it: each message is received once, in the
// order sent (per topic). ok is false when the timeout passed first. The
// deadline is recorded, so it holds across restarts; a wait longer than
// Config.ParkThreshold parks the run until the message or the deadline.
func Recv[T any](wctx Context, topic string, timeout time.Duration) (msg T, ok bool, err error) {
	if timeout < 0 {
		return msg, false, fmt.Errorf("%w: Recv with a negative timeout %v", ErrInvalidArgument, timeout)
	}
	return recv[T](wctx, topic, func(now time.Time) time.Time { return now.Add(timeout) })
}

// RecvUntil is Recv with a deadline instead of a timeout: it waits until
// deadline, on the engine's clock (a test's clock under durabletest), for
// the next message on topic. A deadline in the past receives only a
// message already there. Like Recv's, the deadline is recorded the first
// time, so a replay waits for the recorded one.
func RecvUntil[T any](wctx Context, topic string, deadline time.Time) (msg T, ok bool, err error) {
	return recv[T](wctx, topic, func(time.Time) time.Time { return deadline })
}

// recv is Recv and RecvUntil: deadlineAt computes the wait's deadline from
// the engine clock's time, when it is first recorded.
func recv[T any](wctx Context, topic string, deadlineAt func(now time.Time) time.Time) (msg T, ok bool, err error) {
	if err := checkName("topic", topic); err != nil {
		return msg, false, err
	}
	r := wctx.workflowRun()
	deadline, err := step(wctx, "durable.recv-deadline:"+topic, func(context.Context) (time.Time, error) {
		return deadlineAt(r.e.clock.now()), nil
	}, &StepOpts{Retry: noRetry})
	if err != nil {
		return msg, false, err
	}
	name := "durable.recv:" + topic
	pos, rec, err := r.begin(name)
	if err != nil {
		return msg, false, err
	}
	if rec == nil {
		ws := r.trace().recv(topic, deadline)
		defer func() { ws.end(err) }()
		started := r.e.clock.now()
		waiting := false // the wait topic is recorded
		for {
			w := r.e.hub.Subscribe("m:" + r.id)
			out, got, err := r.receive(pos, name, func(ctx context.Context) ([]byte, error) {
				return r.e.wq.Receive(ctx, r.e.pool, sysdb.ReceiveParams{WorkflowID: r.id, Epoch: r.epoch, Topic: topic, Pos: pos, Name: name, StartedAt: started})
			})
			if err != nil || got {
				r.e.hub.Unsubscribe("m:"+r.id, w)
				if err != nil {
					return msg, false, err
				}
				if waiting {
					r.unmarkWaiting(topic)
				}
				rec = &stepRecord{pos: pos, name: name, status: stepDone, output: out}
				break
			}
			remaining := r.e.clock.until(deadline)
			if remaining <= 0 {
				r.e.hub.Unsubscribe("m:"+r.id, w)
				out, _ := json.Marshal(received{})
				if err := r.checkpoint(pos, name, stepDone, out, nil, 1, started); err != nil {
					return msg, false, err
				}
				if waiting {
					r.unmarkWaiting(topic)
				}
				rec = &stepRecord{pos: pos, name: name, status: stepDone, output: out}
				break
			}
			if r.e.parks(remaining) {
				r.e.hub.Unsubscribe("m:"+r.id, w)
				return msg, false, r.park(deadline, waitOn{topic: topic})
			}
			if !waiting {
				r.markWaiting(topic)
				waiting = true
			}
			err = r.waitFor(w.Done(), deadline)
			r.e.hub.Unsubscribe("m:"+r.id, w)
			if err != nil {
				return msg, false, err
			}
		}
		ws.end(nil)
		ws = nil // ended: the deferred end does nothing
	}
	got, err := replay[received](r, rec)
	if err != nil || !got.OK {
		return msg, false, err
	}
	if err := json.Unmarshal(got.Msg, &msg); err != nil {
		return msg, false, r.halt(&DecodeError{WorkflowID: r.id, What: fmt.Sprintf("message on topic %q", topic), Err: err})
	}
	return msg, true, nil
}

// receive tries to consume one message and record it at pos, with take
// (a Receive or a ReceiveAny).
func (r *run) receive(pos int, name string, take func(ctx context.Context) ([]byte, error)) ([]byte, bool, error) {
	var out []byte
	err := r.retryDB("receive", func(ctx context.Context) error {
		var err error
		out, err = take(ctx)
		return err
	})
	if err != nil {
		if h := r.halted(); h != nil {
			return nil, false, h
		}
		return nil, false, r.halt(err)
	}
	if out != nil {
		return out, true, nil
	}
	// Nothing consumed: no message yet, or we lost the run, or the step was
	// recorded by an earlier try whose answer was lost.
	own, err := r.e.lq.OwnershipCheck(r.e.hardCtx, r.e.pool, sysdb.OwnershipCheckParams{WorkflowID: r.id, Pos: pos})
	if err != nil {
		return nil, false, nil // look again on the next round
	}
	if own.Epoch != r.epoch || own.Status != string(StatusPending) {
		return nil, false, r.diagnose(pos, name, false)
	}
	if own.StepStatus != nil {
		output, err := recordedOutput(r, pos)
		return output, err == nil, err
	}
	return nil, false, nil
}

// waitFor waits for ch, the engine's clock to reach wake, the polling
// period, the engine stopping or the run's context ending.
func (r *run) waitFor(ch <-chan struct{}, wake time.Time) error {
	if r.e.clock.fake != nil {
		return r.e.clock.wait(r, ch, wake, r.e.listener.interval())
	}
	t := time.NewTimer(min(time.Until(wake), r.e.listener.interval()))
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-r.e.stopping:
		return r.halt(fmt.Errorf("workflow %q: %w", r.id, ErrShutdown))
	case <-r.ctx.Done():
		return r.interrupted()
	}
	return nil
}

// SetEvent publishes value under key for the calling workflow: the latest
// value per key, readable from any process with [GetEvent]. It is a
// recorded step, published once.
func SetEvent[T any](wctx Context, key string, value T) error {
	if err := checkName("event key", key); err != nil {
		return err
	}
	r := wctx.workflowRun()
	name := "durable.event:" + key
	pos, rec, err := r.begin(name)
	if err != nil || rec != nil {
		return err
	}
	b, err := encodeArg(value, r.e.cfg.MaxPayloadBytes, "event %q", key)
	if err != nil {
		return err
	}
	started := r.e.clock.now()
	var written bool
	err = r.retryDB("set event", func(ctx context.Context) error {
		var err error
		written, err = r.e.wq.SetEvent(ctx, r.e.pool, sysdb.SetEventParams{WorkflowID: r.id, Epoch: r.epoch, Pos: pos, Name: name, Key: key, Value: b, StartedAt: started})
		return err
	})
	if err != nil {
		if h := r.halted(); h != nil {
			return h
		}
		return r.halt(err)
	}
	if !written {
		return r.diagnose(pos, name, false)
	}
	return nil
}

// GetEvent returns the latest value of the workflow's event key, waiting
// up to timeout for it to be set (woken by a notification). ok is false
// when the timeout passed, or the workflow finished, without the key set.
func GetEvent[T any](ctx context.Context, e *Engine, id, key string, timeout time.Duration) (value T, ok bool, err error) {
	raw, ok, err := engineWatcher(e).event(ctx, id, key, timeout)
	if err != nil || !ok || raw == nil {
		return value, ok, err
	}
	if err := json.Unmarshal(raw, &value); err != nil {
		return value, false, &DecodeError{WorkflowID: id, What: fmt.Sprintf("event %q", key), Err: err}
	}
	return value, true, nil
}

// markWaiting records that the run blocks in memory on topic, for
// WorkflowInfo.WaitTopic. It is called only once a Recv found no message,
// off the path of a message that is already there. A failure only costs
// the listing its topic, so it is logged, not returned.
func (r *run) markWaiting(topic string) {
	if _, err := r.e.wq.SetWaitTopic(r.e.hardCtx, r.e.pool, sysdb.WaitTopicParams{ID: r.id, Epoch: r.epoch, Topic: topic}); err != nil {
		r.e.log.Warn("durable: record wait topic", "workflow_id", r.id, "topic", topic, "error", err)
	}
}

// unmarkWaiting clears what markWaiting recorded once the wait is over.
func (r *run) unmarkWaiting(topic string) {
	if _, err := r.e.wq.ClearWaitTopic(r.e.hardCtx, r.e.pool, sysdb.WaitTopicParams{ID: r.id, Epoch: r.epoch, Topic: topic}); err != nil {
		r.e.log.Warn("durable: clear wait topic", "workflow_id", r.id, "topic", topic, "error", err)
	}
}
