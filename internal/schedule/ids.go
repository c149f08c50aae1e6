package schedule

import (
	"strings"
	"time"
)

// The workflow ID of every scheduled run starts with IDPrefix; a manual
// run's ID has ManualSuffix after the schedule name.
const (
	IDPrefix     = "sched:"
	ManualSuffix = ":manual"
)

// tickID is the workflow ID of a schedule's tick: the same on every
// executor, so one insert of the tick's run wins.
func tickID(name string, tick time.Time) string {
	return IDPrefix + name + ":" + tick.UTC().Format(time.RFC3339Nano)
}

// manualID is the workflow ID of a run of schedule name started by hand
// for tick.
func manualID(name string, tick time.Time) string {
	return IDPrefix + name + ManualSuffix + ":" + tick.UTC().Format(time.RFC3339Nano)
}

// ParseTickID reads the tick back from a scheduled run's workflow ID: the
// shortest suffix after a colon that is an RFC 3339 time.
func ParseTickID(id string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(id, IDPrefix)
	if !ok {
		return time.Time{}, false
	}
	for i := len(rest) - 1; i > 0; i-- {
		if rest[i-1] != ':' {
			continue
		}
		if t, err := time.Parse(time.RFC3339Nano, rest[i:]); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}
