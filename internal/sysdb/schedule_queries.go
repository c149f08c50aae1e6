package sysdb

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// ScheduleQueries is the set of statements of cron schedules for one schema.
type ScheduleQueries struct {
	upsert  string
	list    string
	get     string
	advance string
	update  string
	del     string

	requestTrigger string
	triggerDone    string
}

// scheduleColumns is the column list read by List and Get, in the order
// scanSchedule reads them.
const scheduleColumns = `name, workflow_name, spec, location, catch_up, paused, cursor_at,
	last_tick, last_run_id, next_tick, version, created_at, updated_at, triggers`

// NewScheduleQueries renders the schedule statements for schema; channel
// is the schema's notification channel ("": none sent, see notifier).
func NewScheduleQueries(schema, channel string) *ScheduleQueries {
	n := notifier(channel)
	r := func(s string) string { return Render(s, schema) }
	return &ScheduleQueries{
		// A schedule declared by code at Launch. A new row starts counting
		// ticks at $6. An existing row keeps the values in force (they may
		// have been changed at run time) unless the code declares another
		// spec, time zone or catch-up than it did before; a new spec or time
		// zone restarts the count at $6. Nothing is written when the code's
		// declaration is unchanged, so restarts do not touch the row.
		// $1 name, $2 workflow_name, $3 spec, $4 location, $5 catch_up,
		// $6 cursor_at, $7 next_tick.
		upsert: r(`INSERT INTO {{schema}}.schedules AS s (name, workflow_name, spec, location, catch_up,
	code_spec, code_location, code_catch_up, cursor_at, next_tick)
VALUES ($1, $2, $3, $4, $5, $3, $4, $5, $6, $7)
ON CONFLICT (name) DO UPDATE SET
	workflow_name = EXCLUDED.workflow_name,
	spec = CASE WHEN (s.code_spec, s.code_location) <> (EXCLUDED.code_spec, EXCLUDED.code_location)
		THEN EXCLUDED.spec ELSE s.spec END,
	location = CASE WHEN (s.code_spec, s.code_location) <> (EXCLUDED.code_spec, EXCLUDED.code_location)
		THEN EXCLUDED.location ELSE s.location END,
	cursor_at = CASE WHEN (s.code_spec, s.code_location) <> (EXCLUDED.code_spec, EXCLUDED.code_location)
		THEN EXCLUDED.cursor_at ELSE s.cursor_at END,
	next_tick = CASE WHEN (s.code_spec, s.code_location) <> (EXCLUDED.code_spec, EXCLUDED.code_location)
		THEN CASE WHEN s.paused THEN NULL ELSE EXCLUDED.next_tick END ELSE s.next_tick END,
	catch_up = CASE WHEN s.code_catch_up <> EXCLUDED.code_catch_up THEN EXCLUDED.catch_up ELSE s.catch_up END,
	code_spec = EXCLUDED.code_spec, code_location = EXCLUDED.code_location, code_catch_up = EXCLUDED.code_catch_up,
	version = s.version + 1, updated_at = now()
WHERE (s.workflow_name, s.code_spec, s.code_location, s.code_catch_up)
	<> (EXCLUDED.workflow_name, EXCLUDED.code_spec, EXCLUDED.code_location, EXCLUDED.code_catch_up)`),

		list: r(`SELECT ` + scheduleColumns + ` FROM {{schema}}.schedules ORDER BY name`),

		get: r(`SELECT ` + scheduleColumns + ` FROM {{schema}}.schedules WHERE name = $1`),

		// Moves the cursor past a tick once its run is started (or the tick
		// is given up), if nobody changed the row since it was read.
		// $1 name, $2 version read, $3 tick, $4 next_tick, $5 run ID (NULL:
		// the tick was given up and is not the last tick run).
		advance: r(`UPDATE {{schema}}.schedules SET cursor_at = $3, next_tick = $4,
	last_tick = CASE WHEN $5::text IS NULL THEN last_tick ELSE $3 END,
	last_run_id = coalesce($5::text, last_run_id),
	version = version + 1, updated_at = now()
WHERE name = $1 AND version = $2
RETURNING version`),

		// A change made at run time (pause, resume, new spec), if nobody
		// changed the row since it was read.
		// $1 name, $2 version read, $3 spec, $4 location, $5 paused,
		// $6 cursor_at, $7 next_tick.
		update: r(`UPDATE {{schema}}.schedules SET spec = $3, location = $4, paused = $5, cursor_at = $6,
	next_tick = $7, version = version + 1, updated_at = now()
WHERE name = $1 AND version = $2`),

		del: r(`DELETE FROM {{schema}}.schedules WHERE name = $1`),

		// A manual tick asked for by a process that does not declare the
		// schedule; executors that do are woken to start it. The version is
		// left alone: this is not a change of the schedule.
		// $1 name, $2 tick. No row: no such schedule.
		requestTrigger: r(`WITH u AS (
	UPDATE {{schema}}.schedules SET triggers = CASE WHEN $2 = ANY(triggers) THEN triggers ELSE array_append(triggers, $2) END
	WHERE name = $1 RETURNING name)
SELECT ` + n(`'k:' || name`) + `::text FROM u`),

		// $1 name, $2 tick started.
		triggerDone: r(`UPDATE {{schema}}.schedules SET triggers = array_remove(triggers, $2) WHERE name = $1`),
	}
}

// ScheduleRow is a stored schedule. Its times are in UTC; a zero time is
// a NULL column.
type ScheduleRow struct {
	Name     string
	Workflow string
	Spec     string // the spec in force
	Location string // the time zone it is read in
	CatchUp  int
	Paused   bool
	// Cursor is the last tick started or skipped: the next tick to run is
	// the first after it.
	Cursor    time.Time
	LastTick  time.Time // zero: no tick run yet
	LastRunID string    // "": no tick run yet
	NextTick  time.Time // zero: paused, or the spec never fires again
	Version   int64     // bumped by every change of the row
	CreatedAt time.Time
	UpdatedAt time.Time
	// Triggers are the manual ticks asked for by processes that do not
	// declare the schedule.
	Triggers []time.Time
}

func scanSchedule(row pgx.Row) (ScheduleRow, error) {
	var r ScheduleRow
	var lastTick, nextTick *time.Time
	var lastRunID *string
	if err := row.Scan(&r.Name, &r.Workflow, &r.Spec, &r.Location, &r.CatchUp, &r.Paused, &r.Cursor,
		&lastTick, &lastRunID, &nextTick, &r.Version, &r.CreatedAt, &r.UpdatedAt, &r.Triggers); err != nil {
		return ScheduleRow{}, err
	}
	if lastTick != nil {
		r.LastTick = *lastTick
	}
	if nextTick != nil {
		r.NextTick = *nextTick
	}
	if lastRunID != nil {
		r.LastRunID = *lastRunID
	}
	for _, t := range []*time.Time{&r.Cursor, &r.LastTick, &r.NextTick, &r.CreatedAt, &r.UpdatedAt} {
		if !t.IsZero() {
			*t = t.UTC()
		}
	}
	for i := range r.Triggers {
		r.Triggers[i] = r.Triggers[i].UTC()
	}
	return r, nil
}

// nullTick is a tick as a statement argument: NULL when zero.
func nullTick(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// nullRunID is a run ID as a statement argument: NULL when empty.
func nullRunID(id string) any {
	if id == "" {
		return nil
	}
	return id
}

// ScheduleUpsertParams are a schedule as declared by code.
type ScheduleUpsertParams struct {
	Name     string
	Workflow string
	Spec     string
	Location string
	CatchUp  int
	// Cursor is where a new count of ticks starts (a new row, or a new
	// spec or zone in code); NextTick the first tick after it (zero: none).
	Cursor   time.Time
	NextTick time.Time
}

// Upsert stores a schedule declared by code. An existing row keeps the
// values in force unless the code's declaration changed since the last
// Upsert; an unchanged declaration writes nothing.
func (q *ScheduleQueries) Upsert(ctx context.Context, db DBTX, p ScheduleUpsertParams) error {
	_, err := db.Exec(ctx, q.upsert, p.Name, p.Workflow, p.Spec, p.Location, p.CatchUp, p.Cursor, nullTick(p.NextTick))
	return err
}

// List returns every stored schedule, by name.
func (q *ScheduleQueries) List(ctx context.Context, db DBTX) ([]ScheduleRow, error) {
	rows, err := db.Query(ctx, q.list)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ScheduleRow
	for rows.Next() {
		r, err := scanSchedule(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Get returns schedule name; found is false when there is none.
func (q *ScheduleQueries) Get(ctx context.Context, db DBTX, name string) (r ScheduleRow, found bool, err error) {
	r, err = scanSchedule(db.QueryRow(ctx, q.get, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return ScheduleRow{}, false, nil
	}
	return r, err == nil, err
}

// ScheduleAdvanceParams move a schedule's cursor past a tick.
type ScheduleAdvanceParams struct {
	Name    string
	Version int64 // the version read: the compare-and-set guard
	Tick    time.Time
	// NextTick is the first tick after Tick; zero: none.
	NextTick time.Time
	// RunID is the workflow ID of the tick's run; "" when the tick was
	// given up (then LastTick and LastRunID stay as they are).
	RunID string
}

// Advance moves the cursor of a schedule past a tick and returns the
// row's new version; ok is false, and nothing is written, when the row
// is gone or its version is no longer p.Version.
func (q *ScheduleQueries) Advance(ctx context.Context, db DBTX, p ScheduleAdvanceParams) (version int64, ok bool, err error) {
	err = db.QueryRow(ctx, q.advance, p.Name, p.Version, p.Tick, nullTick(p.NextTick), nullRunID(p.RunID)).Scan(&version)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return version, err == nil, err
}

// ScheduleUpdateParams are a change of a schedule made at run time.
type ScheduleUpdateParams struct {
	Name     string
	Version  int64 // the version read: the compare-and-set guard
	Spec     string
	Location string
	Paused   bool
	Cursor   time.Time
	NextTick time.Time // zero: none (paused, or no tick ahead)
}

// Update writes a change made at run time; ok is false, and nothing is
// written, when the row is gone or its version is no longer p.Version.
func (q *ScheduleQueries) Update(ctx context.Context, db DBTX, p ScheduleUpdateParams) (ok bool, err error) {
	tag, err := db.Exec(ctx, q.update, p.Name, p.Version, p.Spec, p.Location, p.Paused, p.Cursor, nullTick(p.NextTick))
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// Delete deletes schedule name; found is false when there was none.
func (q *ScheduleQueries) Delete(ctx context.Context, db DBTX, name string) (found bool, err error) {
	tag, err := db.Exec(ctx, q.del, name)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

// ScheduleTriggerParams name a manual tick of a schedule.
type ScheduleTriggerParams struct {
	Name string
	Tick time.Time
}

// RequestTrigger stores a manual tick for an executor that declares the
// schedule, once however often it is asked for, and notifies the
// executors; found is false when there is no such schedule.
func (q *ScheduleQueries) RequestTrigger(ctx context.Context, db DBTX, p ScheduleTriggerParams) (found bool, err error) {
	rows, err := db.Query(ctx, q.requestTrigger, p.Name, p.Tick)
	if err != nil {
		return false, err
	}
	found = rows.Next()
	rows.Close()
	return found, rows.Err()
}

// TriggerDone removes a manual tick whose run was started.
func (q *ScheduleQueries) TriggerDone(ctx context.Context, db DBTX, p ScheduleTriggerParams) error {
	_, err := db.Exec(ctx, q.triggerDone, p.Name, p.Tick)
	return err
}
