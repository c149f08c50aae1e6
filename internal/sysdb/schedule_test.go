package sysdb

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// schedAt is a time on 2030-01-01 (UTC).
func schedAt(hour, min int) time.Time { return time.Date(2030, 1, 1, hour, min, 0, 0, time.UTC) }

// scheduleDB is a migrated schema and its schedule statements.
type scheduleDB struct {
	pool   *pgxpool.Pool
	schema string
	q      *ScheduleQueries
}

func newScheduleDB(t *testing.T) *scheduleDB {
	pool, schema := migrated(t)
	return &scheduleDB{pool: pool, schema: schema, q: NewScheduleQueries(schema, ChannelName(schema))}
}

// declare upserts schedule name running "job" every minute from cursor.
func (d *scheduleDB) declare(t *testing.T, name string, cursor time.Time) ScheduleRow {
	t.Helper()
	require.NoError(t, d.q.Upsert(context.Background(), d.pool, ScheduleUpsertParams{
		Name: name, Workflow: "job", Spec: "* * * * *", Location: "UTC", Cursor: cursor, NextTick: cursor.Add(time.Minute)}))
	return d.get(t, name)
}

func (d *scheduleDB) get(t *testing.T, name string) ScheduleRow {
	t.Helper()
	r, found, err := d.q.Get(context.Background(), d.pool, name)
	require.NoError(t, err)
	require.True(t, found, name)
	return r
}

func TestScheduleUpsert(t *testing.T) {
	t.Parallel()
	d := newScheduleDB(t)
	ctx := context.Background()
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	decl := ScheduleUpsertParams{Name: "s", Workflow: "job", Spec: "0 9 * * *", Location: "Europe/Paris", CatchUp: 2,
		Cursor: time.Date(2030, 1, 1, 1, 0, 0, 0, paris), NextTick: schedAt(8, 0)}
	require.NoError(t, d.q.Upsert(ctx, d.pool, decl))
	r := d.get(t, "s")
	require.Equal(t, ScheduleRow{Name: "s", Workflow: "job", Spec: "0 9 * * *", Location: "Europe/Paris", CatchUp: 2,
		Cursor: schedAt(0, 0), NextTick: schedAt(8, 0), Version: 1, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, Triggers: []time.Time{}}, r,
		"a new row; times read back in UTC")
	require.Equal(t, time.UTC, r.CreatedAt.Location())

	// The same declaration again (a restart) writes nothing.
	later := decl
	later.Cursor, later.NextTick = schedAt(5, 0), schedAt(8, 0)
	require.NoError(t, d.q.Upsert(ctx, d.pool, later))
	require.Equal(t, r, d.get(t, "s"))

	// A change made at run time survives the same declaration.
	ok, err := d.q.Update(ctx, d.pool, ScheduleUpdateParams{Name: "s", Version: 1, Spec: "0 10 * * *", Location: "UTC",
		Paused: true, Cursor: schedAt(1, 0)})
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, d.q.Upsert(ctx, d.pool, later))
	r = d.get(t, "s")
	require.Equal(t, "0 10 * * *", r.Spec)
	require.Equal(t, int64(2), r.Version)

	// Another catch-up in code: only catch_up changes.
	more := later
	more.CatchUp = 5
	require.NoError(t, d.q.Upsert(ctx, d.pool, more))
	r = d.get(t, "s")
	require.Equal(t, 5, r.CatchUp)
	require.Equal(t, "0 10 * * *", r.Spec)
	require.Equal(t, schedAt(1, 0), r.Cursor)
	require.Equal(t, int64(3), r.Version)

	// Another spec in code wins over the run-time one and restarts the
	// count; the schedule stays paused, with no next tick.
	respec := more
	respec.Spec, respec.Location, respec.Cursor, respec.NextTick = "*/5 * * * *", "UTC", schedAt(6, 0), schedAt(6, 5)
	require.NoError(t, d.q.Upsert(ctx, d.pool, respec))
	r = d.get(t, "s")
	require.Equal(t, "*/5 * * * *", r.Spec)
	require.Equal(t, "UTC", r.Location)
	require.Equal(t, schedAt(6, 0), r.Cursor)
	require.True(t, r.Paused)
	require.True(t, r.NextTick.IsZero())
	require.Equal(t, int64(4), r.Version)

	// Another workflow in code takes over the row.
	other := respec
	other.Workflow = "job-v2"
	require.NoError(t, d.q.Upsert(ctx, d.pool, other))
	r = d.get(t, "s")
	require.Equal(t, "job-v2", r.Workflow)
	require.Equal(t, schedAt(6, 0), r.Cursor)
	require.Equal(t, int64(5), r.Version)

	// An unpaused schedule gets the new next tick; none (zero) is NULL.
	require.NoError(t, d.q.Upsert(ctx, d.pool, ScheduleUpsertParams{Name: "never", Workflow: "job", Spec: "0 0 30 2 *",
		Location: "UTC", Cursor: schedAt(0, 0)}))
	require.True(t, d.get(t, "never").NextTick.IsZero())
	var null bool
	require.NoError(t, d.pool.QueryRow(ctx, Render(`SELECT next_tick IS NULL FROM {{schema}}.schedules WHERE name = 'never'`, d.schema)).Scan(&null))
	require.True(t, null)
}

func TestScheduleListAndGet(t *testing.T) {
	t.Parallel()
	d := newScheduleDB(t)
	ctx := context.Background()
	list, err := d.q.List(ctx, d.pool)
	require.NoError(t, err)
	require.Empty(t, list)

	b := d.declare(t, "b", schedAt(0, 0))
	a := d.declare(t, "a", schedAt(1, 0))
	list, err = d.q.List(ctx, d.pool)
	require.NoError(t, err)
	require.Equal(t, []ScheduleRow{a, b}, list, "by name")
	require.Equal(t, "a", a.Name)
	require.Equal(t, schedAt(1, 0), a.Cursor)
	require.Equal(t, schedAt(1, 1), a.NextTick)
	require.True(t, a.LastTick.IsZero())
	require.Empty(t, a.LastRunID)

	_, found, err := d.q.Get(ctx, d.pool, "missing")
	require.NoError(t, err)
	require.False(t, found)
}

func TestScheduleAdvance(t *testing.T) {
	t.Parallel()
	d := newScheduleDB(t)
	ctx := context.Background()
	r := d.declare(t, "s", schedAt(0, 0))

	v, ok, err := d.q.Advance(ctx, d.pool, ScheduleAdvanceParams{Name: "s", Version: r.Version, Tick: schedAt(0, 1),
		NextTick: schedAt(0, 2), RunID: "sched:s:1"})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, r.Version+1, v)
	got := d.get(t, "s")
	require.Equal(t, schedAt(0, 1), got.Cursor)
	require.Equal(t, schedAt(0, 1), got.LastTick)
	require.Equal(t, "sched:s:1", got.LastRunID)
	require.Equal(t, schedAt(0, 2), got.NextTick)
	require.Equal(t, v, got.Version)

	// A stale version (another executor advanced the row) writes nothing.
	_, ok, err = d.q.Advance(ctx, d.pool, ScheduleAdvanceParams{Name: "s", Version: r.Version, Tick: schedAt(0, 5),
		NextTick: schedAt(0, 6), RunID: "sched:s:5"})
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, got, d.get(t, "s"))

	// A tick given up moves the cursor but leaves the last run as it is;
	// no next tick is NULL.
	v2, ok, err := d.q.Advance(ctx, d.pool, ScheduleAdvanceParams{Name: "s", Version: v, Tick: schedAt(0, 2)})
	require.NoError(t, err)
	require.True(t, ok)
	got = d.get(t, "s")
	require.Equal(t, schedAt(0, 2), got.Cursor)
	require.Equal(t, schedAt(0, 1), got.LastTick)
	require.Equal(t, "sched:s:1", got.LastRunID)
	require.True(t, got.NextTick.IsZero())
	require.Equal(t, v2, got.Version)

	_, ok, err = d.q.Advance(ctx, d.pool, ScheduleAdvanceParams{Name: "missing", Version: 1, Tick: schedAt(0, 2)})
	require.NoError(t, err)
	require.False(t, ok)
}

func TestScheduleUpdate(t *testing.T) {
	t.Parallel()
	d := newScheduleDB(t)
	ctx := context.Background()
	r := d.declare(t, "s", schedAt(0, 0))
	change := ScheduleUpdateParams{Name: "s", Version: r.Version, Spec: "0 9 * * *", Location: "Asia/Tokyo",
		Paused: true, Cursor: schedAt(3, 0)}
	ok, err := d.q.Update(ctx, d.pool, change)
	require.NoError(t, err)
	require.True(t, ok)
	got := d.get(t, "s")
	require.Equal(t, "0 9 * * *", got.Spec)
	require.Equal(t, "Asia/Tokyo", got.Location)
	require.True(t, got.Paused)
	require.Equal(t, schedAt(3, 0), got.Cursor)
	require.True(t, got.NextTick.IsZero())
	require.Equal(t, r.Version+1, got.Version)

	// A stale version (a change meanwhile) writes nothing.
	stale := change
	stale.Paused, stale.Spec = false, "@hourly"
	ok, err = d.q.Update(ctx, d.pool, stale)
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, got, d.get(t, "s"))

	stale.Version, stale.NextTick = got.Version, schedAt(4, 0)
	ok, err = d.q.Update(ctx, d.pool, stale)
	require.NoError(t, err)
	require.True(t, ok)
	got = d.get(t, "s")
	require.False(t, got.Paused)
	require.Equal(t, "@hourly", got.Spec)
	require.Equal(t, schedAt(4, 0), got.NextTick)

	ok, err = d.q.Update(ctx, d.pool, ScheduleUpdateParams{Name: "missing", Version: 1, Spec: "@hourly", Location: "UTC", Cursor: schedAt(0, 0)})
	require.NoError(t, err)
	require.False(t, ok)
}

func TestScheduleDelete(t *testing.T) {
	t.Parallel()
	d := newScheduleDB(t)
	ctx := context.Background()
	d.declare(t, "s", schedAt(0, 0))
	d.declare(t, "kept", schedAt(0, 0))
	found, err := d.q.Delete(ctx, d.pool, "s")
	require.NoError(t, err)
	require.True(t, found)
	_, found, err = d.q.Get(ctx, d.pool, "s")
	require.NoError(t, err)
	require.False(t, found)
	found, err = d.q.Delete(ctx, d.pool, "s")
	require.NoError(t, err)
	require.False(t, found)
	d.get(t, "kept")
}

func TestScheduleTriggers(t *testing.T) {
	t.Parallel()
	d := newScheduleDB(t)
	ctx := context.Background()
	r := d.declare(t, "s", schedAt(0, 0))
	conn, err := pgx.ConnectConfig(ctx, d.pool.Config().ConnConfig) // its own: see opsListen
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{ChannelName(d.schema)}.Sanitize())
	require.NoError(t, err)

	tick := time.Date(2031, 2, 3, 4, 5, 6, 7000, time.UTC)
	for range 2 {
		found, err := d.q.RequestTrigger(ctx, d.pool, ScheduleTriggerParams{Name: "s", Tick: tick})
		require.NoError(t, err)
		require.True(t, found)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		require.NoError(t, err)
		require.Equal(t, "k:s", n.Payload, "the executors are woken")
	}
	found, err := d.q.RequestTrigger(ctx, d.pool, ScheduleTriggerParams{Name: "s", Tick: schedAt(5, 0)})
	require.NoError(t, err)
	require.True(t, found)
	got := d.get(t, "s")
	require.Equal(t, []time.Time{tick, schedAt(5, 0)}, got.Triggers, "a tick asked for twice is stored once")
	require.Equal(t, r.Version, got.Version, "a trigger is not a change of the schedule")

	found, err = d.q.RequestTrigger(ctx, d.pool, ScheduleTriggerParams{Name: "missing", Tick: tick})
	require.NoError(t, err)
	require.False(t, found)

	require.NoError(t, d.q.TriggerDone(ctx, d.pool, ScheduleTriggerParams{Name: "s", Tick: tick}))
	require.Equal(t, []time.Time{schedAt(5, 0)}, d.get(t, "s").Triggers)
	require.NoError(t, d.q.TriggerDone(ctx, d.pool, ScheduleTriggerParams{Name: "s", Tick: tick}), "done twice is fine")
	require.NoError(t, d.q.TriggerDone(ctx, d.pool, ScheduleTriggerParams{Name: "s", Tick: schedAt(5, 0)}))
	require.Empty(t, d.get(t, "s").Triggers)
}
