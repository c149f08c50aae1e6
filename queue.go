package durable

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/dispatch"
	"github.com/durable-go/durable/internal/errs"
	"github.com/durable-go/durable/internal/sysdb"
)

// Queue errors.
var (
	// ErrQueueNotFound: no queue of that name is declared in the database.
	ErrQueueNotFound = errs.QueueNotFound
	// ErrDuplicate: a run with the same deduplication ID is queued or running.
	ErrDuplicate = errors.New("durable: duplicate run")
)

// DuplicateError reports an enqueue refused because a run with the same
// deduplication ID is still queued or running in that queue.
type DuplicateError struct {
	Queue      string
	DedupID    string
	ExistingID string // the workflow ID of the run that holds the dedup ID
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("durable: queue %q already has run %q with dedup ID %q queued or running", e.Queue, e.ExistingID, e.DedupID)
}
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }

// QueueBatchMax bounds how many runs one dispatch claims.
const QueueBatchMax = dispatch.BatchMax

// QueueOpts are the limits of a queue. Zero means unlimited for each.
//
// (The fields tagged omitempty keep the declaration of a queue that does
// not use them, its settings encoded as JSON, as it was before they
// existed: an upgrade of the library alone is not a new declaration.)
type QueueOpts struct {
	// GlobalConcurrency bounds the runs of the queue running at once across
	// all executors.
	GlobalConcurrency int
	// WorkerConcurrency bounds the runs of the queue running at once in
	// each executor.
	WorkerConcurrency int
	// PartitionConcurrency bounds the running runs of each partition key
	// (EnqueueOpts.PartitionKey), e.g. 1 for one agent per customer. Runs
	// without a key count as one more key. [Queue.SetPartitionLimits]
	// sets another bound for a single key.
	PartitionConcurrency int
	// FairShare shares the queue's capacity among the partition keys that
	// have ready runs, instead of starting runs in priority order: each
	// free slot goes to the key with the fewest runs holding a slot per
	// unit of weight ([PartitionLimits].Weight, 1 by default). A key with
	// nothing running gets the next free slot however many runs other keys
	// have queued, and a slot no key can use is not held back. Priority
	// orders the runs within each key.
	FairShare bool `json:",omitempty"`
	// PartitionRateLimit bounds how many runs of each partition key start
	// per PartitionRatePeriod, across all executors, beside the queue's
	// RateLimit. Both must be set together.
	PartitionRateLimit  int           `json:",omitempty"`
	PartitionRatePeriod time.Duration `json:",omitempty"`
	// RateLimit bounds how many runs start per RatePeriod, across all
	// executors. Both must be set together. Starts count from when the
	// limit is in place: runs started while the queue had none do not
	// count toward it.
	RateLimit  int
	RatePeriod time.Duration
	// ReleaseSlotWhileParked gives a run's slot back while it is parked (a
	// Sleep or Recv longer than Config.ParkThreshold, e.g. a two-day wait
	// for an approval): the run re-enters the queue, delayed until its
	// wake-up time or its message, and takes a slot again to go on. By
	// default a run holds its slot from claim to finish, waits included.
	ReleaseSlotWhileParked bool
}

func (o QueueOpts) validate(name string) error {
	bad := func(field, msg string) error {
		return fmt.Errorf("%w: queue %q: QueueOpts.%s %s", ErrInvalidArgument, name, field, msg)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"GlobalConcurrency", o.GlobalConcurrency}, {"WorkerConcurrency", o.WorkerConcurrency},
		{"PartitionConcurrency", o.PartitionConcurrency}, {"RateLimit", o.RateLimit},
		{"PartitionRateLimit", o.PartitionRateLimit}} {
		if f.v > math.MaxInt32 {
			return bad(f.name, "must be at most 2147483647")
		}
	}
	switch {
	case o.GlobalConcurrency < 0:
		return bad("GlobalConcurrency", "must not be negative")
	case o.WorkerConcurrency < 0:
		return bad("WorkerConcurrency", "must not be negative")
	case o.PartitionConcurrency < 0:
		return bad("PartitionConcurrency", "must not be negative")
	case o.RateLimit < 0:
		return bad("RateLimit", "must not be negative")
	case o.RatePeriod < 0:
		return bad("RatePeriod", "must not be negative")
	case (o.RateLimit > 0) != (o.RatePeriod > 0):
		return bad("RateLimit", "and RatePeriod must be set together")
	case o.RatePeriod > 0 && o.RatePeriod < time.Millisecond:
		return bad("RatePeriod", "must be at least 1ms")
	case o.PartitionRateLimit < 0:
		return bad("PartitionRateLimit", "must not be negative")
	case o.PartitionRatePeriod < 0:
		return bad("PartitionRatePeriod", "must not be negative")
	case (o.PartitionRateLimit > 0) != (o.PartitionRatePeriod > 0):
		return bad("PartitionRateLimit", "and PartitionRatePeriod must be set together")
	case o.PartitionRatePeriod > 0 && o.PartitionRatePeriod < time.Millisecond:
		return bad("PartitionRatePeriod", "must be at least 1ms")
	}
	return nil
}

// Queue is a named Postgres-backed queue. Runs enqueued on it start when
// its limits allow, on any executor that declared it with [RegisterQueue].
//
// A queued run holds its concurrency slot from the moment an executor
// claims it until it finishes, including while it sleeps or waits, unless
// the queue sets QueueOpts.ReleaseSlotWhileParked.
type Queue struct {
	e    *Engine
	name string
	opts QueueOpts
	// lane is the queue's dispatch state in this executor, which runs its
	// work; nil for a QueueRef.
	lane *dispatch.Queue
}

// Name returns the queue's name.
func (q *Queue) Name() string { return q.name }

// RegisterQueue declares the queue name with its limits; this executor then
// runs the queue's work. Declare a queue before Launch. It panics on a
// programmer error; [TryRegisterQueue] returns it instead.
func RegisterQueue(e *Engine, name string, opts *QueueOpts) *Queue {
	q, err := TryRegisterQueue(e, name, opts)
	if err != nil {
		panic(err)
	}
	return q
}

// TryRegisterQueue is [RegisterQueue] returning an error instead of panicking.
func TryRegisterQueue(e *Engine, name string, opts *QueueOpts) (*Queue, error) {
	if err := checkName("queue name", name); err != nil {
		return nil, err
	}
	var o QueueOpts
	if opts != nil {
		o = *opts
	}
	if err := o.validate(name); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state != stateNew {
		return nil, fmt.Errorf("%w: register queue %q before Launch", ErrInvalidArgument, name)
	}
	if _, dup := e.queues.byName[name]; dup {
		return nil, fmt.Errorf("%w: queue %q is already registered", ErrInvalidArgument, name)
	}
	q := &Queue{e: e, name: name, opts: o, lane: dispatch.NewQueue(name)}
	e.queues.byName[name] = q
	return q, nil
}

// QueueRef returns a reference to a queue declared by another executor,
// for enqueueing only: this executor does not run its work. Enqueueing on a
// queue that no executor ever declared, nor [Client.DeclareQueue], fails
// with [ErrQueueNotFound].
func (e *Engine) QueueRef(name string) *Queue {
	e.mu.Lock()
	defer e.mu.Unlock()
	if q, ok := e.queues.byName[name]; ok {
		return q
	}
	return &Queue{e: e, name: name}
}

// Update replaces the queue's limits while the system runs; opts nil
// removes them all (the zero QueueOpts), as with RegisterQueue. Every
// executor applies them at its next dispatch. They hold until a deploy
// declares different limits in code.
func (q *Queue) Update(ctx context.Context, opts *QueueOpts) error {
	var o QueueOpts
	if opts != nil {
		o = *opts
	}
	if err := o.validate(q.name); err != nil {
		return err
	}
	return q.exec(ctx, "update", func(ctx context.Context) (bool, error) {
		return q.e.qq.Update(ctx, q.e.pool, sysdb.QueueUpdateParams{Name: q.name, Settings: o.settings()})
	})
}

// Pause stops the queue from starting runs, on every executor; running
// runs go on. It waits for a dispatch in flight, so once it returns no run
// starts until Resume. Enqueueing still works.
func (q *Queue) Pause(ctx context.Context) error {
	return q.setPaused(ctx, "pause", true)
}

// Resume lets a paused queue start runs again.
func (q *Queue) Resume(ctx context.Context) error {
	return q.setPaused(ctx, "resume", false)
}

func (q *Queue) setPaused(ctx context.Context, what string, paused bool) error {
	return q.exec(ctx, what, func(ctx context.Context) (bool, error) {
		return q.e.qq.SetPaused(ctx, q.e.pool, sysdb.QueuePausedParams{Name: q.name, Paused: paused})
	})
}

// exec runs the change what of the queue's row; write reports whether the
// row exists.
func (q *Queue) exec(ctx context.Context, what string, write func(ctx context.Context) (bool, error)) error {
	if err := checkName("queue name", q.name); err != nil {
		return err
	}
	found, err := write(ctx)
	if err != nil {
		return fmt.Errorf("durable: %s queue %q: %w", what, q.name, err)
	}
	if !found {
		return fmt.Errorf("%w: %q", ErrQueueNotFound, q.name)
	}
	return nil
}

// QueueStats is a snapshot of a queue.
type QueueStats struct {
	Name     string
	Ready    int // enqueued and due
	Delayed  int // enqueued with a start time in the future
	Running  int // claimed by an executor and not finished, or cancelled while its code is still stopping
	Paused   bool
	Settings QueueOpts // the live limits
}

// Stats returns the queue's depth, running count and live settings.
func (q *Queue) Stats(ctx context.Context) (QueueStats, error) {
	if err := checkName("queue name", q.name); err != nil {
		return QueueStats{}, err
	}
	st := QueueStats{Name: q.name}
	set, err := q.e.qq.Settings(ctx, q.e.pool, q.name)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, fmt.Errorf("%w: %q", ErrQueueNotFound, q.name)
	}
	if err != nil {
		return st, fmt.Errorf("durable: stats of queue %q: %w", q.name, err)
	}
	counts, err := q.e.qq.Stats(ctx, q.e.pool, q.name)
	if err != nil {
		return st, fmt.Errorf("durable: stats of queue %q: %w", q.name, err)
	}
	return queueStats(q.name, set, counts), nil
}

// queueStats is the snapshot of queue name from its row and its counts.
func queueStats(name string, set sysdb.QueueSettingsRow, counts sysdb.QueueStatsRow) QueueStats {
	return QueueStats{Name: name, Ready: counts.Ready, Delayed: counts.Delayed, Running: counts.Running,
		Paused: set.Paused, Settings: queueOpts(set.Settings)}
}

// settings are o as a queue's row stores them.
func (o QueueOpts) settings() sysdb.QueueSettings {
	return sysdb.QueueSettings{GlobalConcurrency: o.GlobalConcurrency, WorkerConcurrency: o.WorkerConcurrency,
		PartitionConcurrency: o.PartitionConcurrency, RateLimit: o.RateLimit, RatePeriod: o.RatePeriod,
		ReleaseParked: o.ReleaseSlotWhileParked, FairShare: o.FairShare, PartitionRateLimit: o.PartitionRateLimit,
		PartitionRatePeriod: o.PartitionRatePeriod}
}

// queueOpts are the limits of a queue's row s.
func queueOpts(s sysdb.QueueSettings) QueueOpts {
	return QueueOpts{GlobalConcurrency: s.GlobalConcurrency, WorkerConcurrency: s.WorkerConcurrency,
		PartitionConcurrency: s.PartitionConcurrency, RateLimit: s.RateLimit, RatePeriod: s.RatePeriod,
		ReleaseSlotWhileParked: s.ReleaseParked, FairShare: s.FairShare, PartitionRateLimit: s.PartitionRateLimit,
		PartitionRatePeriod: s.PartitionRatePeriod}
}

// DedupPolicy says what an enqueue does when its dedup ID is taken.
type DedupPolicy int

const (
	// DedupReject fails the enqueue with a [*DuplicateError].
	DedupReject DedupPolicy = iota
	// DedupReturnExisting returns a handle to the run holding the dedup ID.
	DedupReturnExisting
)

// EnqueueOpts are options of one enqueue.
type EnqueueOpts struct {
	// ID is the workflow ID. Defaults to a new UUIDv7.
	ID string
	// DedupID, when set, allows only one run with this ID queued or running
	// in the queue at a time; OnDuplicate says what happens to another.
	DedupID     string
	OnDuplicate DedupPolicy
	// Priority orders the queue: lower values start first. Defaults to 0.
	Priority int
	// PartitionKey groups runs for QueueOpts.PartitionConcurrency.
	PartitionKey string
	// NotBefore delays the start until that time. Defaults to now.
	NotBefore time.Time
	// Timeout bounds the run from the enqueue on, like StartOpts.Timeout; a
	// run still queued at its deadline fails without starting.
	Timeout time.Duration
	// AcceptDifferentInput: as StartOpts.AcceptDifferentInput, an enqueue
	// of an existing ID returns the existing run whatever its input.
	// Defaults to false.
	AcceptDifferentInput bool
	// Debounce collapses this enqueue into the queued run of the workflow
	// with the same debounce key, if there is one, which then starts
	// Debounce.Window after this enqueue with this input (or the merged
	// one); else the enqueue makes such a run. The returned handle is that
	// run's. ID, DedupID and NotBefore must not be set with it; the run
	// keeps the Priority, PartitionKey and Tags of its first enqueue, and
	// takes the Timeout of the latest. Defaults to nil.
	Debounce *Debounce
	// Tags are the run's first tags, as StartOpts.Tags. Defaults to none.
	Tags map[string]string
}

// Enqueue puts a run of w on queue q and returns its handle. It starts when
// the queue's limits allow, on an executor that works q. If the ID exists,
// the existing run is returned, or a [*ConflictError] for another input,
// as with Start.
func (w *Workflow[P, R]) Enqueue(ctx context.Context, q *Queue, in P, opts *EnqueueOpts) (*Handle[R], error) {
	h, err := w.enqueue(ctx, w.e.pool, q, in, opts, false)
	if err == nil {
		w.e.queues.ready(q)
	}
	return h, err
}

// EnqueueTx is Enqueue inside the caller's transaction tx: the run is
// queued if and only if tx commits; dispatchers are woken on commit.
func (w *Workflow[P, R]) EnqueueTx(ctx context.Context, tx pgx.Tx, q *Queue, in P, opts *EnqueueOpts) (*Handle[R], error) {
	if tx == nil {
		return nil, fmt.Errorf("%w: EnqueueTx needs a transaction", ErrInvalidArgument)
	}
	// The notification rides on the commit: it must not arrive before it.
	return w.enqueue(ctx, tx, q, in, opts, !w.e.cfg.PollOnly)
}

func (w *Workflow[P, R]) enqueue(ctx context.Context, db sysdb.DBTX, q *Queue, in P, opts *EnqueueOpts, notify bool) (*Handle[R], error) {
	if q == nil {
		return nil, fmt.Errorf("%w: enqueue needs a queue", ErrInvalidArgument)
	}
	id, err := engineSubmitter(w.e).enqueue(ctx, db, w.def.name, q.name, in, opts, notify)
	if err != nil {
		return nil, err
	}
	return &Handle[R]{e: w.e, id: id}, nil
}

// wake makes this process's dispatcher of q, if it works q, look for work.
func (q *Queue) wake() {
	if q.lane != nil {
		q.lane.Wake()
	}
}

// release gives back the slot of a run of q that ended in this process.
func (q *Queue) release() { q.releaseN(1) }

func (q *Queue) releaseN(n int) { q.lane.Release(n) }
