package sysdb

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ListFilter selects the runs of [InspectQueries.List]. Zero fields do not
// filter.
type ListFilter struct {
	IDs      []string // any of these runs (nil: no filter)
	Statuses []string // run statuses (see statusArms); any of them
	Name     string
	Queue    string
	Parent   string
	IDPrefix string
	// WaitTopicPrefix keeps pending or queued runs waiting on a topic
	// starting with it.
	WaitTopicPrefix string
	From, To        time.Time // created_at in [From, To)
	// Tags keeps the runs that have all these tags (key and value).
	Tags map[string]string
	// AfterAt and AfterID are the keyset cursor, used when HasAfter: rows
	// strictly older than (AfterAt, AfterID) in (created_at DESC, id DESC)
	// order.
	AfterAt  time.Time
	AfterID  string
	HasAfter bool
	Limit    int
	Payloads bool // select input and output
}

// RunRow is a run as listed by [InspectQueries.List]. A NULL column is a
// nil pointer or slice.
type RunRow struct {
	ID               string
	Name             string
	Status           string
	AppVersion       string
	ExecutorID       *string
	ParentID         *string
	QueueName        *string
	CreatedAt        time.Time
	UpdatedAt        time.Time
	RecoveryAttempts int
	Retries          int // by the workflow's retry policy
	Deadline         *time.Time
	Error            []byte // the recorded error, as stored (JSON)
	StartedAt        *time.Time
	Input            []byte  // nil unless ListFilter.Payloads
	Output           []byte  // nil unless ListFilter.Payloads
	WaitTopic        *string // only for a pending or queued run
	TraceContext     *string
	ContinuedAs      *string           // the next run of its chain
	Tags             map[string]string // nil: none
}

// List returns the runs f selects, newest first (by created_at, then ID),
// at most f.Limit of them.
func (q *InspectQueries) List(ctx context.Context, db DBTX, f ListFilter) ([]RunRow, error) {
	sql, args := listSQL(q.schema, f)
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (RunRow, error) {
		var w RunRow
		err := row.Scan(&w.ID, &w.Name, &w.Status, &w.AppVersion, &w.ExecutorID, &w.ParentID, &w.QueueName,
			&w.CreatedAt, &w.UpdatedAt, &w.RecoveryAttempts, &w.Retries, &w.Deadline, &w.Error, &w.StartedAt,
			&w.Input, &w.Output, &w.WaitTopic, &w.TraceContext, &w.ContinuedAs, &w.Tags)
		return w, err
	})
}

// listSQL renders the listing statement of schema for f, and its
// arguments. The statement text depends only on which filters are set, so
// each combination gets its own plan. Its columns are RunRow's, in order.
func listSQL(schema string, f ListFilter) (string, []any) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.IDs != nil {
		where = append(where, "id = ANY("+arg(f.IDs)+"::text[])")
	}
	if len(f.Statuses) > 0 {
		where = append(where, statusCond(f.Statuses))
	}
	if f.Name != "" {
		where = append(where, "name = "+arg(f.Name))
	}
	if f.Queue != "" {
		where = append(where, "queue_name = "+arg(f.Queue))
	}
	if f.Parent != "" {
		where = append(where, "parent_id = "+arg(f.Parent))
	}
	if f.IDPrefix != "" {
		where = append(where, "id LIKE "+arg(likePrefix(f.IDPrefix))+` ESCAPE '\'`)
	}
	// A run's topics: wait_topic (a Recv, a parked Await or Select) and a
	// Select's message cases in wait_any (marked while it waits in memory,
	// all of them once it parked), in case order. The listing shows the
	// first one that matches the prefix.
	waitTopic := selectTopic("'%'") + ", wait_topic"
	if f.WaitTopicPrefix != "" {
		pattern := arg(likePrefix(f.WaitTopicPrefix))
		waitTopic = selectTopic(pattern) + ", CASE WHEN wait_topic LIKE " + pattern + ` ESCAPE '\' THEN wait_topic END`
		where = append(where, statusCond(liveStatuses)+" AND (wait_topic LIKE "+pattern+` ESCAPE '\'`+
			" OR EXISTS (SELECT 1 FROM unnest(wait_any) k WHERE k LIKE 'msg:' || "+pattern+` ESCAPE '\'))`)
	}
	if len(f.Tags) > 0 {
		// Containment, which workflows_tags_idx serves (a run with no tags
		// has no entry there, and does not contain any).
		b, _ := json.Marshal(f.Tags) // a map of strings always encodes
		where = append(where, "tags @> "+arg(string(b))+"::jsonb")
	}
	if !f.From.IsZero() {
		where = append(where, "c.at >= "+arg(f.From))
	}
	if !f.To.IsZero() {
		where = append(where, "c.at < "+arg(f.To))
	}
	if f.HasAfter {
		where = append(where, "(c.at, c.run_id) < ("+arg(f.AfterAt)+"::timestamptz, "+arg(f.AfterID)+"::text)")
	}
	payloads := "NULL::json, NULL::json"
	if f.Payloads {
		payloads = "input, output"
	}
	var b strings.Builder
	// A listing by status, awaited topic (which implies a status), ID
	// prefix or tags, for a page smaller than a default one, is planned in
	// a CTE of its own, for a default page (the outer LIMIT would reach
	// into a subquery), and ordered after it. Under a LIMIT of a few rows
	// the planner bets that the walk of the creation log soon yields
	// matching runs, and loses the whole history when they are rare and
	// old; for a page of a hundred it reads them from their partial
	// indexes (see statusArms), an ID prefix from the primary key (with IDs
	// in the C collation, migration 015), tags from workflows_tags_idx.
	// Execution still stops after the rows asked for. (A listing by IDs
	// needs no CTE: a walk of the log costs a lookup of the run per entry,
	// which the planner weighs against finding the few runs by key.)
	cte := (len(f.Statuses) > 0 || f.WaitTopicPrefix != "" || f.IDPrefix != "" || len(f.Tags) > 0) && f.Limit < minStatusPlanRows
	if cte {
		b.WriteString("WITH r AS MATERIALIZED (\n")
	}
	b.WriteString(`SELECT id, name, status, app_version, executor_id, parent_id, queue_name, created_at, updated_at,
	recovery_attempts, coalesce(retries, 0), deadline, error, started_at, ` + payloads + `,
	CASE WHEN status IN ('pending', 'enqueued') THEN coalesce(` + waitTopic + `) END, trace_context,
	CASE WHEN status = 'success' THEN continued_as END, tags
FROM {{schema}}.workflows JOIN {{schema}}.workflows_created c ON c.run_id = id`)
	if len(where) > 0 {
		b.WriteString("\nWHERE ")
		b.WriteString(strings.Join(where, " AND "))
	}
	if cte {
		b.WriteString("\nORDER BY c.at DESC, c.run_id DESC LIMIT " + strconv.Itoa(minStatusPlanRows))
		b.WriteString(")\nSELECT * FROM r")
	}
	// The page size is written into the statement, not passed: with it a
	// parameter, the plan made without its value (a generic plan) reckons
	// on a tenth of the table, so once the table held some 20,000 runs
	// Postgres planned the listing anew at each call (~0.1 ms, more than
	// its execution). Known, the statement is planned once per connection.
	order := "c.at DESC, c.run_id DESC" // workflows_created_at_idx, walked backward
	if cte {
		order = "created_at DESC, id DESC" // the same values, as r has them
	}
	b.WriteString("\nORDER BY " + order + " LIMIT " + strconv.Itoa(f.Limit))
	return Render(b.String(), schema), args
}

// selectTopic is the first message topic of a Select's waits (wait_any,
// "msg:" entries) that matches the LIKE pattern.
func selectTopic(pattern string) string {
	return `(SELECT substr(k, 5) FROM unnest(wait_any) WITH ORDINALITY u(k, i) WHERE k LIKE 'msg:' || ` + pattern +
		` ESCAPE '\' ORDER BY i LIMIT 1)`
}

// minStatusPlanRows is the fewest rows a listing by status, awaited topic,
// ID prefix or tags is planned for: a default page of the engine's listing
// and the row that tells whether another follows.
const minStatusPlanRows = 101

// statusArm is the listing's condition for one status.
type statusArm struct{ status, cond string }

// statusArms are the listing's conditions for each status, in a fixed
// order. Each arm implies the predicate of a partial index that holds the
// runs in that status (pending runs are split as the takeover sweep's
// indexes split them: owned, unowned, parked; a queued run always has its
// queue; failed, cancelled and dead runs are in workflows_failed_idx), so
// the planner can read a rare status's runs from those indexes instead of
// walking the listing index from the newest run through the whole history.
// The arms are written into the statement, not passed as a parameter: a
// parameter's value is not known when a generic plan is made, so no
// partial index could be proven to apply.
var statusArms = []statusArm{
	{"enqueued", "(status = 'enqueued' AND queue_name IS NOT NULL)"},
	{"pending", "(status = 'pending' AND executor_id IS NOT NULL)" +
		" OR (status = 'pending' AND executor_id IS NULL AND wake_at IS NULL)" +
		" OR (status = 'pending' AND executor_id IS NULL AND wake_at IS NOT NULL)"},
	{"success", "status = 'success'"},
	{"error", "status = 'error'"},
	{"cancelled", "status = 'cancelled'"},
	{"dead", "status = 'dead'"},
}

// liveStatuses are the statuses of runs that may wait on a topic.
var liveStatuses = []string{"pending", "enqueued"}

// statusCond is the condition keeping runs in any of statuses: the OR of
// their arms. A status without an arm (the engine lets none through) keeps
// no run.
func statusCond(statuses []string) string {
	var arms []string
	for _, a := range statusArms {
		if slices.Contains(statuses, a.status) {
			arms = append(arms, a.cond)
		}
	}
	if len(arms) == 0 {
		return "false"
	}
	return "(" + strings.Join(arms, " OR ") + ")"
}

// likePrefix turns s into a LIKE pattern matching the strings that start
// with s, with LIKE's special characters escaped.
func likePrefix(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return r.Replace(s) + "%"
}
