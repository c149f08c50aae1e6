package durable_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// TestTriggerScheduleFromElsewhere: a process that does not declare the
// schedule, and is not even launched (an operator tool), triggers it; an
// executor that declares it starts the run, once, even when the trigger
// is asked for twice, and while the schedule is paused.
func TestTriggerScheduleFromElsewhere(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var rec *tickRecorder
	worker := b.engine(t, nil, func(e *durable.Engine) {
		rec = registerTickRecorder(e, "rt")
		durable.Schedule(rec.wf, "rt", "0 0 1 1 *", tickInput(0)) // yearly: never fires during the test
	})
	ctx := ctxT(t)
	require.NoError(t, worker.PauseSchedule(ctx, "rt"))

	ops, err := durable.New(b.pool, b.cfg) // never launched
	require.NoError(t, err)
	tick := time.Date(2031, 2, 3, 4, 5, 6, 7_000_000, time.UTC)
	id, err := ops.TriggerSchedule(ctx, "rt", tick)
	require.NoError(t, err)
	require.Equal(t, "sched:rt:manual:2031-02-03T04:05:06.007Z", id)
	again, err := ops.TriggerSchedule(ctx, "rt", tick)
	require.NoError(t, err)
	require.Equal(t, id, again)

	var h *durable.Handle[string]
	require.Eventually(t, func() bool {
		h, err = rec.wf.Handle(ctx, id)
		return err == nil
	}, 30*time.Second, 10*time.Millisecond, "the declaring executor starts the run")
	out, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "2031-02-03T04:05:06Z 2031-02-03T04:05:06Z", out)
	require.Eventually(t, func() bool { return len(schedule(t, ops, "rt").Triggers) == 0 }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, rec.executions(id))
	require.Equal(t, []string{id}, b.runIDs(t, "rt"))

	_, err = ops.TriggerSchedule(ctx, "missing", time.Time{})
	require.ErrorIs(t, err, durable.ErrScheduleNotFound)
}
