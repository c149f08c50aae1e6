package durable

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/sysdb"
)

// Debounce collapses repeated enqueues into one run (EnqueueOpts.Debounce):
// a burst of edits to a document indexes it once, a stream of webhooks
// for one customer syncs it once, with the latest input.
type Debounce struct {
	// Key names what is debounced (a document ID, a customer): enqueues of
	// the workflow with the same Key on the queue collapse, while its run
	// is still queued, into that run, across processes. Once the run has
	// started, the next enqueue makes a new run.
	Key string
	// Window is how long the run waits after the latest enqueue: each
	// enqueue within it moves the start to Window after itself. Required.
	Window time.Duration
	// MaxWait bounds the wait from the first enqueue, so that a steady
	// stream of enqueues still starts runs. Defaults to 0: no bound.
	MaxWait time.Duration
	// Merge makes the run's input from the queued run's input and the new
	// one ([MergeInputs] makes one from a typed function). Defaults to nil:
	// the latest input replaces the queued one.
	Merge MergeFunc
}

// MaxDebounceWindow bounds Debounce.Window and Debounce.MaxWait.
const MaxDebounceWindow = 365 * 24 * time.Hour

// MergeFunc merges the encoded input of a queued debounced run with the
// input of a new enqueue, into the run's new input.
type MergeFunc func(queued, next json.RawMessage) (json.RawMessage, error)

// MergeInputs returns the MergeFunc of f, which merges typed inputs: for
// example appending the new event to the queued list.
func MergeInputs[P any](f func(queued, next P) P) MergeFunc {
	return func(queued, next json.RawMessage) (json.RawMessage, error) {
		var a, b P
		if err := json.Unmarshal(queued, &a); err != nil {
			return nil, fmt.Errorf("decode the queued input: %w", err)
		}
		if err := json.Unmarshal(next, &b); err != nil {
			return nil, fmt.Errorf("decode the new input: %w", err)
		}
		return json.Marshal(f(a, b))
	}
}

// check validates d, with the other options of its enqueue o.
func (d *Debounce) check(o *EnqueueOpts) error {
	bad := func(msg string) error { return fmt.Errorf("%w: EnqueueOpts.Debounce: %s", ErrInvalidArgument, msg) }
	if err := checkName("debounce key", d.Key); err != nil {
		return err
	}
	switch {
	case d.Window <= 0:
		return bad("Window must be positive")
	case d.Window > MaxDebounceWindow || d.MaxWait > MaxDebounceWindow:
		return bad("Window and MaxWait must be at most a year")
	case d.MaxWait < 0:
		return bad("MaxWait must not be negative")
	case o.ID != "":
		return bad("set no ID: the debounced run's ID is chosen by its first enqueue")
	case o.DedupID != "":
		return bad("set no DedupID: the debounce key already allows one queued run")
	case !o.NotBefore.IsZero():
		return bad("set no NotBefore: the start is Window after the latest enqueue")
	}
	return nil
}

// debounce puts through db a debounced run of workflow name on queue, or
// collapses it into the queued run holding its key; it returns the run's
// ID. o has been checked; tags are its Tags, encoded.
func (s submitter) debounce(ctx context.Context, db sysdb.DBTX, name, queue string, in any, o *EnqueueOpts, tags json.RawMessage,
	notify bool) (_ string, err error) {
	id, input, err := prepareRun(name, in, "", s.limit)
	if err != nil {
		return "", err
	}
	d := o.Debounce
	now := s.clock.now()
	p := sysdb.DebounceParams{ID: id, Workflow: name, AppVersion: s.appVersion, Input: input, Queue: queue,
		Priority: o.Priority, PartitionKey: o.PartitionKey, Key: d.Key, Start: now.Add(d.Window), Notify: notify, Tags: tags}
	if d.MaxWait > 0 {
		bound := now.Add(d.MaxWait)
		p.StartBound = &bound
	}
	if o.Timeout > 0 {
		deadline := now.Add(o.Timeout)
		p.Deadline = &deadline
	}
	sp := s.tr.enqueue(ctx, name, id, queue)
	defer func() { sp.end(err) }()
	p.TraceContext = sp.traceparent()
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("durable: enqueue workflow %q on queue %q with debounce key %q: %w", name, queue, d.Key, err)
	}
	var res sysdb.DebounceRow
	if d.Merge == nil {
		res, err = s.dq.Upsert(ctx, db, p)
		if err != nil {
			return fail(err)
		}
	} else {
		tx, ok := db.(interface {
			Begin(context.Context) (pgx.Tx, error)
		})
		if !ok {
			return fail(fmt.Errorf("a merge needs a pool or a transaction"))
		}
		err = pgx.BeginFunc(ctx, tx, func(tx pgx.Tx) error {
			res, err = s.joinQueued(ctx, tx, p, func(held []byte) ([]byte, bool, error) {
				merged, err := d.Merge(held, p.Input)
				if err != nil {
					return nil, false, fmt.Errorf("%w: merge: %w", ErrInvalidArgument, err)
				}
				merged, err = encodeArg(merged, s.limit, "merged input of workflow %q", name)
				return merged, false, err
			})
			return err
		})
		if err != nil {
			return fail(err)
		}
	}
	switch {
	case !res.QueueFound:
		return "", queueNotFound(queue)
	case res.ID == "":
		return "", fmt.Errorf("%w: queue %q debounce key %q is held by a queued run of another workflow, not %q",
			ErrInvalidArgument, queue, d.Key, name)
	case res.Inserted:
		s.met.started(ctx, name, startEnqueue)
	default:
		sp.existing()
		s.met.joinedRun(ctx, queue, joinDebounce)
	}
	return res.ID, nil
}

// joinQueued joins p, in tx, to the queued run holding its key: locked
// until tx ends, it takes the input join makes from its own (and starts
// at once, giving its key up, when join says close); or, when no run
// holds the key, inserts p, and joins a run another transaction inserted
// meanwhile on the next try. A key held by a run of another workflow
// gives a row with no ID. Debounce merges and batches share it.
func (s submitter) joinQueued(ctx context.Context, tx pgx.Tx, p sysdb.DebounceParams,
	join func(held []byte) (input []byte, close bool, err error)) (sysdb.DebounceRow, error) {
	p.NoCollapse = true
	for range 3 {
		held, found, err := s.dq.Lock(ctx, tx, p.Queue, p.Key)
		if err != nil {
			return sysdb.DebounceRow{}, err
		}
		if !found {
			res, err := s.dq.Upsert(ctx, tx, p)
			if err != nil || !res.QueueFound || res.Inserted {
				return res, err
			}
			continue // inserted by another enqueue just now: join it
		}
		if held.Workflow != p.Workflow {
			return sysdb.DebounceRow{QueueFound: true}, nil
		}
		input, closed, err := join(held.Input)
		if err != nil {
			return sysdb.DebounceRow{}, err
		}
		if _, err := s.dq.Update(ctx, tx, sysdb.DebounceUpdateParams{ID: held.ID, Input: input, Start: p.Start,
			Deadline: p.Deadline, Close: closed, Notify: p.Notify}); err != nil {
			return sysdb.DebounceRow{}, err
		}
		return sysdb.DebounceRow{QueueFound: true, ID: held.ID}, nil
	}
	return sysdb.DebounceRow{}, fmt.Errorf("the queued run of the key kept changing")
}
