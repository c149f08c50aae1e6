package sysdb

// QueueQueries are the statements of queues.
type QueueQueries struct {
	Declare       string
	Settings      string
	Update        string
	SetPaused     string
	Enqueue       string
	LockAndLoad   string
	Counts        string
	ClaimSimple   string
	Candidates    string
	PartitionLoad string
	ClaimIDs      string
	Requeue       string
	Release       string
	OwnStopping   string
	Stats         string
	ByDedup       string
	Names         string
}

// stopping is the condition of a cancelled queued run whose code may
// still run in its executor: it holds its queue slot until that executor
// clears executor_id (workflows_queue_stopping_idx).
const stopping = `status = 'cancelled' AND executor_id IS NOT NULL AND queue_name IS NOT NULL`

// running counts the runs of the queue named by the SQL expression name
// that hold a slot: pending ones and stopping ones, each from its own
// partial index (workflows_queue_running_idx, workflows_queue_stopping_idx).
func running(name string) string {
	return `(SELECT count(*) FROM {{schema}}.workflows WHERE queue_name = ` + name + ` AND status = 'pending')
	+ (SELECT count(*) FROM {{schema}}.workflows WHERE queue_name = ` + name + ` AND ` + stopping + `)`
}

// NewQueueQueries renders the queue statements for schema; channel is the
// schema's notification channel ("": none sent, see notifier).
func NewQueueQueries(schema, channel string) *QueueQueries {
	n := notifier(channel)
	r := func(s string) string { return Render(s, schema) }
	return &QueueQueries{
		Names: r(`SELECT name FROM {{schema}}.queues ORDER BY name`),

		// Code declares a queue at Launch. A declaration different from the
		// last one (a deploy changed the code) overwrites the live settings;
		// the same declaration keeps changes made at run time.
		// $1 name, $2 global, $3 worker, $4 partition, $5 rate, $6 period ms, $7 declared, $8 release parked.
		Declare: r(`INSERT INTO {{schema}}.queues AS q (name, global_concurrency, worker_concurrency,
	partition_concurrency, rate_limit, rate_period_ms, declared, release_parked)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (name) DO UPDATE SET global_concurrency = EXCLUDED.global_concurrency,
	worker_concurrency = EXCLUDED.worker_concurrency, partition_concurrency = EXCLUDED.partition_concurrency,
	rate_limit = EXCLUDED.rate_limit, rate_period_ms = EXCLUDED.rate_period_ms,
	release_parked = EXCLUDED.release_parked, declared = EXCLUDED.declared, updated_at = now()
WHERE q.declared IS DISTINCT FROM EXCLUDED.declared`),

		Settings: r(`SELECT global_concurrency, worker_concurrency, partition_concurrency, rate_limit, rate_period_ms, paused, release_parked
FROM {{schema}}.queues WHERE name = $1`),

		// $1 name, $2 global, $3 worker, $4 partition, $5 rate, $6 period ms, $7 release parked.
		Update: r(`WITH u AS (
	UPDATE {{schema}}.queues SET global_concurrency = $2, worker_concurrency = $3, partition_concurrency = $4,
		rate_limit = $5, rate_period_ms = $6, release_parked = $7, updated_at = now()
	WHERE name = $1 RETURNING name)
SELECT ` + n(`'q:' || name`) + ` FROM u`),

		SetPaused: r(`WITH u AS (
	UPDATE {{schema}}.queues SET paused = $2, updated_at = now() WHERE name = $1 RETURNING name)
SELECT ` + n(`'q:' || name`) + ` FROM u`),

		// One statement: it checks the queue exists, inserts the run unless
		// its ID or its dedup ID is taken, and wakes the dispatchers on commit.
		// $1 id, $2 name, $3 app_version, $4 input, $5 queue, $6 priority,
		// $7 partition_key, $8 dedup_id, $9 not_before, $10 deadline, $11 notify (bool),
		// $12 trace_context.
		Enqueue: r(`WITH q AS (SELECT name FROM {{schema}}.queues WHERE name = $5),
ins AS (
	INSERT INTO {{schema}}.workflows (id, name, status, app_version, executor_id, epoch, input,
		queue_name, priority, partition_key, dedup_id, not_before, deadline, trace_context)
	SELECT $1, $2, 'enqueued', $3, NULL, 0, $4, q.name, $6, $7, $8, $9, $10, $12 FROM q
	ON CONFLICT DO NOTHING
	RETURNING id)
SELECT (SELECT count(*) FROM q), (SELECT count(*) FROM ins),
	(SELECT CASE WHEN $11::bool AND count(*) > 0 THEN ` + n(`'q:' || $5::text`) + ` END FROM ins)::text`),

		// The dispatch transaction of one queue starts here. The row lock
		// on the queue serialises dispatchers of this queue across all
		// executors, so the counts below stay true until commit; Pause and
		// Update wait for it, and a dispatch that waited reads the row as
		// they left it (a row lock re-reads the latest version, an advisory
		// lock would not).
		// $1 name.
		LockAndLoad: r(`SELECT global_concurrency, worker_concurrency,
	partition_concurrency, rate_limit, rate_period_ms, paused, release_parked
FROM {{schema}}.queues WHERE name = $1 FOR NO KEY UPDATE`),

		// Recent starts are those with rate_start, which the claims set
		// only while the queue has a rate limit.
		// $1 name, $2 count running (bool), $3 rate period ms (0: none).
		Counts: r(`SELECT
	CASE WHEN $2::bool THEN ` + running("$1") + ` ELSE 0 END,
	CASE WHEN $3::bigint > 0 THEN (SELECT count(*) FROM {{schema}}.workflows
		WHERE queue_name = $1 AND rate_start > now() - $3 * interval '1 millisecond') ELSE 0 END,
	CASE WHEN $3::bigint > 0 THEN (SELECT min(rate_start) + $3 * interval '1 millisecond' - now() FROM {{schema}}.workflows
		WHERE queue_name = $1 AND rate_start > now() - $3 * interval '1 millisecond') END,
	(SELECT min(not_before) - now() FROM {{schema}}.workflows
		WHERE queue_name = $1 AND status = 'enqueued' AND not_before > now())`),

		// Claims up to $5 ready runs in priority order. A run that never
		// started may run on any application version; a re-queued one only
		// on its own. The IDs come as an array so the update finds each row
		// by its key (a join may scan the whole table when the queue is most
		// of it), and the order is the index order of
		// workflows_queue_claim_idx, so the scan stops after $5 entries.
		// $1 name, $2 executor, $3 app_version, $4 names, $5 limit,
		// $6 rate limited (bool: record rate_start).
		ClaimSimple: r(`UPDATE {{schema}}.workflows w
SET status = 'pending', executor_id = $2, epoch = w.epoch + 1, started_at = now(), updated_at = now(),
	rate_start = CASE WHEN $6::bool THEN now() END,
	app_version = $3, recovery_attempts = w.recovery_attempts + CASE WHEN w.epoch = 0 OR w.wake_at IS NOT NULL THEN 0 ELSE 1 END,
	wake_at = NULL, wait_topic = NULL
WHERE w.id = ANY(ARRAY(SELECT id FROM {{schema}}.workflows
	WHERE queue_name = $1 AND status = 'enqueued' AND (not_before IS NULL OR not_before <= now())
		AND name = ANY($4::text[]) AND (epoch = 0 OR app_version = $3)
	ORDER BY priority, created_at, id LIMIT $5 FOR UPDATE SKIP LOCKED))
RETURNING w.id, w.name, w.input, w.epoch, w.recovery_attempts, w.deadline, w.queue_name, w.trace_context,
	clock_timestamp() - w.created_at`),

		// With partition limits the choice is made in Go from a window of
		// candidates. $1 name, $2 app_version, $3 names, $4 limit.
		Candidates: r(`SELECT id, coalesce(partition_key, '') FROM {{schema}}.workflows
WHERE queue_name = $1 AND status = 'enqueued' AND (not_before IS NULL OR not_before <= now())
	AND name = ANY($3::text[]) AND (epoch = 0 OR app_version = $2)
ORDER BY priority, created_at, id LIMIT $4 FOR UPDATE SKIP LOCKED`),

		PartitionLoad: r(`SELECT k, count(*) FROM (
	SELECT coalesce(partition_key, '') AS k FROM {{schema}}.workflows
	WHERE queue_name = $1 AND status = 'pending' AND coalesce(partition_key, '') = ANY($2::text[])
	UNION ALL
	SELECT coalesce(partition_key, '') FROM {{schema}}.workflows
	WHERE queue_name = $1 AND ` + stopping + ` AND coalesce(partition_key, '') = ANY($2::text[])) s
GROUP BY 1`),

		// $1 ids, $2 executor, $3 app_version, $4 rate limited.
		ClaimIDs: r(`UPDATE {{schema}}.workflows w
SET status = 'pending', executor_id = $2, epoch = w.epoch + 1, started_at = now(), updated_at = now(),
	rate_start = CASE WHEN $4::bool THEN now() END,
	app_version = $3, recovery_attempts = w.recovery_attempts + CASE WHEN w.epoch = 0 OR w.wake_at IS NOT NULL THEN 0 ELSE 1 END,
	wake_at = NULL, wait_topic = NULL
WHERE w.id = ANY($1::text[]) AND w.status = 'enqueued'
RETURNING w.id, w.name, w.input, w.epoch, w.recovery_attempts, w.deadline, w.queue_name, w.trace_context,
	clock_timestamp() - w.created_at`),

		// Queued runs whose executor died (or, at boot, this executor's own
		// previous incarnation) go back to their queue, keeping their place
		// and their recorded steps, and pass through the limits again. The
		// epoch bump fences the old owner.
		// $1 executor_id, $2 include own runs (bool), $3 include runs of
		// executors whose lease expired (bool).
		// Cancelled runs such an executor was stopping give their slots
		// back. Columns: queue, runs requeued, (notify).
		Requeue: r(`WITH r AS (
	UPDATE {{schema}}.workflows o SET status = 'enqueued', executor_id = NULL, epoch = o.epoch + 1, updated_at = now()
	WHERE o.status = 'pending' AND o.queue_name IS NOT NULL AND o.wake_at IS NULL
	AND ((o.executor_id = $1 AND $2::bool) OR o.executor_id IS NULL OR (o.executor_id <> $1 AND $3::bool AND NOT EXISTS (
		SELECT 1 FROM {{schema}}.executors e WHERE e.id = o.executor_id AND e.lease_expires_at > now())))
	RETURNING o.queue_name),
c AS (
	UPDATE {{schema}}.workflows o SET executor_id = NULL
	WHERE ` + stopping + `
	AND ((o.executor_id = $1 AND $2::bool) OR (o.executor_id <> $1 AND $3::bool AND NOT EXISTS (
		SELECT 1 FROM {{schema}}.executors e WHERE e.id = o.executor_id AND e.lease_expires_at > now())))
	RETURNING o.queue_name)
SELECT queue_name, count(*) FILTER (WHERE requeued), ` + n(`'q:' || queue_name`) + `::text
FROM (SELECT queue_name, true AS requeued FROM r UNION ALL SELECT queue_name, false FROM c) x GROUP BY queue_name`),

		// Release gives back the slot of a cancelled run whose code has
		// stopped in this executor. $1 id, $2 epoch.
		Release: r(`WITH u AS (
	UPDATE {{schema}}.workflows SET executor_id = NULL
	WHERE id = $1 AND epoch = $2 AND ` + stopping + `
	RETURNING queue_name)
SELECT ` + n(`'q:' || queue_name`) + `::text FROM u`),

		// Cancelled runs holding a slot for this executor (adoptStrays
		// releases those not executing). $1 executor_id.
		OwnStopping: r(`SELECT id, epoch FROM {{schema}}.workflows WHERE ` + stopping + ` AND executor_id = $1`),

		// See queueCounts. $1 name.
		Stats: r(`SELECT e.ready, e.delayed, r.running FROM ` + queueCounts("$1")),

		// $1 queue, $2 dedup_id.
		ByDedup: r(`SELECT id FROM {{schema}}.workflows
WHERE queue_name = $1 AND dedup_id = $2 AND status IN ('enqueued', 'pending')`),
	}
}
