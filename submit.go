package durable

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"

	"github.com/durable-go/durable/internal/sysdb"
)

// submitter creates runs for executors to claim: an engine's StartTx and
// Enqueue, and a [Client], which share it so that a run a client creates
// is the same rows and notifications as one an engine creates.
type submitter struct {
	q          *sysdb.Queries
	qq         *sysdb.QueueQueries
	bq         *sysdb.BatchQueries
	dq         *sysdb.DebounceQueries
	appVersion string
	limit      int // the encoded input's limit (MaxPayloadBytes)
	tr         *tracer
	clock      engineClock // the time of deadlines; zero: the system clock
	met        *meters     // nil: no metrics
}

// engineSubmitter is the submitter of e's runs.
func engineSubmitter(e *Engine) submitter {
	return submitter{q: e.q, qq: e.qq, bq: e.bq, dq: e.dq, appVersion: e.cfg.AppVersion, limit: e.cfg.MaxPayloadBytes, tr: &e.tr,
		clock: e.clock, met: e.met}
}

// prepareRun returns the ID of a new run of workflow name (id, or a new
// UUIDv7 when id is "") and its encoded input in, both checked.
func prepareRun(name string, in any, id string, limit int) (string, []byte, error) {
	if id == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return "", nil, err
		}
		id = u.String()
	}
	if err := checkName("workflow ID", id); err != nil {
		return "", nil, err
	}
	input, err := encodeArg(in, limit, "input of workflow %q", name)
	return id, input, err
}

// start inserts through db an unowned run of workflow name, which any
// executor running name under the same AppVersion claims when woken by the
// notification its commit sends. If the ID exists, that run must be of
// name with the same input (see [StartOpts].ID). It returns the run's ID.
func (s submitter) start(ctx context.Context, db sysdb.DBTX, name string, in any, opts *StartOpts) (_ string, err error) {
	if err := checkName("workflow name", name); err != nil {
		return "", err
	}
	var id string
	if opts != nil {
		id = opts.ID
	}
	id, input, err := prepareRun(name, in, id, s.limit)
	if err != nil {
		return "", err
	}
	deadline, err := opts.deadline(s.clock.now())
	if err != nil {
		return "", err
	}
	tags, err := opts.tags()
	if err != nil {
		return "", err
	}
	sp := s.tr.start(ctx, "durable.start", name, id)
	defer func() { sp.end(err) }()
	inserted, err := s.q.InsertWorkflow(ctx, db, sysdb.InsertWorkflowParams{ID: id, Name: name, AppVersion: s.appVersion,
		Input: input, NotifyPayload: "n:" + id, Deadline: deadline, TraceContext: sp.traceparent(), Tags: tags})
	if err != nil {
		return "", fmt.Errorf("durable: start workflow %q id %q: %w", name, id, err)
	}
	if !inserted {
		sp.existing()
		return id, checkExisting(ctx, s.q, db, id, name, opts.sameInput(input), "")
	}
	s.met.started(ctx, name, startDirect)
	return id, nil
}

// check validates o, the options of an enqueue.
func (o *EnqueueOpts) check() error {
	if o.Timeout < 0 {
		return fmt.Errorf("%w: EnqueueOpts.Timeout %v is negative", ErrInvalidArgument, o.Timeout)
	}
	if o.Priority < math.MinInt32 || o.Priority > math.MaxInt32 {
		return fmt.Errorf("%w: EnqueueOpts.Priority %d is outside the 32-bit range", ErrInvalidArgument, o.Priority)
	}
	if o.DedupID != "" {
		if err := checkName("dedup ID", o.DedupID); err != nil {
			return err
		}
	}
	if o.PartitionKey != "" {
		if err := checkName("partition key", o.PartitionKey); err != nil {
			return err
		}
	}
	if o.Debounce != nil {
		return o.Debounce.check(o)
	}
	return nil
}

// enqueue puts through db a run of workflow name on queue; with notify its
// commit wakes the queue's dispatchers. It returns the ID of the run to
// follow: the new run, the existing run of its ID (see [StartOpts].ID),
// or with DedupReturnExisting the run holding its dedup ID.
func (s submitter) enqueue(ctx context.Context, db sysdb.DBTX, name, queue string, in any, opts *EnqueueOpts, notify bool) (_ string, err error) {
	if err := checkName("queue name", queue); err != nil {
		return "", err
	}
	if err := checkName("workflow name", name); err != nil {
		return "", err
	}
	var o EnqueueOpts
	if opts != nil {
		o = *opts
	}
	if err := o.check(); err != nil {
		return "", err
	}
	tags, err := encodeTags("EnqueueOpts.Tags", o.Tags)
	if err != nil {
		return "", err
	}
	if o.Debounce != nil {
		return s.debounce(ctx, db, name, queue, in, &o, tags, notify)
	}
	id, input, err := prepareRun(name, in, o.ID, s.limit)
	if err != nil {
		return "", err
	}
	var notBefore, deadline *time.Time
	if !o.NotBefore.IsZero() {
		notBefore = &o.NotBefore
	}
	if o.Timeout > 0 {
		d := s.clock.now().Add(o.Timeout)
		deadline = &d
	}
	sp := s.tr.enqueue(ctx, name, id, queue)
	defer func() { sp.end(err) }()
	res, err := s.qq.Enqueue(ctx, db, sysdb.EnqueueParams{ID: id, Workflow: name, AppVersion: s.appVersion,
		Input: input, Queue: queue, Priority: o.Priority, PartitionKey: o.PartitionKey, DedupID: o.DedupID,
		NotBefore: notBefore, Deadline: deadline, Notify: notify, TraceContext: sp.traceparent(), Tags: tags})
	if err != nil {
		return "", fmt.Errorf("durable: enqueue workflow %q on queue %q: %w", name, queue, err)
	}
	switch {
	case !res.QueueFound:
		return "", queueNotFound(queue)
	case res.Inserted:
		s.met.started(ctx, name, startEnqueue)
		return id, nil
	}
	// Not inserted: the ID exists, or the dedup ID is taken.
	sp.existing()
	return s.settleEnqueue(ctx, db, name, queue, id, input, &o)
}

// settleEnqueue returns the run to follow for an enqueue of run id with
// input and options o that was not inserted: the existing run of its ID
// (see [StartOpts].ID) or, with DedupReturnExisting, the run holding its
// dedup ID, else a [*DuplicateError]. When neither exists, the error
// matches pgx.ErrNoRows.
func (s submitter) settleEnqueue(ctx context.Context, db sysdb.DBTX, name, queue, id string, input []byte, o *EnqueueOpts) (string, error) {
	so := &StartOpts{ID: id, AcceptDifferentInput: o.AcceptDifferentInput}
	if err := checkExisting(ctx, s.q, db, id, name, so.sameInput(input), ""); !errors.Is(err, ErrWorkflowNotFound) {
		return id, err
	}
	holder, err := s.qq.ByDedup(ctx, db, sysdb.ByDedupParams{Queue: queue, DedupID: o.DedupID})
	if err != nil {
		return "", fmt.Errorf("durable: enqueue workflow %q on queue %q: run %q not inserted and no dedup holder found: %w", name, queue, id, err)
	}
	if o.OnDuplicate == DedupReturnExisting {
		return holder, checkExisting(ctx, s.q, db, holder, name, nil, "") // another ID: its input may differ
	}
	return "", &DuplicateError{Queue: queue, DedupID: o.DedupID, ExistingID: holder}
}

// queueNotFound is the error of an enqueue on queue, which nobody declared.
func queueNotFound(queue string) error {
	return fmt.Errorf("%w: %q: declare it with RegisterQueue in the executors that work it (at their Launch), "+
		"or beforehand with Client.DeclareQueue", ErrQueueNotFound, queue)
}
