package dispatch

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/sysdb"
)

// handOn finishes the runs finish (claimed here at epoch 1) and hands
// their slots on in one statement, as the engine's batch finish does, in
// a transaction it commits if commit; it returns the runs claimed.
func (f *fix) handOn(commit bool, finish ...string) []string {
	f.t.Helper()
	var runs []*sysdb.FinishOneParams
	for _, id := range finish {
		runs = append(runs, &sysdb.FinishOneParams{ID: id, Epoch: 1, Status: "success"})
	}
	written, claimed := f.handOnRuns(commit, runs, finish)
	for i, w := range written {
		require.True(f.t, w, finish[i])
	}
	return claimed
}

// handOnRuns is handOn with the finishes runs, of which the runs named may
// hand their slots on; it returns which runs it finished, and the runs
// claimed.
func (f *fix) handOnRuns(commit bool, runs []*sysdb.FinishOneParams, named []string) (written []bool, claimed []string) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second) // a wait for a lock ends
	defer cancel()
	stmtCtx, p, after, ok := f.d.HandOn(ctx, map[string]bool{"q": true})
	if !ok {
		return nil, nil
	}
	p.IDs = named
	tx, err := f.pool.Begin(ctx)
	require.NoError(f.t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	written, _, got, err := sysdb.New(f.schema, false).FinishHandOn(stmtCtx, tx, runs, nil, p)
	if err == nil && commit {
		err = tx.Commit(ctx)
	}
	after(got, err == nil && commit) // before any check: it ends the hand-on, which Stop waits for
	require.NoError(f.t, err)
	claimed = ids(got)
	slices.Sort(claimed)
	return written, claimed
}

// running returns a started fix of a queue with settings s and n runs,
// whose first pass claimed and launched the first k.
func running(t *testing.T, s sysdb.QueueSettings, n, k int) *fix {
	t.Helper()
	f := newFix(t, s)
	f.enqueue(n)
	f.start()
	require.Equal(t, k, f.pass().Claimed)
	require.Len(t, f.launch(), k)
	return f
}

// lock holds run id's row in a transaction of its own until the returned
// func or the test's end.
func (f *fix) lock(id string) (unlock func()) {
	f.t.Helper()
	tx, err := f.pool.Begin(f.ctx)
	require.NoError(f.t, err)
	unlock = func() { _ = tx.Rollback(context.Background()) }
	f.t.Cleanup(unlock)
	_, err = tx.Exec(f.ctx, sysdb.Render(`SELECT 1 FROM {{schema}}.workflows WHERE id = $1 FOR UPDATE`, f.schema), id)
	require.NoError(f.t, err)
	return unlock
}

// pending returns the runs of the queue that hold a slot.
func (f *fix) pending() []string {
	f.t.Helper()
	rows, err := f.pool.Query(f.ctx, sysdb.Render(`SELECT id FROM {{schema}}.workflows
		WHERE status = 'pending' ORDER BY id`, f.schema))
	require.NoError(f.t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(f.t, err)
	return ids
}

// TestHandOn: a finish hands its run's slot to the queue's next ready
// run in its own transaction, launched as a pass's claim is, when the
// queue's limits are concurrency limits only; never beyond what those
// limits leave (a limit lowered meanwhile, the runs of other executors),
// and never for a paused queue or one with a rate, partition or fair
// dispatch, which go through the pass.
func TestHandOn(t *testing.T) {
	t.Run("global", func(t *testing.T) {
		f := newFix(t, sysdb.QueueSettings{GlobalConcurrency: 2})
		f.enqueue(5)
		f.start()
		require.Equal(t, 2, f.pass().Claimed)
		require.Equal(t, []string{"r0000", "r0001"}, ids(f.launch()))
		require.True(t, f.q.HandsOn())

		require.Equal(t, []string{"r0002"}, f.handOn(true, "r0000"))
		got := f.launch()
		require.Equal(t, []string{"r0002"}, ids(got), "launched after the commit")
		require.Equal(t, int64(1), got[0].Epoch)
		require.Equal(t, 3, f.q.Running(), "taken here; the finished run's release gives its own back")
		require.Equal(t, []string{"r0001", "r0002"}, f.pending())
		require.Zero(t, f.trouble.Load())

		// Another executor's run takes a slot: two finishes hand on one.
		f.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, queue_name) VALUES
			('other', 'w', 'cancelled', 'v', 'peer', 'q')`)
		require.Equal(t, []string{"r0003"}, f.handOn(true, "r0001", "r0002"))
		require.Equal(t, []string{"r0003"}, ids(f.launch()))
	})
	t.Run("finished-only", func(t *testing.T) {
		f := running(t, sysdb.QueueSettings{GlobalConcurrency: 2}, 6, 2)
		written, claimed := f.handOnRuns(true, []*sysdb.FinishOneParams{
			{ID: "r0000", Epoch: 9, Status: "success"}, // fenced: not finished
			{ID: "r0001", Epoch: 1, Status: "success"},
		}, []string{"r0000", "r0001"})
		require.Equal(t, []bool{false, true}, written)
		require.Equal(t, []string{"r0002"}, claimed, "only the run finished hands its slot on")
		f.launch()
		// A run finished but not named (its queue did not hand on when it
		// ended) frees its slot for the pass.
		written, claimed = f.handOnRuns(true, []*sysdb.FinishOneParams{
			{ID: "r0000", Epoch: 1, Status: "success"},
			{ID: "r0002", Epoch: 1, Status: "success"},
		}, []string{"r0002"})
		require.Equal(t, []bool{true, true}, written)
		require.Equal(t, []string{"r0003"}, claimed)
	})
	t.Run("lowered", func(t *testing.T) {
		f := running(t, sysdb.QueueSettings{GlobalConcurrency: 3}, 6, 3)
		f.exec(`UPDATE {{schema}}.queues SET global_concurrency = 1`)
		require.Empty(t, f.handOn(true, "r0000"), "2 still run: over the new limit")
		require.Empty(t, f.handOn(true, "r0001"), "1 still runs: the new limit is full")
		require.Equal(t, []string{"r0003"}, f.handOn(true, "r0002"))
		require.Equal(t, []string{"r0003"}, f.pending())
	})
	t.Run("worker", func(t *testing.T) {
		f := running(t, sysdb.QueueSettings{WorkerConcurrency: 2}, 5, 2)
		require.True(t, f.q.HandsOn())
		require.Equal(t, []string{"r0002"}, f.handOn(true, "r0000"))
		f.launch()
		require.Equal(t, 3, f.q.Running())
		f.q.Release(1) // r0000's execution ended
		require.Empty(t, f.q.kick, "its slot went to r0002: no pass is woken")
		require.Equal(t, 2, f.q.Running())
		f.exec(`UPDATE {{schema}}.queues SET worker_concurrency = 1`)
		require.Empty(t, f.handOn(true, "r0001"), "r0002 still runs here: the new limit is full")
		f.q.Release(1) // r0001's execution ended, its slot not handed on
		require.Equal(t, Pass{Queue: "q", Wait: never}, f.pass(), "woken; and r0002 fills the new limit")
	})
	t.Run("stopped", func(t *testing.T) {
		f := running(t, sysdb.QueueSettings{GlobalConcurrency: 1}, 3, 1)
		require.NoError(t, f.d.Stop(f.ctx))
		require.Empty(t, f.handOn(true, "r0000"), "a stopped dispatcher launches no run, by pass or hand-on")
		require.NoError(t, f.d.Start(f.ctx))
	})
	t.Run("stop-cancels", func(t *testing.T) {
		f := running(t, sysdb.QueueSettings{GlobalConcurrency: 1}, 3, 1)
		unlock := f.lock("r0000") // the finishing run: the statement waits
		stmtCtx, p, after, ok := f.d.HandOn(f.ctx, map[string]bool{"q": true})
		require.True(t, ok)
		p.IDs = []string{"r0000"}
		ended := make(chan error, 1)
		go func() {
			_, _, got, err := sysdb.New(f.schema, false).FinishHandOn(stmtCtx, f.pool,
				[]*sysdb.FinishOneParams{{ID: "r0000", Epoch: 1, Status: "success"}}, nil, p)
			after(got, err == nil)
			ended <- err
		}()
		stopped := make(chan error, 1)
		go func() { stopped <- f.d.Stop(context.Background()) }()
		select {
		case err := <-stopped:
			require.NoError(t, err)
		case <-time.After(10 * time.Second): // the lock is held until the test ends
			t.Fatal("Stop waits for a hand-on's statement instead of cancelling it")
		}
		require.ErrorIs(t, <-ended, context.Canceled)
		require.Equal(t, []string{"r0000"}, f.pending(), "nothing written: the finish goes again without a hand-on")
		unlock()
		require.NoError(t, f.d.Start(f.ctx))
	})
	t.Run("uncommitted", func(t *testing.T) {
		f := running(t, sysdb.QueueSettings{GlobalConcurrency: 1}, 3, 1)
		require.Equal(t, []string{"r0001"}, f.handOn(false, "r0000"))
		require.Equal(t, int32(1), f.trouble.Load(), "a claim that may have committed unseen is trouble")
		require.Empty(t, f.launched, "nothing launched")
		require.Equal(t, 1, f.q.Running())
		require.Equal(t, []string{"r0000"}, f.pending())
	})
	for _, c := range []struct {
		name, set string
	}{
		{"paused", `paused = true`},
		{"rate", `rate_limit = 10, rate_period_ms = 1000`},
		{"partition", `partition_concurrency = 1`},
		{"partition-rate", `partition_rate_limit = 10, partition_rate_period_ms = 1000`},
		{"fair", `fair_share = true`},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := running(t, sysdb.QueueSettings{GlobalConcurrency: 1}, 3, 1)
			require.Zero(t, f.pass().Claimed) // the queue is full
			// Set behind the passes' back: the statement reads the live
			// settings.
			f.exec(`UPDATE {{schema}}.queues SET ` + c.set)
			require.Empty(t, f.handOn(true, "r0000"))
			f.q.Wake()
			f.pass()
			require.False(t, f.q.HandsOn(), "the next pass sees it too")
		})
	}
	t.Run("partition-limits", func(t *testing.T) {
		f := running(t, sysdb.QueueSettings{GlobalConcurrency: 1}, 3, 1)
		f.exec(`INSERT INTO {{schema}}.queue_partitions (queue_name, partition_key, concurrency) VALUES ('q', 'k', 1)`)
		require.Empty(t, f.handOn(true, "r0000"))
	})
	t.Run("locked", func(t *testing.T) {
		f := running(t, sysdb.QueueSettings{GlobalConcurrency: 1}, 3, 1)
		f.lock("r0001")
		require.Equal(t, []string{"r0002"}, f.handOn(true, "r0000"), "a run locked elsewhere is skipped, not waited for")
	})
}
