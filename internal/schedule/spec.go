package schedule

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"
)

// cronParser reads schedule specs: standard five-field cron, an optional
// leading seconds field, descriptors (@hourly, @every 90s) and a
// TZ=/CRON_TZ= prefix.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Spec is a parsed spec: the ticks of a schedule.
type Spec struct {
	sched cron.Schedule
	loc   *time.Location
	// every is the period of an "@every" spec, whose ticks are counted
	// from the schedule's cursor rather than aligned on the calendar.
	every time.Duration
}

// Location returns the time zone the spec is read in.
func (ts *Spec) Location() *time.Location { return ts.loc }

// ParseSpec parses spec read in loc (UTC when nil); a time zone prefix of
// the spec takes precedence, and must agree with loc when both are given.
func ParseSpec(spec string, loc *time.Location) (ts *Spec, err error) {
	explicit := loc != nil
	if loc == nil {
		loc = time.UTC
	}
	if err := checkLocation(loc); err != nil {
		return nil, fmt.Errorf("ScheduleOpts.Location: %w", err)
	}
	trimmed := strings.TrimSpace(spec)
	prefixed := HasZonePrefix(trimmed)
	if trimmed == "" {
		return nil, errors.New("spec is empty")
	}
	if prefixed && !strings.Contains(trimmed, " ") {
		return nil, fmt.Errorf("spec %q: a time zone prefix must be followed by a space and a schedule", spec)
	}
	defer func() {
		// The parser is third-party code; a panic on a strange spec is a
		// bad spec, not a crash.
		if p := recover(); p != nil {
			ts, err = nil, fmt.Errorf("spec %q: %v", spec, p)
		}
	}()
	sched, err := cronParser.Parse(trimmed)
	if err != nil {
		return nil, fmt.Errorf("spec %q: %w", spec, err)
	}
	ts = &Spec{sched: sched, loc: loc}
	switch c := sched.(type) {
	case *cron.SpecSchedule:
		if prefixed {
			if err := checkLocation(c.Location); err != nil {
				return nil, fmt.Errorf("spec %q: %w", spec, err)
			}
			if explicit && c.Location.String() != loc.String() {
				return nil, fmt.Errorf("spec %q has time zone %q but ScheduleOpts.Location is %q: set the zone once", spec, c.Location, loc)
			}
			ts.loc = c.Location
		} else {
			c.Location = loc
		}
	case cron.ConstantDelaySchedule:
		ts.every = c.Delay
	default:
		return nil, fmt.Errorf("spec %q: unsupported schedule type %T", spec, sched)
	}
	return ts, nil
}

// HasZonePrefix reports whether spec starts with a time zone
// ("TZ=Zone " or "CRON_TZ=Zone ").
func HasZonePrefix(spec string) bool {
	spec = strings.TrimSpace(spec)
	return strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=")
}

// checkLocation refuses zones that other executors could read differently.
func checkLocation(loc *time.Location) error {
	name := loc.String()
	if loc == time.Local || name == "Local" {
		return errors.New("time.Local differs between machines: name the zone (time.LoadLocation(\"Europe/Paris\"))")
	}
	if _, err := time.LoadLocation(name); err != nil {
		return fmt.Errorf("time zone %q cannot be loaded by name on other executors: use time.LoadLocation with an IANA name: %w", name, err)
	}
	return nil
}

// next returns the first tick after t, in UTC; zero if there is none.
func (ts *Spec) next(t time.Time) time.Time {
	n := ts.sched.Next(t)
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// due returns the keep most recent ticks in (after, now], oldest first,
// and whether earlier ticks in that range were left out. It costs about
// keep steps, not one per tick of a long downtime.
func (ts *Spec) due(after, now time.Time, keep int) (ticks []time.Time, skipped bool) {
	if ts.every > 0 {
		first := ts.next(after)
		if first.After(now) {
			return nil, false
		}
		n := int64(now.Sub(first)/ts.every) + 1
		k := min(n, int64(keep))
		for i := n - k; i < n; i++ {
			ticks = append(ticks, first.Add(time.Duration(i)*ts.every))
		}
		return ticks, n > k
	}
	// Calendar ticks do not depend on where the search starts: search a
	// window ending at now, growing until it holds keep ticks or reaches
	// after.
	for window := time.Minute; ; window *= 8 {
		from := after
		if now.Sub(after) > window && window < 100*365*24*time.Hour {
			from = now.Add(-window)
		}
		var last []time.Time // the latest keep ticks found so far
		count := 0
		for t := ts.next(from); !t.IsZero() && !t.After(now); t = ts.next(t) {
			count++
			if len(last) == keep {
				copy(last, last[1:])
				last = last[:keep-1]
			}
			last = append(last, t)
		}
		if count >= keep || from.Equal(after) {
			first := ts.next(after)
			return last, count > keep || (!from.Equal(after) && !first.IsZero() && !first.After(from))
		}
	}
}

// between returns the ticks in [from, to), at most limit of them. The
// ticks of an "@every" spec are those of the chain counted from cursor.
func (ts *Spec) between(cursor, from, to time.Time, limit int) ([]time.Time, error) {
	var out []time.Time
	add := func(t time.Time) error {
		if len(out) == limit {
			return fmt.Errorf("the range holds more than %d ticks (BackfillMaxTicks): split it", limit)
		}
		out = append(out, t)
		return nil
	}
	if ts.every > 0 {
		base := ts.next(cursor)
		k := ceilDiv(from.Sub(base), ts.every)
		for t := base.Add(time.Duration(k) * ts.every); t.Before(to); t = t.Add(ts.every) {
			if err := add(t); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	for t := ts.next(from.Add(-time.Nanosecond)); !t.IsZero() && t.Before(to); t = ts.next(t) {
		if err := add(t); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ceilDiv is the smallest k with k*d >= x, for d > 0.
func ceilDiv(x, d time.Duration) int64 {
	q := int64(x / d)
	if x%d > 0 {
		q++
	}
	return q
}

// specCache holds the specs and zones read from stored rows, parsed once.
type specCache struct {
	mu    sync.Mutex
	specs map[string]*Spec // by spec and zone
	locs  map[string]*time.Location
}

// spec reads a stored spec in a stored zone.
func (c *specCache) spec(spec, location string) (*Spec, error) {
	key := spec + "\x00" + location
	c.mu.Lock()
	ts := c.specs[key]
	c.mu.Unlock()
	if ts != nil {
		return ts, nil
	}
	loc, err := c.location(location)
	if err != nil {
		return nil, err
	}
	if ts, err = ParseSpec(spec, loc); err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.specs == nil {
		c.specs = map[string]*Spec{}
	}
	c.specs[key] = ts
	c.mu.Unlock()
	return ts, nil
}

func (c *specCache) location(name string) (*time.Location, error) {
	c.mu.Lock()
	loc := c.locs[name]
	c.mu.Unlock()
	if loc != nil {
		return loc, nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("time zone %q: %w", name, err)
	}
	c.mu.Lock()
	if c.locs == nil {
		c.locs = map[string]*time.Location{}
	}
	c.locs[name] = loc
	c.mu.Unlock()
	return loc, nil
}
