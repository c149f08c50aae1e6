package sysdb

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// streamEntry is one entry to append, of run "a" at epoch 2 unless set.
type streamEntry struct {
	id     string
	epoch  int64
	key    string
	off    int64
	value  string // "": the close marker
	wseq   *int64
	closed bool
}

func appendParams(notify bool, entries ...streamEntry) AppendParams {
	p := AppendParams{Notify: notify}
	for _, e := range entries {
		if e.id == "" {
			e.id = "a"
		}
		if e.epoch == 0 {
			e.epoch = 2
		}
		if e.key == "" {
			e.key = "k"
		}
		var v json.RawMessage
		if e.value != "" {
			v = json.RawMessage(e.value)
		}
		p.WorkflowIDs = append(p.WorkflowIDs, e.id)
		p.Keys = append(p.Keys, e.key)
		p.Offsets = append(p.Offsets, e.off)
		p.Values = append(p.Values, v)
		p.Closed = append(p.Closed, e.closed)
		p.Wseqs = append(p.Wseqs, e.wseq)
		p.Epochs = append(p.Epochs, e.epoch)
	}
	return p
}

func rank(n int64) *int64 { return &n }

// stored returns the entries of stream key of run id as "off:value" (the
// close marker as "off:closed"), in order.
func (d *waitDB) stored(id, key string) []string {
	d.t.Helper()
	rows, err := d.pool.Query(d.ctx, Render(`SELECT off || ':' || CASE WHEN closed THEN 'closed' ELSE value::text END
FROM {{schema}}.streams WHERE workflow_id = $1 AND key = $2 ORDER BY off`, d.schema), id, key)
	require.NoError(d.t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(d.t, err)
	return out
}

func TestStreamAppend(t *testing.T) {
	t.Parallel()
	d := newWaitDB(t)
	d.run("a", "")
	d.run("watched", "notify = true")
	d.run("fenced", "epoch = 3")
	d.run("done", "status = 'success'")
	got, err := d.sq.Append(d.ctx, d.pool, appendParams(true,
		streamEntry{off: 0, value: `"x"`, wseq: rank(0)},
		streamEntry{off: 1, value: `"y"`},
		streamEntry{key: "other", off: 0, closed: true},
		streamEntry{id: "watched", off: 0, value: `1`},
		streamEntry{id: "fenced", off: 0, value: `1`},
		streamEntry{id: "done", off: 0, value: `1`},
		streamEntry{id: "missing", off: 0, value: `1`},
	))
	require.NoError(t, err)
	require.ElementsMatch(t, []AppendRow{{"a", 2}, {"watched", 2}}, got, "the runs pending at the writer's epoch")
	require.Equal(t, []string{`0:"x"`, `1:"y"`}, d.stored("a", "k"))
	require.Equal(t, []string{`0:closed`}, d.stored("a", "other"))
	require.Equal(t, []string{`0:1`}, d.stored("watched", "k"))
	for _, id := range []string{"fenced", "done", "missing"} {
		require.Empty(t, d.stored(id, "k"), "%s: rejected", id)
	}
	var wseq *int64
	d.scan(`SELECT wseq FROM {{schema}}.streams WHERE workflow_id = 'a' AND key = 'k' AND off = 0`, nil, &wseq)
	require.Equal(t, int64(0), *wseq)
	d.scan(`SELECT wseq FROM {{schema}}.streams WHERE workflow_id = 'a' AND key = 'k' AND off = 1`, nil, &wseq)
	require.Nil(t, wseq, "a step's entry has no rank")
	require.Equal(t, "s:watched", d.notified(), "only a watched run's readers are told")
	d.mark()
	require.Equal(t, "mark", d.notified())

	// A retry after a lost acknowledgement writes nothing twice.
	got, err = d.sq.Append(d.ctx, d.pool, appendParams(false,
		streamEntry{off: 1, value: `"changed"`},
		streamEntry{off: 2, value: `"z"`},
		streamEntry{id: "watched", off: 1, value: `2`},
	))
	require.NoError(t, err)
	require.ElementsMatch(t, []AppendRow{{"a", 2}, {"watched", 2}}, got)
	require.Equal(t, []string{`0:"x"`, `1:"y"`, `2:"z"`}, d.stored("a", "k"))
	d.mark()
	require.Equal(t, "mark", d.notified(), "no notification without Notify")
}

func TestStreamKeyState(t *testing.T) {
	t.Parallel()
	d := newWaitDB(t)
	d.run("a", "")
	state := func(key string) KeyStateRow {
		t.Helper()
		s, err := d.sq.KeyState(d.ctx, d.pool, KeyStateParams{WorkflowID: "a", Key: key})
		require.NoError(t, err)
		return s
	}
	require.Equal(t, KeyStateRow{}, state("k"), "an empty stream")
	_, err := d.sq.Append(d.ctx, d.pool, appendParams(false,
		streamEntry{off: 0, value: `0`, wseq: rank(0)},
		streamEntry{off: 1, value: `1`, wseq: rank(2)},
		streamEntry{off: 2, value: `2`},
		streamEntry{key: "closed", off: 0, value: `0`},
		streamEntry{key: "closed", off: 1, closed: true, wseq: rank(1)},
	))
	require.NoError(t, err)
	require.Equal(t, KeyStateRow{LastOffset: rank(2), MaxWseq: rank(2)}, state("k"))
	require.Equal(t, KeyStateRow{LastOffset: rank(1), Closed: true, MaxWseq: rank(1)}, state("closed"))
	require.Equal(t, KeyStateRow{}, state("other"))
}

func TestStreamRead(t *testing.T) {
	t.Parallel()
	d := newWaitDB(t)
	read := func(id, key string, from int64, limit int) []ReadRow {
		t.Helper()
		rows, err := d.sq.Read(d.ctx, d.pool, ReadParams{WorkflowID: id, Key: key, From: from, Limit: limit})
		require.NoError(t, err)
		return rows
	}
	offsets := func(rows []ReadRow) []int64 {
		var out []int64
		for _, r := range rows {
			out = append(out, *r.Offset)
		}
		return out
	}
	require.Empty(t, read("missing", "k", 0, 10), "no run: no row")
	d.run("a", "")
	rows := read("a", "k", 0, 10)
	require.Len(t, rows, 1, "a run without entries: one row")
	require.Equal(t, ReadRow{Status: "pending"}, rows[0])

	_, err := d.sq.Append(d.ctx, d.pool, appendParams(false,
		streamEntry{off: 0, value: `"a"`}, streamEntry{off: 1, value: `"b"`}, streamEntry{off: 2, value: `"c"`},
		streamEntry{key: "other", off: 0, value: `"x"`},
	))
	require.NoError(t, err)
	rows = read("a", "k", 1, 10)
	require.Equal(t, []int64{1, 2}, offsets(rows), "from an offset")
	require.Equal(t, `"b"`, string(rows[0].Value))
	require.False(t, rows[0].CreatedAt.IsZero())
	require.False(t, rows[0].TailClosed)
	require.Equal(t, []int64{0, 1}, offsets(read("a", "k", 0, 2)), "up to the limit")
	rows = read("a", "k", 3, 10)
	require.Len(t, rows, 1)
	require.Nil(t, rows[0].Offset, "nothing from the offset on")

	_, err = d.sq.Append(d.ctx, d.pool, appendParams(false, streamEntry{off: 3, closed: true}))
	require.NoError(t, err)
	d.exec(`UPDATE {{schema}}.workflows SET status = 'success' WHERE id = 'a'`)
	rows = read("a", "k", 2, 10)
	require.Equal(t, []int64{2, 3}, offsets(rows))
	for _, r := range rows {
		require.Equal(t, "success", r.Status)
		require.True(t, r.TailClosed, "the stream's last entry is its close marker")
	}
	require.True(t, rows[1].Closed)
	require.Nil(t, rows[1].Value)
	require.True(t, read("a", "k", 0, 1)[0].TailClosed, "whatever the entries read")
}

func TestStreamRunState(t *testing.T) {
	t.Parallel()
	d := newWaitDB(t)
	d.run("a", "status = 'cancelled', epoch = 5")
	s, err := d.sq.RunState(d.ctx, d.pool, "a")
	require.NoError(t, err)
	require.Equal(t, RunStateRow{Status: "cancelled", Epoch: 5}, s)
	_, err = d.sq.RunState(d.ctx, d.pool, "missing")
	require.True(t, errors.Is(err, pgx.ErrNoRows), "no run: %v", err)
}
