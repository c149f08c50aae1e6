package schedule

import (
	"testing"
	"time"
	_ "time/tzdata" // the zones of the tests, on any machine

	"github.com/robfig/cron/v3"
	"github.com/stretchr/testify/require"
)

// at is a time on 2030-01-01 (UTC) or a later day.
func at(day, hour, min, sec int) time.Time {
	return time.Date(2030, 1, day, hour, min, sec, 0, time.UTC)
}

func mustSpec(t *testing.T, spec string, loc *time.Location) *Spec {
	t.Helper()
	ts, err := ParseSpec(spec, loc)
	require.NoError(t, err)
	return ts
}

func paris(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	return loc
}

// nexts returns the n ticks after t.
func nexts(ts *Spec, t time.Time, n int) []time.Time {
	var out []time.Time
	for range n {
		t = ts.next(t)
		out = append(out, t)
	}
	return out
}

// TestSpecAcrossDST: a calendar spec follows the wall clock of its zone;
// a local time that does not exist (spring forward) has no tick that day,
// one that exists twice (fall back) has two, each its own UTC instant and
// so its own run. "@every" counts elapsed time.
func TestSpecAcrossDST(t *testing.T) {
	t.Parallel()
	loc := paris(t)
	utc := func(m time.Month, d, h, min int) time.Time { return time.Date(2030, m, d, h, min, 0, 0, time.UTC) }

	nine := mustSpec(t, "0 9 * * *", loc)
	require.Equal(t, []time.Time{utc(3, 30, 8, 0), utc(3, 31, 7, 0)}, nexts(nine, utc(3, 30, 0, 0), 2), "09:00 CET, then 09:00 CEST")
	require.Equal(t, []time.Time{utc(10, 26, 7, 0), utc(10, 27, 8, 0)}, nexts(nine, utc(10, 26, 0, 0), 2), "09:00 CEST, then 09:00 CET")

	gap := mustSpec(t, "30 2 * * *", loc)
	require.Equal(t, []time.Time{utc(3, 30, 1, 30), utc(4, 1, 0, 30)}, nexts(gap, utc(3, 30, 0, 0), 2),
		"02:30 does not exist on March 31: no tick that day")
	require.Equal(t, []time.Time{utc(10, 26, 0, 30), utc(10, 27, 0, 30), utc(10, 27, 1, 30), utc(10, 28, 1, 30)},
		nexts(gap, utc(10, 26, 0, 0), 4), "02:30 happens twice on October 27: two ticks")
	require.NotEqual(t, tickID("s", utc(10, 27, 0, 30)), tickID("s", utc(10, 27, 1, 30)))
	ticks, skipped := gap.due(utc(10, 26, 23, 0), utc(10, 27, 3, 0), 5)
	require.Equal(t, []time.Time{utc(10, 27, 0, 30), utc(10, 27, 1, 30)}, ticks)
	require.False(t, skipped)

	every := mustSpec(t, "@every 1h", loc)
	require.Equal(t, []time.Time{utc(3, 31, 0, 30), utc(3, 31, 1, 30), utc(3, 31, 2, 30)}, nexts(every, utc(3, 30, 23, 30), 3),
		"an hour apart, whatever the wall clock does")
	for _, tk := range nexts(nine, utc(3, 1, 0, 0), 3) {
		require.Equal(t, time.UTC, tk.Location(), "ticks are in UTC")
	}
}

// TestDueCatchUp: due keeps the keep latest ticks of a downtime, oldest
// first, and says when it left earlier ones out.
func TestDueCatchUp(t *testing.T) {
	t.Parallel()
	minutely := mustSpec(t, "* * * * *", nil)
	ticks, skipped := minutely.due(at(1, 0, 0, 0), at(1, 0, 10, 30), 3)
	require.Equal(t, []time.Time{at(1, 0, 8, 0), at(1, 0, 9, 0), at(1, 0, 10, 0)}, ticks)
	require.True(t, skipped)

	ticks, skipped = minutely.due(at(1, 0, 0, 0), at(1, 0, 3, 0), 5)
	require.Equal(t, []time.Time{at(1, 0, 1, 0), at(1, 0, 2, 0), at(1, 0, 3, 0)}, ticks, "fewer ticks than keep: all, up to now included")
	require.False(t, skipped)

	ticks, skipped = minutely.due(at(1, 0, 0, 0), at(1, 0, 0, 59), 1)
	require.Empty(t, ticks)
	require.False(t, skipped)

	// The oldest tick of the downtime is just outside the window searched
	// first: it still counts as skipped.
	hourly := mustSpec(t, "0 * * * *", nil)
	ticks, skipped = hourly.due(at(1, 0, 30, 0), at(1, 2, 0, 0), 1)
	require.Equal(t, []time.Time{at(1, 2, 0, 0)}, ticks)
	require.True(t, skipped)

	// "@every" ticks count from the cursor, not from the calendar.
	every := mustSpec(t, "@every 1m", nil)
	ticks, skipped = every.due(at(1, 0, 0, 30), at(1, 0, 10, 30), 3)
	require.Equal(t, []time.Time{at(1, 0, 8, 30), at(1, 0, 9, 30), at(1, 0, 10, 30)}, ticks)
	require.True(t, skipped)
	ticks, skipped = every.due(at(1, 0, 0, 30), at(1, 0, 2, 0), 3)
	require.Equal(t, []time.Time{at(1, 0, 1, 30)}, ticks)
	require.False(t, skipped)

	// A spec that never fires again has nothing due.
	never := mustSpec(t, "0 0 30 2 *", nil)
	ticks, skipped = never.due(at(1, 0, 0, 0), at(1, 0, 0, 0).AddDate(10, 0, 0), 3)
	require.Empty(t, ticks)
	require.False(t, skipped)
}

// countingSchedule counts the Next calls of the cron schedule it wraps.
type countingSchedule struct {
	cron.Schedule
	calls *int
}

func (c countingSchedule) Next(t time.Time) time.Time {
	*c.calls++
	return c.Schedule.Next(t)
}

// TestDueAfterALongDowntimeIsCheap: after a year down, due finds the
// latest ticks in about keep steps, not one per missed tick (half a
// million for a minutely spec, thirty million for a secondly one).
func TestDueAfterALongDowntimeIsCheap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spec     string
		keep     int
		maxCalls int
	}{
		{"* * * * *", 1, 100},
		{"* * * * *", 3, 100},
		{"* * * * * *", 1001, 10 * 1001},
		{"0 9 * * 1", 2, 1000},
	} {
		ts := mustSpec(t, tc.spec, nil)
		calls := 0
		ts.sched = countingSchedule{Schedule: ts.sched, calls: &calls}
		after, now := at(1, 0, 0, 0), at(1, 0, 0, 0).AddDate(1, 0, 0)
		ticks, skipped := ts.due(after, now, tc.keep)
		require.Len(t, ticks, tc.keep, tc.spec)
		require.True(t, skipped, tc.spec)
		require.False(t, ticks[len(ticks)-1].After(now), tc.spec)
		require.True(t, ts.next(ticks[len(ticks)-1]).After(now), "%s: the latest due tick is kept", tc.spec)
		require.LessOrEqual(t, calls, tc.maxCalls+2, "%s: Next calls for %d ticks", tc.spec, tc.keep)
	}
}

// TestBetween: the ticks of [from, to), at most limit; "@every" ticks
// on the chain counted from the cursor.
func TestBetween(t *testing.T) {
	t.Parallel()
	tenMin := mustSpec(t, "*/10 * * * *", nil)
	ticks, err := tenMin.between(at(1, 0, 0, 0), at(1, 0, 0, 0), at(1, 0, 30, 0), 10)
	require.NoError(t, err)
	require.Equal(t, []time.Time{at(1, 0, 0, 0), at(1, 0, 10, 0), at(1, 0, 20, 0)}, ticks, "from included, to excluded")

	_, err = tenMin.between(at(1, 0, 0, 0), at(1, 0, 0, 0), at(1, 1, 0, 0), 5)
	require.ErrorContains(t, err, "more than 5 ticks")
	ticks, err = tenMin.between(at(1, 0, 0, 0), at(1, 0, 0, 0), at(1, 0, 50, 0), 5)
	require.NoError(t, err)
	require.Len(t, ticks, 5, "exactly limit ticks is fine")

	every := mustSpec(t, "@every 1m", nil)
	ticks, err = every.between(at(1, 0, 0, 30), at(1, 0, 5, 0), at(1, 0, 8, 0), 10)
	require.NoError(t, err)
	require.Equal(t, []time.Time{at(1, 0, 5, 30), at(1, 0, 6, 30), at(1, 0, 7, 30)}, ticks)
	ticks, err = every.between(at(1, 0, 0, 30), at(1, 0, 5, 30), at(1, 0, 6, 30), 10)
	require.NoError(t, err)
	require.Equal(t, []time.Time{at(1, 0, 5, 30)}, ticks, "a tick on from is included")
}

func TestTickIDs(t *testing.T) {
	t.Parallel()
	tick := time.Date(2030, 1, 1, 9, 0, 0, 1500, time.FixedZone("X", 3600))
	require.Equal(t, "sched:a:b:2030-01-01T08:00:00.0000015Z", tickID("a:b", tick))
	require.Equal(t, "sched:a:b:manual:2030-01-01T08:00:00.0000015Z", manualID("a:b", tick))
	for _, id := range []string{tickID("a:b", tick), manualID("a:b", tick)} {
		got, ok := ParseTickID(id)
		require.True(t, ok, id)
		require.True(t, got.Equal(tick), id)
		require.Equal(t, time.UTC, got.Location())
	}
	for _, id := range []string{"", "job-1", "sched:", "sched:x", "sched-x:2030-01-01T08:00:00Z"} {
		_, ok := ParseTickID(id)
		require.False(t, ok, id)
	}
}
