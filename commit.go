package durable

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Group commit. Checkpoint writes of different runs that arrive while a
// write is in flight are coalesced into one multi-row statement and one
// commit. There is no artificial delay: a lone write goes out at once as a
// single-row statement; under concurrency the next batch gathers while the
// current ones are in flight. Latency stays one commit; throughput stops
// being one commit per step.

const (
	groupMaxInflight = 1   // concurrent flushes per kind of write: while one is in flight the next batch gathers
	groupMaxBatch    = 500 // rows per statement
)

type batchItem[T any] struct {
	v    T
	ok   bool // the row was written
	err  error
	done chan struct{}
}

// batcher coalesces items of one kind. The caller that finds a free flush
// slot becomes the leader: it flushes its own item with everything waiting,
// and hands any later arrivals to a new flush before returning.
type batcher[T any] struct {
	mu       sync.Mutex
	pending  []*batchItem[T]
	inflight int
	flush    func(items []*batchItem[T]) // sets ok/err of every item
}

// do writes v and reports whether its row was written.
func (b *batcher[T]) do(v T) (bool, error) {
	it := &batchItem[T]{v: v, done: make(chan struct{})}
	b.mu.Lock()
	if b.inflight >= groupMaxInflight {
		b.pending = append(b.pending, it)
		b.mu.Unlock()
		<-it.done
		return it.ok, it.err
	}
	b.inflight++
	batch := append(b.takeLocked(groupMaxBatch-1), it)
	b.mu.Unlock()
	b.run(batch)
	b.next()
	return it.ok, it.err
}

func (b *batcher[T]) takeLocked(n int) []*batchItem[T] {
	if len(b.pending) == 0 {
		return nil
	}
	n = min(n, len(b.pending))
	batch := make([]*batchItem[T], n, n+1)
	copy(batch, b.pending)
	b.pending = b.pending[n:]
	if len(b.pending) == 0 {
		b.pending = nil
	}
	return batch
}

func (b *batcher[T]) run(batch []*batchItem[T]) {
	b.flush(batch)
	for _, it := range batch {
		close(it.done)
	}
}

// next flushes what gathered meanwhile, in a new goroutine, or frees the
// flush slot.
func (b *batcher[T]) next() {
	b.mu.Lock()
	batch := b.takeLocked(groupMaxBatch)
	if batch == nil {
		b.inflight--
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	go func() {
		b.run(batch)
		b.next()
	}()
}

// writeSingly handles a multi-row statement that failed: a transient error
// goes back to every item (each retries), any other is retried row by row,
// so one bad row cannot fail the writes of other runs.
func writeSingly[T any](items []*batchItem[T], err error, one func(*batchItem[T])) {
	if isTransient(err) {
		setAll(items, err)
		return
	}
	for _, it := range items {
		one(it)
	}
}

// collectWritten reads the result of a multi-row write (the query's rows
// and error), marking as written the item each row names (item scans the
// row). It returns the statement's error, which may also come with the
// rows or after some of them; then no item is marked: the statement failed
// as a whole.
func collectWritten[T any](rows pgx.Rows, err error, items []*batchItem[T], item func(pgx.Rows) (*batchItem[T], error)) error {
	if err == nil {
		for rows.Next() {
			var it *batchItem[T]
			if it, err = item(rows); err != nil {
				rows.Close()
				break
			}
			if it != nil {
				it.ok = true
			}
		}
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		for _, it := range items {
			it.ok = false
		}
	}
	return err
}

func setAll[T any](items []*batchItem[T], err error) {
	for _, it := range items {
		it.err = err
	}
}

// stepWrite is one step checkpoint.
type stepWrite struct {
	id, name, status string
	pos, attempts    int
	output, errb     []byte
	started          time.Time
	epoch            int64
}

// startWrite is one run started by this executor.
type startWrite struct {
	id, name string
	input    []byte
	parent   string
	deadline *time.Time
	trace    string // W3C trace context of the start span; "" without tracing
}

// finishWrite is one run's final outcome, with the checkpoints of its
// last steps deferred to it (pending.go).
type finishWrite struct {
	id    string
	epoch int64
	o     *outcome
	steps []*stepWrite
}

// stepArrays are the columns of step checkpoints, as statement arguments.
type stepArrays struct {
	ids, names, statuses []string
	pos, attempts        []int32
	// json.RawMessage, not []byte, as every payload argument of a json
	// column: pgx maps it to json in every query exec mode, while a []byte
	// is bytea (as text, "\x...") in the exec and simple protocol modes
	// that poolers without prepared statements need.
	outputs, errs []json.RawMessage
	started       []time.Time
}

func newStepArrays(n int) *stepArrays {
	return &stepArrays{ids: make([]string, 0, n), names: make([]string, 0, n), statuses: make([]string, 0, n),
		pos: make([]int32, 0, n), attempts: make([]int32, 0, n), outputs: make([]json.RawMessage, 0, n), errs: make([]json.RawMessage, 0, n),
		started: make([]time.Time, 0, n)}
}

func (a *stepArrays) add(w *stepWrite) {
	a.ids, a.names, a.statuses = append(a.ids, w.id), append(a.names, w.name), append(a.statuses, w.status)
	a.pos, a.attempts = append(a.pos, int32(w.pos)), append(a.attempts, int32(w.attempts))
	a.outputs, a.errs, a.started = append(a.outputs, w.output), append(a.errs, w.errb), append(a.started, w.started)
}

func (e *Engine) initBatchers() {
	e.startBatch = &batcher[*startWrite]{flush: e.flushStarts}
	e.stepBatch = &batcher[*stepWrite]{flush: e.flushSteps}
	e.finishBatch = &batcher[*finishWrite]{flush: e.flushFinishes}
}

// writeStep records a step checkpoint; ok is false when the fenced insert
// touched no row.
func (e *Engine) writeStep(ctx context.Context, w *stepWrite) (bool, error) {
	if e.knobs.NoGroupCommit {
		return e.insertStep(ctx, w)
	}
	return e.stepBatch.do(w)
}

// insertStep writes one step checkpoint; written is false when the run was
// fenced or the step is already recorded (a unique violation: InsertStep
// has no ON CONFLICT clause, see InsertSteps).
func (e *Engine) insertStep(ctx context.Context, w *stepWrite) (written bool, err error) {
	tag, err := e.pool.Exec(ctx, e.q.InsertStep, w.id, w.pos, w.name, w.status, json.RawMessage(w.output), json.RawMessage(w.errb), w.attempts, w.started, w.epoch)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return false, nil
	}
	return tag.RowsAffected() == 1, err
}

func (e *Engine) flushSteps(items []*batchItem[*stepWrite]) {
	ctx := e.hardCtx
	if len(items) == 1 {
		items[0].ok, items[0].err = e.insertStep(ctx, items[0].v)
		return
	}
	n := len(items)
	a := newStepArrays(n)
	epochs := make([]int64, n)
	type key struct {
		id  string
		pos int32
	}
	index := make(map[key]*batchItem[*stepWrite], n)
	for i, it := range items {
		a.add(it.v)
		epochs[i] = it.v.epoch
		index[key{it.v.id, int32(it.v.pos)}] = it
	}
	rows, err := e.pool.Query(ctx, e.q.InsertSteps, a.ids, a.pos, a.names, a.statuses, a.outputs, a.errs, a.attempts, a.started, epochs)
	err = collectWritten(rows, err, items, func(rows pgx.Rows) (*batchItem[*stepWrite], error) {
		var k key
		err := rows.Scan(&k.id, &k.pos)
		return index[k], err
	})
	if err != nil { // a row already recorded (see InsertSteps), a bad row, the connection
		writeSingly(items, err, func(it *batchItem[*stepWrite]) { it.ok, it.err = e.insertStep(ctx, it.v) })
	}
}

// writeFinish records a run's outcome; ok is false when the fenced update
// touched no row.
func (e *Engine) writeFinish(ctx context.Context, w *finishWrite) (bool, error) {
	if e.knobs.NoGroupCommit {
		return e.finishOne(ctx, w)
	}
	return e.finishBatch.do(w)
}

func (e *Engine) finishOne(ctx context.Context, w *finishWrite) (bool, error) {
	var notify bool
	var parent *string
	var err error
	if len(w.steps) == 0 {
		err = e.pool.QueryRow(ctx, e.q.FinishOne, w.id, w.epoch, string(w.o.status), json.RawMessage(w.o.output), json.RawMessage(w.o.err)).Scan(&notify, &parent)
	} else {
		var a stepArrays
		for _, s := range w.steps {
			a.add(s)
		}
		err = e.pool.QueryRow(ctx, e.q.FinishOneSteps, w.id, w.epoch, string(w.o.status), json.RawMessage(w.o.output), json.RawMessage(w.o.err),
			a.pos, a.names, a.statuses, a.outputs, a.errs, a.attempts, a.started).Scan(&notify, &parent)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		e.wakeParentOfFinished(ctx, w.id)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if notify { // a waiter in another process asked; the finish is committed
		if _, err := e.pool.Exec(ctx, e.q.NotifyDone, w.id); err != nil {
			e.log.Warn("durable: notify finish", "workflow_id", w.id, "err", err) // its poll will see it
		}
	}
	if parent != nil { // a parent parked in Await on this run wakes up
		// The finish is committed: a lost wake-up would leave the parent
		// parked for good, so ride out an outage here.
		err := e.retryBG(ctx, "wake parent", func(ctx context.Context) error {
			rows, err := e.pool.Query(ctx, e.q.WakeParent, w.id, *parent)
			if err == nil {
				rows.Close()
				err = rows.Err()
			}
			return err
		})
		if err != nil {
			e.log.Warn("durable: wake parent", "workflow_id", w.id, "parent", *parent, "err", err)
		}
	}
	return true, nil
}

func (e *Engine) flushFinishes(items []*batchItem[*finishWrite]) {
	ctx := e.hardCtx
	if len(items) == 1 {
		items[0].ok, items[0].err = e.finishOne(ctx, items[0].v)
		return
	}
	n := len(items)
	ids, statuses := make([]string, n), make([]string, n)
	epochs := make([]int64, n)
	outputs, errs := make([]json.RawMessage, n), make([]json.RawMessage, n)
	index := make(map[string]*batchItem[*finishWrite], n)
	var steps stepArrays
	for i, it := range items {
		w := it.v
		ids[i], epochs[i], statuses[i], outputs[i], errs[i] = w.id, w.epoch, string(w.o.status), w.o.output, w.o.err
		index[w.id] = it
		for _, s := range w.steps {
			steps.add(s)
		}
	}
	var rows pgx.Rows
	var err error
	if steps.ids == nil {
		rows, err = e.pool.Query(ctx, e.q.FinishWorkflows, ids, epochs, statuses, outputs, errs)
	} else {
		rows, err = e.pool.Query(ctx, e.q.FinishStepsMany, ids, epochs, statuses, outputs, errs,
			steps.ids, steps.pos, steps.names, steps.statuses, steps.outputs, steps.errs, steps.attempts, steps.started)
	}
	err = collectWritten(rows, err, items, func(rows pgx.Rows) (*batchItem[*finishWrite], error) {
		var id string
		var ignored *string
		err := rows.Scan(&id, &ignored)
		return index[id], err
	})
	if err != nil {
		writeSingly(items, err, func(it *batchItem[*finishWrite]) { it.ok, it.err = e.finishOne(ctx, it.v) })
		return
	}
	for _, it := range items {
		if !it.ok {
			e.wakeParentOfFinished(ctx, it.v.id)
		}
	}
}

// writeStart inserts a run owned by this executor; ok is false when the ID
// already exists.
func (e *Engine) writeStart(ctx context.Context, w *startWrite) (bool, error) {
	if e.knobs.NoGroupCommit {
		return e.startOne(ctx, w)
	}
	return e.startBatch.do(w)
}

func (e *Engine) startOne(ctx context.Context, w *startWrite) (bool, error) {
	var parent any
	if w.parent != "" {
		parent = w.parent
	}
	tag, err := e.pool.Exec(ctx, e.q.InsertOwned, w.id, w.name, e.cfg.AppVersion, e.cfg.ExecutorID, json.RawMessage(w.input), parent, w.deadline, nullString(w.trace))
	return tag.RowsAffected() == 1, err
}

func (e *Engine) flushStarts(items []*batchItem[*startWrite]) {
	ctx := e.hardCtx
	if len(items) == 1 {
		items[0].ok, items[0].err = e.startOne(ctx, items[0].v)
		return
	}
	n := len(items)
	ids, names := make([]string, n), make([]string, n)
	inputs := make([]json.RawMessage, n)
	parents := make([]pgtype.Text, n)
	deadlines := make([]pgtype.Timestamptz, n)
	var traces []pgtype.Text // nil (NULL) without tracing
	if e.tracing() {
		traces = make([]pgtype.Text, n)
	}
	index := make(map[string][]*batchItem[*startWrite], n)
	for i, it := range items {
		w := it.v
		ids[i], names[i], inputs[i] = w.id, w.name, w.input
		parents[i] = pgtype.Text{String: w.parent, Valid: w.parent != ""}
		if w.deadline != nil {
			deadlines[i] = pgtype.Timestamptz{Time: *w.deadline, Valid: true}
		}
		if traces != nil {
			traces[i] = pgtype.Text{String: w.trace, Valid: w.trace != ""}
		}
		index[w.id] = append(index[w.id], it)
	}
	rows, err := e.pool.Query(ctx, e.q.InsertWorkflows, ids, names, e.cfg.AppVersion, e.cfg.ExecutorID, inputs, parents, deadlines, traces)
	err = collectWritten(rows, err, items, func(rows pgx.Rows) (*batchItem[*startWrite], error) {
		var id string
		err := rows.Scan(&id)
		if its := index[id]; len(its) > 0 {
			return its[0], err // with the same ID twice in one batch, the first start wins
		}
		return nil, err
	})
	if err != nil {
		writeSingly(items, err, func(it *batchItem[*startWrite]) { it.ok, it.err = e.startOne(ctx, it.v) })
	}
}
