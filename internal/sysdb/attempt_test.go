package sysdb

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// attempts lists the step_attempts rows of run id: "pos name attempts error".
func (c *coreDB) attempts(id string) []string {
	c.t.Helper()
	var out []string
	rows, err := c.pool.Query(c.ctx, Render(`SELECT pos || ' ' || name || ' ' || attempts || ' ' || coalesce(error::text, '-')
		FROM {{schema}}.step_attempts WHERE workflow_id = $1 ORDER BY pos`, c.schema), id)
	require.NoError(c.t, err)
	for rows.Next() {
		var s string
		require.NoError(c.t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(c.t, rows.Err())
	return out
}

// TestRecordAttempt: the count of a step's failed attempts is written and
// then overwritten, only while the run is pending at the epoch given.
func TestRecordAttempt(t *testing.T) {
	c := newCore(t)
	q := NewAttemptQueries(c.schema)
	c.run("r", 2, "pending")
	c.run("done", 2, "success")
	p := RecordAttemptParams{WorkflowID: "r", Pos: 3, Name: "charge", Attempts: 1, Error: json.RawMessage(`"e1"`), Epoch: 2}
	ok, err := q.RecordAttempt(c.ctx, c.pool, p)
	require.NoError(t, err)
	require.True(t, ok)
	p.Attempts, p.Error = 2, json.RawMessage(`"e2"`)
	ok, err = q.RecordAttempt(c.ctx, c.pool, p)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []string{`3 charge 2 "e2"`}, c.attempts("r"))

	// Fenced: another epoch, a finished run, a run that does not exist.
	for _, f := range []RecordAttemptParams{
		{WorkflowID: "r", Pos: 3, Name: "charge", Attempts: 9, Epoch: 1},
		{WorkflowID: "done", Pos: 0, Name: "charge", Attempts: 1, Epoch: 2},
		{WorkflowID: "nope", Pos: 0, Name: "charge", Attempts: 1, Epoch: 2},
	} {
		ok, err := q.RecordAttempt(c.ctx, c.pool, f)
		require.NoError(t, err)
		require.False(t, ok, "%+v", f)
	}
	require.Equal(t, []string{`3 charge 2 "e2"`}, c.attempts("r"))
	require.Empty(t, c.attempts("done"))
	require.Empty(t, c.attempts("nope"))
}

// TestLoadAttempts: the failed attempts of the runs asked for, of steps
// without a recorded outcome (an intent is none).
func TestLoadAttempts(t *testing.T) {
	c := newCore(t)
	q := NewAttemptQueries(c.schema)
	for _, id := range []string{"a", "b", "other"} {
		c.run(id, 1, "pending")
	}
	c.exec(`INSERT INTO {{schema}}.step_attempts (workflow_id, pos, name, attempts) VALUES
		('a', 0, 's', 1), ('a', 1, 's', 2), ('a', 2, 'i', 1), ('b', 5, 's', 4), ('other', 0, 's', 1)`)
	c.exec(`INSERT INTO {{schema}}.steps (workflow_id, pos, name, status, attempts) VALUES
		('a', 0, 's', 'done', 2), ('a', 2, 'i', 'intent', 0)`)
	got, err := q.LoadAttempts(c.ctx, c.pool, []string{"a", "b", "none"})
	require.NoError(t, err)
	require.ElementsMatch(t, []LoadAttemptsRow{{"a", 1, 2}, {"a", 2, 1}, {"b", 5, 4}}, got)

	got, err = q.LoadAttempts(c.ctx, c.pool, []string{"none"})
	require.NoError(t, err)
	require.Empty(t, got)
}

// TestResumeClearsAttempts: resuming a failed run gives its steps a new
// retry budget; a run not resumed keeps its counts.
func TestResumeClearsAttempts(t *testing.T) {
	c := newCore(t)
	c.run("failed", 1, "error")
	c.run("running", 1, "pending")
	c.exec(`INSERT INTO {{schema}}.step_attempts (workflow_id, pos, name, attempts) VALUES ('failed', 0, 's', 2), ('running', 0, 's', 2)`)
	cq := NewControlQueries(c.schema, ChannelName(c.schema))
	for _, id := range []string{"failed", "running"} {
		_, err := cq.Resume(c.ctx, c.pool, id)
		require.NoError(t, err)
	}
	require.Empty(t, c.attempts("failed"))
	require.Equal(t, []string{"0 s 2 -"}, c.attempts("running"))
}

// TestPruneBatchDeletesAttempts: retention deletes the attempt counts of
// the runs it deletes, and only those.
func TestPruneBatchDeletesAttempts(t *testing.T) {
	c := newCore(t)
	c.exec(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, updated_at) VALUES
		('old', 'w', 'error', 'v', now() - interval '3 hours'), ('new', 'w', 'error', 'v', now())`)
	c.exec(`INSERT INTO {{schema}}.step_attempts (workflow_id, pos, name, attempts) VALUES ('old', 0, 's', 2), ('new', 0, 's', 2)`)
	b, err := NewRetentionQueries(c.schema).PruneBatch(c.ctx, c.pool, PruneBatchParams{Before: time.Now().Add(-time.Hour), Limit: 10})
	require.NoError(t, err)
	require.EqualValues(t, 1, b.Runs)
	require.Empty(t, c.attempts("old"))
	require.Equal(t, []string{"0 s 2 -"}, c.attempts("new"))
}
