package stream

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/durable-go/durable/internal/errs"
	"github.com/durable-go/durable/internal/sysdb"
)

// Run is one execution of a workflow run in this process, as the writer
// sees it. The writer keeps its state per Run value until Release.
type Run interface {
	// ID is the run's workflow ID.
	ID() string
	// Epoch is the epoch the run executes under: its entries are written
	// only while the run is pending at that epoch.
	Epoch() int64
	// Context ends when the run must stop; the writer's waits end with it.
	Context() context.Context
	// Halted returns why the run must stop, or nil.
	Halted() error
	// Halt records why the run must stop (its entries were rejected or
	// could not be stored); the first reason wins.
	Halt(err error)
	// WaitEnded returns the error of a wait that ended because ctx or the
	// run's context ended; what names the wait.
	WaitEnded(ctx context.Context, what string) error
	// Logger logs about the run.
	Logger() *slog.Logger
}

// runStreams is the stream state of one Run.
type runStreams struct {
	r     Run
	id    string
	epoch int64

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

// state returns r's stream state, made on first use.
func (w *Writer) state(r Run) *runStreams {
	if v, ok := w.runs.Load(r); ok {
		return v.(*runStreams)
	}
	v, _ := w.runs.LoadOrStore(r, &runStreams{r: r, id: r.ID(), epoch: r.Epoch(), keys: map[string]*streamKey{}, progress: make(chan struct{})})
	return v.(*runStreams)
}

// Append queues one entry of stream key of r: value, or the close marker
// when closing. inWorkflow marks a write by workflow code, which a replay
// of the run does not write again; a step's write is written each time.
// Its waits (for where the stream stands, for room in the queue) end
// with ctx or the run's context. It fails with errs.StreamClosed after
// the close, and with the run's error once its entries failed.
func (w *Writer) Append(ctx context.Context, r Run, inWorkflow bool, key string, value []byte, closing bool) error {
	if h := r.Halted(); h != nil {
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
		return fmt.Errorf("durable: write to stream %q of workflow %q: %w", key, rs.id, errs.StreamClosed)
	}
	e := &entry{rs: rs, key: key, off: ks.next, value: value, closed: closing, wseq: wseq}
	ks.next++
	ks.closed = closing
	rs.appended++
	w.queue(e) // under rs.mu, so the run's entries queue in offset order
	return nil
}

// Flush waits until every entry r queued so far is stored, and returns
// why they will not be if so; or it returns when ctx or the run's context
// ends first (see Run.WaitEnded; what names the wait). A run that queued
// nothing returns at once.
func (w *Writer) Flush(ctx context.Context, r Run, what string) error {
	v, ok := w.runs.Load(r)
	if !ok {
		return nil
	}
	return v.(*runStreams).wait(ctx, what)
}

// Release forgets r's state when its execution here ends. Entries still
// queued are written (or rejected) all the same.
func (w *Writer) Release(r Run) {
	w.runs.Delete(r)
}

// loadKey returns the state of stream key of the run, reading where it
// stands from the database on the run's first write to it. The read rides
// out a database outage until ctx or the run's context ends.
func (w *Writer) loadKey(ctx context.Context, rs *runStreams, key string) (*streamKey, error) {
	r := rs.r
	rs.mu.Lock()
	ks := rs.keys[key]
	if ks != nil {
		rs.mu.Unlock()
		select {
		case <-ks.ready:
		case <-ctx.Done():
			return nil, r.WaitEnded(ctx, "read stream "+key)
		case <-r.Context().Done():
			return nil, r.WaitEnded(ctx, "read stream "+key)
		}
		if ks.err != nil {
			if ctx.Err() == nil && r.Context().Err() == nil && r.Halted() == nil {
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

	var st sysdb.KeyStateRow
	qctx, cancel := context.WithCancel(ctx)
	defer context.AfterFunc(r.Context(), cancel)()
	err := w.retry(qctx, func(ctx context.Context) error {
		var err error
		st, err = w.cfg.Queries.KeyState(ctx, w.cfg.DB, sysdb.KeyStateParams{WorkflowID: rs.id, Key: key})
		return err
	}, func(attempt int, err error) {
		if attempt == 1 || attempt%10 == 0 {
			r.Logger().Warn("durable: database read failed, retrying", "op", "read stream state", "attempt", attempt, "err", err)
		}
	})
	cancel()
	if err != nil {
		switch {
		case r.Halted() != nil:
			err = r.Halted()
		case ctx.Err() != nil || r.Context().Err() != nil:
			err = r.WaitEnded(ctx, "read stream "+key)
		default:
			err = fmt.Errorf("durable: workflow %q: read stream %q: %w", rs.id, key, err)
		}
		ks.err = err
		rs.mu.Lock()
		delete(rs.keys, key) // the next write tries again
		rs.mu.Unlock()
		return nil, err
	}
	ks.replayed = -1
	if st.LastOffset != nil {
		ks.next = *st.LastOffset + 1
	}
	if st.MaxWseq != nil {
		ks.replayed = *st.MaxWseq
	}
	ks.closed = st.Closed
	return ks, nil
}

// wait blocks until every entry queued before the call is stored, or
// returns why they will not be; or it returns when ctx or the run's
// context ends first (see Run.WaitEnded; what names the wait).
func (rs *runStreams) wait(ctx context.Context, what string) error {
	rs.mu.Lock()
	target := rs.appended
	for rs.err == nil && rs.flushed < target {
		ch := rs.progress
		rs.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return rs.r.WaitEnded(ctx, what)
		case <-rs.r.Context().Done():
			return rs.r.WaitEnded(ctx, what)
		}
		rs.mu.Lock()
	}
	err := rs.err
	rs.mu.Unlock()
	return err
}

// settle records that n more entries are stored, or that the run's
// entries failed with err (which halts the run).
func (rs *runStreams) settle(n int64, err error) {
	if err != nil {
		// The run halts before any waiter wakes: a Flush that returns
		// err finds the run already halted.
		rs.r.Halt(err)
	}
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
}

func (rs *runStreams) failed() bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.err != nil
}
