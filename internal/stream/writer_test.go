package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/errs"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/sysdb"
	"github.com/durable-go/durable/internal/sysdbtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// signalTimeout bounds the waits for a signal: only a broken writer
// misses it.
const signalTimeout = 30 * time.Second

// rig is a migrated schema and a writer on it, not started.
type rig struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	schema string
	w      *Writer

	mu       sync.Mutex
	notified []string
}

// newRig makes a writer with cfg's limits, on pool if not nil (else a
// pool of the test database), with its signals initialised. It is
// stopped when the test ends.
func newRig(t *testing.T, cfg Config) *rig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	r := &rig{t: t, ctx: ctx}
	r.pool, r.schema = sysdbtest.Migrated(t)

	if cfg.DB == nil {
		cfg.DB = r.pool
	}
	cfg.Queries = sysdb.NewStreamQueries(r.schema, "")
	cfg.Notified = func(id string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.notified = append(r.notified, id)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	r.w = New(cfg)
	r.w.signals.Writing.Init()
	r.w.signals.Written.Init()
	r.w.signals.Retrying.Init()
	r.w.signals.WaitingSpace.Init()
	t.Cleanup(func() { require.NoError(t, r.w.Stop(context.Background())) })
	return r
}

func (r *rig) exec(sql string, args ...any) {
	r.t.Helper()
	_, err := r.pool.Exec(r.ctx, sysdb.Render(sql, r.schema), args...)
	require.NoError(r.t, err)
}

// newRun inserts run id, pending at epoch 2, and returns its execution.
func (r *rig) newRun(id string) *testRun {
	r.t.Helper()
	r.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch) VALUES ($1, 'w', 'pending', 'v', 'x', 2)`, id)
	return r.execution(id, 2)
}

// execution returns an execution of run id at epoch.
func (r *rig) execution(id string, epoch int64) *testRun {
	ctx, cancel := context.WithCancel(r.ctx)
	r.t.Cleanup(cancel)
	return &testRun{id: id, epoch: epoch, ctx: ctx, cancel: cancel}
}

func (r *rig) start() {
	r.t.Helper()
	require.NoError(r.t, r.w.Start(r.ctx))
}

// write appends value ("": the close marker) to stream k of run.
func (r *rig) write(run *testRun, inWorkflow bool, value string) error {
	var v []byte
	if value != "" {
		v = []byte(value)
	}
	return r.w.Append(r.ctx, run, inWorkflow, "k", v, value == "")
}

// stored returns the entries of stream k of run id as "value" (the close
// marker as "closed"), in offset order, checking there is no gap.
func (r *rig) stored(id string) []string {
	r.t.Helper()
	rows, err := r.pool.Query(r.ctx, sysdb.Render(`SELECT off, CASE WHEN closed THEN 'closed' ELSE value::text END
FROM {{schema}}.streams WHERE workflow_id = $1 AND key = 'k' ORDER BY off`, r.schema), id)
	require.NoError(r.t, err)
	var out []string
	for rows.Next() {
		var off int64
		var v string
		require.NoError(r.t, rows.Scan(&off, &v))
		require.Equal(r.t, int64(len(out)), off, "offsets without gaps")
		out = append(out, v)
	}
	require.NoError(r.t, rows.Err())
	return out
}

// lockStreams locks the streams table until the returned func is called.
func (r *rig) lockStreams() (unlock func()) {
	r.t.Helper()
	tx, err := r.pool.Begin(r.ctx)
	require.NoError(r.t, err)
	_, err = tx.Exec(r.ctx, "LOCK TABLE "+pgx.Identifier{r.schema, "streams"}.Sanitize()+" IN ACCESS EXCLUSIVE MODE")
	require.NoError(r.t, err)
	var once sync.Once
	unlock = func() { once.Do(func() { require.NoError(r.t, tx.Rollback(r.ctx)) }) }
	r.t.Cleanup(unlock)
	return unlock
}

// testRun is an execution of a run.
type testRun struct {
	id     string
	epoch  int64
	ctx    context.Context
	cancel context.CancelFunc

	// haltDelay slows Halt down, so a waiter woken before the run
	// halts (and not after) sees it still running.
	haltDelay time.Duration

	mu   sync.Mutex
	stop error
}

var errRunEnded = errors.New("the run's context ended")

func (r *testRun) ID() string               { return r.id }
func (r *testRun) Epoch() int64             { return r.epoch }
func (r *testRun) Context() context.Context { return r.ctx }
func (r *testRun) Logger() *slog.Logger     { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func (r *testRun) Halted() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stop
}

func (r *testRun) Halt(err error) {
	time.Sleep(r.haltDelay)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stop == nil {
		r.stop = err
	}
}

func (r *testRun) WaitEnded(ctx context.Context, what string) error {
	if r.ctx.Err() != nil {
		return fmt.Errorf("%s: %w", what, errRunEnded)
	}
	return fmt.Errorf("%s: %w", what, ctx.Err())
}

// Entries of several runs queued together are written by one statement,
// and each run's waiters and readers are told.
func TestWriterBatchesRuns(t *testing.T) {
	t.Parallel()
	r := newRig(t, Config{})
	a, b := r.newRun("a"), r.newRun("b")
	for i := range 3 {
		require.NoError(t, r.write(a, true, fmt.Sprint(i)))
	}
	require.NoError(t, r.write(b, false, `"x"`))
	require.NoError(t, r.write(b, false, ""))
	r.start()
	require.Equal(t, 5, r.w.signals.Writing.Wait(t, signalTimeout), "one batch")
	require.Equal(t, 5, r.w.signals.Written.Wait(t, signalTimeout))
	require.NoError(t, r.w.Flush(r.ctx, a, "flush"))
	require.NoError(t, r.w.Flush(r.ctx, b, "flush"))
	require.Equal(t, []string{"0", "1", "2"}, r.stored("a"))
	require.Equal(t, []string{`"x"`, "closed"}, r.stored("b"))
	r.mu.Lock()
	require.ElementsMatch(t, []string{"a", "b"}, r.notified)
	r.mu.Unlock()

	// Later entries go on where the stream stands.
	require.NoError(t, r.write(a, true, "3"))
	require.NoError(t, r.w.Flush(r.ctx, a, "flush"))
	require.Equal(t, []string{"0", "1", "2", "3"}, r.stored("a"))
	require.NoError(t, r.w.Flush(r.ctx, r.execution("idle", 2), "flush"), "a run that wrote nothing")
}

// A batch holds at most BatchRows entries, and at most BatchBytes unless
// a single entry is larger.
func TestWriterBatchLimits(t *testing.T) {
	t.Parallel()
	r := newRig(t, Config{BatchRows: 2, BatchBytes: 10})
	a := r.newRun("a")
	for _, v := range []string{"1", "2", "3", `"a longer value"`, "5", "6"} {
		require.NoError(t, r.write(a, false, v))
	}
	r.start()
	var sizes []int
	for range 4 {
		sizes = append(sizes, r.w.signals.Writing.Wait(t, signalTimeout))
	}
	require.Equal(t, []int{2, 1, 1, 2}, sizes)
	require.NoError(t, r.w.Flush(r.ctx, a, "flush"))
	require.Len(t, r.stored("a"), 6)
}

// While one statement is in flight, the entries queued meanwhile gather
// into the next one.
func TestWriterGathersWhileWriting(t *testing.T) {
	t.Parallel()
	r := newRig(t, Config{})
	a := r.newRun("a")
	require.NoError(t, r.write(a, false, "0")) // where the stream stands is read before the lock
	r.start()
	require.Equal(t, 1, r.w.signals.Writing.Wait(t, signalTimeout))
	require.Equal(t, 1, r.w.signals.Written.Wait(t, signalTimeout))
	unlock := r.lockStreams()
	require.NoError(t, r.write(a, false, "1"))
	require.Equal(t, 1, r.w.signals.Writing.Wait(t, signalTimeout)) // blocked on the lock
	for i := 2; i < 6; i++ {
		require.NoError(t, r.write(a, false, fmt.Sprint(i)))
	}
	unlock()
	require.Equal(t, 1, r.w.signals.Written.Wait(t, signalTimeout))
	require.Equal(t, 4, r.w.signals.Writing.Wait(t, signalTimeout), "the entries queued meanwhile, together")
	require.NoError(t, r.w.Flush(r.ctx, a, "flush"))
	require.Len(t, r.stored("a"), 6)
}

// A writer blocks while MaxPendingRows entries wait, and goes on once the
// loop takes them.
func TestWriterBackPressure(t *testing.T) {
	t.Parallel()
	r := newRig(t, Config{MaxPendingRows: 2})
	a := r.newRun("a")
	require.NoError(t, r.write(a, false, "0"))
	require.NoError(t, r.write(a, false, "1"))
	done := make(chan error, 1)
	go func() { done <- r.write(a, false, "2") }()
	select {
	case <-r.w.signals.WaitingSpace.Chan():
	case err := <-done:
		t.Fatalf("the write returned (%v) with the queue full", err)
	case <-time.After(signalTimeout):
		t.Fatal("the write neither waited nor returned")
	}
	r.start()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(signalTimeout):
		t.Fatal("the write still waits after the queue was taken")
	}
	require.Equal(t, 2, r.w.signals.Writing.Wait(t, signalTimeout), "the full queue")
	require.Equal(t, 1, r.w.signals.Writing.Wait(t, signalTimeout), "the entry that waited")
	require.NoError(t, r.w.Flush(r.ctx, a, "flush"))
	require.Equal(t, []string{"0", "1", "2"}, r.stored("a"))

	// The wait ends with the run.
	unlock := r.lockStreams()
	require.NoError(t, r.write(a, false, "3"))
	require.Equal(t, 1, r.w.signals.Writing.Wait(t, signalTimeout))
	require.NoError(t, r.write(a, false, "4"))
	require.NoError(t, r.write(a, false, "5"))
	go func() { done <- r.write(a, false, "6") }()
	r.w.signals.WaitingSpace.Wait(t, signalTimeout)
	a.cancel()
	require.ErrorIs(t, returns(t, func() error { return <-done }), errRunEnded)
	unlock()
}

// The entries of a run that is no longer pending at the writer's epoch are
// not written: the run halts with why, and its later writes fail.
func TestWriterRejects(t *testing.T) {
	t.Parallel()
	r := newRig(t, Config{})
	r.start()
	for _, c := range []struct {
		name, set string
		want      error
	}{
		{"fenced", "epoch = 3", errs.Fenced},
		{"cancelled", "status = 'cancelled'", errs.Cancelled},
		{"finished", "status = 'success'", errs.Fenced},
	} {
		run := r.newRun(c.name)
		run.haltDelay = 100 * time.Millisecond
		require.NoError(t, r.write(run, false, "1"), c.name)
		require.NoError(t, r.w.Flush(r.ctx, run, "flush"), c.name)
		r.exec(`UPDATE {{schema}}.workflows SET `+c.set+` WHERE id = $1`, c.name)
		require.NoError(t, r.write(run, false, "2"), c.name)
		err := r.w.Flush(r.ctx, run, "flush")
		require.ErrorIs(t, err, c.want, c.name)
		require.ErrorIs(t, run.Halted(), c.want, "%s: the run halts", c.name)
		require.ErrorIs(t, r.write(run, false, "3"), c.want, c.name)
		require.Equal(t, []string{"1"}, r.stored(c.name), c.name)
	}
}

// A replay of workflow code does not write its entries again; a step's
// entries are written by every execution.
func TestWriterReplay(t *testing.T) {
	t.Parallel()
	r := newRig(t, Config{})
	r.start()
	first := r.newRun("a")
	require.NoError(t, r.write(first, true, `"w0"`))
	require.NoError(t, r.write(first, true, `"w1"`))
	require.NoError(t, r.write(first, false, `"step"`))
	require.NoError(t, r.w.Flush(r.ctx, first, "flush"))
	r.w.Release(first)

	r.exec(`UPDATE {{schema}}.workflows SET epoch = 3 WHERE id = 'a'`)
	second := r.execution("a", 3)
	require.NoError(t, r.write(second, true, `"w0"`))
	require.NoError(t, r.write(second, true, `"w1"`))
	require.NoError(t, r.write(second, false, `"step"`))
	require.NoError(t, r.write(second, true, `"w2"`))
	require.NoError(t, r.w.Flush(r.ctx, second, "flush"))
	require.Equal(t, []string{`"w0"`, `"w1"`, `"step"`, `"step"`, `"w2"`}, r.stored("a"))
}

// After the close, writes fail with errs.StreamClosed, in this execution
// and in the next one; closing again does nothing.
func TestWriterClose(t *testing.T) {
	t.Parallel()
	r := newRig(t, Config{})
	r.start()
	run := r.newRun("a")
	require.NoError(t, r.write(run, false, "1"))
	require.NoError(t, r.write(run, false, ""))
	require.ErrorIs(t, r.write(run, false, "2"), errs.StreamClosed)
	require.NoError(t, r.write(run, false, ""), "a second close")
	require.NoError(t, r.w.Flush(r.ctx, run, "flush"))
	r.w.Release(run)
	next := r.execution("a", 2)
	require.ErrorIs(t, r.write(next, false, "2"), errs.StreamClosed, "the close is read back")
	require.Equal(t, []string{"1", "closed"}, r.stored("a"))
}

// A statement that fails with a transient error is tried again until it
// succeeds.
func TestWriterRetries(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = "50ms"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	lockTimeout := func(err error) bool {
		var pgErr *pgconn.PgError
		return errors.As(err, &pgErr) && pgErr.Code == "55P03"
	}
	r := newRig(t, Config{DB: pool, Transient: lockTimeout})
	r.start()
	run := r.newRun("a")
	require.NoError(t, r.write(run, false, "1"))
	require.NoError(t, r.w.Flush(r.ctx, run, "flush"))
	unlock := r.lockStreams()
	require.NoError(t, r.write(run, false, "2"))
	require.True(t, lockTimeout(r.w.signals.Retrying.Wait(t, signalTimeout)))
	unlock()
	require.NoError(t, r.w.Flush(r.ctx, run, "flush"))
	require.Equal(t, []string{"1", "2"}, r.stored("a"))
}

// Stop cancels the statement in flight: its entries, and those queued
// behind it, fail with errs.Shutdown and halt their runs.
func TestWriterStop(t *testing.T) {
	t.Parallel()
	r := newRig(t, Config{BatchRows: 1})
	a, b := r.newRun("a"), r.newRun("b")
	require.NoError(t, r.write(a, false, "1"))
	require.NoError(t, r.write(b, false, "1"))
	r.start()
	require.NoError(t, r.w.Flush(r.ctx, a, "flush"))
	require.NoError(t, r.w.Flush(r.ctx, b, "flush"))
	require.Equal(t, 1, r.w.signals.Writing.Wait(t, signalTimeout))
	require.Equal(t, 1, r.w.signals.Writing.Wait(t, signalTimeout))
	r.lockStreams()
	require.NoError(t, r.write(a, false, "2"))
	require.Equal(t, 1, r.w.signals.Writing.Wait(t, signalTimeout))
	require.NoError(t, r.write(b, false, "2"))
	require.NoError(t, r.w.Stop(r.ctx))
	for _, run := range []*testRun{a, b} {
		require.ErrorIs(t, r.w.Flush(r.ctx, run, "flush"), errs.Shutdown, run.id)
		require.ErrorIs(t, run.Halted(), errs.Shutdown, run.id)
	}
}

// A Flush waiting for entries the database does not take ends with its
// context or with the run's.
func TestWriterFlushEnds(t *testing.T) {
	t.Parallel()
	r := newRig(t, Config{})
	r.start()
	run := r.newRun("a")
	require.NoError(t, r.write(run, false, "1"))
	require.NoError(t, r.w.Flush(r.ctx, run, "flush"))
	r.lockStreams()
	require.NoError(t, r.write(run, false, "2"))
	ctx, cancel := context.WithCancel(r.ctx)
	cancel()
	require.ErrorIs(t, returns(t, func() error { return r.w.Flush(ctx, run, "flush") }), context.Canceled)
	run.cancel()
	require.ErrorIs(t, returns(t, func() error { return r.w.Flush(r.ctx, run, "flush") }), errRunEnded)
}

// returns returns what call returns, failing the test if it blocks.
func returns(t *testing.T, call func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return err
	case <-time.After(signalTimeout):
		t.Fatal("the call still blocks")
		return nil
	}
}

// Once a statement failed for a run, its entries queued behind are
// dropped: written, they would leave a gap.
func TestWriterDropsAfterFailure(t *testing.T) {
	t.Parallel()
	r := newRig(t, Config{BatchRows: 1})
	a := r.newRun("a")
	require.NoError(t, r.write(a, false, "{not json"))
	require.NoError(t, r.write(a, false, "2"))
	r.start()
	require.Equal(t, 1, r.w.signals.Written.Wait(t, signalTimeout), "the first statement fails")
	require.Equal(t, 0, r.w.signals.Written.Wait(t, signalTimeout), "nothing more is sent")
	err := r.w.Flush(r.ctx, a, "flush")
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "the statement's error: %v", err)
	require.ErrorIs(t, a.Halted(), err)
	require.Empty(t, r.stored("a"))
}
