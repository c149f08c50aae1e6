package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Queue errors.
var (
	// ErrQueueNotFound: no queue of that name is declared in the database.
	ErrQueueNotFound = errors.New("durable: queue not found")
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
const QueueBatchMax = 1000

// queueBatchFirst is how many runs a dispatch claims after an idle spell.
// Each dispatch that takes all it asked for doubles the next one, up to
// QueueBatchMax: a backlog is claimed in big batches, but its first runs
// start after a claim of a few runs instead of one of a thousand (~30 ms
// on the bench's machine before any of them starts).
const queueBatchFirst = 64

// QueueOpts are the limits of a queue. Zero means unlimited for each.
type QueueOpts struct {
	// GlobalConcurrency bounds the runs of the queue running at once across
	// all executors.
	GlobalConcurrency int
	// WorkerConcurrency bounds the runs of the queue running at once in
	// each executor.
	WorkerConcurrency int
	// PartitionConcurrency bounds the running runs of each partition key
	// (EnqueueOpts.PartitionKey), e.g. 1 for one agent per customer.
	PartitionConcurrency int
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
		{"PartitionConcurrency", o.PartitionConcurrency}, {"RateLimit", o.RateLimit}} {
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
	e      *Engine
	name   string
	opts   QueueOpts
	worked bool // declared by RegisterQueue: this executor runs its work

	mu      sync.Mutex
	running int // runs of this queue executing in this process
	kick    chan struct{}
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
	if _, dup := e.queues[name]; dup {
		return nil, fmt.Errorf("%w: queue %q is already registered", ErrInvalidArgument, name)
	}
	q := &Queue{e: e, name: name, opts: o, worked: true, kick: make(chan struct{}, 1)}
	e.queues[name] = q
	return q, nil
}

// QueueRef returns a reference to a queue declared by another executor,
// for enqueueing only: this executor does not run its work. Enqueueing on a
// queue that no executor ever declared fails with [ErrQueueNotFound].
func (e *Engine) QueueRef(name string) *Queue {
	e.mu.Lock()
	defer e.mu.Unlock()
	if q, ok := e.queues[name]; ok {
		return q
	}
	return &Queue{e: e, name: name}
}

// Update changes the queue's limits while the system runs. Every executor
// applies them at its next dispatch. They hold until a deploy declares
// different limits in code.
func (q *Queue) Update(ctx context.Context, opts QueueOpts) error {
	if err := opts.validate(q.name); err != nil {
		return err
	}
	return q.exec(ctx, "update", q.e.qq.Update, q.name, opts.GlobalConcurrency, opts.WorkerConcurrency,
		opts.PartitionConcurrency, opts.RateLimit, opts.RatePeriod.Milliseconds(), opts.ReleaseSlotWhileParked)
}

// Pause stops the queue from starting runs, on every executor; running
// runs go on. It waits for a dispatch in flight, so once it returns no run
// starts until Resume. Enqueueing still works.
func (q *Queue) Pause(ctx context.Context) error {
	return q.exec(ctx, "pause", q.e.qq.SetPaused, q.name, true)
}

// Resume lets a paused queue start runs again.
func (q *Queue) Resume(ctx context.Context) error {
	return q.exec(ctx, "resume", q.e.qq.SetPaused, q.name, false)
}

func (q *Queue) exec(ctx context.Context, what, sql string, args ...any) error {
	if err := checkName("queue name", q.name); err != nil {
		return err
	}
	rows, err := q.e.pool.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("durable: %s queue %q: %w", what, q.name, err)
	}
	found := rows.Next()
	rows.Close()
	if err := rows.Err(); err != nil {
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
	var period int64
	err := q.e.pool.QueryRow(ctx, q.e.qq.Settings, q.name).Scan(&st.Settings.GlobalConcurrency, &st.Settings.WorkerConcurrency,
		&st.Settings.PartitionConcurrency, &st.Settings.RateLimit, &period, &st.Paused, &st.Settings.ReleaseSlotWhileParked)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, fmt.Errorf("%w: %q", ErrQueueNotFound, q.name)
	}
	if err != nil {
		return st, fmt.Errorf("durable: stats of queue %q: %w", q.name, err)
	}
	st.Settings.RatePeriod = time.Duration(period) * time.Millisecond
	if err := q.e.pool.QueryRow(ctx, q.e.qq.Stats, q.name).Scan(&st.Ready, &st.Delayed, &st.Running); err != nil {
		return st, fmt.Errorf("durable: stats of queue %q: %w", q.name, err)
	}
	return st, nil
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
}

// Enqueue puts a run of w on queue q and returns its handle. It starts when
// the queue's limits allow, on an executor that works q. If the ID exists,
// the existing run is returned, or a [*ConflictError] for another input,
// as with Start.
func (w *Workflow[P, R]) Enqueue(ctx context.Context, q *Queue, in P, opts *EnqueueOpts) (*Handle[R], error) {
	h, err := w.enqueue(ctx, w.e.pool, q, in, opts, false)
	if err == nil {
		w.e.queueReady(q)
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

func (w *Workflow[P, R]) enqueue(ctx context.Context, db queryer, q *Queue, in P, opts *EnqueueOpts, notify bool) (_ *Handle[R], err error) {
	if q == nil {
		return nil, fmt.Errorf("%w: enqueue needs a queue", ErrInvalidArgument)
	}
	if err := checkName("queue name", q.name); err != nil {
		return nil, err
	}
	var o EnqueueOpts
	if opts != nil {
		o = *opts
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("%w: EnqueueOpts.Timeout %v is negative", ErrInvalidArgument, o.Timeout)
	}
	if o.Priority < math.MinInt32 || o.Priority > math.MaxInt32 {
		return nil, fmt.Errorf("%w: EnqueueOpts.Priority %d is outside the 32-bit range", ErrInvalidArgument, o.Priority)
	}
	if o.DedupID != "" {
		if err := checkName("dedup ID", o.DedupID); err != nil {
			return nil, err
		}
	}
	if o.PartitionKey != "" {
		if err := checkName("partition key", o.PartitionKey); err != nil {
			return nil, err
		}
	}
	so := &StartOpts{ID: o.ID, AcceptDifferentInput: o.AcceptDifferentInput}
	id, input, err := w.prepare(in, so, "")
	if err != nil {
		return nil, err
	}
	var notBefore, deadline *time.Time
	if !o.NotBefore.IsZero() {
		notBefore = &o.NotBefore
	}
	if o.Timeout > 0 {
		d := time.Now().Add(o.Timeout)
		deadline = &d
	}
	nullable := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	var queueFound, inserted int
	var ignored *string
	sp := w.e.traceEnqueue(ctx, w.def.name, id, q.name)
	defer func() { sp.end(err) }()
	err = db.QueryRow(ctx, w.e.qq.Enqueue, id, w.def.name, w.e.cfg.AppVersion, json.RawMessage(input), q.name, o.Priority,
		nullable(o.PartitionKey), nullable(o.DedupID), notBefore, deadline, notify, nullString(sp.traceparent())).Scan(&queueFound, &inserted, &ignored)
	if err != nil {
		return nil, fmt.Errorf("durable: enqueue workflow %q on queue %q: %w", w.def.name, q.name, err)
	}
	switch {
	case queueFound == 0:
		return nil, fmt.Errorf("%w: %q (declare it with RegisterQueue in some executor)", ErrQueueNotFound, q.name)
	case inserted == 1:
		return &Handle[R]{e: w.e, id: id}, nil
	}
	// Not inserted: the ID exists, or the dedup ID is taken.
	sp.existing()
	if h, err := w.existing(ctx, db, id, so.sameInput(input), ""); !errors.Is(err, ErrWorkflowNotFound) {
		return h, err
	}
	var holder string
	if err := db.QueryRow(ctx, w.e.qq.ByDedup, q.name, o.DedupID).Scan(&holder); err != nil {
		return nil, fmt.Errorf("durable: enqueue workflow %q on queue %q: run %q not inserted and no dedup holder found: %w", w.def.name, q.name, id, err)
	}
	if o.OnDuplicate == DedupReturnExisting {
		return w.existing(ctx, db, holder, nil, "") // another ID: its input may differ
	}
	return nil, &DuplicateError{Queue: q.name, DedupID: o.DedupID, ExistingID: holder}
}

// queueReady tells dispatchers that q has new work, after an enqueue has
// committed: this process's own dispatcher directly, the others by a
// notification. A NOTIFY takes a server-wide lock until commit, so one per
// enqueue would make concurrent enqueues commit one at a time: at most one
// notification per queue is in flight from this process, and enqueues that
// arrive meanwhile share the next one (no added delay when idle).
func (e *Engine) queueReady(q *Queue) {
	if q.worked && q.e == e {
		q.wake()
	}
	if e.cfg.PollOnly {
		return
	}
	e.notifyMu.Lock()
	if e.notifyInflight[q.name] {
		e.notifyPending[q.name] = true
		e.notifyMu.Unlock()
		return
	}
	e.notifyInflight[q.name] = true
	e.notifyMu.Unlock()
	go func() {
		for {
			e.sendQueueNotify(q.name)
			e.notifyMu.Lock()
			if !e.notifyPending[q.name] {
				e.notifyInflight[q.name] = false
				e.notifyMu.Unlock()
				return
			}
			e.notifyPending[q.name] = false
			e.notifyMu.Unlock()
		}
	}()
}

func (e *Engine) sendQueueNotify(name string) {
	if _, err := e.pool.Exec(e.hardCtx, e.q.Notify, "q:"+name); err != nil && e.hardCtx.Err() == nil {
		e.log.Warn("durable: notify queue", "queue", name, "err", err)
	}
}

// wake makes this process's dispatcher of q look for work.
func (q *Queue) wake() {
	if q.kick == nil {
		return
	}
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// release gives back the slot of a run of q that ended in this process.
func (q *Queue) release() { q.releaseN(1) }

func (q *Queue) releaseN(n int) {
	q.mu.Lock()
	q.running -= n
	q.mu.Unlock()
	q.wake()
}

// declareQueues writes the declared settings of every queue worked here.
func (e *Engine) declareQueues(ctx context.Context) error {
	for _, q := range e.queues {
		declared, _ := json.Marshal(q.opts)
		if _, err := e.pool.Exec(ctx, e.qq.Declare, q.name, q.opts.GlobalConcurrency, q.opts.WorkerConcurrency,
			q.opts.PartitionConcurrency, q.opts.RateLimit, q.opts.RatePeriod.Milliseconds(), string(declared),
			q.opts.ReleaseSlotWhileParked); err != nil {
			return fmt.Errorf("declare queue %q: %w", q.name, err)
		}
	}
	return nil
}

// requeue returns queued runs without a live owner to their queues (with
// own, also this executor's runs left by its previous incarnation). The
// runs of executors whose lease expired go back only when this executor
// judges leases (judgesLeases), decided once it holds a connection (see
// claimOrphans).
func (e *Engine) requeue(ctx context.Context, own bool) error {
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	rows, err := conn.Query(ctx, e.qq.Requeue, e.cfg.ExecutorID, own, e.judgesLeases())
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var n int64
		var ignored *string
		if err := rows.Scan(&name, &n, &ignored); err != nil {
			return err
		}
		if n > 0 { // else only slots of cancelled runs came back
			e.log.Info("durable: runs of a dead executor returned to their queue", "queue", name, "count", n)
		}
		if q := e.queues[name]; q != nil {
			q.wake()
		}
	}
	return rows.Err()
}

// dispatchLoop starts the queue's runs in this executor as its limits allow.
func (e *Engine) dispatchLoop(q *Queue) func(ctx context.Context) {
	return func(ctx context.Context) {
		timer := time.NewTimer(0)
		defer timer.Stop()
		batch := queueBatchFirst
		for {
			wait, more := e.dispatch(ctx, q, batch)
			if ctx.Err() != nil {
				return
			}
			if more {
				batch = min(2*batch, QueueBatchMax)
				continue
			}
			batch = queueBatchFirst
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-q.kick:
			case <-timer.C:
			}
		}
	}
}

// dispatch runs one dispatch transaction for q, claiming at most batch
// runs. It returns how long to wait before the next one when nothing wakes
// the loop, and whether more work may be ready right away.
func (e *Engine) dispatch(ctx context.Context, q *Queue, batch int) (time.Duration, bool) {
	defer e.recov.EnterLaunch()()
	poll := e.pollInterval()
	q.mu.Lock()
	running := q.running
	q.mu.Unlock()
	var got []claimed
	var wait time.Duration = poll
	claimLimit := 0
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		var s QueueOpts
		var period int64
		var paused bool
		err := tx.QueryRow(ctx, e.qq.LockAndLoad, q.name).Scan(
			&s.GlobalConcurrency, &s.WorkerConcurrency, &s.PartitionConcurrency, &s.RateLimit, &period, &paused,
			&s.ReleaseSlotWhileParked)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %q was deleted", ErrQueueNotFound, q.name)
		}
		if err != nil || paused {
			return err
		}
		s.RatePeriod = time.Duration(period) * time.Millisecond
		n := batch
		if s.WorkerConcurrency > 0 {
			n = min(n, s.WorkerConcurrency-running)
		}
		if n <= 0 {
			wait = poll // a local finish wakes us
			return nil
		}
		var globalRunning, recent int
		var rateFree, nextDelayed *time.Duration
		if err := tx.QueryRow(ctx, e.qq.Counts, q.name, s.GlobalConcurrency > 0, period).Scan(&globalRunning, &recent, &rateFree, &nextDelayed); err != nil {
			return err
		}
		if nextDelayed != nil {
			wait = min(wait, max(*nextDelayed, time.Millisecond))
		}
		if s.GlobalConcurrency > 0 {
			n = min(n, s.GlobalConcurrency-globalRunning)
		}
		if s.RateLimit > 0 {
			if recent >= s.RateLimit && rateFree != nil {
				wait = min(wait, max(*rateFree, time.Millisecond))
			}
			n = min(n, s.RateLimit-recent)
		}
		if n <= 0 {
			return nil
		}
		claimLimit = n
		if s.PartitionConcurrency > 0 {
			got, err = e.claimPartitioned(ctx, tx, q.name, n, s.PartitionConcurrency, s.RateLimit > 0)
		} else {
			got, err = scanClaimed(tx.Query(ctx, e.qq.ClaimSimple, q.name, e.cfg.ExecutorID, e.cfg.AppVersion, e.names, n, s.RateLimit > 0))
		}
		return err
	})
	if err != nil {
		e.noteDBTrouble()
		if ctx.Err() == nil {
			e.log.Warn("durable: dispatch failed", "queue", q.name, "err", err)
		}
		return min(poll, time.Second), false
	}
	if len(got) == 0 {
		return wait, false
	}
	q.mu.Lock()
	q.running += len(got)
	q.mu.Unlock()
	if err := e.startClaimed(ctx, got, q); err != nil {
		e.noteDBTrouble()
		if ctx.Err() == nil {
			e.log.Warn("durable: start claimed runs", "queue", q.name, "err", err)
		}
	}
	return wait, len(got) >= claimLimit
}

// claimPartitioned claims up to n runs, at most limit running per partition
// key, from a window of candidates in priority order.
func (e *Engine) claimPartitioned(ctx context.Context, tx pgx.Tx, queue string, n, limit int, rated bool) ([]claimed, error) {
	rows, err := tx.Query(ctx, e.qq.Candidates, queue, e.cfg.AppVersion, e.names, min(n*8, QueueBatchMax*4))
	if err != nil {
		return nil, err
	}
	type cand struct{ id, key string }
	var cands []cand
	keys := map[string]bool{}
	for rows.Next() {
		var c cand
		if err := rows.Scan(&c.id, &c.key); err != nil {
			rows.Close()
			return nil, err
		}
		cands = append(cands, c)
		keys[c.key] = true
	}
	if err := rows.Err(); err != nil || len(cands) == 0 {
		return nil, err
	}
	keyList := make([]string, 0, len(keys))
	for k := range keys {
		keyList = append(keyList, k)
	}
	load := map[string]int{}
	rows, err = tx.Query(ctx, e.qq.PartitionLoad, queue, keyList)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var k string
		var c int
		if err := rows.Scan(&k, &c); err != nil {
			rows.Close()
			return nil, err
		}
		load[k] = c
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var ids []string
	for _, c := range cands {
		if len(ids) == n {
			break
		}
		if load[c.key] < limit {
			load[c.key]++
			ids = append(ids, c.id)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	return scanClaimed(tx.Query(ctx, e.qq.ClaimIDs, ids, e.cfg.ExecutorID, e.cfg.AppVersion, rated))
}

func scanClaimed(rows pgx.Rows, err error) ([]claimed, error) {
	if err != nil {
		return nil, err
	}
	var got []claimed
	for rows.Next() {
		var c claimed
		if err := rows.Scan(&c.id, &c.name, &c.input, &c.epoch, &c.attempts, &c.deadline, &c.queue, &c.trace, &c.queued); err != nil {
			rows.Close()
			return nil, err
		}
		got = append(got, c)
	}
	return got, rows.Err()
}

// enqueueDef enqueues a run of def on q under id, unless the ID exists
// (created false); a run of another workflow under id is a
// [*ConflictError]. It is the untyped path used by schedules.
func (e *Engine) enqueueDef(ctx context.Context, def *wfDef, q *Queue, id string, input []byte) (created bool, err error) {
	var queueFound, inserted int
	var ignored *string
	sp := e.traceEnqueue(ctx, def.name, id, q.name)
	defer func() { sp.end(err) }()
	err = e.pool.QueryRow(ctx, e.qq.Enqueue, id, def.name, e.cfg.AppVersion, json.RawMessage(input), q.name, 0,
		nil, nil, nil, nil, false, nullString(sp.traceparent())).Scan(&queueFound, &inserted, &ignored)
	if err != nil {
		return false, fmt.Errorf("durable: enqueue workflow %q id %q on queue %q: %w", def.name, id, q.name, err)
	}
	if queueFound == 0 {
		return false, fmt.Errorf("%w: %q", ErrQueueNotFound, q.name)
	}
	if inserted == 1 {
		e.queueReady(q)
		return true, nil
	}
	return false, e.checkExisting(ctx, e.pool, id, def.name, nil, "")
}
