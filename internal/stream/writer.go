// Package stream writes the stream entries of the runs executing in one
// engine. Entries queue in memory in FIFO order and one loop writes them
// in multi-row statements, with no artificial delay: while one statement
// is in flight the next batch gathers. Since one batch is written at a
// time, the stored entries of a run are always a prefix of those it
// queued. Writers block while too much is queued (back-pressure).
package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/errs"
	"github.com/durable-go/durable/internal/service"
	"github.com/durable-go/durable/internal/sysdb"
	"github.com/durable-go/durable/internal/testsignal"
)

// Defaults of the Config limits.
const (
	DefaultBatchRows       = 2000
	DefaultBatchBytes      = 2 << 20
	DefaultMaxPendingRows  = 20000
	DefaultMaxPendingBytes = 32 << 20
)

// Retry delays of a statement that failed with a transient error: the
// first, doubled after each failure up to the last.
const (
	firstRetryDelay = 20 * time.Millisecond
	maxRetryDelay   = 2 * time.Second
)

// Config is what a Writer needs from its engine.
type Config struct {
	// DB runs the statements: the engine's pool.
	DB sysdb.DBTX
	// Queries are the stream statements of the engine's schema.
	Queries *sysdb.StreamQueries
	// Notify makes a write notify the readers in other processes that
	// watch its run. Defaults to false (no notification: the engine
	// polls).
	Notify bool
	// Notified wakes the readers in this process of run id, once entries
	// of it are stored. Defaults to none.
	Notified func(id string)
	// Transient reports an error worth retrying: the database is away.
	// Defaults to none: every error is final.
	Transient func(err error) bool
	// Logger logs the retries. Defaults to slog.Default().
	Logger *slog.Logger

	// BatchRows is the most entries one statement writes. Defaults to
	// DefaultBatchRows.
	BatchRows int
	// BatchBytes is the most bytes of values one statement writes (a
	// larger single value goes alone). Defaults to DefaultBatchBytes.
	BatchBytes int
	// MaxPendingRows is how many entries may wait in memory before
	// writers block. Defaults to DefaultMaxPendingRows.
	MaxPendingRows int
	// MaxPendingBytes is how many bytes of values may wait in memory
	// before writers block. Defaults to DefaultMaxPendingBytes.
	MaxPendingBytes int
}

func (c Config) withDefaults() Config {
	if c.Notified == nil {
		c.Notified = func(string) {}
	}
	if c.Transient == nil {
		c.Transient = func(error) bool { return false }
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.BatchRows <= 0 {
		c.BatchRows = DefaultBatchRows
	}
	if c.BatchBytes <= 0 {
		c.BatchBytes = DefaultBatchBytes
	}
	if c.MaxPendingRows <= 0 {
		c.MaxPendingRows = DefaultMaxPendingRows
	}
	if c.MaxPendingBytes <= 0 {
		c.MaxPendingBytes = DefaultMaxPendingBytes
	}
	return c
}

// Writer writes the stream entries of one engine's runs. Entries are
// written between Start and Stop; those queued while it is stopped wait
// for Start, and their writers' waits end with their runs.
type Writer struct {
	cfg  Config
	loop service.Loop
	kick chan struct{} // wakes the loop when entries queue while it is idle

	runs sync.Map // Run -> *runStreams, while the run executes here

	mu       sync.Mutex
	pending  []*entry
	bytes    int
	flushing bool          // the loop was kicked and has not found the queue empty since
	space    chan struct{} // closed (and replaced) when pending shrinks

	signals signals
}

// signals tell the tests what the writer does.
type signals struct {
	Writing      testsignal.Signal[int]      // a batch of n entries is about to be written
	Written      testsignal.Signal[int]      // a statement of n entries ended (0: none sent, every run failed)
	Retrying     testsignal.Signal[error]    // a statement failed with a transient error; it is tried again
	WaitingSpace testsignal.Signal[struct{}] // a writer blocks until entries leave the queue
}

// entry is one entry waiting to be written.
type entry struct {
	rs     *runStreams
	key    string
	off    int64
	value  []byte // nil for the close marker
	closed bool
	wseq   int64 // rank among the run's workflow-code stream calls; -1: a step's write
}

// New returns a stopped writer.
func New(cfg Config) *Writer {
	return &Writer{cfg: cfg.withDefaults(), kick: make(chan struct{}, 1), space: make(chan struct{})}
}

// Start starts the loop that writes queued entries.
func (w *Writer) Start(ctx context.Context) error {
	return w.loop.StartLoop(ctx, w.run)
}

// Stop stops the loop. A statement in flight is cancelled, and its entries
// and those still queued fail with errs.Shutdown.
func (w *Writer) Stop(ctx context.Context) error {
	return w.loop.Stop(ctx)
}

func (w *Writer) run(ctx context.Context) {
	for {
		select {
		case <-w.kick:
			w.flush(ctx)
		case <-ctx.Done():
			w.flush(ctx) // what is queued fails at once
			return
		}
	}
}

// queue appends e to the queue and wakes the loop if it is idle.
func (w *Writer) queue(e *entry) {
	w.mu.Lock()
	w.pending = append(w.pending, e)
	w.bytes += len(e.value)
	start := !w.flushing
	w.flushing = true
	w.mu.Unlock()
	if start {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// flush writes batches until nothing is queued.
func (w *Writer) flush(ctx context.Context) {
	for {
		w.mu.Lock()
		n, size := 0, 0
		for n < len(w.pending) && n < w.cfg.BatchRows {
			l := len(w.pending[n].value)
			if n > 0 && size+l > w.cfg.BatchBytes {
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
		batch := make([]*entry, n)
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
		w.signals.Writing.Signal(n)
		w.write(ctx, batch)
	}
}

// waitSpace blocks while too much is queued, until ctx or the run's
// context ends.
func (w *Writer) waitSpace(ctx context.Context, r Run) error {
	for {
		w.mu.Lock()
		if len(w.pending) < w.cfg.MaxPendingRows && w.bytes < w.cfg.MaxPendingBytes {
			w.mu.Unlock()
			return nil
		}
		ch := w.space
		w.mu.Unlock()
		w.signals.WaitingSpace.Signal(struct{}{})
		select {
		case <-ch:
		case <-ctx.Done():
			return r.WaitEnded(ctx, "stream write")
		case <-r.Context().Done():
			return r.WaitEnded(ctx, "stream write")
		}
	}
}

type runEpoch struct {
	id    string
	epoch int64
}

// write stores one batch and settles the runs it holds entries of.
func (w *Writer) write(ctx context.Context, batch []*entry) {
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
	defer func() { w.signals.Written.Signal(len(rows)) }()
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
		ids[i], keys[i], offs[i], epochs[i] = row.rs.id, row.key, row.off, row.rs.epoch
		values[i], closed[i] = row.value, row.closed
		if row.wseq >= 0 {
			wseqs[i] = &row.wseq
		}
	}
	var accepted map[runEpoch]bool
	err := w.retry(ctx, func(ctx context.Context) error {
		res, err := w.cfg.Queries.Append(ctx, w.cfg.DB, sysdb.AppendParams{WorkflowIDs: ids, Keys: keys, Offsets: offs,
			Values: values, Closed: closed, Wseqs: wseqs, Epochs: epochs, Notify: w.cfg.Notify})
		if err != nil {
			return err
		}
		accepted = map[runEpoch]bool{}
		for _, a := range res {
			accepted[runEpoch{a.WorkflowID, a.Epoch}] = true
		}
		return nil
	}, func(attempt int, err error) {
		w.signals.Retrying.Signal(err)
		if attempt == 1 || attempt%10 == 0 {
			w.cfg.Logger.Warn("durable: writing stream entries failed, retrying", "attempt", attempt, "err", err)
		}
	})
	for rs, c := range counts {
		switch {
		case err != nil && ctx.Err() != nil:
			rs.settle(0, fmt.Errorf("durable: workflow %q: stream entries not written: %w", rs.id, errs.Shutdown))
		case err != nil:
			rs.settle(0, fmt.Errorf("durable: workflow %q: write stream entries: %w", rs.id, err))
		case accepted[runEpoch{rs.id, rs.epoch}]:
			rs.settle(c, nil)
		default:
			rs.settle(0, w.rejected(ctx, rs))
		}
	}
	if err == nil {
		for k := range accepted {
			w.cfg.Notified(k.id)
		}
	}
}

// retry runs op until it succeeds, fails with an error that is not
// transient, or ctx ends; onRetry is called before each new try.
func (w *Writer) retry(ctx context.Context, op func(ctx context.Context) error, onRetry func(attempt int, err error)) error {
	delay := firstRetryDelay
	for attempt := 1; ; attempt++ {
		err := op(ctx)
		if err == nil || !w.cfg.Transient(err) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		onRetry(attempt, err)
		// ±20%, so that writers cut off together do not retry in step.
		t := time.NewTimer(time.Duration(float64(delay) * (0.8 + 0.4*rand.Float64())))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		delay = min(delay*2, maxRetryDelay)
	}
}

// rejected explains why the entries of rs were not accepted.
func (w *Writer) rejected(ctx context.Context, rs *runStreams) error {
	st, err := w.cfg.Queries.RunState(ctx, w.cfg.DB, rs.id)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("durable: workflow %q was deleted while running; stream entries rejected: %w", rs.id, errs.Fenced)
	case err != nil:
		return fmt.Errorf("durable: workflow %q: stream entries rejected (owner check failed: %v): %w", rs.id, err, errs.Fenced)
	case st.Status == "cancelled":
		return fmt.Errorf("durable: workflow %q: stream entries rejected: %w", rs.id, errs.Cancelled)
	case st.Epoch != rs.epoch:
		return fmt.Errorf("durable: workflow %q: stream entries rejected: owner epoch is %d, this executor had %d: %w", rs.id, st.Epoch, rs.epoch, errs.Fenced)
	case st.Status != "pending":
		return fmt.Errorf("durable: workflow %q: stream entries rejected: the run is %s: %w", rs.id, st.Status, errs.Fenced)
	}
	return fmt.Errorf("durable: workflow %q: stream entries rejected for an unknown reason: %w", rs.id, errs.Fenced)
}
