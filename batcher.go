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

// BatchOpts shape the batches of a [Batcher].
type BatchOpts struct {
	// MaxItems starts a batch as soon as it holds this many items.
	// Required: at least 1.
	MaxItems int
	// MaxWait starts a batch this long after its first item, however few
	// it holds. Required.
	MaxWait time.Duration
}

// BatchAddOpts are options of one [Batcher.Add].
type BatchAddOpts struct {
	// Key gathers items into batches per key (a tenant, a destination):
	// items of different keys never share a batch. Defaults to "": one
	// batch at a time for the whole queue.
	Key string
	// PartitionKey, Priority and Tags are those of a batch the item opens
	// ([EnqueueOpts]); a batch keeps the ones of its first item.
	PartitionKey string
	Priority     int
	Tags         map[string]string
}

// BatchItem is where an added item went: the run of its batch, and the
// item's position in that run's input.
type BatchItem[R any] struct {
	Run   *Handle[R]
	Index int
}

// Batcher gathers items, added one at a time from any process, into runs
// of a workflow that takes them all at once: up to MaxItems per run, or
// what arrived within MaxWait of the first. Each item goes into exactly
// one run, across processes; a run is a run of the workflow like any
// other (queued, claimed within its queue's limits, resumed after a
// crash), whose input is its items in the order they were added.
type Batcher[T, R any] struct {
	w    *Workflow[[]T, R]
	opts BatchOpts
}

// batchKeyPrefix keeps a batch's key apart from debounce keys of the
// same queue: a batch is held by "batch:" and its Key.
const batchKeyPrefix = "batch:"

// NewBatcher returns the Batcher of workflow w with opts; an invalid opts
// is an error wrapping [ErrInvalidArgument].
func NewBatcher[T, R any](w *Workflow[[]T, R], opts BatchOpts) (*Batcher[T, R], error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	return &Batcher[T, R]{w: w, opts: opts}, nil
}

func (opts BatchOpts) check() error {
	switch {
	case opts.MaxItems < 1:
		return fmt.Errorf("%w: BatchOpts.MaxItems must be at least 1", ErrInvalidArgument)
	case opts.MaxWait <= 0 || opts.MaxWait > MaxDebounceWindow:
		return fmt.Errorf("%w: BatchOpts.MaxWait must be positive and at most a year", ErrInvalidArgument)
	}
	return nil
}

// Add puts item into the open batch of its key on queue q, or opens one.
func (b *Batcher[T, R]) Add(ctx context.Context, q *Queue, item T, opts *BatchAddOpts) (BatchItem[R], error) {
	var res BatchItem[R]
	err := pgx.BeginFunc(ctx, b.w.e.pool, func(tx pgx.Tx) error {
		var err error
		res, err = b.add(ctx, tx, q, item, opts, !b.w.e.cfg.PollOnly)
		return err
	})
	if err == nil {
		b.w.e.queues.ready(q)
	}
	return res, err
}

// AddTx is Add inside the caller's transaction tx: the item is in its
// batch if and only if tx commits. It locks the open batch until then,
// which the other adds to that batch wait for: keep tx short.
func (b *Batcher[T, R]) AddTx(ctx context.Context, tx pgx.Tx, q *Queue, item T, opts *BatchAddOpts) (BatchItem[R], error) {
	if tx == nil {
		return BatchItem[R]{}, fmt.Errorf("%w: AddTx needs a transaction", ErrInvalidArgument)
	}
	return b.add(ctx, tx, q, item, opts, !b.w.e.cfg.PollOnly)
}

func (b *Batcher[T, R]) add(ctx context.Context, tx pgx.Tx, q *Queue, item T, opts *BatchAddOpts, notify bool) (BatchItem[R], error) {
	if q == nil {
		return BatchItem[R]{}, fmt.Errorf("%w: Add needs a queue", ErrInvalidArgument)
	}
	id, index, err := addToBatch(ctx, engineSubmitter(b.w.e), tx, b.w.def.name, q.name, []T{item}, b.opts, opts, notify)
	if err != nil {
		return BatchItem[R]{}, err
	}
	return BatchItem[R]{Run: &Handle[R]{e: b.w.e, id: id}, Index: index}, nil
}

// addToBatch puts the item (encoded alone as a one-item list, first) into
// the open batch of workflow name on queue, in tx, or opens one; it
// returns the batch's run ID and the item's index in its input.
func addToBatch(ctx context.Context, s submitter, tx pgx.Tx, name, queue string, first any, bo BatchOpts, opts *BatchAddOpts,
	notify bool) (_ string, index int, err error) {
	var o BatchAddOpts
	if opts != nil {
		o = *opts
	}
	eo := &EnqueueOpts{PartitionKey: o.PartitionKey, Priority: o.Priority}
	if err := eo.check(); err != nil {
		return "", 0, err
	}
	tags, err := encodeTags("BatchAddOpts.Tags", o.Tags)
	if err != nil {
		return "", 0, err
	}
	if o.Key != "" {
		if err := checkName("batch key", o.Key); err != nil {
			return "", 0, err
		}
	}
	for _, n := range []struct{ what, name string }{{"queue name", queue}, {"workflow name", name}} {
		if err := checkName(n.what, n.name); err != nil {
			return "", 0, err
		}
	}
	id, input, err := prepareRun(name, first, "", s.limit)
	if err != nil {
		return "", 0, err
	}
	now := s.clock.now()
	bound := now.Add(bo.MaxWait)
	p := sysdb.DebounceParams{ID: id, Workflow: name, AppVersion: s.appVersion, Input: input, Queue: queue,
		Priority: o.Priority, PartitionKey: o.PartitionKey, Key: batchKeyPrefix + o.Key, Start: bound, StartBound: &bound,
		Notify: notify, Tags: tags}
	if bo.MaxItems == 1 { // a batch of one: full at once
		p.Key, p.Start = "", now
	}
	sp := s.tr.enqueue(ctx, name, id, queue)
	defer func() { sp.end(err) }()
	p.TraceContext = sp.traceparent()
	fail := func(err error) (string, int, error) {
		return "", 0, fmt.Errorf("durable: add to a batch of workflow %q on queue %q: %w", name, queue, err)
	}
	res, err := s.joinQueued(ctx, tx, p, func(held []byte) ([]byte, bool, error) {
		var items, added []json.RawMessage
		if err := json.Unmarshal(held, &items); err != nil {
			return nil, false, fmt.Errorf("the open batch's input is not a list: %w", err)
		}
		if err := json.Unmarshal(input, &added); err != nil || len(added) != 1 {
			return nil, false, fmt.Errorf("the item does not encode as one JSON value: %v", err)
		}
		index = len(items)
		items = append(items, added[0])
		merged, err := encodeArg(items, s.limit, "input of batch workflow %q", name)
		return merged, len(items) >= bo.MaxItems, err
	})
	switch {
	case errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrPayloadTooLarge):
		return "", 0, err
	case err != nil:
		return fail(err)
	case !res.QueueFound:
		return "", 0, queueNotFound(queue)
	case res.ID == "":
		return "", 0, fmt.Errorf("%w: queue %q batch key %q is held by a queued run of another workflow, not %q",
			ErrInvalidArgument, queue, o.Key, name)
	case res.Inserted:
		s.met.started(ctx, name, startEnqueue)
	default:
		sp.existing()
		s.met.joinedRun(ctx, queue, joinBatch)
	}
	return res.ID, index, nil
}

// ClientBatcher is a [Batcher] for a [Client]: items added from a process
// that runs no workflows, into the batches the executors run.
type ClientBatcher[T, R any] struct {
	w    *WorkflowRef[[]T, R]
	opts BatchOpts
}

// ClientBatchItem is where an item added by a [ClientBatcher] went.
type ClientBatchItem[R any] struct {
	Run   *ClientHandle[R]
	Index int
}

// NewClientBatcher returns the batcher of workflow w for its client, as
// [NewBatcher] does for an engine.
func NewClientBatcher[T, R any](w *WorkflowRef[[]T, R], opts BatchOpts) (*ClientBatcher[T, R], error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	return &ClientBatcher[T, R]{w: w, opts: opts}, nil
}

// Add is [Batcher.Add] for a client, on the queue named queue.
func (b *ClientBatcher[T, R]) Add(ctx context.Context, queue string, item T, opts *BatchAddOpts) (ClientBatchItem[R], error) {
	var res ClientBatchItem[R]
	err := pgx.BeginFunc(ctx, b.w.c.pool, func(tx pgx.Tx) error {
		var err error
		res, err = b.add(ctx, tx, queue, item, opts)
		return err
	})
	return res, b.w.c.hint(err)
}

// AddTx is [Batcher.AddTx] for a client.
func (b *ClientBatcher[T, R]) AddTx(ctx context.Context, tx pgx.Tx, queue string, item T, opts *BatchAddOpts) (ClientBatchItem[R], error) {
	if tx == nil {
		return ClientBatchItem[R]{}, fmt.Errorf("%w: AddTx needs a transaction", ErrInvalidArgument)
	}
	res, err := b.add(ctx, tx, queue, item, opts)
	return res, b.w.c.hint(err)
}

func (b *ClientBatcher[T, R]) add(ctx context.Context, tx pgx.Tx, queue string, item T, opts *BatchAddOpts) (ClientBatchItem[R], error) {
	id, index, err := addToBatch(ctx, b.w.c.submitter(), tx, b.w.name, queue, []T{item}, b.opts, opts, !b.w.c.cfg.PollOnly)
	if err != nil {
		return ClientBatchItem[R]{}, err
	}
	h, err := b.w.handle(id, nil)
	return ClientBatchItem[R]{Run: h, Index: index}, err
}
