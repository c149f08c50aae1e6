package sysdb

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// CheckpointRefused is the SQLSTATE of InsertStepTx when the checkpoint
// cannot be written.
const CheckpointRefused = "DU001"

// Marker is the placeholder for the schema name in SQL text.
const Marker = "{{schema}}"

// Render replaces the schema marker in sql with the sanitised identifier of
// schema.
func Render(sql, schema string) string {
	return strings.ReplaceAll(sql, Marker, pgx.Identifier{schema}.Sanitize())
}

// notifier returns the renderer of notifications on channel: n(payload),
// payload being an SQL text expression, is pg_notify(channel, payload).
// With channel "" (Config.PollOnly: nobody listens) it is a void value
// instead, of the same type as pg_notify's, so a statement keeps its shape
// and result columns while its commit sends nothing and skips the
// server-wide lock a notification takes.
func notifier(channel string) func(payload string) string {
	if channel == "" {
		return func(string) string { return "''::void" }
	}
	return func(payload string) string { return "pg_notify('" + channel + "', " + payload + ")" }
}

// maxChannelLen is the longest LISTEN/NOTIFY channel name Postgres takes
// (NAMEDATALEN - 1 bytes): pg_notify refuses a longer one.
const maxChannelLen = 63

// ChannelName returns the LISTEN/NOTIFY channel of schema: "durable:" and
// the schema name, or, when that is too long for Postgres, a prefix of the
// name and a hash of the whole name.
func ChannelName(schema string) string {
	c := "durable:" + schema
	if len(c) <= maxChannelLen {
		return c
	}
	h := fnv.New32a()
	h.Write([]byte(schema))
	return fmt.Sprintf("%s_%08x", c[:maxChannelLen-9], h.Sum32())
}

// Queries is the set of statements for one schema.
type Queries struct {
	Schema   string
	Channel  string // LISTEN/NOTIFY channel for this schema
	NotifyTo string // Channel, or "" when the statements send no notifications

	insertWorkflow  string
	workflowByID    string
	watchWorkflow   string
	loadStepsMany   string
	insertStep      string
	insertSteps     string
	insertOwned     string
	finishOne       string
	finishOneSteps  string
	notifyDone      string
	notify          string
	wakeParent      string
	wakeWatchers    string
	insertWorkflows string
	finishWorkflows string
	finishStepsMany string
	// The two above with the hand-on of the finished runs' queue slots.
	finishHandOn, finishStepsHandOn string
	insertStepTx                    string
	completeIntent                  string
	listen                          string
}

// New renders all statements for schema. With notify false
// (Config.PollOnly) they send no notifications (see notifier).
func New(schema string, notify bool) *Queries {
	r := func(s string) string { return Render(s, schema) }
	channel, sendTo := ChannelName(schema), ""
	// watched: a waiter in another process asked for the notification of
	// the finish (see WatchWorkflow).
	watched := "false AS notify"
	if notify {
		sendTo, watched = channel, "notify"
	}
	n := notifier(sendTo)
	return &Queries{
		Schema:   schema,
		Channel:  channel,
		NotifyTo: sendTo,

		// $1 id, $2 name, $3 app_version, $4 executor_id (NULL: unowned),
		// $5 epoch, $6 input, $7 parent_id, $8 notify payload (NULL: none),
		// $9 deadline (NULL: none), $10 trace_context (NULL: none), $11 tags
		// (NULL: none).
		// The notification of an unowned run is only delivered when the
		// inserting transaction commits, which is what StartTx relies on.
		insertWorkflow: r(`WITH ins AS (
	INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, input, parent_id, deadline, trace_context, tags)
	VALUES ($1, $2, 'pending', $3, $4, $5, $6, $7, $9, $10, $11::jsonb)
	ON CONFLICT (id) DO NOTHING
	RETURNING id)
SELECT CASE WHEN $8::text IS NULL THEN '' ELSE ` + n(`$8::text`) + `::text END FROM ins`),

		// InsertWorkflow for one run owned by this executor: the plainest
		// statement, as it is half of a short run's cost.
		// $1 id, $2 name, $3 app_version, $4 executor_id, $5 input, $6 parent_id, $7 deadline,
		// $8 trace_context, $9 tags.
		insertOwned: r(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, input, parent_id, deadline, trace_context, tags)
VALUES ($1, $2, 'pending', $3, $4, 1, $5, $6, $7, $8, $9::jsonb)
ON CONFLICT (id) DO NOTHING`),

		// Records a run's final outcome, fenced by its epoch. The notification
		// for remote waiters (the notify flag, set by WatchWorkflow) is sent
		// by the caller after the commit, only when one asked.
		//
		// Its commit waits for the WAL flush like every other write: a
		// finish is what Result, Status, a parent and every listing show,
		// and an outcome a caller has seen must not be taken back by a
		// crash of Postgres. (Under concurrency the flush is shared: group
		// commit puts concurrent finishes in one statement, FinishWorkflows.)
		// $1 id, $2 epoch, $3 status, $4 output, $5 error.
		finishOne: r(`UPDATE {{schema}}.workflows SET status = $3, output = $4, error = $5, updated_at = now()
WHERE id = $1 AND epoch = $2 AND status = 'pending'
RETURNING ` + watched + `, parent_id, notify AS watched`),

		// FinishOne that also records the run's last step checkpoints
		// (deferred to the finish, see pending.go in the engine), only when
		// the run is finished by it.
		// $1-$5 as FinishOne; the steps' $6 positions, $7 names, $8 statuses,
		// $9 outputs, $10 errors, $11 attempts, $12 started_at.
		finishOneSteps: r(`WITH upd AS (
	UPDATE {{schema}}.workflows SET status = $3, output = $4, error = $5, updated_at = now()
	WHERE id = $1 AND epoch = $2 AND status = 'pending'
	RETURNING ` + watched + `, parent_id, notify AS watched),
ins AS (
	INSERT INTO {{schema}}.steps (workflow_id, pos, name, status, output, error, attempts, started_at)
	SELECT $1, s.* FROM unnest($6::int[], $7::text[], $8::text[], $9::json[], $10::json[], $11::int[], $12::timestamptz[])
		AS s(pos, name, status, output, error, attempts, started_at)
	WHERE EXISTS (SELECT 1 FROM upd))
SELECT notify, parent_id, watched FROM upd`),

		// Wakes a parent parked in Await (or a Select) on child $1, and
		// nudges one that executes (see Park): the update always matches a
		// pending parent, so it also sees a park that commits concurrently.
		wakeParent: r(`WITH u AS (
	UPDATE {{schema}}.workflows SET
		wake_at = CASE WHEN ` + parkedOnChild + ` THEN now() ELSE wake_at END,
		nudged = CASE WHEN executor_id IS NOT NULL THEN true ELSE nudged END
	WHERE id = $2 AND status = 'pending'
	RETURNING id, ` + parkedOnChild + ` AS woken)
SELECT ` + n(`'n:' || id`) + `::text FROM u WHERE woken`),

		// Wakes the runs parked in a Select on the finish of the runs $1
		// names ("done:" ID entries, see WaitKeys): for finishes of runs a
		// waiter watched, after they committed. A GIN lookup of
		// workflows_wait_any_idx.
		wakeWatchers: r(wakeWaiters(n, `wait_any && $1::text[]`)),

		notifyDone: "SELECT " + n("'d:' || $1::text"),

		// Notify sends payload $1 on the schema's channel (nothing with
		// Config.PollOnly).
		notify: "SELECT " + n("$1::text"),

		// InsertWorkflow (owned by this executor) for many runs at once.
		// $1 ids, $2 names, $3 app_version, $4 executor_id, $5 inputs,
		// $6 parents, $7 deadlines, $8 trace contexts (NULL: none for all),
		// $9 tags (NULL: none for all).
		insertWorkflows: r(`INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, input, parent_id, deadline, trace_context, tags)
SELECT u.id, u.name, 'pending', $3, $4, 1, u.input, u.parent_id, u.deadline, u.trace_context, u.tags::jsonb
FROM unnest($1::text[], $2::text[], $5::json[], $6::text[], $7::timestamptz[], $8::text[], $9::json[])
	AS u(id, name, input, parent_id, deadline, trace_context, tags)
ON CONFLICT (id) DO NOTHING
RETURNING id`),

		workflowByID: r(`SELECT id, name, status, app_version, executor_id, epoch, recovery_attempts,
	notify, parent_id, input, output, error, created_at, updated_at, queue_name, deadline, continued_as
FROM {{schema}}.workflows WHERE id = $1`),

		// A waiter in another process asks to be notified of the finish.
		// No row: the run is not pending any more. A run no executor has
		// claimed yet (queued, or pending without an owner, not parked for
		// later) also wakes those that may claim it: a claim that ran while
		// this statement held the row's lock skipped the row (SKIP LOCKED),
		// and nothing else would wake them before their next poll.
		watchWorkflow: r(`WITH u AS (
	UPDATE {{schema}}.workflows SET notify = true WHERE id = $1 AND status IN ('pending', 'enqueued')
	RETURNING id, status, queue_name, executor_id, wake_at)
SELECT (CASE WHEN status = 'enqueued' THEN ` + n(`'q:' || queue_name`) + `
	WHEN executor_id IS NULL AND (wake_at IS NULL OR wake_at <= now()) THEN ` + n(`'n:' || id`) + ` END)::text FROM u`),

		// One window of the recorded steps of each of the runs of $1, from
		// position $4 on: at most $3 steps of a run, and only those whose
		// outputs and errors add up to at most $2 bytes (its first step
		// whatever its size). The runs are then taken in $1's order while
		// their windows add up to at most $2 bytes (the first run always).
		// The sizes are read first without loading the values:
		// pg_column_size is the stored size, read from the tuple or its
		// TOAST pointer (a json value's length would detoast it), which for
		// a value TOAST compressed is less than its length. The LIMIT reads
		// one step past the window, to tell whether the run has more.
		// Returns the 1-based rank in $1 of each run taken with each step of
		// its window, ordered by rank and position (a run taken without steps
		// comes as one row of NULLs), whether steps beyond the window are
		// recorded, and how many steps the run has recorded: counted (once
		// per run: taken is materialized) only when $4 is 0 and the window
		// does not hold them all, else the window's.
		// $1 workflow_ids, $2 byte budget, $3 window (steps), $4 first position.
		loadStepsMany: r(`WITH ids AS (
	SELECT id, n FROM unnest($1::text[]) WITH ORDINALITY AS i(id, n)),
win AS (
	SELECT ids.n, ids.id, s.pos, s.name, s.status, s.output, s.error, s.attempts,
		row_number() OVER (PARTITION BY ids.n ORDER BY s.pos) AS k,
		sum(coalesce(pg_column_size(s.output), 0) + coalesce(pg_column_size(s.error), 0))
			OVER (PARTITION BY ids.n ORDER BY s.pos) AS upto
	FROM ids LEFT JOIN LATERAL (
		SELECT * FROM {{schema}}.steps s WHERE s.workflow_id = ids.id AND s.pos >= $4
		ORDER BY s.pos LIMIT $3 + 1) s ON true),
kept AS (
	SELECT win.*, k = 1 OR (k <= $3 AND upto <= $2) AS keep FROM win),
sized AS (
	SELECT n, id, max(upto) FILTER (WHERE keep) AS bytes, count(pos) FILTER (WHERE keep) AS loaded,
		bool_or(NOT keep) AS more
	FROM kept GROUP BY n, id),
taken AS MATERIALIZED (
	SELECT x.n, x.more, CASE WHEN x.more AND $4 = 0
		THEN (SELECT count(*) FROM {{schema}}.steps s WHERE s.workflow_id = x.id)
		ELSE x.loaded END AS recorded
	FROM (SELECT sized.*, sum(bytes) OVER (ORDER BY n) AS total FROM sized) x
	WHERE n = 1 OR total <= $2)
SELECT t.n, k.pos, k.name, k.status, k.output, k.error, k.attempts, t.more, t.recorded
FROM taken t JOIN kept k ON k.n = t.n AND k.keep
ORDER BY t.n, k.pos`),

		// The single statement of a step: it records the outcome only while
		// the run is pending and owned at epoch $9. FOR SHARE makes a
		// concurrent change of owner wait for this write (or this write see
		// the new owner), so a fenced executor can never slip a checkpoint in.
		// A step already recorded fails it with a unique violation (no ON
		// CONFLICT clause, as in InsertSteps), which the engine reads as "not
		// written" and then finds the record.
		// $1 workflow_id, $2 pos, $3 name, $4 status, $5 output, $6 error,
		// $7 attempts, $8 started_at, $9 epoch.
		insertStep: r(`INSERT INTO {{schema}}.steps (workflow_id, pos, name, status, output, error, attempts, started_at)
SELECT $1, $2, $3, $4, $5, $6, $7, $8
FROM {{schema}}.workflows w
WHERE w.id = $1 AND w.epoch = $9 AND w.status = 'pending'
FOR SHARE OF w`),

		// InsertStep for many runs at once (group commit). Returns the rows
		// written; a missing one was fenced. A row already recorded (an
		// earlier try whose acknowledgement was lost) fails the statement
		// with a unique violation, and the caller then writes the rows one by
		// one (InsertStep): no ON CONFLICT clause, whose speculative
		// insertion costs more per row than a plain insert. Each run's
		// row is found by its primary key alone, in a LATERAL subquery that
		// also takes the lock: a join of the array with the table leaves
		// the access path to the statistics, and when those say few runs are
		// pending (gathered before a burst) the planner scans all pending
		// runs once per row. Rows are locked in ID order, as the other
		// batch statements do.
		// $1 workflow_ids, $2 positions, $3 names, $4 statuses, $5 outputs,
		// $6 errors, $7 attempts, $8 started_at, $9 epochs.
		insertSteps: r(`INSERT INTO {{schema}}.steps (workflow_id, pos, name, status, output, error, attempts, started_at)
SELECT u.workflow_id, u.pos, u.name, u.status, u.output, u.error, u.attempts, u.started_at
FROM (SELECT * FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::json[], $6::json[], $7::int[], $8::timestamptz[], $9::bigint[])
	AS u(workflow_id, pos, name, status, output, error, attempts, started_at, epoch) ORDER BY workflow_id) u
CROSS JOIN LATERAL (SELECT 1 FROM {{schema}}.workflows w
	WHERE w.id = u.workflow_id AND w.epoch = u.epoch AND w.status = 'pending' FOR SHARE) w
RETURNING workflow_id, pos`),

		// FinishOne for many runs at once (group commit), waking parked
		// parents and notifying in the same statement. See finishMany.
		// $1 ids, $2 epochs, $3 statuses, $4 outputs, $5 errors.
		finishWorkflows: r(finishMany(n, false, false)),
		finishHandOn:    r(finishMany(n, false, true)),

		// FinishWorkflows that also records the runs' last step checkpoints
		// (deferred to the finish, see pending.go in the engine) for the runs
		// it finishes.
		// $1-$5 as FinishWorkflows; $6 the steps' workflow_ids, $7 positions,
		// $8 names, $9 statuses, $10 outputs, $11 errors, $12 attempts,
		// $13 started_at.
		finishStepsMany:   r(finishMany(n, true, false)),
		finishStepsHandOn: r(finishMany(n, true, true)),

		// InsertStep for a transaction step: instead of touching no row it
		// raises SQLSTATE DU001, which aborts the transaction (see
		// checkpoint_refused in schema.sql).
		insertStepTx: r(`WITH ins AS (
	INSERT INTO {{schema}}.steps (workflow_id, pos, name, status, output, error, attempts, started_at, finished_at)
	SELECT $1, $2, $3, $4, $5, $6, $7, $8, clock_timestamp()
	FROM {{schema}}.workflows w
	WHERE w.id = $1 AND w.epoch = $9 AND w.status = 'pending'
	FOR SHARE OF w
	ON CONFLICT (workflow_id, pos) DO NOTHING
	RETURNING 1)
SELECT CASE WHEN count(*) = 1 THEN 1 ELSE {{schema}}.checkpoint_refused() END FROM ins`),

		// $1 workflow_id, $2 pos, $3 status, $4 output, $5 error, $6 attempts, $7 epoch.
		completeIntent: r(`UPDATE {{schema}}.steps s SET status = $3, output = $4, error = $5, attempts = $6, finished_at = now()
FROM (SELECT id FROM {{schema}}.workflows WHERE id = $1 AND epoch = $7 AND status = 'pending' FOR SHARE) w
WHERE s.workflow_id = $1 AND s.workflow_id = w.id AND s.pos = $2 AND s.status = 'intent'`),

		listen: "LISTEN " + pgx.Identifier{channel}.Sanitize(),
	}
}

// parkedOnChild is WakeParent's test of a parent parked in Await, or in
// a Select, on child $1 (read on the row the update writes: the columns
// it tests are not written).
const parkedOnChild = `executor_id IS NULL AND coalesce(wait_topic = 'child:' || $1::text OR 'child:' || $1::text = ANY(wait_any), false)`

// finishMany is FinishWorkflows, or FinishStepsMany with withSteps. The
// runs are found and locked by primary key (see InsertSteps), then updated
// by ID alone: a status test in the UPDATE itself would bring back the
// planner's guess about how many runs are pending. "id = ANY" keeps the
// update on the primary key too (else a table small enough for the planner
// is read whole per batch); the join with mine is at worst a rescan of the
// batch per row, bounded by its size. Step rows are inserted only for the
// runs the statement finishes. The pending parents of the runs finished
// are locked in ID order, as the runs are, and updated whatever they do:
// one parked on a finished child is woken, one that executes is nudged
// (see Park in WaitQueries), and a park that commits concurrently is seen
// either way. A parent the batch finishes too is left as upd wrote it: upd
// runs first (parked reads its rows), and a row a statement already
// updated is skipped by its later locks and updates.
//
// With handOn, the statement also hands the slots of the runs it finished
// to the next ready runs of their queues (FinishHandOn). Its CTEs read
// the table as it was before the statement: the runs it finishes still
// count as running there, so each queue's count subtracts them.
func finishMany(n func(payload string) string, withSteps, handOn bool) string {
	steps := ""
	if withSteps {
		steps = `
ins AS (
	INSERT INTO {{schema}}.steps (workflow_id, pos, name, status, output, error, attempts, started_at)
	SELECT s.* FROM unnest($6::text[], $7::int[], $8::text[], $9::text[], $10::json[], $11::json[], $12::int[], $13::timestamptz[])
		AS s(workflow_id, pos, name, status, output, error, attempts, started_at)
	WHERE s.workflow_id IN (SELECT id FROM upd)),`
	}
	q := `WITH u AS (
	SELECT u.* FROM unnest($1::text[], $2::bigint[], $3::text[], $4::json[], $5::json[]) AS u(id, epoch, status, output, error)
	ORDER BY u.id),
mine AS (
	SELECT u.* FROM u CROSS JOIN LATERAL (SELECT 1 FROM {{schema}}.workflows w
		WHERE w.id = u.id AND w.epoch = u.epoch AND w.status = 'pending' FOR NO KEY UPDATE) w),
upd AS (
	UPDATE {{schema}}.workflows w SET status = mine.status, output = mine.output, error = mine.error, updated_at = now()
	FROM mine WHERE w.id = mine.id AND w.id = ANY(ARRAY(SELECT id FROM mine))
	RETURNING w.id, w.notify, w.parent_id, w.queue_name),` + steps + `
parked AS (
	SELECT p.id, p.executor_id IS NULL AND coalesce(p.wait_topic = ANY(k.keys) OR p.wait_any && k.keys, false) AS wake
	FROM (SELECT parent_id, array_agg('child:' || id) AS keys FROM upd
		WHERE parent_id IS NOT NULL
		GROUP BY parent_id ORDER BY parent_id) k
	CROSS JOIN LATERAL (SELECT p.id, p.executor_id, p.wait_topic, p.wait_any FROM {{schema}}.workflows p
		WHERE p.id = k.parent_id AND p.status = 'pending' FOR NO KEY UPDATE) p),
parents AS (
	UPDATE {{schema}}.workflows p SET wake_at = CASE WHEN parked.wake THEN now() ELSE p.wake_at END,
		nudged = CASE WHEN p.executor_id IS NOT NULL THEN true ELSE p.nudged END
	FROM parked WHERE p.id = parked.id
	RETURNING p.id, parked.wake)`
	if !handOn {
		return q + `
SELECT id, (CASE WHEN notify THEN ` + n(`'d:' || id`) + ` END)::text, notify FROM upd
UNION ALL
SELECT '', ` + n(`'n:' || id`) + `::text, false FROM parents WHERE wake`
	}
	k := 6 // the hand-on's parameters follow the others
	if withSteps {
		k = 14
	}
	p := func(i int) string { return "$" + strconv.Itoa(k+i) }
	// The finish's rows carry empty claim columns: a NULL ID, and zero
	// values where a claimed run has a value.
	none := `, NULL::text, ''::text, NULL::json, 0::bigint, 0::int, NULL::timestamptz, NULL::text, NULL::text, NULL::interval, false`
	return q + `,
fin AS (
	SELECT queue_name AS queue, count(*)::int AS finished FROM upd
	WHERE id = ANY(` + p(0) + `::text[]) AND queue_name IS NOT NULL GROUP BY queue_name),
handon AS (
	UPDATE {{schema}}.workflows w
	` + claimSet(p(3), p(4), "false") + `
	WHERE w.id = ANY(ARRAY(SELECT c.id
		FROM fin JOIN unnest(` + p(1) + `::text[], ` + p(2) + `::int[]) AS t(queue, here) ON t.queue = fin.queue
		JOIN {{schema}}.queues q ON q.name = fin.queue AND ` + handOnQueue + `
		CROSS JOIN LATERAL (SELECT least(fin.finished,
			CASE WHEN q.global_concurrency > 0 THEN q.global_concurrency - ((` + running("q.name") + `) - fin.finished) ELSE fin.finished END,
			CASE WHEN q.worker_concurrency > 0 THEN q.worker_concurrency - (t.here - fin.finished) ELSE fin.finished END) AS n) k
		CROSS JOIN LATERAL (` + readyRuns("q.name", p(5), p(4), "greatest(k.n, 0)") + `) c))
	RETURNING ` + claimedColumns + `)
SELECT id, (CASE WHEN notify THEN ` + n(`'d:' || id`) + ` END)::text, notify` + none + ` FROM upd
UNION ALL
SELECT '', ` + n(`'n:' || id`) + `::text, false` + none + ` FROM parents WHERE wake
UNION ALL
SELECT NULL, NULL, false, h.* FROM handon h`
}
