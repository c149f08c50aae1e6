package schedule

import (
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzParseSpec: a cron spec (with an optional zone) from code or from the
// schedules table parses or fails without a panic, an accepted spec can be
// stored, and a parsed spec yields ticks in order, after the time asked, within the range asked.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{"* * * * *", "*/5 * * * * *", "0 9 * * 1-5", "CRON_TZ=Europe/Paris 30 8 * * *", "TZ=UTC @daily",
		"@every 90s", "@every 1ns", "@every -5s", "0 0 30 2 *", "TZ=", "CRON_TZ=Nowhere/Land * * * * *", "CRON_TZ=UTC",
		"60 * * * *", "* * * * * * *", "@reboot", "1-0 * * * *", "*/0 * * * *", "?", "TZ=../../etc/passwd * * * * *",
		"  CRON_TZ=America/New_York\t0 0 * * *", "0 0 29 2 *", "@yearly", "@every 2562047h"} {
		f.Add(s, "", int64(1764400000))
		f.Add(s, "Asia/Kolkata", int64(-1))
	}
	f.Add("* * * * *", "Local", int64(0))
	f.Add("0 2 * * *", "America/Sao_Paulo", int64(2208988800))
	f.Fuzz(func(t *testing.T, spec, zone string, sec int64) {
		var loc *time.Location
		if zone != "" {
			l, err := time.LoadLocation(zone)
			if err != nil {
				return
			}
			loc = l
		}
		ts, err := ParseSpec(spec, loc)
		if err != nil {
			if ts != nil {
				t.Fatalf("ParseSpec(%q) returned a spec and %v", spec, err)
			}
			return
		}
		if !utf8.ValidString(spec) || strings.ContainsRune(spec, 0) {
			t.Fatalf("parseSpec accepted %q, which the schedules table cannot store", spec)
		}
		// Ticks between 1900 and 2200, to second precision like the
		// schedules' cursors.
		const span = 300 * 365 * 24 * 3600
		after := time.Unix(-2208988800+((sec%span)+span)%span, 0).UTC()
		n := ts.next(after)
		if !n.IsZero() && (!n.After(after) || n.Location() != time.UTC) {
			t.Fatalf("spec %q: next(%v) = %v", spec, after, n)
		}
		now := after.Add(48 * time.Hour)
		ticks, _ := ts.due(after, now, 3)
		if len(ticks) > 3 {
			t.Fatalf("spec %q: due kept %d ticks, asked 3", spec, len(ticks))
		}
		for i, tk := range ticks {
			if !tk.After(after) || tk.After(now) || (i > 0 && !tk.After(ticks[i-1])) {
				t.Fatalf("spec %q: due(%v, %v) = %v", spec, after, now, ticks)
			}
		}
		to := after.Add(24 * time.Hour)
		between, err := ts.between(after, after, to, 50)
		if err != nil {
			return
		}
		for i, tk := range between {
			if tk.Before(after) || !tk.Before(to) || (i > 0 && !tk.After(between[i-1])) {
				t.Fatalf("spec %q: between(%v, %v) = %v", spec, after, to, between)
			}
		}
	})
}

// FuzzTickID: ParseTickID (durable.ScheduledTime) reads the tick back from any workflow ID
// without a panic, and gets exactly the tick of every scheduled or
// manually triggered run, whatever the schedule's name.
func FuzzTickID(f *testing.F) {
	f.Add("nightly", int64(1764400000000000000), false)
	f.Add("a:b:2026-11-29T00:00:00Z", int64(1), true)
	f.Add("sched:x", int64(-6795364578871345152), false)
	f.Add("ü'\"\\%_", int64(math.MaxInt64), true)
	f.Add("sched:n:manual:2026-11-29T16:20:15.123456789+02:00", int64(math.MinInt64), false)
	f.Fuzz(func(t *testing.T, name string, ns int64, manual bool) {
		ParseTickID(name) // any ID: no panic
		if name == "" || !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
			return // not a schedule name the engine takes
		}
		tick := time.Unix(0, ns).UTC()
		id := tickID(name, tick)
		if manual {
			id = manualID(name, tick)
		}
		got, ok := ParseTickID(id)
		if !ok || !got.Equal(tick) {
			t.Fatalf("ParseTickID(%q) = %v, %v; want %v", id, got, ok, tick)
		}
	})
}
