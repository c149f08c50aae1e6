package sysdb

// ScheduleQueries is the set of statements of cron schedules for one schema.
type ScheduleQueries struct {
	Upsert  string
	List    string
	Get     string
	Advance string
	Update  string
	Delete  string

	RequestTrigger string
	TriggerDone    string
}

// scheduleColumns is the column list read by List and Get, in the order
// the engine scans them.
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
		Upsert: r(`INSERT INTO {{schema}}.schedules AS s (name, workflow_name, spec, location, catch_up,
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

		List: r(`SELECT ` + scheduleColumns + ` FROM {{schema}}.schedules ORDER BY name`),

		Get: r(`SELECT ` + scheduleColumns + ` FROM {{schema}}.schedules WHERE name = $1`),

		// Moves the cursor past a tick once its run is started (or the tick
		// is given up), if nobody changed the row since it was read.
		// $1 name, $2 version read, $3 tick, $4 next_tick, $5 run ID (NULL:
		// the tick was given up and is not the last tick run).
		Advance: r(`UPDATE {{schema}}.schedules SET cursor_at = $3, next_tick = $4,
	last_tick = CASE WHEN $5::text IS NULL THEN last_tick ELSE $3 END,
	last_run_id = coalesce($5::text, last_run_id),
	version = version + 1, updated_at = now()
WHERE name = $1 AND version = $2
RETURNING version`),

		// A change made at run time (pause, resume, new spec), if nobody
		// changed the row since it was read.
		// $1 name, $2 version read, $3 spec, $4 location, $5 paused,
		// $6 cursor_at, $7 next_tick.
		Update: r(`UPDATE {{schema}}.schedules SET spec = $3, location = $4, paused = $5, cursor_at = $6,
	next_tick = $7, version = version + 1, updated_at = now()
WHERE name = $1 AND version = $2`),

		Delete: r(`DELETE FROM {{schema}}.schedules WHERE name = $1`),

		// A manual tick asked for by a process that does not declare the
		// schedule; executors that do are woken to start it. The version is
		// left alone: this is not a change of the schedule.
		// $1 name, $2 tick. No row: no such schedule.
		RequestTrigger: r(`WITH u AS (
	UPDATE {{schema}}.schedules SET triggers = CASE WHEN $2 = ANY(triggers) THEN triggers ELSE array_append(triggers, $2) END
	WHERE name = $1 RETURNING name)
SELECT ` + n(`'k:' || name`) + `::text FROM u`),

		// $1 name, $2 tick started.
		TriggerDone: r(`UPDATE {{schema}}.schedules SET triggers = array_remove(triggers, $2) WHERE name = $1`),
	}
}
