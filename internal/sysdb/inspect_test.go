package sysdb

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestInspectSteps: Step reads one recorded step, ListSteps all of a run's
// in order, ListStepWindow a window of them with their count, and tells a
// run without steps from no run.
func TestInspectSteps(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	q := NewInspectQueries(schema)
	started := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	opsExec(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version) VALUES ('run', 'w', 'pending', 'v'), ('empty', 'w', 'pending', 'v'), ('other', 'w', 'pending', 'v')`)
	opsExec(t, pool, schema, `INSERT INTO {{schema}}.steps (workflow_id, pos, name, status, output, error, attempts, started_at, finished_at)
		SELECT 'run', i, 's' || i, CASE WHEN i = 1 THEN 'error' ELSE 'done' END,
			CASE WHEN i = 1 THEN NULL ELSE to_json(i) END, CASE WHEN i = 1 THEN '{"msg":"boom"}'::json END,
			i + 1, CASE WHEN i = 0 THEN NULL ELSE $1::timestamptz END, $1::timestamptz + i * interval '1 second'
		FROM generate_series(0, 9) i`, started)
	opsExec(t, pool, schema, `INSERT INTO {{schema}}.steps (workflow_id, pos, name, status, output) VALUES ('other', 0, 'x', 'done', '0')`)

	// Step: one step, each column in its field.
	s, err := q.Step(ctx, pool, StepParams{WorkflowID: "run", Pos: 1})
	require.NoError(t, err)
	require.Equal(t, 1, s.Pos)
	require.Equal(t, "s1", s.Name)
	require.Equal(t, "error", s.Status)
	require.Equal(t, 2, s.Attempts)
	require.True(t, s.StartedAt.Equal(started), "started_at %v", s.StartedAt)
	require.True(t, s.FinishedAt.Equal(started.Add(time.Second)), "finished_at %v", s.FinishedAt)
	require.Nil(t, s.Output)
	require.JSONEq(t, `{"msg":"boom"}`, string(s.Error))
	s, err = q.Step(ctx, pool, StepParams{WorkflowID: "run", Pos: 0})
	require.NoError(t, err)
	require.Nil(t, s.StartedAt)
	require.Equal(t, "0", string(s.Output))
	require.Nil(t, s.Error)
	_, err = q.Step(ctx, pool, StepParams{WorkflowID: "run", Pos: 10})
	require.True(t, errors.Is(err, pgx.ErrNoRows), "%v", err)

	// ListSteps: every step of the run, in position order.
	steps, err := q.ListSteps(ctx, pool, "run")
	require.NoError(t, err)
	require.Len(t, steps, 10)
	for i, s := range steps {
		require.Equal(t, i, s.Pos)
	}
	require.Equal(t, StepRow{Pos: 1, Name: "s1", Status: "error", Attempts: 2, StartedAt: steps[1].StartedAt,
		FinishedAt: steps[1].FinishedAt, Error: steps[1].Error}, steps[1])
	none, err := q.ListSteps(ctx, pool, "empty")
	require.NoError(t, err)
	require.Empty(t, none)

	// ListStepWindow: from a position, or the last ones; the total.
	pos := func(w StepWindow) []int {
		out := []int{}
		for _, s := range w.Steps {
			out = append(out, s.Pos)
		}
		return out
	}
	for _, c := range []struct {
		id          string
		from, limit int
		want        []int
		total       int
	}{
		{"run", 0, 3, []int{0, 1, 2}, 10},
		{"run", 8, 5, []int{8, 9}, 10},
		{"run", 10, 5, []int{}, 10},
		{"run", -1, 3, []int{7, 8, 9}, 10},
		{"run", -1, 20, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 10},
		{"empty", 0, 5, []int{}, 0},
		{"empty", -1, 5, []int{}, 0},
	} {
		w, found, err := q.ListStepWindow(ctx, pool, ListStepWindowParams{WorkflowID: c.id, From: c.from, Limit: c.limit})
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, c.want, pos(w), "%s from %d limit %d", c.id, c.from, c.limit)
		require.Equal(t, c.total, w.Total, "%s from %d limit %d", c.id, c.from, c.limit)
	}
	w, found, err := q.ListStepWindow(ctx, pool, ListStepWindowParams{WorkflowID: "run", From: 1, Limit: 1})
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, steps[1:2], w.Steps)
	_, found, err = q.ListStepWindow(ctx, pool, ListStepWindowParams{WorkflowID: "nope", From: 0, Limit: 5})
	require.NoError(t, err)
	require.False(t, found)
}

// TestListEvents: the latest value of each key a run published, in key
// order; none for a run without events, and not found for no run.
func TestListEvents(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := context.Background()
	q := NewInspectQueries(schema)
	at := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	opsExec(t, pool, schema, `INSERT INTO {{schema}}.workflows (id, name, status, app_version) VALUES ('run', 'w', 'pending', 'v'), ('quiet', 'w', 'pending', 'v')`)
	opsExec(t, pool, schema, `INSERT INTO {{schema}}.events (workflow_id, key, value, updated_at)
		VALUES ('run', 'b', '2', $1), ('run', 'a', '{"x":1}', $1), ('run', 'c', NULL, $1), ('other', 'a', '9', $1)`, at)
	events, found, err := q.ListEvents(ctx, pool, "run")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, []EventRow{
		{Key: "a", Value: []byte(`{"x":1}`), UpdatedAt: events[0].UpdatedAt},
		{Key: "b", Value: []byte(`2`), UpdatedAt: events[1].UpdatedAt},
		{Key: "c", UpdatedAt: events[2].UpdatedAt},
	}, events)
	for _, e := range events {
		require.True(t, e.UpdatedAt.Equal(at), "updated_at %v", e.UpdatedAt)
	}
	events, found, err = q.ListEvents(ctx, pool, "quiet")
	require.NoError(t, err)
	require.True(t, found)
	require.Empty(t, events)
	_, found, err = q.ListEvents(ctx, pool, "nope")
	require.NoError(t, err)
	require.False(t, found)
}
