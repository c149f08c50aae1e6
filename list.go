package durable

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/durable-go/durable/internal/sysdb"
)

// Limits of [Engine.ListWorkflows].
const (
	ListLimitDefault = 100
	ListLimitMax     = 1000
)

// ListParams selects the runs [Engine.ListWorkflows] returns. Zero fields
// do not filter; set filters combine with AND.
type ListParams struct {
	// Statuses keeps runs in any of these statuses. Defaults to all.
	Statuses []Status
	// Name keeps runs of this workflow name. Defaults to all.
	Name string
	// Queue keeps runs enqueued on this queue. Defaults to all.
	Queue string
	// Parent keeps the child runs of this workflow ID. Defaults to all.
	Parent string
	// IDs keeps the runs with these IDs (at most ListLimitMax of them):
	// the state of known runs in one query, and with OmitPayloads a cheap
	// status poll. IDs no run has are left out of the result, not
	// reported. nil does not filter; an empty, non-nil slice keeps no run.
	IDs []string
	// IDPrefix keeps runs whose ID starts with this string. Defaults to all.
	IDPrefix string
	// WaitTopicPrefix keeps the pending or queued runs waiting for a
	// message on a topic that starts with this string: in Recv, or in a
	// Select on any of its message cases (see WorkflowInfo.WaitTopic).
	// Defaults to all.
	WaitTopicPrefix string
	// From keeps runs created at or after this time. Defaults to no bound.
	From time.Time
	// To keeps runs created before this time. Defaults to no bound.
	To time.Time
	// Tags keeps the runs that have all these tags, each key with its
	// value (see [SetTag]). It reads an index of the tagged runs. At most
	// [MaxTags]. Defaults to all.
	Tags map[string]string
	// Cursor continues a listing where the previous page ended: pass the
	// cursor ListWorkflows returned, with the same filters. Defaults to the
	// first page.
	Cursor string
	// Limit is the page size, at most ListLimitMax.
	// Defaults to ListLimitDefault.
	Limit int
	// OmitPayloads leaves Input and Output out, for listings that do not
	// need them. Defaults to false.
	OmitPayloads bool
}

// WorkflowInfo describes a run, as listed by [Engine.ListWorkflows].
type WorkflowInfo struct {
	ID               string
	Name             string
	Status           Status
	AppVersion       string
	Executor         string // owner of a pending run; "" when unowned
	Parent           string // parent workflow ID; "" for a top-level run
	Queue            string // queue it was enqueued on; "" when started directly
	CreatedAt        time.Time
	UpdatedAt        time.Time
	StartedAt        time.Time // when a queued run was last claimed by an executor; zero otherwise
	RecoveryAttempts int
	// Retries counts the times the run's code failed and its workflow's
	// retry policy (WorkflowOpts.Retry) ran it again; attempt = Retries + 1.
	Retries int
	// ContinuedAs is the run a successful run continued as
	// ([Workflow.ContinueAsNew]), the next link of its chain; "" otherwise.
	ContinuedAs string
	Deadline    time.Time       // zero: none
	Error       error           // the recorded error of a failed, cancelled or dead run, else nil
	Input       json.RawMessage // as stored; nil with ListParams.OmitPayloads
	Output      json.RawMessage // as stored; nil until it succeeds or with ListParams.OmitPayloads
	// WaitTopic is the message topic a pending or queued run is blocked on
	// in Recv ("child:<id>" while it is parked awaiting a child), so an
	// operator can see who waits for an answer; "" otherwise. For a
	// Select, the first of its message topics, or with
	// ListParams.WaitTopicPrefix the first that matches it. A Recv or a
	// Select that finds its message at once writes nothing for it; one that
	// blocks in memory records the topic and clears it when the wait ends
	// (two small writes); a parked wait records it as part of parking.
	WaitTopic string
	// TraceID is the OpenTelemetry trace of the run (every execution of
	// it joins the trace of the span that started it), as 32 hex digits;
	// "" when the starting engine had no Config.TracerProvider.
	TraceID string
	// Tags are the run's tags: those it was started with and those its
	// code set with [SetTag]; nil when it has none.
	Tags map[string]string
}

// ListWorkflows returns runs matching p, newest first (by creation time,
// then ID), one page at a time. next is the cursor of the following page,
// "" after the last one. Paging is by key, not offset: pages neither repeat
// nor skip runs that existed when the listing began, however many runs
// start meanwhile. It works from any process, for any run.
func (e *Engine) ListWorkflows(ctx context.Context, p *ListParams) (runs []WorkflowInfo, next string, err error) {
	var params ListParams
	if p != nil {
		params = *p
	}
	f, err := params.filter()
	if err != nil {
		return nil, "", err
	}
	runs, err = e.listRuns(ctx, f)
	if err != nil {
		return nil, "", err
	}
	if len(runs) > f.Limit-1 {
		runs = runs[:f.Limit-1]
		last := runs[len(runs)-1]
		next = encodeListCursor(last.CreatedAt, last.ID)
	}
	return runs, next, nil
}

// listRuns runs the listing query of f.
func (e *Engine) listRuns(ctx context.Context, f sysdb.ListFilter) ([]WorkflowInfo, error) {
	rows, err := e.iq.List(ctx, e.pool, f)
	if err != nil {
		return nil, fmt.Errorf("durable: list workflows: %w", err)
	}
	var runs []WorkflowInfo
	for _, row := range rows {
		runs = append(runs, workflowInfo(row))
	}
	return runs, nil
}

// workflowInfo describes a listed run for the caller.
func workflowInfo(row sysdb.RunRow) WorkflowInfo {
	w := WorkflowInfo{ID: row.ID, Name: row.Name, Status: Status(row.Status), AppVersion: row.AppVersion,
		Executor: deref(row.ExecutorID), Parent: deref(row.ParentID), Queue: deref(row.QueueName),
		CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt, RecoveryAttempts: row.RecoveryAttempts,
		Retries: row.Retries, ContinuedAs: deref(row.ContinuedAs), Error: decodeError(row.Error), Input: row.Input, Output: row.Output,
		WaitTopic: deref(row.WaitTopic), Tags: row.Tags}
	if sc := parseTraceparent(row.TraceContext); sc.HasTraceID() {
		w.TraceID = sc.TraceID().String()
	}
	if row.StartedAt != nil {
		w.StartedAt = *row.StartedAt
	}
	if row.Deadline != nil {
		w.Deadline = *row.Deadline
	}
	return w
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// filter validates p and turns it into the query's filter. The query asks
// for one row more than the page, to know whether another page follows.
func (p ListParams) filter() (sysdb.ListFilter, error) {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: ListParams.%s %s", ErrInvalidArgument, field, fmt.Sprintf(format, args...))
	}
	f := sysdb.ListFilter{Name: p.Name, Queue: p.Queue, Parent: p.Parent, IDPrefix: p.IDPrefix,
		WaitTopicPrefix: p.WaitTopicPrefix, From: p.From, To: p.To, Payloads: !p.OmitPayloads}
	limit := p.Limit
	switch {
	case limit == 0:
		limit = ListLimitDefault
	case limit < 0 || limit > ListLimitMax:
		return f, bad("Limit", "%d is outside 1..%d", limit, ListLimitMax)
	}
	f.Limit = limit + 1
	for _, s := range p.Statuses {
		switch s {
		case StatusEnqueued, StatusPending, StatusSuccess, StatusError, StatusCancelled, StatusDead:
			f.Statuses = append(f.Statuses, string(s))
		default:
			return f, bad("Statuses", "has unknown status %q", s)
		}
	}
	for _, v := range []struct{ field, s string }{{"Name", p.Name}, {"Queue", p.Queue}, {"Parent", p.Parent}, {"IDPrefix", p.IDPrefix}, {"WaitTopicPrefix", p.WaitTopicPrefix}} {
		if v.s != "" {
			if err := checkName("ListParams."+v.field, v.s); err != nil {
				return f, err
			}
		}
	}
	if len(p.IDs) > ListLimitMax {
		return f, bad("IDs", "has %d IDs, more than %d", len(p.IDs), ListLimitMax)
	}
	for _, id := range p.IDs {
		if err := checkName("ListParams.IDs", id); err != nil {
			return f, err
		}
	}
	f.IDs = p.IDs
	if err := checkTags("ListParams.Tags", p.Tags); err != nil {
		return f, err
	}
	f.Tags = p.Tags
	if !p.From.IsZero() && !p.To.IsZero() && !p.From.Before(p.To) {
		return f, bad("To", "(%s) must be after From (%s)", p.To.Format(time.RFC3339Nano), p.From.Format(time.RFC3339Nano))
	}
	if p.Cursor != "" {
		at, id, ok := decodeListCursor(p.Cursor)
		if !ok {
			return f, bad("Cursor", "%q is not a cursor returned by ListWorkflows", p.Cursor)
		}
		f.AfterAt, f.AfterID, f.HasAfter = at, id, true
	}
	return f, nil
}

// A cursor is the (created_at, id) of the last run of a page, opaque to
// callers: base64url of "1.<unix microseconds>.<id>".
const listCursorVersion = "1"

func encodeListCursor(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(listCursorVersion + "." + strconv.FormatInt(at.UnixMicro(), 10) + "." + id))
}

func decodeListCursor(c string) (time.Time, string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", false
	}
	version, rest, ok := strings.Cut(string(b), ".")
	if !ok || version != listCursorVersion {
		return time.Time{}, "", false
	}
	us, id, ok := strings.Cut(rest, ".")
	if !ok || checkName("cursor ID", id) != nil {
		return time.Time{}, "", false
	}
	n, err := strconv.ParseInt(us, 10, 64)
	if err != nil {
		return time.Time{}, "", false
	}
	return time.UnixMicro(n), id, true
}
