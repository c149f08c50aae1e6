package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/internal/notify"
	"github.com/durable-go/durable/internal/sysdb"
)

// Streams are an ordered, offset-addressed side channel per workflow and
// key: model tokens, progress and lifecycle events that a UI follows while
// the run goes on. Entries are numbered 0, 1, 2, ... per (workflow, key) in
// write order, without gaps; a stream ends with [StreamClose] or when its
// workflow finishes.
//
// Writes are buffered and written by the engine in multi-row statements,
// with no artificial delay: while one write is in flight the next batch
// gathers. A step's entries are stored before its outcome is recorded (a
// TxStep's right after its commit, as the flush needs a connection of its
// own) and a run's before it finishes, so an entry is never lost once its
// step completed. Delivery is:
//   - exactly once for writes made by workflow code: a replay of the
//     workflow skips the entries its earlier executions wrote (workflow
//     code must call the stream functions in a deterministic order, like
//     steps);
//   - at least once per attempt for writes made inside a step: a step that
//     runs again (retry, or crash before its checkpoint) appends its
//     entries again. That is the accepted semantics of a side channel;
//     readers that need more can dedupe on a field of the value.
//
// Only the run's current owner can append: entries of a fenced executor
// are rejected like its checkpoints.

// Limits of stream reads.
const (
	StreamEntriesLimitDefault = 1000
	StreamEntriesLimitMax     = 10000
)

// ErrStreamClosed: a write to a stream that was closed with [StreamClose].
var ErrStreamClosed = errors.New("durable: stream closed")

// Stream writer limits: rows and bytes per statement, and how much may wait
// in memory before writers block.
const (
	streamBatchRows       = 2000
	streamBatchBytes      = 2 << 20
	streamMaxPendingRows  = 20000
	streamMaxPendingBytes = 32 << 20
	streamReadBatch       = 1000
)

// StreamEntry is one entry of a stream.
type StreamEntry[T any] struct {
	Offset    int64
	Value     T
	CreatedAt time.Time
}

// StreamWrite appends v to the stream key of the calling workflow. ctx is
// the workflow's [Context] or the context of one of its steps. It returns
// once the entry is queued; the entry is written within milliseconds, and
// at the latest before the step (or the run) records its outcome. It fails
// with [ErrStreamClosed] after [StreamClose], with [ErrInvalidArgument]
// outside a workflow or for a bad key, and with [*PayloadTooLargeError]
// for a value over Config.MaxPayloadBytes.
func StreamWrite[T any](ctx context.Context, key string, v T) error {
	r, inWorkflow, err := streamRun(ctx, "StreamWrite")
	if err != nil {
		return err
	}
	if err := checkName("stream key", key); err != nil {
		return err
	}
	value, err := r.e.encodeArg(v, "stream %q entry", key)
	if err != nil {
		return err
	}
	return r.e.streams().append(ctx, r, inWorkflow, key, value, false)
}

// StreamClose closes the stream key of the calling workflow: readers end
// after its last entry, and later writes fail with [ErrStreamClosed].
// Closing a closed stream does nothing. It returns once every entry the run
// wrote so far, and the close, are stored (inside a TxStep, that wait holds
// the step's connection: close the stream after the step instead).
func StreamClose(ctx context.Context, key string) error {
	r, inWorkflow, err := streamRun(ctx, "StreamClose")
	if err != nil {
		return err
	}
	if err := checkName("stream key", key); err != nil {
		return err
	}
	w := r.e.streams()
	if err := w.append(ctx, r, inWorkflow, key, nil, true); err != nil {
		return err
	}
	return w.state(r).wait(ctx, "close stream "+key)
}

// StreamRead returns an iterator over the entries of stream key of run
// workflowID from offset from, in order. It yields entries as they are
// written, waiting for new ones (woken by notifications, with a poll every
// Config.PollInterval as a safety net), and ends after the last entry
// when the stream is closed or the workflow finished. A reader may start
// at any offset, before, during or after the run. An error (bad argument,
// [ErrWorkflowNotFound], an undecodable entry, ctx ending) is yielded once
// and ends the iteration.
func StreamRead[T any](ctx context.Context, e *Engine, workflowID, key string, from int64) iter.Seq2[StreamEntry[T], error] {
	return func(yield func(StreamEntry[T], error) bool) {
		var zero StreamEntry[T]
		if err := checkStreamRead(workflowID, key, from); err != nil {
			yield(zero, err)
			return
		}
		sw := e.streams()
		if !e.cfg.PollOnly {
			// Ask the run's writers for notifications (stream entries and
			// the finish), as a result waiter does, before the first read:
			// what is written after this is notified, what was written
			// before it is read. No row: the run finished or does not exist.
			if _, err := e.q.WatchWorkflow(ctx, e.pool, workflowID); err != nil {
				yield(zero, fmt.Errorf("durable: read stream %q of workflow %q: %w", key, workflowID, err))
				return
			}
		}
		next := from
		for {
			// Subscribe before reading, so a write or a finish between the
			// read and the wait is not missed.
			entryKey := "s:" + workflowID
			ew := e.hub.Subscribe(entryKey)
			fw := e.hub.Subscribe(workflowID)
			unsubscribe := func() {
				e.hub.Unsubscribe(entryKey, ew)
				e.hub.Unsubscribe(workflowID, fw)
			}
			p, err := readStream[T](ctx, e.pool, sw.sq, workflowID, key, next, streamReadBatch)
			if err != nil {
				unsubscribe()
				yield(zero, err)
				return
			}
			for _, ent := range p.entries {
				if !yield(ent, nil) {
					unsubscribe()
					return
				}
			}
			next = p.next
			if p.done {
				unsubscribe()
				return
			}
			if p.rows == streamReadBatch {
				unsubscribe()
				continue
			}
			t := time.NewTimer(e.pollInterval())
			select {
			case <-ew.Done():
			case <-fw.Done():
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				unsubscribe()
				yield(zero, fmt.Errorf("durable: read stream %q of workflow %q: %w", key, workflowID, ctx.Err()))
				return
			}
			t.Stop()
			unsubscribe()
		}
	}
}

// StreamEntries reads up to limit entries (0 means
// StreamEntriesLimitDefault) of stream key of run workflowID from offset
// from, without waiting. done reports that the entries returned reach the
// end of the stream: it is closed or its workflow finished, so nothing will
// follow them. To read on, call again from the last offset plus one.
func StreamEntries[T any](ctx context.Context, e *Engine, workflowID, key string, from int64, limit int) (entries []StreamEntry[T], done bool, err error) {
	if err := checkStreamRead(workflowID, key, from); err != nil {
		return nil, false, err
	}
	if limit == 0 {
		limit = StreamEntriesLimitDefault
	}
	if limit < 0 || limit > StreamEntriesLimitMax {
		return nil, false, fmt.Errorf("%w: StreamEntries limit %d is outside 0..%d", ErrInvalidArgument, limit, StreamEntriesLimitMax)
	}
	p, err := readStream[T](ctx, e.pool, e.streams().sq, workflowID, key, from, limit)
	if err != nil {
		return nil, false, err
	}
	return p.entries, p.done, nil
}

func checkStreamRead(workflowID, key string, from int64) error {
	if err := checkName("workflow ID", workflowID); err != nil {
		return err
	}
	if err := checkName("stream key", key); err != nil {
		return err
	}
	if from < 0 {
		return fmt.Errorf("%w: stream offset %d is negative", ErrInvalidArgument, from)
	}
	return nil
}

type streamPage[T any] struct {
	entries []StreamEntry[T]
	rows    int   // rows read, the close marker included
	next    int64 // offset to read from next
	done    bool  // nothing follows
}

func readStream[T any](ctx context.Context, pool *pgxpool.Pool, sq *sysdb.StreamQueries, workflowID, key string, from int64, limit int) (*streamPage[T], error) {
	rows, err := pool.Query(ctx, sq.Read, workflowID, key, from, limit)
	if err != nil {
		return nil, fmt.Errorf("durable: read stream %q of workflow %q: %w", key, workflowID, err)
	}
	defer rows.Close()
	p := &streamPage[T]{next: from}
	found, finished, tailClosed, closedSeen := false, false, false, false
	for rows.Next() {
		var status string
		var tail *bool
		var off *int64
		var value []byte
		var closed *bool
		var at *time.Time
		if err := rows.Scan(&status, &tail, &off, &value, &closed, &at); err != nil {
			return nil, fmt.Errorf("durable: read stream %q of workflow %q: %w", key, workflowID, err)
		}
		found = true
		finished = Status(status).Finished()
		tailClosed = tail != nil && *tail
		if off == nil {
			continue
		}
		p.rows++
		if closed != nil && *closed {
			closedSeen = true
			p.next = *off
			continue
		}
		ent := StreamEntry[T]{Offset: *off}
		if at != nil {
			ent.CreatedAt = *at
		}
		if err := json.Unmarshal(value, &ent.Value); err != nil {
			return nil, &DecodeError{WorkflowID: workflowID, What: fmt.Sprintf("stream %q entry %d", key, *off), Err: err}
		}
		p.entries = append(p.entries, ent)
		p.next = *off + 1
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("durable: read stream %q of workflow %q: %w", key, workflowID, err)
	}
	if !found {
		return nil, fmt.Errorf("%w: %q (reading stream %q)", ErrWorkflowNotFound, workflowID, key)
	}
	p.done = closedSeen || ((tailClosed || finished) && p.rows < limit)
	return p, nil
}

// runKey carries the *run in the contexts of workflow and step code.
type runKey struct{}

// runFromContext returns the run whose workflow or step context ctx is (or
// derives from), or nil.
func runFromContext(ctx context.Context) *run {
	if wctx, ok := ctx.(Context); ok {
		return wctx.workflowRun()
	}
	r, _ := ctx.Value(runKey{}).(*run)
	return r
}

// streamRun finds the run a stream write belongs to. inWorkflow reports a
// write by workflow code (deduplicated on replay) rather than by a step.
func streamRun(ctx context.Context, op string) (r *run, inWorkflow bool, err error) {
	if ctx == nil {
		return nil, false, fmt.Errorf("%w: durable.%s needs a context", ErrInvalidArgument, op)
	}
	_, inStep := StepInfoFrom(ctx)
	if r = runFromContext(ctx); r == nil {
		if inStep {
			return nil, false, fmt.Errorf("%w: durable.%s: this step's context does not carry its workflow run", ErrInvalidArgument, op)
		}
		return nil, false, fmt.Errorf("%w: durable.%s must be called with the context of workflow code (a durable.Context) or of a step function; this context belongs to no workflow run",
			ErrInvalidArgument, op)
	}
	return r, !inStep, nil
}

// streamWriter writes the stream entries of one engine. Entries queue in
// FIFO order and one flush at a time writes them, so the stored entries of
// a run are always a prefix of those it wrote. It does not reference the
// engine, so the engine can be collected (see streamWriters).
type streamWriter struct {
	pool    *pgxpool.Pool
	sq      *sysdb.StreamQueries
	hub     *notify.Hub[*outcome]
	log     *slog.Logger
	hardCtx context.Context
	notify  bool

	runs sync.Map // *run -> *runStreams, while the run executes here

	mu       sync.Mutex
	pending  []*streamRow
	bytes    int
	flushing bool
	space    chan struct{} // closed (and replaced) when pending shrinks
}

// streamRow is one entry waiting to be written.
type streamRow struct {
	rs     *runStreams
	key    string
	off    int64
	value  []byte // nil for the close marker
	closed bool
	wseq   int64 // rank among the run's workflow-code stream calls; -1: a step's write
}

// runStreams is the stream state of one execution of a run.
type runStreams struct {
	r *run

	mu       sync.Mutex
	keys     map[string]*streamKey
	wseq     int64         // workflow-code stream calls so far
	appended int64         // entries queued
	flushed  int64         // entries stored: always the first ones queued
	err      error         // entries were rejected or could not be stored
	progress chan struct{} // closed (and replaced) when flushed or err changes
}

// streamKey is where a run's writes to one stream stand.
type streamKey struct {
	ready    chan struct{} // closed once loaded from the database
	err      error         // the load failed
	next     int64         // offset of the next entry
	replayed int64         // highest workflow-code rank already stored; -1: none
	closed   bool
}

// newStreamWriter makes the engine's stream writer (in New).
func newStreamWriter(e *Engine) *streamWriter {
	return &streamWriter{
		pool:    e.pool,
		sq:      sysdb.NewStreamQueries(e.cfg.Schema, e.q.NotifyTo),
		hub:     e.hub,
		log:     e.log,
		hardCtx: e.hardCtx,
		notify:  !e.cfg.PollOnly,
		space:   make(chan struct{}),
	}
}

// streams returns the engine's stream writer.
func (e *Engine) streams() *streamWriter { return e.streamw }

// flushStreams waits until every stream entry r queued so far is stored.
// Call it before recording a step's outcome (ctx: the step's) and before
// finishing the run (ctx: the run's). While the database is away the wait
// goes on (the writer retries), until ctx or the run's context ends. A
// failure (the run was fenced or cancelled, the engine stopped, its
// deadline passed) halts the run and is returned; ctx alone ending (a
// step's timeout) returns its error, and the step's attempt fails.
func (r *run) flushStreams(ctx context.Context) error {
	v, ok := r.e.streams().runs.Load(r)
	if !ok {
		return nil
	}
	if err := v.(*runStreams).wait(ctx, "stream entries not stored"); err != nil {
		if h := r.halted(); h != nil {
			return h
		}
		return err
	}
	return nil
}

// waitEnded explains why a stream call stopped waiting, its context ctx or
// the run's having ended: when the run's did (cancelled, past its deadline,
// the engine hard-stopped) the run halts and the halt reason is returned;
// when only ctx did (a step's timeout, the caller's own deadline), ctx's
// cause is, and the run goes on.
func (r *run) waitEnded(ctx context.Context, what string) error {
	if r.ctx.Err() != nil {
		return r.haltEnded(what)
	}
	return fmt.Errorf("durable: workflow %q: %s: %w", r.id, what, context.Cause(ctx))
}

// releaseStreams forgets r's stream state when its execution here ends.
// Entries still queued are written (or rejected) all the same.
func (r *run) releaseStreams() {
	r.e.streams().runs.Delete(r)
}

// state returns r's stream state, made on first use.
func (w *streamWriter) state(r *run) *runStreams {
	if v, ok := w.runs.Load(r); ok {
		return v.(*runStreams)
	}
	v, _ := w.runs.LoadOrStore(r, &runStreams{r: r, keys: map[string]*streamKey{}, progress: make(chan struct{})})
	return v.(*runStreams)
}

// append queues one entry (or the close marker) of stream key of r. Its
// waits (for the key's state, for room in the queue) end with ctx or the
// run's context.
func (w *streamWriter) append(ctx context.Context, r *run, inWorkflow bool, key string, value []byte, closing bool) error {
	if h := r.halted(); h != nil {
		return h
	}
	rs := w.state(r)
	wseq := int64(-1)
	if inWorkflow {
		rs.mu.Lock()
		wseq = rs.wseq
		rs.wseq++
		rs.mu.Unlock()
	}
	ks, err := w.loadKey(ctx, rs, key)
	if err != nil {
		return err
	}
	if err := w.waitSpace(ctx, r); err != nil {
		return err
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	switch {
	case rs.err != nil:
		return rs.err
	case wseq >= 0 && wseq <= ks.replayed:
		return nil // stored by an earlier execution of this workflow code
	case ks.closed && closing:
		return nil
	case ks.closed:
		return fmt.Errorf("durable: write to stream %q of workflow %q: %w", key, r.id, ErrStreamClosed)
	}
	row := &streamRow{rs: rs, key: key, off: ks.next, value: value, closed: closing, wseq: wseq}
	ks.next++
	ks.closed = closing
	rs.appended++
	// Queued under rs.mu, so the run's entries queue in offset order.
	w.mu.Lock()
	w.pending = append(w.pending, row)
	w.bytes += len(value)
	start := !w.flushing
	w.flushing = true
	w.mu.Unlock()
	if start {
		go w.flushLoop()
	}
	return nil
}

// loadKey returns the state of stream key of the run, reading where it
// stands from the database on the run's first write to it. The read rides
// out a database outage until ctx or the run's context ends.
func (w *streamWriter) loadKey(ctx context.Context, rs *runStreams, key string) (*streamKey, error) {
	r := rs.r
	rs.mu.Lock()
	ks := rs.keys[key]
	if ks != nil {
		rs.mu.Unlock()
		select {
		case <-ks.ready:
		case <-ctx.Done():
			return nil, r.waitEnded(ctx, "read stream "+key)
		case <-r.ctx.Done():
			return nil, r.waitEnded(ctx, "read stream "+key)
		}
		if ks.err != nil {
			if ctx.Err() == nil && r.ctx.Err() == nil && r.halted() == nil {
				return w.loadKey(ctx, rs, key) // the reader's own context ended (a step's timeout): read it here
			}
			return nil, ks.err
		}
		return ks, nil
	}
	ks = &streamKey{ready: make(chan struct{})}
	rs.keys[key] = ks
	rs.mu.Unlock()
	defer close(ks.ready)

	var last, maxWseq *int64
	var closed *bool
	qctx, cancel := context.WithCancel(ctx)
	defer context.AfterFunc(r.ctx, cancel)()
	err, _ := retryTransient(qctx, func(ctx context.Context) error {
		return w.pool.QueryRow(ctx, w.sq.KeyState, r.id, key).Scan(&last, &closed, &maxWseq)
	}, func(attempt int, err error) {
		if attempt == 1 || attempt%10 == 0 {
			r.log().Warn("durable: database read failed, retrying", "op", "read stream state", "attempt", attempt, "err", err)
		}
	})
	cancel()
	if err != nil {
		switch {
		case r.halted() != nil:
			err = r.halted()
		case ctx.Err() != nil || r.ctx.Err() != nil:
			err = r.waitEnded(ctx, "read stream "+key)
		default:
			err = fmt.Errorf("durable: workflow %q: read stream %q: %w", r.id, key, err)
		}
		ks.err = err
		rs.mu.Lock()
		delete(rs.keys, key) // the next write tries again
		rs.mu.Unlock()
		return nil, err
	}
	ks.replayed = -1
	if last != nil {
		ks.next = *last + 1
	}
	if maxWseq != nil {
		ks.replayed = *maxWseq
	}
	ks.closed = closed != nil && *closed
	return ks, nil
}

// waitSpace blocks while too much is queued, until ctx or the run's
// context ends.
func (w *streamWriter) waitSpace(ctx context.Context, r *run) error {
	for {
		w.mu.Lock()
		if len(w.pending) < streamMaxPendingRows && w.bytes < streamMaxPendingBytes {
			w.mu.Unlock()
			return nil
		}
		ch := w.space
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return r.waitEnded(ctx, "stream write")
		case <-r.ctx.Done():
			return r.waitEnded(ctx, "stream write")
		}
	}
}

// wait blocks until every entry queued before the call is stored, or
// returns why they will not be; or it returns when ctx or the run's
// context ends first (see waitEnded; what names the wait).
func (rs *runStreams) wait(ctx context.Context, what string) error {
	rs.mu.Lock()
	target := rs.appended
	for rs.err == nil && rs.flushed < target {
		ch := rs.progress
		rs.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return rs.r.waitEnded(ctx, what)
		case <-rs.r.ctx.Done():
			return rs.r.waitEnded(ctx, what)
		}
		rs.mu.Lock()
	}
	err := rs.err
	rs.mu.Unlock()
	return err
}

func (rs *runStreams) settle(n int64, err error) {
	rs.mu.Lock()
	if err != nil {
		if rs.err == nil {
			rs.err = err
		}
	} else {
		rs.flushed += n
	}
	close(rs.progress)
	rs.progress = make(chan struct{})
	rs.mu.Unlock()
	if err != nil {
		rs.r.halt(err)
	}
}

func (rs *runStreams) failed() bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.err != nil
}

// flushLoop writes batches until nothing is queued. There is at most one
// per engine.
func (w *streamWriter) flushLoop() {
	for {
		w.mu.Lock()
		n, size := 0, 0
		for n < len(w.pending) && n < streamBatchRows {
			l := len(w.pending[n].value)
			if n > 0 && size+l > streamBatchBytes {
				break
			}
			size += l
			n++
		}
		if n == 0 {
			w.flushing = false
			w.mu.Unlock()
			return
		}
		batch := make([]*streamRow, n)
		copy(batch, w.pending)
		clear(w.pending[:n])
		w.pending = w.pending[n:]
		if len(w.pending) == 0 {
			w.pending = nil
		}
		w.bytes -= size
		close(w.space)
		w.space = make(chan struct{})
		w.mu.Unlock()
		w.write(batch)
	}
}

type runEpoch struct {
	id    string
	epoch int64
}

// write stores one batch and settles the runs it holds entries of.
func (w *streamWriter) write(batch []*streamRow) {
	// Entries of a run that already failed are dropped: writing them would
	// leave a gap before them.
	rows := batch[:0:0]
	counts := map[*runStreams]int64{}
	for _, row := range batch {
		if _, seen := counts[row.rs]; !seen && row.rs.failed() {
			continue
		}
		counts[row.rs]++
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		return
	}
	n := len(rows)
	ids, keys := make([]string, n), make([]string, n)
	offs, epochs := make([]int64, n), make([]int64, n)
	values := make([]json.RawMessage, n)
	closed := make([]bool, n)
	wseqs := make([]*int64, n)
	for i, row := range rows {
		ids[i], keys[i], offs[i], epochs[i] = row.rs.r.id, row.key, row.off, row.rs.r.epoch
		values[i], closed[i] = row.value, row.closed
		if row.wseq >= 0 {
			wseqs[i] = &row.wseq
		}
	}
	var accepted map[runEpoch]bool
	err := w.retry(func(ctx context.Context) error {
		res, err := w.pool.Query(ctx, w.sq.Append, ids, keys, offs, values, closed, wseqs, epochs, w.notify)
		if err != nil {
			return err
		}
		accepted = map[runEpoch]bool{}
		for res.Next() {
			var k runEpoch
			var ignored *string
			if err := res.Scan(&k.id, &k.epoch, &ignored); err != nil {
				res.Close()
				return err
			}
			accepted[k] = true
		}
		return res.Err()
	})
	for rs, c := range counts {
		r := rs.r
		switch {
		case err != nil && w.hardCtx.Err() != nil:
			rs.settle(0, fmt.Errorf("durable: workflow %q: stream entries not written: %w", r.id, ErrShutdown))
		case err != nil:
			rs.settle(0, fmt.Errorf("durable: workflow %q: write stream entries: %w", r.id, err))
		case accepted[runEpoch{r.id, r.epoch}]:
			rs.settle(c, nil)
		default:
			rs.settle(0, w.rejected(r))
		}
	}
	if err == nil {
		for k := range accepted {
			w.hub.Notified("s:" + k.id) // readers in this process
		}
	}
}

// retry runs op until it succeeds, fails with a non-transient error, or
// the engine stops.
func (w *streamWriter) retry(op func(ctx context.Context) error) error {
	delay := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := op(w.hardCtx)
		if err == nil || !isTransient(err) {
			return err
		}
		if attempt == 1 || attempt%10 == 0 {
			w.log.Warn("durable: writing stream entries failed, retrying", "attempt", attempt, "err", err)
		}
		t := time.NewTimer(jitter(delay, 0.2))
		select {
		case <-t.C:
		case <-w.hardCtx.Done():
			t.Stop()
			return w.hardCtx.Err()
		}
		delay = min(delay*2, 2*time.Second)
	}
}

// rejected explains why the entries of r were not written.
func (w *streamWriter) rejected(r *run) error {
	var status string
	var epoch int64
	err := w.pool.QueryRow(w.hardCtx, w.sq.RunState, r.id).Scan(&status, &epoch)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("durable: workflow %q was deleted while running; stream entries rejected: %w", r.id, ErrFenced)
	case err != nil:
		return fmt.Errorf("durable: workflow %q: stream entries rejected (owner check failed: %v): %w", r.id, err, ErrFenced)
	case status == string(StatusCancelled):
		return fmt.Errorf("durable: workflow %q: stream entries rejected: %w", r.id, ErrCancelled)
	case epoch != r.epoch:
		return fmt.Errorf("durable: workflow %q: stream entries rejected: owner epoch is %d, this executor had %d: %w", r.id, epoch, r.epoch, ErrFenced)
	case status != string(StatusPending):
		return fmt.Errorf("durable: workflow %q: stream entries rejected: the run is %s: %w", r.id, status, ErrFenced)
	}
	return fmt.Errorf("durable: workflow %q: stream entries rejected for an unknown reason: %w", r.id, ErrFenced)
}
