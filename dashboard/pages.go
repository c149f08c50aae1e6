package dashboard

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// approvalTopic is the topic prefix of agentkit's approval waits.
const approvalTopic = "agentkit.approval:"

type pages struct {
	t map[string]*template.Template
}

var funcs = template.FuncMap{
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000")
	},
	"dur": func(d time.Duration) string {
		switch {
		case d <= 0:
			return "—"
		case d < time.Millisecond:
			return d.String()
		case d < time.Second:
			return d.Round(100 * time.Microsecond).String()
		default:
			return d.Round(time.Millisecond).String()
		}
	},
	"errtext": func(err error) string {
		if err == nil {
			return ""
		}
		return err.Error()
	},
	"statusClass": statusClass,
	"count":       count,
}

func parsePages() (*pages, error) {
	p := &pages{t: map[string]*template.Template{}}
	for _, name := range []string{"runs", "run", "approvals", "queues", "schedules", "activity", "login", "error"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: template %s: %w", name, err)
		}
		p.t[name] = t
	}
	return p, nil
}

// statusClass maps a run or step status to one of a fixed set of CSS
// classes.
func statusClass(s string) string {
	switch s {
	case "success", "done", "approved", "edited":
		return "ok"
	case "error", "dead", "denied", "timed_out":
		return "bad"
	case "cancelled":
		return "off"
	case "pending", "intent":
		return "run"
	case "enqueued":
		return "wait"
	}
	return "other"
}

// page is what every template gets.
type page struct {
	P        string // path prefix
	Title    string
	Nav      string
	CSRF     string
	ReadOnly bool
	LoggedIn bool // with a session cookie: show the sign-out button
	Data     any
}

func (d *dash) render(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	pg := page{P: d.opts.Prefix, Nav: name, ReadOnly: d.opts.ReadOnly, Data: data}
	if name != "login" {
		pg.CSRF = d.csrfToken(w, r)
		if c, err := r.Cookie(sessionCookie); err == nil && d.opts.Token != "" && d.sessions.valid(c.Value) {
			pg.LoggedIn = true
		}
	}
	var buf bytes.Buffer
	if err := d.pages.t[name].Execute(&buf, pg); err != nil {
		d.log.Error("dashboard: render", "page", name, "error", err)
		http.Error(w, "dashboard: cannot render the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

type errorView struct{ Message string }

type loginView struct{ Message string }

func (d *dash) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	d.render(w, r, status, "error", errorView{Message: msg})
}

// failErr answers err with the status its class calls for.
func (d *dash) failErr(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return // the client went away
	}
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, durable.ErrWorkflowNotFound), errors.Is(err, durable.ErrScheduleNotFound), errors.Is(err, durable.ErrQueueNotFound):
		status = http.StatusNotFound
	case errors.Is(err, durable.ErrInvalidArgument):
		status = http.StatusBadRequest
	case errors.Is(err, agentkit.ErrNoPendingApproval), errors.Is(err, durable.ErrWorkflowFinished), errors.Is(err, durable.ErrNotRegistered):
		status = http.StatusConflict
	}
	if status == http.StatusInternalServerError {
		d.log.Error("dashboard: request failed", "path", r.URL.Path, "error", err)
	}
	d.fail(w, r, status, err.Error())
}

func (d *dash) static(w http.ResponseWriter, r *http.Request) {
	sub, _ := fs.Sub(staticFS, "static")
	w.Header().Set("Cache-Control", "public, max-age=3600")
	http.StripPrefix("/static/", http.FileServerFS(sub)).ServeHTTP(w, r)
}

type runsView struct {
	Runs     []durable.WorkflowInfo
	Next     string
	Status   string
	Name     string
	Queue    string
	ID       string
	Wait     string
	Tags     []string // the tag filters, as key=value
	Statuses []string
}

func (d *dash) runsPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v := runsView{Status: q.Get("status"), Name: q.Get("name"), Queue: q.Get("queue"), ID: q.Get("id"), Wait: q.Get("wait"),
		Statuses: []string{"enqueued", "pending", "success", "error", "cancelled", "dead"}}
	p := &durable.ListParams{Name: v.Name, Queue: v.Queue, IDPrefix: v.ID, WaitTopicPrefix: v.Wait,
		Cursor: q.Get("cursor"), Limit: d.opts.PageSize, OmitPayloads: true}
	if v.Status != "" {
		p.Statuses = []durable.Status{durable.Status(v.Status)}
	}
	for _, tag := range q["tag"] {
		if tag == "" {
			continue // the form's empty field
		}
		key, value, ok := strings.Cut(tag, "=")
		if !ok || p.Tags[key] != "" {
			d.failErr(w, r, fmt.Errorf("%w: tag %q: want key=value, each key once", durable.ErrInvalidArgument, tag))
			return
		}
		if p.Tags == nil {
			p.Tags = map[string]string{}
		}
		p.Tags[key] = value
		v.Tags = append(v.Tags, tag)
	}
	runs, next, err := d.eng.ListWorkflows(r.Context(), p)
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	v.Runs, v.Next = runs, next
	d.render(w, r, http.StatusOK, "runs", v)
}

type stepView struct {
	durable.StepRecord
	Duration time.Duration
	Error    string
	Output   string
	Label    string // the name, cut to fit the chart
	// Bar geometry in the timeline's SVG units.
	X, W, Y float64
}

type kv struct{ Key, Value string }

type streamView struct {
	Key     string
	Entries []entryView
	Next    int64 // the offset live updates start from
	More    bool  // entries were left out
}

type entryView struct {
	Key     string `json:"key"`
	Offset  int64  `json:"offset"`
	At      string `json:"at"`
	Summary string `json:"summary"`
}

type runView struct {
	Info        durable.WorkflowInfo
	Input       string
	Output      string
	Error       string
	Steps       []stepView
	StepsTotal  int    // recorded steps of the run; Steps is a window of them
	Earlier     string // link to the window before, if any
	Later       string // link to the window after, if any
	Latest      string // link to the last steps, when not shown
	Span        time.Duration
	ChartHeight float64
	Approvals   []agentkit.PendingApproval
	MessageWait string // a Recv topic that is not an approval
	Events      []kv
	Streams     []streamView
	Transcript  []kv
	Children    []durable.WorkflowInfo
	Version     string // see version
	TraceURL    string // link to the run's trace, if Options.TraceURL is set
	Live        bool
	Cancellable bool
	Resumable   bool
}

// Timeline chart geometry, in SVG user units.
const (
	chartLabel = 340.0
	chartBars  = 610.0
	chartRow   = 22.0
	payloadMax = 64 << 10
	stepsPage  = 200 // steps shown at once: a long agent run has thousands
)

func (d *dash) runPage(w http.ResponseWriter, r *http.Request) {
	v, err := d.runView(r, r.URL.Query().Get("id"))
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	d.render(w, r, http.StatusOK, "run", v)
}

func (d *dash) runView(r *http.Request, id string) (*runView, error) {
	ctx := r.Context()
	info, err := d.eng.Inspect(ctx, id)
	if err != nil {
		return nil, err
	}
	from := -1 // the last steps
	if f := r.URL.Query().Get("from"); f != "" {
		if from, err = strconv.Atoi(f); err != nil || from < 0 || from > math.MaxInt32 {
			return nil, fmt.Errorf("%w: from must be a step position", durable.ErrInvalidArgument)
		}
	}
	steps, total, err := d.eng.ListStepWindow(ctx, id, from, stepsPage)
	if err != nil {
		return nil, err
	}
	v := &runView{Info: info, Input: pretty(info.Input), Output: pretty(info.Output), Live: !info.Status.Finished(),
		Version:     version(info, steps, total),
		StepsTotal:  total,
		Cancellable: !info.Status.Finished(),
		Resumable:   info.Status == durable.StatusCancelled || info.Status == durable.StatusDead || info.Status == durable.StatusError}
	if info.TraceID != "" && d.opts.TraceURL != "" {
		v.TraceURL = strings.ReplaceAll(d.opts.TraceURL, "{trace}", info.TraceID)
	}
	if info.Error != nil {
		v.Error = info.Error.Error()
	}
	// Timeline: from the run's creation to its last known instant.
	t0, end := info.CreatedAt, info.UpdatedAt
	if v.Live {
		end = time.Now()
	}
	if n := len(steps); n > 0 && n < total {
		run := d.opts.Prefix + "/run?id=" + url.QueryEscape(id)
		if first := steps[0].Pos; first > 0 {
			v.Earlier = run + "&from=" + strconv.Itoa(max(0, first-stepsPage))
		}
		if from >= 0 && n == stepsPage {
			v.Later = run + "&from=" + strconv.Itoa(steps[n-1].Pos+1)
		}
		if from >= 0 {
			v.Latest = run
		}
		// The chart spans the steps shown.
		t0, end = steps[0].FinishedAt, steps[n-1].FinishedAt
	}
	for _, s := range steps {
		if s.FinishedAt.After(end) {
			end = s.FinishedAt
		}
		if !s.StartedAt.IsZero() && s.StartedAt.Before(t0) {
			t0 = s.StartedAt
		}
	}
	events, err := d.eng.ListEvents(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, ev := range events {
		v.Events = append(v.Events, kv{ev.Key, pretty(ev.Value)})
	}
	v.Span = end.Sub(t0)
	span := max(float64(v.Span), 1)
	for i, s := range steps {
		sv := stepView{StepRecord: s, Output: pretty(s.Output), Label: clip(s.Name, 44), Y: float64(i) * chartRow}
		start := s.StartedAt
		if start.IsZero() {
			start = s.FinishedAt
		}
		if !s.StartedAt.IsZero() && !s.FinishedAt.IsZero() {
			sv.Duration = s.FinishedAt.Sub(s.StartedAt)
		}
		if s.Err != nil {
			sv.Error = s.Err.Error()
		}
		sv.X = chartLabel + chartBars*float64(start.Sub(t0))/span
		sv.W = max(chartBars*float64(sv.Duration)/span, 2)
		sv.X = min(sv.X, chartLabel+chartBars-2)
		sv.W = min(sv.W, chartLabel+chartBars-sv.X)
		v.Steps = append(v.Steps, sv)
	}
	v.ChartHeight = float64(len(steps))*chartRow + 4
	if !info.Status.Finished() {
		if pend, err := agentkit.Pending(ctx, d.eng, id); err == nil {
			for _, p := range pend {
				if p.Status == agentkit.ApprovalPending {
					v.Approvals = append(v.Approvals, p)
				}
			}
		}
		if t := info.WaitTopic; t != "" && !strings.HasPrefix(t, approvalTopic) && !strings.HasPrefix(t, "child:") {
			v.MessageWait = t
		}
	}
	var tr agentkit.Transcript
	for _, key := range d.opts.Streams {
		sv := streamView{Key: key}
		entries, done, err := durable.StreamEntries[json.RawMessage](ctx, d.eng, id, key, 0, durable.StreamEntriesLimitDefault)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			sv.Entries = append(sv.Entries, entry(key, e))
			sv.Next = e.Offset + 1
			if key == agentkit.EventsKey {
				var ev agentkit.Event
				if json.Unmarshal(e.Value, &ev) == nil {
					tr.Apply(ev)
				}
			}
		}
		sv.More = !done && len(entries) == durable.StreamEntriesLimitDefault
		if len(sv.Entries) > 0 || v.Live {
			v.Streams = append(v.Streams, sv)
		}
	}
	for _, turn := range slices.Sorted(maps.Keys(tr.Turns)) {
		if text := tr.Turns[turn]; text != "" {
			v.Transcript = append(v.Transcript, kv{strconv.Itoa(turn), text})
		}
	}
	if children, _, err := d.eng.ListWorkflows(ctx, &durable.ListParams{Parent: id, Limit: 100, OmitPayloads: true}); err == nil {
		v.Children = children
	}
	return v, nil
}

// entry summarises a stream entry in one line of text.
func entry(key string, e durable.StreamEntry[json.RawMessage]) entryView {
	ev := entryView{Key: key, Offset: e.Offset, At: e.CreatedAt.UTC().Format("15:04:05.000")}
	if key == agentkit.EventsKey {
		var a agentkit.Event
		if json.Unmarshal(e.Value, &a) == nil && a.Type != "" {
			ev.Summary = summarise(a)
			return ev
		}
	}
	ev.Summary = clip(unescapeHTML(string(e.Value)), 2000)
	return ev
}

func summarise(a agentkit.Event) string {
	s := string(a.Type)
	if a.Turn > 0 {
		s += fmt.Sprintf(" (turn %d)", a.Turn)
	}
	switch {
	case a.Delta != nil:
		s += ": " + a.Delta.Text
	case a.Message != nil:
		s += ": " + a.Message.Text()
	case a.Approval != nil:
		s += fmt.Sprintf(": %s %s [%s]", a.Approval.Call.Name, string(a.Approval.Call.Arguments), a.Approval.Status)
	case a.Call != nil:
		s += fmt.Sprintf(": %s %s", a.Call.Name, string(a.Call.Arguments))
		if a.Result != "" {
			s += " → " + a.Result
		}
	case a.Outcome != "":
		s += ": " + string(a.Outcome)
		if a.Text != "" {
			s += ": " + a.Text
		}
	}
	return clip(s, 2000)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// pretty indents JSON for display, with the \u003c, \u003e and \u0026
// escapes of Go's encoder turned back into the characters they stand for,
// so a reader sees the text as sent. html/template escapes the result.
func pretty(raw []byte) string {
	if len(raw) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return clip(string(raw), payloadMax)
	}
	s := unescapeHTML(buf.String())
	if len(s) > payloadMax {
		return s[:payloadMax] + fmt.Sprintf("\n… (%d bytes in all)", len(s))
	}
	return s
}

// unescapeHTML undoes the HTML-safe escapes of valid JSON text, leaving
// every other escape (an escaped backslash included) as it is.
func unescapeHTML(s string) string {
	if !strings.Contains(s, `\u00`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		if s[i+1] == 'u' && i+6 <= len(s) {
			switch s[i+2 : i+6] {
			case "003c", "003C":
				b.WriteByte('<')
				i += 5
				continue
			case "003e", "003E":
				b.WriteByte('>')
				i += 5
				continue
			case "0026":
				b.WriteByte('&')
				i += 5
				continue
			}
		}
		b.WriteString(s[i : i+2]) // the escape and the character it escapes
		i++
	}
	return b.String()
}

type approvalRow struct {
	Run durable.WorkflowInfo
	agentkit.PendingApproval
}

func (d *dash) approvalsPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	runs, _, err := d.eng.ListWorkflows(ctx, &durable.ListParams{WaitTopicPrefix: approvalTopic, Limit: 200, OmitPayloads: true})
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	var rows []approvalRow
	for _, run := range runs {
		pend, err := agentkit.Pending(ctx, d.eng, run.ID)
		if err != nil {
			continue
		}
		for _, p := range pend {
			if p.Status == agentkit.ApprovalPending {
				rows = append(rows, approvalRow{run, p})
			}
		}
	}
	d.render(w, r, http.StatusOK, "approvals", rows)
}

// queueRow is a queue on the queues page, with its busiest partition
// keys when its keys matter (fair sharing, limits or rates per key).
type queueRow struct {
	durable.QueueStats
	Keys []durable.PartitionStats
}

// queueKeysShown is how many partition keys the queues page shows for
// each queue.
const queueKeysShown = 10

func (d *dash) queuesPage(w http.ResponseWriter, r *http.Request) {
	qs, err := d.eng.ListQueues(r.Context())
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	rows := make([]queueRow, len(qs))
	for i, q := range qs {
		rows[i].QueueStats = q
		if s := q.Settings; s.FairShare || s.PartitionConcurrency > 0 || s.PartitionRateLimit > 0 {
			if rows[i].Keys, err = d.eng.QueueRef(q.Name).PartitionStats(r.Context(), queueKeysShown); err != nil {
				d.failErr(w, r, err)
				return
			}
		}
	}
	d.render(w, r, http.StatusOK, "queues", rows)
}

func (d *dash) schedulesPage(w http.ResponseWriter, r *http.Request) {
	ss, err := d.eng.ListSchedules(r.Context())
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	d.render(w, r, http.StatusOK, "schedules", ss)
}

// action runs one POSTed operator action and redirects to the page it
// concerns.
func (d *dash) action(w http.ResponseWriter, r *http.Request) {
	if d.opts.ReadOnly {
		d.fail(w, r, http.StatusForbidden, "This dashboard is read-only.")
		return
	}
	ctx := r.Context()
	f := r.PostFormValue
	id, name := f("id"), f("name")
	back := d.opts.Prefix + "/run?id=" + url.QueryEscape(id)
	var err error
	switch op := f("op"); op {
	case "cancel":
		err = d.eng.Cancel(ctx, id, nil)
	case "resume":
		err = d.eng.Resume(ctx, id, nil)
	case "approve", "deny":
		dec := agentkit.Decision{Action: agentkit.ActionApprove, By: "dashboard"}
		if op == "deny" {
			dec.Action, dec.Reason = agentkit.ActionDeny, f("reason")
		}
		err = agentkit.Decide(ctx, d.eng, id, f("call"), dec)
		if f("from") == "approvals" {
			back = d.opts.Prefix + "/approvals"
		}
	case "send":
		msg := json.RawMessage(f("message"))
		if !json.Valid(msg) {
			d.fail(w, r, http.StatusBadRequest, "The message is not valid JSON.")
			return
		}
		err = durable.Send(ctx, d.eng, id, f("topic"), msg, nil)
	case "pause-schedule", "resume-schedule", "trigger-schedule":
		back = d.opts.Prefix + "/schedules"
		switch op {
		case "pause-schedule":
			err = d.eng.PauseSchedule(ctx, name)
		case "resume-schedule":
			err = d.eng.ResumeSchedule(ctx, name)
		default:
			var runID string
			runID, err = d.eng.TriggerSchedule(ctx, name, time.Time{})
			back = d.opts.Prefix + "/run?id=" + url.QueryEscape(runID)
		}
	case "pause-queue", "resume-queue":
		back = d.opts.Prefix + "/queues"
		if op == "pause-queue" {
			err = d.eng.QueueRef(name).Pause(ctx)
		} else {
			err = d.eng.QueueRef(name).Resume(ctx)
		}
	default:
		d.fail(w, r, http.StatusBadRequest, fmt.Sprintf("Unknown action %q.", op))
		return
	}
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}
