package sysdb

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDebounceStatements(t *testing.T) {
	f := newQueueFix(t)
	dq := NewDebounceQueries(f.schema, ChannelName(f.schema))
	f.declare("q", QueueSettings{})
	now := time.Now().UTC().Truncate(time.Microsecond)
	bound := now.Add(10 * time.Second)
	p := DebounceParams{ID: "r1", Workflow: "w", AppVersion: "v", Input: []byte(`1`), Queue: "q", Key: "k",
		Start: now.Add(5 * time.Second), StartBound: &bound, Notify: true}
	row := func(id string) (input string, start time.Time) {
		t.Helper()
		require.NoError(t, f.pool.QueryRow(f.ctx, Render(`SELECT input::text, not_before FROM {{schema}}.workflows WHERE id = $1`, f.schema), id).
			Scan(&input, &start))
		return input, start.UTC()
	}

	conn := f.listen()
	res, err := dq.Upsert(f.ctx, f.pool, p)
	require.NoError(t, err)
	require.Equal(t, DebounceRow{QueueFound: true, ID: "r1", Inserted: true}, res)
	require.Equal(t, "q:q", f.notified(conn))

	// Collapse: the new input and start, up to the bound set by the first.
	p2 := p
	p2.ID, p2.Input, p2.Start = "r2", []byte(`2`), now.Add(8*time.Second)
	res, err = dq.Upsert(f.ctx, f.pool, p2)
	require.NoError(t, err)
	require.Equal(t, DebounceRow{QueueFound: true, ID: "r1"}, res)
	in, start := row("r1")
	require.Equal(t, "2", in)
	require.Equal(t, now.Add(8*time.Second), start)
	p2.Start = now.Add(time.Minute)
	_, err = dq.Upsert(f.ctx, f.pool, p2)
	require.NoError(t, err)
	_, start = row("r1")
	require.Equal(t, bound, start, "not past the bound")

	// Insert only (a merge's), another workflow, no queue.
	p3 := p2
	p3.NoCollapse = true
	res, err = dq.Upsert(f.ctx, f.pool, p3)
	require.NoError(t, err)
	require.Equal(t, DebounceRow{QueueFound: true}, res)
	p3.NoCollapse, p3.Workflow = false, "other"
	res, err = dq.Upsert(f.ctx, f.pool, p3)
	require.NoError(t, err)
	require.Equal(t, DebounceRow{QueueFound: true}, res)
	p3.Queue = "nope"
	res, err = dq.Upsert(f.ctx, f.pool, p3)
	require.NoError(t, err)
	require.False(t, res.QueueFound)

	// Lock and Update (a merge), and once the run is claimed, a new run.
	tx, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	held, found, err := dq.Lock(f.ctx, tx, "q", "k")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, DebouncedRow{ID: "r1", Workflow: "w", Input: []byte(`2`)}, held)
	ok, err := dq.Update(f.ctx, tx, DebounceUpdateParams{ID: "r1", Input: []byte(`[2,3]`), Start: now.Add(time.Hour)})
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, tx.Commit(f.ctx))
	in, start = row("r1")
	require.Equal(t, "[2,3]", in)
	require.Equal(t, bound, start)

	f.exec(`UPDATE {{schema}}.workflows SET status = 'pending' WHERE id = 'r1'`)
	_, found, err = dq.Lock(f.ctx, f.pool, "q", "k")
	require.NoError(t, err)
	require.False(t, found)
	p3 = p
	p3.ID = "r3"
	res, err = dq.Upsert(f.ctx, f.pool, p3)
	require.NoError(t, err)
	require.Equal(t, DebounceRow{QueueFound: true, ID: "r3", Inserted: true}, res)
}
