package sysdb

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// MetricsQueries are the read-only statements behind the engine's
// observable metrics and the dashboard's charts. Each reads its runs
// from a partial index, never the whole history.
type MetricsQueries struct {
	countParked       string
	finishedPerMinute string
	stepLatency       string
}

// NewMetricsQueries renders the metrics statements for schema.
func NewMetricsQueries(schema string) *MetricsQueries {
	r := func(s string) string { return Render(s, schema) }
	return &MetricsQueries{
		// Parked runs (pending, no owner, a wake-up time): the predicate of
		// workflows_parked_due_idx.
		countParked: r(`SELECT count(*) FROM {{schema}}.workflows
WHERE status = 'pending' AND executor_id IS NULL AND wake_at IS NOT NULL`),

		// Runs finished since $1, per minute and final status, from
		// workflows_finish_time_idx (a finish sets updated_at). $1 since.
		finishedPerMinute: r(`SELECT date_trunc('minute', updated_at), status, count(*) FROM {{schema}}.workflows
WHERE status IN ('success', 'error', 'cancelled', 'dead') AND updated_at IS NOT NULL AND updated_at >= $1
GROUP BY 1, 2 ORDER BY 1, 2`),

		// The median and 99th percentile of the duration of the steps of
		// the last $2 runs that finished since $1 (the newest of
		// workflows_finish_time_idx, then their steps by primary key), with
		// how many steps they are. A step's duration runs from its first
		// attempt's start to its record. $1 since, $2 runs.
		// The runs' steps are read by primary key, run by run (a lateral
		// subquery, kept apart from the join order by OFFSET 0): with the
		// steps table's statistics stale (a table just emptied), a plain
		// join scanned every step and read the runs again for each.
		stepLatency: r(`SELECT count(*),
	percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM s.finished_at - s.started_at)),
	percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM s.finished_at - s.started_at))
FROM (SELECT id FROM {{schema}}.workflows
	WHERE status IN ('success', 'error', 'cancelled', 'dead') AND updated_at IS NOT NULL AND updated_at >= $1
	ORDER BY updated_at DESC, id DESC LIMIT $2) w
CROSS JOIN LATERAL (SELECT s.started_at, s.finished_at FROM {{schema}}.steps s
	WHERE s.workflow_id = w.id AND s.started_at IS NOT NULL AND s.status <> 'intent' OFFSET 0) s`),
	}
}

// CountParked returns how many runs are parked: pending without an owner,
// waiting for a wake-up time or a message.
func (q *MetricsQueries) CountParked(ctx context.Context, db DBTX) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, q.countParked).Scan(&n)
	return n, err
}

// FinishedPerMinuteRow counts the runs that finished with one status in
// one minute.
type FinishedPerMinuteRow struct {
	Minute time.Time
	Status string
	Count  int64
}

// FinishedPerMinute counts the runs finished since since, per minute and
// status, oldest minute first.
func (q *MetricsQueries) FinishedPerMinute(ctx context.Context, db DBTX, since time.Time) ([]FinishedPerMinuteRow, error) {
	rows, err := db.Query(ctx, q.finishedPerMinute, since)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (FinishedPerMinuteRow, error) {
		var r FinishedPerMinuteRow
		err := row.Scan(&r.Minute, &r.Status, &r.Count)
		return r, err
	})
}

// StepLatencyParams are the arguments of StepLatency.
type StepLatencyParams struct {
	Since time.Time // runs finished since
	Runs  int       // at most this many runs, the newest
}

// StepLatencyRow is the median and 99th percentile of step durations, in
// seconds (zero when Steps is 0).
type StepLatencyRow struct {
	Steps    int64
	P50, P99 float64
}

// StepLatency returns the median and 99th percentile of the durations of
// the recorded steps (intents excluded) of the newest p.Runs runs
// finished since p.Since.
func (q *MetricsQueries) StepLatency(ctx context.Context, db DBTX, p StepLatencyParams) (StepLatencyRow, error) {
	var r StepLatencyRow
	var p50, p99 *float64
	err := db.QueryRow(ctx, q.stepLatency, p.Since, p.Runs).Scan(&r.Steps, &p50, &p99)
	if p50 != nil {
		r.P50 = *p50
	}
	if p99 != nil {
		r.P99 = *p99
	}
	return r, err
}
