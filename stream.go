package durable

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/internal/errs"
	"github.com/durable-go/durable/internal/service"
	"github.com/durable-go/durable/internal/stream"
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
var ErrStreamClosed = errs.StreamClosed

// streamReadBatch is how many entries a StreamRead reads at once.
const streamReadBatch = 1000

// StreamEntry is one entry of a stream.
type StreamEntry[T any] struct {
	Offset    int64
	Value     T
	CreatedAt time.Time
}

// StreamWrite appends v to the stream key of the calling workflow, from
// workflow code: exactly once, as a replay skips the entries its earlier
// executions wrote. Inside a step, use [StreamWriteFromStep]. It returns
// once the entry is queued; the entry is written within milliseconds, and
// at the latest before the run's next step records its outcome or the run
// finishes. It fails with [ErrStreamClosed] after [StreamClose], with
// [ErrInvalidArgument] for a bad key, and with [*PayloadTooLargeError] for
// a value over Config.MaxPayloadBytes.
func StreamWrite[T any](wctx Context, key string, v T) error {
	if wctx == nil {
		return fmt.Errorf("%w: durable.StreamWrite needs the workflow's durable.Context", ErrInvalidArgument)
	}
	return streamWrite(wctx, wctx.workflowRun(), true, key, v)
}

// StreamWriteFromStep appends v to the stream key of the workflow, from
// inside one of its steps: ctx is the context the step function got. That
// is how a step streams what arrives while it runs (a model's tokens). It
// is at least once per attempt: a step that runs again (a retry, or a
// crash before its checkpoint) writes its entries again. The entry is
// stored before the step records its outcome (a TxStep's right after its
// commit). It fails like [StreamWrite], and with [ErrInvalidArgument] when
// ctx is not a step's.
func StreamWriteFromStep[T any](ctx context.Context, key string, v T) error {
	if ctx == nil {
		return fmt.Errorf("%w: durable.StreamWriteFromStep needs the step's context", ErrInvalidArgument)
	}
	_, inStep := StepInfoFrom(ctx)
	r := runFromContext(ctx)
	if !inStep || r == nil {
		return fmt.Errorf("%w: durable.StreamWriteFromStep must be called with the context of a step function (in workflow code, use durable.StreamWrite)",
			ErrInvalidArgument)
	}
	return streamWrite(ctx, r, false, key, v)
}

// streamWrite queues v as the next entry of stream key of r. inWorkflow
// marks a write by workflow code, deduplicated on replay.
func streamWrite[T any](ctx context.Context, r *run, inWorkflow bool, key string, v T) error {
	if err := checkName("stream key", key); err != nil {
		return err
	}
	value, err := encodeArg(v, r.e.cfg.MaxPayloadBytes, "stream %q entry", key)
	if err != nil || r.replaying != nil {
		return err // a replay writes nothing
	}
	return r.e.streamw.Append(ctx, (*streamRun)(r), inWorkflow, key, value, false)
}

// StreamClose closes the stream key of the calling workflow: readers end
// after its last entry, and later writes fail with [ErrStreamClosed].
// Closing a closed stream does nothing. It returns once every entry the run
// wrote so far, and the close, are stored.
func StreamClose(wctx Context, key string) error {
	if wctx == nil {
		return fmt.Errorf("%w: durable.StreamClose needs the workflow's durable.Context", ErrInvalidArgument)
	}
	if err := checkName("stream key", key); err != nil {
		return err
	}
	r := wctx.workflowRun()
	if r.replaying != nil {
		return nil // a replay writes nothing
	}
	if err := r.e.streamw.Append(wctx, (*streamRun)(r), true, key, nil, true); err != nil {
		return err
	}
	return r.e.streamw.Flush(wctx, (*streamRun)(r), "close stream "+key)
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
			p, err := readStream[T](ctx, e.pool, e.sq, workflowID, key, next, streamReadBatch)
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
			t := time.NewTimer(e.listener.interval())
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
	p, err := readStream[T](ctx, e.pool, e.sq, workflowID, key, from, limit)
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
	rows, err := sq.Read(ctx, pool, sysdb.ReadParams{WorkflowID: workflowID, Key: key, From: from, Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("durable: read stream %q of workflow %q: %w", key, workflowID, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%w: %q (reading stream %q)", ErrWorkflowNotFound, workflowID, key)
	}
	p := &streamPage[T]{next: from}
	closedSeen := false
	for _, row := range rows {
		if row.Offset == nil {
			continue
		}
		off := *row.Offset
		p.rows++
		if row.Closed {
			closedSeen = true
			p.next = off
			continue
		}
		ent := StreamEntry[T]{Offset: off, CreatedAt: row.CreatedAt}
		if err := json.Unmarshal(row.Value, &ent.Value); err != nil {
			return nil, &DecodeError{WorkflowID: workflowID, What: fmt.Sprintf("stream %q entry %d", key, off), Err: err}
		}
		p.entries = append(p.entries, ent)
		p.next = off + 1
	}
	last := rows[len(rows)-1]
	finished, tailClosed := Status(last.Status).Finished(), last.TailClosed
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

// streamService is what the engine needs of its stream writer
// (internal/stream): started at Launch and stopped at Shutdown, it writes
// the entries runs append.
type streamService interface {
	service.Service
	Append(ctx context.Context, r stream.Run, inWorkflow bool, key string, value []byte, closing bool) error
	Flush(ctx context.Context, r stream.Run, what string) error
	Release(r stream.Run)
}

// newStreamWriter makes the engine's stream writer (in New).
func newStreamWriter(e *Engine) streamService {
	return stream.New(stream.Config{
		DB:        e.pool,
		Queries:   e.sq,
		Notify:    !e.cfg.PollOnly,
		Notified:  func(id string) { e.hub.Notified("s:" + id) },
		Transient: isTransient,
		Logger:    e.log,
	})
}

// streamRun is a run as the stream writer sees it.
type streamRun run

func (s *streamRun) ID() string               { return s.id }
func (s *streamRun) Epoch() int64             { return s.epoch }
func (s *streamRun) Context() context.Context { return s.ctx }
func (s *streamRun) Halted() error            { return (*run)(s).halted() }
func (s *streamRun) Halt(err error)           { (*run)(s).halt(err) }
func (s *streamRun) WaitEnded(ctx context.Context, what string) error {
	return (*run)(s).waitEnded(ctx, what)
}
func (s *streamRun) Logger() *slog.Logger { return (*run)(s).log() }

// flushStreams waits until every stream entry r queued so far is stored.
// Call it before recording a step's outcome (ctx: the step's) and before
// finishing the run (ctx: the run's). While the database is away the wait
// goes on (the writer retries), until ctx or the run's context ends. A
// failure (the run was fenced or cancelled, the engine stopped, its
// deadline passed) halts the run and is returned; ctx alone ending (a
// step's timeout) returns its error, and the step's attempt fails.
func (r *run) flushStreams(ctx context.Context) error {
	if err := r.e.streamw.Flush(ctx, (*streamRun)(r), "stream entries not stored"); err != nil {
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
	r.e.streamw.Release((*streamRun)(r))
}
