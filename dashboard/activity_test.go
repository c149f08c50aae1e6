package dashboard

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// TestActivityChart: the per-minute bars stack each status's count, scaled
// to the busiest minute, one bar per minute of the window, empty minutes
// included; the queue rows split each queue's runs by state, scaled to the
// fullest queue; the latency bars are scaled to the p99.
func TestActivityChart(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	a := durable.Activity{
		Since: since,
		Finished: []durable.FinishedCount{
			{Minute: since, Status: durable.StatusSuccess, Count: 3},
			{Minute: since, Status: durable.StatusError, Count: 1},
			{Minute: since.Add(2 * time.Minute), Status: durable.StatusDead, Count: 2},
			{Minute: since.Add(2 * time.Minute), Status: durable.StatusSuccess, Count: 1},
		},
		Steps: durable.StepLatency{Steps: 10, P50: 10 * time.Millisecond, P99: 40 * time.Millisecond},
		Queues: []durable.QueueStats{
			{Name: "a", Ready: 2, Delayed: 1, Running: 1},
			{Name: "b", Ready: 2},
		},
	}
	v := activityChart(a, since.Add(3*time.Minute+time.Second))
	require.Len(t, v.Minutes, 4, "one bar per minute, the empty ones too")
	require.EqualValues(t, 4, v.MaxPerMin)
	first := v.Minutes[0]
	require.Len(t, first.Segments, 2)
	require.Equal(t, "success", first.Segments[0].Status)
	require.InDelta(t, actHeight*3/4, first.Segments[0].H, 1e-9)
	require.InDelta(t, actHeight/4, first.Segments[0].Y, 1e-9, "stacked from the bottom")
	require.Equal(t, "error", first.Segments[1].Status)
	require.InDelta(t, 0, first.Segments[1].Y, 1e-9, "the busiest minute fills the chart")
	require.Empty(t, v.Minutes[1].Segments)
	require.Equal(t, "success", v.Minutes[2].Segments[0].Status, "successes at the bottom of every bar")
	require.Equal(t, "dead", v.Minutes[2].Segments[1].Status)
	require.InDelta(t, actHeight/2, v.Minutes[2].Segments[1].H, 1e-9)
	require.Equal(t, []statusTotal{{"success", 4}, {"error", 1}, {"cancelled", 0}, {"dead", 2}}, v.Totals)
	require.Equal(t, "03:00", v.FirstMinute)
	require.Equal(t, "03:03", v.LastMinute)

	require.Len(t, v.QueueRows, 2)
	full := actWidth - actLabel - 8
	var w float64
	for _, s := range v.QueueRows[0].Segments {
		w += s.W
	}
	require.InDelta(t, full, w, 1e-9, "the fullest queue spans the chart")
	require.Len(t, v.QueueRows[1].Segments, 1)
	require.InDelta(t, full/2, v.QueueRows[1].Segments[0].W, 1e-9)

	require.InDelta(t, full/4, v.Latency[0].W, 1e-9)
	require.InDelta(t, full, v.Latency[1].W, 1e-9)
}
