package main

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/durable-go/durable"
)

// json writes v as indented JSON.
func (c *cli) json(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes aligned columns.
type table struct {
	tw     *tabwriter.Writer
	cols   []string
	rows   [][]string
	header bool
}

func (c *cli) table(cols ...string) *table {
	return &table{tw: tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0), cols: cols, header: true}
}

func (t *table) row(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) flush() error {
	if t.header {
		t.tw.Write([]byte(strings.Join(t.cols, "\t") + "\n"))
	}
	for _, r := range t.rows {
		for i := range r {
			r[i] = cell(r[i])
		}
		t.tw.Write([]byte(strings.Join(r, "\t") + "\n"))
	}
	return t.tw.Flush()
}

// cell makes s safe for one table cell on a terminal: control characters
// (newlines, tabs, escape sequences from stored data) become spaces or
// '?'.
func cell(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "?")
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t' || r == '\r':
			return ' '
		case unicode.IsControl(r):
			return '?'
		}
		return r
	}, s)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func limit(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func fmtDuration(start, end time.Time) string {
	if start.IsZero() || end.IsZero() {
		return "-"
	}
	d := end.Sub(start)
	switch {
	case d < 0:
		return "-"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Minute:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// fmtTags writes tags as key=value pairs in key order, separated by
// commas; "" for none.
func fmtTags(tags map[string]string) string {
	pairs := make([]string, 0, len(tags))
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		pairs = append(pairs, k+"="+tags[k])
	}
	return strings.Join(pairs, ",")
}

func errText(err error, n int) string {
	if err == nil {
		return ""
	}
	return clip(err.Error(), n)
}

// JSON shapes: stable field names in snake_case, times in RFC 3339 (UTC),
// absent values left out.

type errorJSON struct {
	Kind    string `json:"kind,omitempty"`
	Message string `json:"message"`
}

func toErrorJSON(err error) *errorJSON {
	if err == nil {
		return nil
	}
	out := &errorJSON{Message: err.Error()}
	var re *durable.RecordedError
	if errors.As(err, &re) {
		out.Kind, out.Message = re.Kind, re.Message
	}
	return out
}

type runJSON struct {
	ID               string            `json:"id"`
	Name             string            `json:"name"`
	Status           durable.Status    `json:"status"`
	AppVersion       string            `json:"app_version"`
	Executor         string            `json:"executor,omitempty"`
	Parent           string            `json:"parent,omitempty"`
	Queue            string            `json:"queue,omitempty"`
	CreatedAt        time.Time         `json:"created_at"`
	UpdatedAt        time.Time         `json:"updated_at"`
	StartedAt        *time.Time        `json:"started_at,omitempty"`
	Deadline         *time.Time        `json:"deadline,omitempty"`
	RecoveryAttempts int               `json:"recovery_attempts"`
	Retries          int               `json:"retries,omitempty"`
	ContinuedAs      string            `json:"continued_as,omitempty"`
	TraceID          string            `json:"trace_id,omitempty"`
	Tags             map[string]string `json:"tags,omitempty"`
	Error            *errorJSON        `json:"error,omitempty"`
	Input            json.RawMessage   `json:"input,omitempty"`
	Output           json.RawMessage   `json:"output,omitempty"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func toRunJSON(r durable.WorkflowInfo) runJSON {
	return runJSON{ID: r.ID, Name: r.Name, Status: r.Status, AppVersion: r.AppVersion, Executor: r.Executor,
		Parent: r.Parent, Queue: r.Queue, CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
		StartedAt: timePtr(r.StartedAt), Deadline: timePtr(r.Deadline), RecoveryAttempts: r.RecoveryAttempts, Retries: r.Retries, ContinuedAs: r.ContinuedAs,
		TraceID: r.TraceID, Tags: r.Tags, Error: toErrorJSON(r.Error), Input: r.Input, Output: r.Output}
}

type stepJSON struct {
	Pos        int             `json:"pos"`
	Name       string          `json:"name"`
	Status     string          `json:"status"`
	Attempts   int             `json:"attempts"`
	StartedAt  *time.Time      `json:"started_at,omitempty"`
	FinishedAt *time.Time      `json:"finished_at,omitempty"`
	DurationMS *float64        `json:"duration_ms,omitempty"`
	Error      *errorJSON      `json:"error,omitempty"`
	Output     json.RawMessage `json:"output,omitempty"`
}

func toStepJSON(s durable.StepRecord) stepJSON {
	out := stepJSON{Pos: s.Pos, Name: s.Name, Status: s.Status, Attempts: s.Attempts,
		StartedAt: timePtr(s.StartedAt), FinishedAt: timePtr(s.FinishedAt), Error: toErrorJSON(s.Err), Output: s.Output}
	if !s.StartedAt.IsZero() && !s.FinishedAt.IsZero() {
		ms := float64(s.FinishedAt.Sub(s.StartedAt).Microseconds()) / 1000
		out.DurationMS = &ms
	}
	return out
}

type queueJSON struct {
	Name                  string `json:"name"`
	Ready                 int    `json:"ready"`
	Delayed               int    `json:"delayed"`
	Running               int    `json:"running"`
	Paused                bool   `json:"paused"`
	GlobalConcurrency     int    `json:"global_concurrency"`
	WorkerConcurrency     int    `json:"worker_concurrency"`
	PartitionConcurrency  int    `json:"partition_concurrency"`
	RateLimit             int    `json:"rate_limit"`
	RatePeriodMS          int64  `json:"rate_period_ms"`
	ReleaseSlotParked     bool   `json:"release_slot_while_parked"`
	FairShare             bool   `json:"fair_share"`
	PartitionRateLimit    int    `json:"partition_rate_limit"`
	PartitionRatePeriodMS int64  `json:"partition_rate_period_ms"`
}

type partitionJSON struct {
	Key         string `json:"key"`
	Ready       int    `json:"ready"`
	Delayed     int    `json:"delayed"`
	Running     int    `json:"running"`
	Concurrency *int   `json:"concurrency,omitempty"`
	Weight      int    `json:"weight"`
}

func toPartitionJSON(k durable.PartitionStats) partitionJSON {
	out := partitionJSON{Key: k.Key, Ready: k.Ready, Delayed: k.Delayed, Running: k.Running, Weight: 1}
	if k.Limits != nil {
		out.Weight = k.Limits.Weight
		if k.Limits.Concurrency > 0 {
			out.Concurrency = &k.Limits.Concurrency
		}
	}
	return out
}

func toQueueJSON(q durable.QueueStats) queueJSON {
	return queueJSON{Name: q.Name, Ready: q.Ready, Delayed: q.Delayed, Running: q.Running, Paused: q.Paused,
		GlobalConcurrency: q.Settings.GlobalConcurrency, WorkerConcurrency: q.Settings.WorkerConcurrency,
		PartitionConcurrency: q.Settings.PartitionConcurrency, RateLimit: q.Settings.RateLimit,
		RatePeriodMS: q.Settings.RatePeriod.Milliseconds(), ReleaseSlotParked: q.Settings.ReleaseSlotWhileParked,
		FairShare: q.Settings.FairShare, PartitionRateLimit: q.Settings.PartitionRateLimit,
		PartitionRatePeriodMS: q.Settings.PartitionRatePeriod.Milliseconds()}
}

type scheduleJSON struct {
	Name      string      `json:"name"`
	Workflow  string      `json:"workflow"`
	Spec      string      `json:"spec"`
	Location  string      `json:"location"`
	CatchUp   int         `json:"catch_up"`
	Paused    bool        `json:"paused"`
	LastTick  *time.Time  `json:"last_tick,omitempty"`
	LastRunID string      `json:"last_run_id,omitempty"`
	NextTick  *time.Time  `json:"next_tick,omitempty"`
	Triggers  []time.Time `json:"triggers,omitempty"`
	CreatedAt time.Time   `json:"created_at"`
	UpdatedAt time.Time   `json:"updated_at"`
}

func toScheduleJSON(s durable.ScheduleInfo) scheduleJSON {
	return scheduleJSON{Name: s.Name, Workflow: s.Workflow, Spec: s.Spec, Location: s.Location, CatchUp: s.CatchUp,
		Paused: s.Paused, LastTick: timePtr(s.LastTick), LastRunID: s.LastRunID, NextTick: timePtr(s.NextTick),
		Triggers: s.Triggers, CreatedAt: s.CreatedAt.UTC(), UpdatedAt: s.UpdatedAt.UTC()}
}
