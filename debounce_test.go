package durable_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// TestDebounce: enqueues with one debounce key collapse into one queued
// run, which starts with the latest input once the window after the latest
// enqueue has passed (or the longest wait from the first); the next
// enqueue after its start makes a new run. (Merged inputs across
// processes: TestQueueFlowControlAcrossProcesses.)
func TestDebounce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var wf, other *durable.Workflow[string, string]
	var q *durable.Queue
	e := b.engine(t, nil, func(e *durable.Engine) {
		q = durable.RegisterQueue(e, "deb", nil)
		wf = durable.Register(e, "echo", func(wctx durable.Context, in string) (string, error) { return in, nil }, nil)
		other = durable.Register(e, "other", func(wctx durable.Context, in string) (string, error) { return in, nil }, nil)
	})
	ctx := ctxT(t)
	deb := func(key string, window, maxWait time.Duration) *durable.EnqueueOpts {
		return &durable.EnqueueOpts{Debounce: &durable.Debounce{Key: key, Window: window, MaxWait: maxWait}}
	}
	runs := func(key string) (n int) {
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{b.schema, "workflows"}.Sanitize()+
			" WHERE debounce_key = $1", key).Scan(&n))
		return n
	}

	t.Run("LatestInputWins", func(t *testing.T) {
		var ids []string
		for _, in := range []string{"v1", "v2", "v3"} {
			h, err := wf.Enqueue(ctx, q, in, deb("doc-1", 400*time.Millisecond, 0))
			require.NoError(t, err)
			ids = append(ids, h.ID())
		}
		require.Equal(t, []string{ids[0], ids[0], ids[0]}, ids, "one run")
		h, err := wf.Handle(ctx, ids[0])
		require.NoError(t, err)
		v, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "v3", v)
		var notBefore, started time.Time
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT not_before, started_at FROM "+pgx.Identifier{b.schema, "workflows"}.Sanitize()+
			" WHERE id = $1", ids[0]).Scan(&notBefore, &started))
		require.False(t, started.Before(notBefore), "started before the window after the latest enqueue")

		// Started: the next enqueue is a new run.
		h2, err := wf.Enqueue(ctx, q, "v4", deb("doc-1", time.Millisecond, 0))
		require.NoError(t, err)
		require.NotEqual(t, ids[0], h2.ID())
		v, err = h2.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "v4", v)
		require.Equal(t, 2, runs("doc-1"))
	})

	// A window of an hour, pushed back by each enqueue, but no longer than
	// MaxWait from the first: the run starts within seconds.
	t.Run("MaxWait", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second) // far below the window
		defer cancel()
		var h *durable.Handle[string]
		for _, in := range []string{"a", "b"} {
			var err error
			h, err = wf.Enqueue(ctx, q, in, deb("doc-2", time.Hour, 300*time.Millisecond))
			require.NoError(t, err)
		}
		v, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "b", v)
	})

	// In the caller's transaction: a rollback leaves no run and no input.
	t.Run("Tx", func(t *testing.T) {
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = wf.EnqueueTx(ctx, tx, q, "rolled back", deb("doc-3", time.Hour, 0))
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))
		require.Zero(t, runs("doc-3"))
		h, err := wf.Enqueue(ctx, q, "kept", deb("doc-3", 10*time.Millisecond, 0))
		require.NoError(t, err)
		v, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "kept", v)
	})

	t.Run("Merge", func(t *testing.T) {
		opts := deb("doc-4", 300*time.Millisecond, 0)
		opts.Debounce.Merge = durable.MergeInputs(func(queued, next string) string { return queued + "+" + next })
		var h *durable.Handle[string]
		for _, in := range []string{"x", "y", "z"} {
			var err error
			h, err = wf.Enqueue(ctx, q, in, opts)
			require.NoError(t, err)
		}
		v, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "x+y+z", v)
	})

	// Merges from many connections at once: every part in the one run.
	t.Run("MergeConcurrent", func(t *testing.T) {
		opts := deb("doc-5", time.Hour, 0)
		opts.Debounce.Merge = durable.MergeInputs(func(queued, next string) string { return queued + next })
		var wg sync.WaitGroup
		ids := make(chan string, 200)
		for range 8 {
			wg.Go(func() {
				for range 25 {
					h, err := wf.Enqueue(ctx, q, "x", opts)
					if assert.NoError(t, err) {
						ids <- h.ID()
					}
				}
			})
		}
		wg.Wait()
		close(ids)
		seen := map[string]bool{}
		for id := range ids {
			seen[id] = true
		}
		require.Len(t, seen, 1, "one run")
		var input string
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT input #>> '{}' FROM "+pgx.Identifier{b.schema, "workflows"}.Sanitize()+
			" WHERE debounce_key = 'doc-5'").Scan(&input))
		require.Len(t, input, 200, "a merge was lost")
	})

	t.Run("BadInput", func(t *testing.T) {
		for _, o := range []*durable.EnqueueOpts{
			deb("", time.Second, 0),
			deb("k", 0, 0),
			deb("k", time.Second, -time.Second),
			deb("k", 2*durable.MaxDebounceWindow, 0),
			{ID: "x", Debounce: &durable.Debounce{Key: "k", Window: time.Second}},
			{DedupID: "x", Debounce: &durable.Debounce{Key: "k", Window: time.Second}},
			{NotBefore: time.Now(), Debounce: &durable.Debounce{Key: "k", Window: time.Second}},
		} {
			_, err := wf.Enqueue(ctx, q, "bad", o)
			require.ErrorIs(t, err, durable.ErrInvalidArgument, "%+v", o.Debounce)
		}
		_, err := wf.EnqueueMany(ctx, q, []durable.EnqueueItem[string]{{Input: "a"}, {Input: "b", Opts: deb("k", time.Second, 0)}})
		require.ErrorIs(t, err, durable.ErrInvalidArgument, "a batch does not debounce")
		require.Zero(t, runs("k"), "nothing written")
		_, err = wf.Enqueue(ctx, e.QueueRef("nowhere"), "x", deb("k", time.Second, 0))
		require.ErrorIs(t, err, durable.ErrQueueNotFound)

		// The key is held by a queued run of another workflow.
		_, err = other.Enqueue(ctx, q, "o", deb("shared", time.Hour, 0))
		require.NoError(t, err)
		_, err = wf.Enqueue(ctx, q, "w", deb("shared", time.Hour, 0))
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		require.ErrorContains(t, err, "another workflow")

		// A merge that fails writes nothing.
		opts := deb("shared-2", time.Hour, 0)
		_, err = wf.Enqueue(ctx, q, "first", opts)
		require.NoError(t, err)
		opts.Debounce.Merge = func(queued, next json.RawMessage) (json.RawMessage, error) { return nil, context.Canceled }
		_, err = wf.Enqueue(ctx, q, "second", opts)
		require.ErrorIs(t, err, durable.ErrInvalidArgument)
		var input string
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT input #>> '{}' FROM "+pgx.Identifier{b.schema, "workflows"}.Sanitize()+
			" WHERE debounce_key = 'shared-2'").Scan(&input))
		require.Equal(t, "first", input)
	})
}
