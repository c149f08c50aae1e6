package durable

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/internal/sysdb"
)

// BatchMaxItems bounds the items of one EnqueueMany or StartMany call (and
// of their Tx twins and a [WorkflowRef]'s); a larger batch fails with
// [ErrInvalidArgument]. Split it: every batch is one statement, so a few
// batches of this size cost a few round trips.
const BatchMaxItems = 10_000

// batchMaxBytes bounds the encoded inputs of one batch, well under the
// 1 GiB Postgres takes in one array or one message.
const batchMaxBytes = 256 << 20

// EnqueueItem is one run of an EnqueueMany: its input and its options,
// which are those of a single Enqueue (nil: the defaults).
type EnqueueItem[P any] struct {
	Input P
	Opts  *EnqueueOpts
}

// StartItem is one run of a StartMany: its input and its options, which
// are those of a single StartTx (nil: the defaults).
type StartItem[P any] struct {
	Input P
	Opts  *StartOpts
}

// BatchItemError is the error of one item of a batch (EnqueueMany,
// StartMany and their Tx twins): the item's index and the error a single
// call would have returned for it, which it unwraps to ([ErrInvalidArgument],
// [ErrPayloadTooLarge], a [*ConflictError], a [*DuplicateError]).
type BatchItemError struct {
	Op    string // the method: "EnqueueMany", "StartManyTx", ...
	Index int    // the item's index in the batch
	Err   error
}

func (e *BatchItemError) Error() string {
	return fmt.Sprintf("durable: %s item %d: %s", e.Op, e.Index, strings.TrimPrefix(e.Err.Error(), "durable: "))
}

func (e *BatchItemError) Unwrap() error { return e.Err }

// EnqueueMany puts a run of w on queue q for each item, in one statement,
// and returns their handles in the order of items. Each item is treated as
// a single [Workflow.Enqueue] of it would be, in item order: an existing
// ID with the same input gives that run, a dedup ID taken (by an existing
// run or an earlier item) gives the holder's run with DedupReturnExisting.
//
// The batch is all or nothing: it runs in a transaction of its own, and
// an item that a single Enqueue would refuse (a bad option, an ID of
// another input: a [*ConflictError], a dedup ID taken: a
// [*DuplicateError]) fails it as a [*BatchItemError] naming the item, with
// no run of the batch written. Two items with one ID are refused. An empty
// batch returns nil without a statement; one over [BatchMaxItems] is
// refused. Dispatchers are woken once, after the commit.
func (w *Workflow[P, R]) EnqueueMany(ctx context.Context, q *Queue, items []EnqueueItem[P]) ([]*Handle[R], error) {
	if q == nil {
		return nil, fmt.Errorf("%w: EnqueueMany needs a queue", ErrInvalidArgument)
	}
	ids, err := enqueueMany(ctx, engineSubmitter(w.e), "EnqueueMany", w.e.pool, nil, w.def.name, q.name, items, false)
	if err != nil {
		return nil, err
	}
	if len(ids) > 0 {
		w.e.queues.ready(q)
	}
	return w.handles(ids), nil
}

// EnqueueManyTx is EnqueueMany inside the caller's transaction tx: the
// runs are queued if and only if tx commits; dispatchers are woken on
// commit. On an error, roll tx back: runs of the batch before the failing
// item may have been written in it.
func (w *Workflow[P, R]) EnqueueManyTx(ctx context.Context, tx pgx.Tx, q *Queue, items []EnqueueItem[P]) ([]*Handle[R], error) {
	if tx == nil {
		return nil, fmt.Errorf("%w: EnqueueManyTx needs a transaction", ErrInvalidArgument)
	}
	if q == nil {
		return nil, fmt.Errorf("%w: EnqueueManyTx needs a queue", ErrInvalidArgument)
	}
	ids, err := enqueueMany(ctx, engineSubmitter(w.e), "EnqueueManyTx", nil, tx, w.def.name, q.name, items, !w.e.cfg.PollOnly)
	if err != nil {
		return nil, err
	}
	return w.handles(ids), nil
}

// StartMany creates a run of w for each item, in one statement, and
// returns their handles in the order of items. The runs start as
// [Workflow.StartTx]'s do after their commit: any executor with w
// registered under the same AppVersion claims them, this one first
// (woken at once), the others woken by one notification. Each item is
// treated as a single StartTx of it would be: an existing ID with the
// same input gives that run (see [StartOpts].ID).
//
// The batch is all or nothing, as with [Workflow.EnqueueMany]: an item a
// single StartTx would refuse fails it as a [*BatchItemError], with no
// run of the batch written.
func (w *Workflow[P, R]) StartMany(ctx context.Context, items []StartItem[P]) ([]*Handle[R], error) {
	ids, err := startMany(ctx, engineSubmitter(w.e), "StartMany", w.e.pool, nil, w.def.name, items)
	if err != nil {
		return nil, err
	}
	if len(ids) > 0 {
		w.e.recov.Wake() // this executor's sweeper claims them; the others on the notification
	}
	return w.handles(ids), nil
}

// StartManyTx is StartMany inside the caller's transaction tx: the runs
// exist if and only if tx commits, and executors are woken on commit. On
// an error, roll tx back: runs of the batch may have been written in it.
func (w *Workflow[P, R]) StartManyTx(ctx context.Context, tx pgx.Tx, items []StartItem[P]) ([]*Handle[R], error) {
	if tx == nil {
		return nil, fmt.Errorf("%w: StartManyTx needs a transaction", ErrInvalidArgument)
	}
	ids, err := startMany(ctx, engineSubmitter(w.e), "StartManyTx", nil, tx, w.def.name, items)
	if err != nil {
		return nil, err
	}
	return w.handles(ids), nil
}

func (w *Workflow[P, R]) handles(ids []string) []*Handle[R] {
	if ids == nil {
		return nil
	}
	hs := make([]*Handle[R], len(ids))
	for i, id := range ids {
		hs[i] = &Handle[R]{e: w.e, id: id}
	}
	return hs
}

// inBatchTx runs write on tx or, when tx is nil, in a transaction of its
// own on pool, committed only when write succeeds.
func inBatchTx(ctx context.Context, pool *pgxpool.Pool, tx pgx.Tx, write func(db sysdb.DBTX) ([]string, error)) ([]string, error) {
	if tx != nil {
		return write(tx)
	}
	var ids []string
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		ids, err = write(tx)
		return err
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// checkBatchSize refuses a batch of n items over BatchMaxItems.
func checkBatchSize(op string, n int) error {
	if n > BatchMaxItems {
		return fmt.Errorf("%w: %s of %d items is over the limit of %d (BatchMaxItems): split the batch",
			ErrInvalidArgument, op, n, BatchMaxItems)
	}
	return nil
}

// batchIDs checks the prepared runs of a batch: their IDs are distinct,
// their inputs within batchMaxBytes in all.
type batchIDs struct {
	op    string
	index map[string]int
	bytes int
}

func newBatchIDs(op string, n int) *batchIDs {
	return &batchIDs{op: op, index: make(map[string]int, n)}
}

// add checks item i, of ID id and encoded input.
func (b *batchIDs) add(i int, id string, input []byte) error {
	if j, dup := b.index[id]; dup {
		return &BatchItemError{Op: b.op, Index: i, Err: fmt.Errorf("%w: workflow ID %q is also item %d's: "+
			"one batch creates a run of an ID once", ErrInvalidArgument, id, j)}
	}
	b.index[id] = i
	b.bytes += len(input)
	if b.bytes > batchMaxBytes {
		return fmt.Errorf("%w: %s: the inputs of items 0 to %d are over %d MiB in all: split the batch",
			ErrInvalidArgument, b.op, i, batchMaxBytes>>20)
	}
	return nil
}

// enqueueBatch is an EnqueueMany checked and encoded, ready to write.
type enqueueBatch struct {
	s           submitter
	op          string
	name, queue string
	runs        []sysdb.QueuedRun
	opts        []EnqueueOpts // each run's, with its ID
	// held[i]: an earlier item has the run's dedup ID. The run is not
	// sent: like a single enqueue after that item's, it finds the dedup
	// ID taken by it.
	held []bool
}

// enqueueMany enqueues a run of workflow name on queue per item, on tx or
// in a transaction of its own on pool (see [Workflow.EnqueueMany]), and
// returns the runs' IDs in item order; with notify the commit wakes the
// dispatchers.
func enqueueMany[P any](ctx context.Context, s submitter, op string, pool *pgxpool.Pool, tx pgx.Tx, name, queue string,
	items []EnqueueItem[P], notify bool) ([]string, error) {
	if len(items) == 0 {
		return nil, nil
	}
	b, err := prepareEnqueueMany(s, op, name, queue, items)
	if err != nil {
		return nil, err
	}
	return inBatchTx(ctx, pool, tx, func(db sysdb.DBTX) ([]string, error) { return b.write(ctx, db, notify) })
}

// prepareEnqueueMany checks and encodes every item, without a statement.
func prepareEnqueueMany[P any](s submitter, op, name, queue string, items []EnqueueItem[P]) (*enqueueBatch, error) {
	if err := checkBatchSize(op, len(items)); err != nil {
		return nil, err
	}
	if err := checkName("queue name", queue); err != nil {
		return nil, err
	}
	if err := checkName("workflow name", name); err != nil {
		return nil, err
	}
	n := len(items)
	b := &enqueueBatch{s: s, op: op, name: name, queue: queue, runs: make([]sysdb.QueuedRun, n),
		opts: make([]EnqueueOpts, n), held: make([]bool, n)}
	ids := newBatchIDs(op, n)
	dedups := map[string]bool{}
	now := s.clock.now()
	for i, it := range items {
		o := &b.opts[i]
		if it.Opts != nil {
			*o = *it.Opts
		}
		if err := o.check(); err != nil {
			return nil, &BatchItemError{Op: op, Index: i, Err: err}
		}
		if err := o.batchable(); err != nil {
			return nil, &BatchItemError{Op: op, Index: i, Err: err}
		}
		id, input, err := prepareRun(name, it.Input, o.ID, s.limit)
		if err != nil {
			return nil, &BatchItemError{Op: op, Index: i, Err: err}
		}
		tags, err := encodeTags("EnqueueOpts.Tags", o.Tags)
		if err != nil {
			return nil, &BatchItemError{Op: op, Index: i, Err: err}
		}
		if err := ids.add(i, id, input); err != nil {
			return nil, err
		}
		o.ID = id
		r := &b.runs[i]
		*r = sysdb.QueuedRun{ID: id, Input: input, Priority: int32(o.Priority), PartitionKey: o.PartitionKey, DedupID: o.DedupID,
			Tags: tags}
		if !o.NotBefore.IsZero() {
			nb := o.NotBefore
			r.NotBefore = &nb
		}
		if o.Timeout > 0 {
			d := now.Add(o.Timeout)
			r.Deadline = &d
		}
		if o.DedupID != "" {
			b.held[i] = dedups[o.DedupID]
			dedups[o.DedupID] = true
		}
	}
	return b, nil
}

// batchable refuses the options a batch does not write: Debounce. A batch
// writes every other field of EnqueueOpts; TestBatchableKnowsEveryOption
// fails when a field is added that it neither writes nor refuses, so a
// new option is refused here until batches handle it, never dropped.
func (o *EnqueueOpts) batchable() error {
	if o.Debounce != nil {
		return fmt.Errorf("%w: a batch does not take EnqueueOpts.Debounce: enqueue a run with it alone", ErrInvalidArgument)
	}
	return nil
}

// write inserts the batch through db in one statement, then settles the
// items not inserted one by one, as a single enqueue does (the rare path).
func (b *enqueueBatch) write(ctx context.Context, db sysdb.DBTX, notify bool) (_ []string, err error) {
	s := b.s
	sp := s.tr.batch(ctx, "durable.enqueue", b.name, b.queue, len(b.runs))
	defer func() { sp.end(err) }()
	send, sent := b.runs, []int(nil) // sent[k]: the item of send[k]; nil: send is runs
	if slices.Contains(b.held, true) {
		send = make([]sysdb.QueuedRun, 0, len(b.runs))
		for i, r := range b.runs {
			if !b.held[i] {
				send = append(send, r)
				sent = append(sent, i)
			}
		}
	}
	res, err := s.bq.EnqueueMany(ctx, db, sysdb.EnqueueManyParams{Queue: b.queue, Workflow: b.name, AppVersion: s.appVersion,
		Runs: send, Notify: notify, TraceContext: sp.traceparent()})
	if err != nil {
		return nil, fmt.Errorf("durable: %s of %d runs of workflow %q on queue %q: %w", b.op, len(b.runs), b.name, b.queue, err)
	}
	if !res.QueueFound {
		return nil, queueNotFound(b.queue)
	}
	inserted := make([]bool, len(b.runs))
	for k, ok := range res.Inserted {
		i := k
		if sent != nil {
			i = sent[k]
		}
		inserted[i] = ok
	}
	ids := make([]string, len(b.runs))
	count := 0
	for i, r := range b.runs {
		if inserted[i] {
			ids[i] = r.ID
			count++
			continue
		}
		id, added, err := b.settle(ctx, db, i, notify, sp.traceparent())
		if err != nil {
			return nil, &BatchItemError{Op: b.op, Index: i, Err: err}
		}
		ids[i] = id
		if added {
			count++
		}
	}
	s.met.startedMany(ctx, b.name, startEnqueue, count)
	return ids, nil
}

// settle returns the run to follow for item i, which the batch's
// statement did not insert; added reports that it inserted it after all.
func (b *enqueueBatch) settle(ctx context.Context, db sysdb.DBTX, i int, notify bool, trace string) (id string, added bool, err error) {
	s, r, o := b.s, &b.runs[i], &b.opts[i]
	id, err = s.settleEnqueue(ctx, db, b.name, b.queue, r.ID, r.Input, o)
	if !b.held[i] || !errors.Is(err, pgx.ErrNoRows) {
		return id, false, err
	}
	// Held back, and the earlier item with its dedup ID did not take it
	// (that item's ID existed): the run is enqueued alone.
	res, err := s.qq.Enqueue(ctx, db, sysdb.EnqueueParams{ID: r.ID, Workflow: b.name, AppVersion: s.appVersion, Input: r.Input,
		Queue: b.queue, Priority: int(r.Priority), PartitionKey: r.PartitionKey, DedupID: r.DedupID, NotBefore: r.NotBefore,
		Deadline: r.Deadline, Notify: notify, TraceContext: trace, Tags: r.Tags})
	switch {
	case err != nil:
		return "", false, fmt.Errorf("durable: enqueue workflow %q on queue %q: %w", b.name, b.queue, err)
	case res.Inserted:
		return r.ID, true, nil
	}
	id, err = s.settleEnqueue(ctx, db, b.name, b.queue, r.ID, r.Input, o)
	return id, false, err
}

// startBatch is a StartMany checked and encoded, ready to write.
type startBatch struct {
	s    submitter
	op   string
	name string
	runs []sysdb.StartedRun
	any  []bool // the item's AcceptDifferentInput
}

// startMany inserts an unowned run of workflow name per item, on tx or in
// a transaction of its own on pool (see [Workflow.StartMany]), and returns
// the runs' IDs in item order; the commit notifies the executors.
func startMany[P any](ctx context.Context, s submitter, op string, pool *pgxpool.Pool, tx pgx.Tx, name string,
	items []StartItem[P]) ([]string, error) {
	if len(items) == 0 {
		return nil, nil
	}
	b, err := prepareStartMany(s, op, name, items)
	if err != nil {
		return nil, err
	}
	return inBatchTx(ctx, pool, tx, func(db sysdb.DBTX) ([]string, error) { return b.write(ctx, db) })
}

// prepareStartMany checks and encodes every item, without a statement.
func prepareStartMany[P any](s submitter, op, name string, items []StartItem[P]) (*startBatch, error) {
	if err := checkBatchSize(op, len(items)); err != nil {
		return nil, err
	}
	if err := checkName("workflow name", name); err != nil {
		return nil, err
	}
	n := len(items)
	b := &startBatch{s: s, op: op, name: name, runs: make([]sysdb.StartedRun, n), any: make([]bool, n)}
	ids := newBatchIDs(op, n)
	now := s.clock.now()
	for i, it := range items {
		var id string
		if it.Opts != nil {
			id, b.any[i] = it.Opts.ID, it.Opts.AcceptDifferentInput
		}
		id, input, err := prepareRun(name, it.Input, id, s.limit)
		if err != nil {
			return nil, &BatchItemError{Op: op, Index: i, Err: err}
		}
		deadline, err := it.Opts.deadline(now)
		if err != nil {
			return nil, &BatchItemError{Op: op, Index: i, Err: err}
		}
		tags, err := it.Opts.tags()
		if err != nil {
			return nil, &BatchItemError{Op: op, Index: i, Err: err}
		}
		if err := ids.add(i, id, input); err != nil {
			return nil, err
		}
		b.runs[i] = sysdb.StartedRun{ID: id, Input: input, Deadline: deadline, Tags: tags}
	}
	return b, nil
}

// write inserts the batch through db in one statement, then checks the
// runs whose ID existed one by one, as a single start does.
func (b *startBatch) write(ctx context.Context, db sysdb.DBTX) (_ []string, err error) {
	s := b.s
	sp := s.tr.batch(ctx, "durable.start", b.name, "", len(b.runs))
	defer func() { sp.end(err) }()
	inserted, err := s.bq.StartMany(ctx, db, sysdb.StartManyParams{Workflow: b.name, AppVersion: s.appVersion, Runs: b.runs,
		TraceContext: sp.traceparent()})
	if err != nil {
		return nil, fmt.Errorf("durable: %s of %d runs of workflow %q: %w", b.op, len(b.runs), b.name, err)
	}
	ids := make([]string, len(b.runs))
	count := 0
	for i, r := range b.runs {
		ids[i] = r.ID
		if inserted[i] {
			count++
			continue
		}
		want := r.Input
		if b.any[i] {
			want = nil
		}
		if err := checkExisting(ctx, s.q, db, r.ID, b.name, want, ""); err != nil {
			return nil, &BatchItemError{Op: b.op, Index: i, Err: err}
		}
	}
	s.met.startedMany(ctx, b.name, startDirect, count)
	return ids, nil
}
