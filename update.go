package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// An update is a request to a running workflow that waits for its reply:
// the request is a message (stored, delivered once by its update ID), the
// workflow takes it with HandleUpdate, and the reply is an event keyed by
// the update ID (a recorded step, published once). Both ends ride on the
// machinery of messages and events, so an update survives the crash of
// either side.

// updatePrefix starts the topic of an update's requests and the key of
// its reply.
const updatePrefix = "durable.update:"

// UpdateTimeoutDefault is how long [Update] waits for the reply by
// default.
const UpdateTimeoutDefault = time.Minute

// ErrUpdateRejected: the workflow's validator refused an update. See
// [HandleUpdate].
var ErrUpdateRejected = errors.New("durable: update rejected")

// UpdateOpts are options of one update.
type UpdateOpts struct {
	// ID identifies the update. An Update retried with the same ID (after
	// a timeout, or from another process) is delivered once and gets the
	// same reply. Defaults to a new UUID.
	ID string
	// Timeout bounds the wait for the reply. The update stays delivered
	// when it passes: waiting again with the same ID gets the reply.
	// Defaults to UpdateTimeoutDefault.
	Timeout time.Duration
}

// UpdateError is the reply of an update that the workflow refused (its
// validator) or whose handler failed. It matches [ErrUpdateRejected] when
// Rejected; Err is the workflow's error as recorded ([*RecordedError]).
type UpdateError struct {
	WorkflowID string
	Name       string // the update's name
	UpdateID   string
	Rejected   bool
	Err        error
}

func (e *UpdateError) Error() string {
	what := "failed"
	if e.Rejected {
		what = "was rejected"
	}
	return fmt.Sprintf("durable: update %q (%s) of workflow %q %s: %v", e.Name, e.UpdateID, e.WorkflowID, what, e.Err)
}

func (e *UpdateError) Unwrap() error { return e.Err }

func (e *UpdateError) Is(target error) bool { return e.Rejected && target == ErrUpdateRejected }

// updateRequest is the message of an update.
type updateRequest struct {
	ID  string          `json:"id"`
	Req json.RawMessage `json:"req"`
}

// updateReply is the event that answers an update.
type updateReply struct {
	Resp     json.RawMessage `json:"resp,omitempty"`
	Err      *RecordedError  `json:"error,omitempty"`
	Rejected bool            `json:"rejected,omitempty"`
}

// Update sends req to run id as an update named name and waits for the
// workflow's reply ([HandleUpdate]): its handler's result, or an
// [*UpdateError] when its validator refused the request or its handler
// failed. The request is stored, so a run that is parked or whose process
// is down gets it when it runs again; it fails with [ErrWorkflowNotFound]
// or [ErrWorkflowFinished] when the run cannot take it, and with an error
// matching context.DeadlineExceeded when no reply came within the timeout
// (the update stays delivered: call again with the same UpdateOpts.ID to
// keep waiting). opts may be nil.
func Update[Req, Resp any](ctx context.Context, e *Engine, id, name string, req Req, opts *UpdateOpts) (Resp, error) {
	return update[Resp](ctx, id, name, req, opts,
		func(ctx context.Context, topic string, msg any, so *SendOpts) error {
			return send(ctx, e.q, e.wq, e.cfg.MaxPayloadBytes, e.pool, id, topic, msg, so)
		},
		func(ctx context.Context, key string, timeout time.Duration) (json.RawMessage, bool, error) {
			return engineWatcher(e).event(ctx, id, key, timeout)
		},
		func(ctx context.Context) (*runInfo, error) { return readRun(ctx, e.q, e.pool, id) })
}

// ClientUpdate is [Update] through a [Client], from a process that runs
// no engine.
func ClientUpdate[Req, Resp any](ctx context.Context, c *Client, id, name string, req Req, opts *UpdateOpts) (Resp, error) {
	out, err := update[Resp](ctx, id, name, req, opts,
		func(ctx context.Context, topic string, msg any, so *SendOpts) error {
			return send(ctx, c.q, c.wq, c.cfg.MaxPayloadBytes, c.pool, id, topic, msg, so)
		},
		func(ctx context.Context, key string, timeout time.Duration) (json.RawMessage, bool, error) {
			return c.watcher().event(ctx, id, key, timeout)
		},
		func(ctx context.Context) (*runInfo, error) { return readRun(ctx, c.q, c.pool, id) })
	return out, c.hint(err)
}

// UpdateWithStart starts a run of w (or finds the existing run of
// start.ID, which it should set: see [StartOpts].ID) and sends it the
// update, as [Update]: for a request that must reach a run whether or not
// it is already running.
func UpdateWithStart[P, R, Req, Resp any](ctx context.Context, w *Workflow[P, R], in P, start *StartOpts, name string, req Req, opts *UpdateOpts) (*Handle[R], Resp, error) {
	var zero Resp
	h, err := w.Start(ctx, in, start)
	if err != nil {
		return nil, zero, err
	}
	out, err := Update[Req, Resp](ctx, w.e, h.ID(), name, req, opts)
	return h, out, err
}

func update[Resp any](ctx context.Context, id, name string, req any, opts *UpdateOpts,
	sendTo func(ctx context.Context, topic string, msg any, so *SendOpts) error,
	event func(ctx context.Context, key string, timeout time.Duration) (json.RawMessage, bool, error),
	read func(ctx context.Context) (*runInfo, error),
) (Resp, error) {
	var zero Resp
	var o UpdateOpts
	if opts != nil {
		o = *opts
	}
	if err := checkUpdateName(name); err != nil {
		return zero, err
	}
	if o.Timeout < 0 {
		return zero, fmt.Errorf("%w: UpdateOpts.Timeout %v is negative", ErrInvalidArgument, o.Timeout)
	}
	if o.ID == "" {
		o.ID = uuid.NewString()
	}
	if err := checkName("update ID", updatePrefix+o.ID); err != nil {
		return zero, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return zero, fmt.Errorf("%w: update %q: encode the request: %w", ErrInvalidArgument, name, err)
	}
	// The send is deduplicated on the update ID: a retried Update delivers
	// its request once.
	if err := sendTo(ctx, updatePrefix+name, updateRequest{ID: o.ID, Req: body}, &SendOpts{IdempotencyKey: updatePrefix + o.ID}); err != nil {
		return zero, fmt.Errorf("durable: update %q of workflow %q: %w", name, id, err)
	}
	raw, ok, err := event(ctx, updatePrefix+o.ID, cmpDuration(o.Timeout, UpdateTimeoutDefault))
	if err != nil {
		return zero, err
	}
	if !ok {
		if info, rerr := read(ctx); rerr == nil && info.status.Finished() {
			return zero, fmt.Errorf("durable: update %q (%s) of workflow %q: the run finished without a reply: %w", name, o.ID, id, ErrWorkflowFinished)
		}
		return zero, fmt.Errorf("durable: update %q (%s) of workflow %q: no reply within %v (it stays delivered): %w", name, o.ID, id,
			cmpDuration(o.Timeout, UpdateTimeoutDefault), context.DeadlineExceeded)
	}
	var rep updateReply
	if err := json.Unmarshal(raw, &rep); err != nil {
		return zero, &DecodeError{WorkflowID: id, What: fmt.Sprintf("reply to update %q", name), Err: err}
	}
	if rep.Err != nil {
		return zero, &UpdateError{WorkflowID: id, Name: name, UpdateID: o.ID, Rejected: rep.Rejected, Err: rep.Err}
	}
	var out Resp
	if err := json.Unmarshal(rep.Resp, &out); err != nil {
		return zero, &DecodeError{WorkflowID: id, What: fmt.Sprintf("reply to update %q", name), Err: err}
	}
	return out, nil
}

func cmpDuration(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func checkUpdateName(name string) error {
	if err := checkName("update name", name); err != nil {
		return err
	}
	return checkName("update name", updatePrefix+name)
}

// HandleUpdate waits up to timeout for the next update named name sent
// to the calling run ([Update]) and handles it. validate, if not nil,
// checks the request first, in workflow code (deterministic, no I/O): its
// error rejects the update (the caller gets an [*UpdateError] matching
// [ErrUpdateRejected]) and handle is not called. handle is workflow code
// (it may run steps and waits); its result, or its error, is the reply.
// The request is received once (a recorded wait, as [Recv]) and the reply
// is a recorded step, so across crashes the update is handled once and
// its caller gets one reply. handled is false when the timeout passed
// without an update. Updates of one name are handled in the order sent.
func HandleUpdate[Req, Resp any](wctx Context, name string, timeout time.Duration, validate func(Req) error,
	handle func(wctx Context, req Req) (Resp, error)) (handled bool, err error) {
	if err := checkUpdateName(name); err != nil {
		return false, err
	}
	if handle == nil {
		return false, fmt.Errorf("%w: update %q has no handler", ErrInvalidArgument, name)
	}
	u, ok, err := Recv[updateRequest](wctx, updatePrefix+name, timeout)
	if err != nil || !ok {
		return false, err
	}
	var req Req
	if err := json.Unmarshal(u.Req, &req); err != nil {
		return true, replyUpdate(wctx, u.ID, nil, fmt.Errorf("%w: decode the request of update %q: %w", ErrInvalidArgument, name, err), true)
	}
	if validate != nil {
		if err := validate(req); err != nil {
			return true, replyUpdate(wctx, u.ID, nil, err, true)
		}
	}
	// A handler cut short by a park or a shutdown has its halt as err: the
	// reply's step refuses to record anything for a halted run, so the
	// run replies when it runs again.
	resp, err := handle(wctx, req)
	if err != nil {
		return true, replyUpdate(wctx, u.ID, nil, err, false)
	}
	body, err := encodePayload(resp, wctx.workflowRun().e.cfg.MaxPayloadBytes, "reply to update %q", name)
	if err != nil {
		return true, replyUpdate(wctx, u.ID, nil, err, false)
	}
	return true, replyUpdate(wctx, u.ID, body, nil, false)
}

// replyUpdate publishes the reply to update id.
func replyUpdate(wctx Context, id string, resp json.RawMessage, err error, rejected bool) error {
	rep := updateReply{Resp: resp, Rejected: rejected}
	if err != nil {
		rep.Err = decodeError(encodeError(err)).(*RecordedError)
	}
	return SetEvent(wctx, updatePrefix+id, rep)
}
