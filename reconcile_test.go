package durable_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// A finish commits without waiting for its WAL flush, so a crash of
// Postgres can undo it: the row reads as pending again, still owned by the
// live executor that finished it. The test makes that state by hand (a real
// server crash cannot be timed to lose exactly one commit) and checks the
// executor's reconcile pass re-runs the run by replay: same outcome, no step
// executed again. Queued runs go back to their queue and end the same way.
func TestLostFinishIsReplayed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var stepRuns, bodyRuns atomic.Int32
	var wf *durable.Workflow[int, string]
	var q *durable.Queue
	e := b.engine(t, nil, func(e *durable.Engine) {
		q = durable.RegisterQueue(e, "lost", nil)
		wf = durable.Register(e, "lost-finish", func(wctx durable.Context, in int) (string, error) {
			bodyRuns.Add(1)
			v, err := durable.Step(wctx, "effect", func(ctx context.Context) (string, error) {
				stepRuns.Add(1)
				return fmt.Sprintf("done-%d", in), nil
			}, nil)
			return v, err
		}, nil)
	})
	ctx := ctxT(t)

	h, err := wf.Start(ctx, 1, &durable.StartOpts{ID: "plain"})
	require.NoError(t, err)
	got, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "done-1", got)
	hq, err := wf.Enqueue(ctx, q, 2, &durable.EnqueueOpts{ID: "queued"})
	require.NoError(t, err)
	got, err = hq.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "done-2", got)
	require.EqualValues(t, 2, stepRuns.Load())
	require.EqualValues(t, 2, bodyRuns.Load())

	// What a lost finish leaves: pending, owned by this live executor, the
	// output gone, last touched a while ago.
	tag, err := b.pool.Exec(ctx, fmt.Sprintf(`UPDATE %s.workflows SET status = 'pending', output = NULL,
		updated_at = now() - interval '1 minute' WHERE id IN ('plain', 'queued') AND executor_id = $1`, b.schema), e.ExecutorID())
	require.NoError(t, err)
	require.EqualValues(t, 2, tag.RowsAffected())

	for _, id := range []string{"plain", "queued"} {
		require.Eventually(t, func() bool {
			var status string
			var out *string
			err := b.pool.QueryRow(ctx, fmt.Sprintf(`SELECT status, output::text FROM %s.workflows WHERE id = $1`, b.schema), id).Scan(&status, &out)
			require.NoError(t, err)
			return status == "success" && out != nil
		}, 30*time.Second, 20*time.Millisecond, "run %s was not reconciled; logs:\n%s", id, b.logs.String())
	}
	for id, want := range map[string]string{"plain": "done-1", "queued": "done-2"} {
		h, err := wf.Handle(ctx, id)
		require.NoError(t, err)
		got, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	require.EqualValues(t, 2, stepRuns.Load(), "a recorded step ran again")
	require.EqualValues(t, 4, bodyRuns.Load(), "each run is replayed once")
	require.Contains(t, b.logs.String(), "not running here")
}
