package sysdb

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCountParked(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	on(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, wake_at) VALUES
	('sleeping', 'w', 'pending', 'v', NULL, now() + interval '1 hour'),
	('waiting', 'w', 'pending', 'v', NULL, 'infinity'),
	('due', 'w', 'pending', 'v', NULL, now() - interval '1 second'),
	('running', 'w', 'pending', 'v', 'me', NULL),
	('unowned', 'w', 'pending', 'v', NULL, NULL),
	('finished', 'w', 'success', 'v', NULL, now())`)
	n, err := NewMetricsQueries(schema).CountParked(ctx, pool)
	require.NoError(t, err)
	require.EqualValues(t, 3, n, "pending, unowned, with a wake-up time")
}

func TestFinishedPerMinute(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	on(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, updated_at) VALUES
	('a', 'w', 'success', 'v', date_trunc('minute', now()) - interval '2 minutes' + interval '1 second'),
	('b', 'w', 'success', 'v', date_trunc('minute', now()) - interval '2 minutes' + interval '30 seconds'),
	('c', 'w', 'error', 'v', date_trunc('minute', now()) - interval '2 minutes'),
	('d', 'w', 'dead', 'v', date_trunc('minute', now()) - interval '1 minute'),
	('old', 'w', 'success', 'v', now() - interval '2 hours'),
	('pending', 'w', 'pending', 'v', now())`)
	var since time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT date_trunc('minute', now()) - interval '10 minutes'`).Scan(&since))
	rows, err := NewMetricsQueries(schema).FinishedPerMinute(ctx, pool, since)
	require.NoError(t, err)
	require.Len(t, rows, 3)
	m2 := since.UTC().Add(8 * time.Minute)
	require.Equal(t, FinishedPerMinuteRow{Minute: m2, Status: "error", Count: 1}, norm(rows[0]))
	require.Equal(t, FinishedPerMinuteRow{Minute: m2, Status: "success", Count: 2}, norm(rows[1]))
	require.Equal(t, FinishedPerMinuteRow{Minute: m2.Add(time.Minute), Status: "dead", Count: 1}, norm(rows[2]))
}

func norm(r FinishedPerMinuteRow) FinishedPerMinuteRow {
	r.Minute = r.Minute.UTC()
	return r
}

func TestStepLatency(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	q := NewMetricsQueries(schema)
	since := time.Now().Add(-time.Hour)
	got, err := q.StepLatency(ctx, pool, StepLatencyParams{Since: since, Runs: 10})
	require.NoError(t, err)
	require.Equal(t, StepLatencyRow{}, got, "no step")

	on(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version, updated_at) VALUES
	('new', 'w', 'success', 'v', now()), ('older', 'w', 'error', 'v', now() - interval '1 minute'),
	('old', 'w', 'success', 'v', now() - interval '2 hours'), ('running', 'w', 'pending', 'v', now())`)
	// Steps of 1s..100s in "new"; one of 1000s in "older", "old" and "running".
	on(t, pool, schema, `INSERT INTO {{schema}}.steps (workflow_id, pos, name, status, started_at, finished_at)
	SELECT 'new', i, 's', 'done', now() - i * interval '1 second', now() FROM generate_series(1, 100) i`)
	on(t, pool, schema, `INSERT INTO {{schema}}.steps (workflow_id, pos, name, status, started_at, finished_at) VALUES
	('older', 0, 's', 'error', now() - interval '1000 seconds', now()),
	('old', 0, 's', 'done', now() - interval '1000 seconds', now()),
	('running', 0, 's', 'done', now() - interval '1000 seconds', now()),
	('new', 0, 's', 'intent', now() - interval '1000 seconds', now()),
	('new', 101, 's', 'done', NULL, now())`)

	got, err = q.StepLatency(ctx, pool, StepLatencyParams{Since: since, Runs: 1})
	require.NoError(t, err)
	require.EqualValues(t, 100, got.Steps, "the newest run's steps with a start time, intents left out")
	require.InDelta(t, 50.5, got.P50, 0.01)
	require.InDelta(t, 99.01, got.P99, 0.01)

	got, err = q.StepLatency(ctx, pool, StepLatencyParams{Since: since, Runs: 10})
	require.NoError(t, err)
	require.EqualValues(t, 101, got.Steps, "the runs finished since Since")
	got, err = q.StepLatency(ctx, pool, StepLatencyParams{Since: time.Now().Add(-30 * time.Second), Runs: 10})
	require.NoError(t, err)
	require.EqualValues(t, 100, got.Steps, "not the runs finished before Since")
}
