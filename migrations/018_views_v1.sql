-- Views for people and programs that read the engine's state with SQL:
-- query them, join them with your own tables, grant a reporting role
-- SELECT on them alone. They are a public contract, versioned with the
-- schema: a view's columns keep their names, types and meaning; a later
-- version of the library may add columns at the end, and a change that
-- cannot keep them comes as a new view (runs_v2) beside this one. The
-- tables behind them are the engine's own and change without notice.
-- docs/operations.md documents every column.

-- One row per run.
CREATE OR REPLACE VIEW {{schema}}.runs_v1 AS
SELECT w.id AS workflow_id,
    w.name AS workflow_name,
    w.status,
    w.app_version,
    w.executor_id,
    w.parent_id,
    w.queue_name,
    w.priority,
    w.partition_key,
    w.dedup_id,
    w.recovery_attempts,
    w.created_at,
    w.started_at AS claimed_at,
    w.updated_at,
    CASE WHEN w.status IN ('success', 'error', 'cancelled', 'dead') THEN w.updated_at END AS finished_at,
    w.deadline,
    w.not_before,
    w.wake_at,
    w.wait_topic,
    nullif(split_part(w.trace_context, '-', 2), '') AS trace_id,
    w.input,
    w.output,
    w.error
FROM {{schema}}.workflows w;

-- One row per step with a recorded outcome or intent, and per step whose
-- attempts failed and that waits for its next one (status retrying).
CREATE OR REPLACE VIEW {{schema}}.steps_v1 AS
SELECT s.workflow_id,
    s.pos,
    s.name,
    s.status,
    CASE WHEN s.status = 'intent' THEN coalesce(a.attempts, 0) ELSE s.attempts END AS attempts,
    s.output,
    coalesce(s.error, a.error) AS error,
    s.started_at,
    CASE WHEN s.status = 'intent' THEN NULL ELSE s.finished_at END AS finished_at
FROM {{schema}}.steps s
LEFT JOIN {{schema}}.step_attempts a ON s.status = 'intent' AND a.workflow_id = s.workflow_id AND a.pos = s.pos
UNION ALL
SELECT a.workflow_id,
    a.pos,
    a.name,
    'retrying'::text,
    a.attempts,
    NULL::json,
    a.error,
    NULL::timestamptz,
    NULL::timestamptz
FROM {{schema}}.step_attempts a
WHERE NOT EXISTS (SELECT 1 FROM {{schema}}.steps s WHERE s.workflow_id = a.workflow_id AND s.pos = a.pos);

-- One row per declared queue, with its live settings and counts.
CREATE OR REPLACE VIEW {{schema}}.queues_v1 AS
SELECT q.name AS queue_name,
    q.paused,
    q.global_concurrency,
    q.worker_concurrency,
    q.partition_concurrency,
    q.rate_limit,
    q.rate_period_ms * interval '1 millisecond' AS rate_period,
    q.release_parked,
    e.ready + e.delayed AS enqueued,
    e.ready,
    e.delayed,
    r.running,
    e.oldest_enqueued_at,
    q.updated_at
FROM {{schema}}.queues q
CROSS JOIN LATERAL (SELECT
        count(*) FILTER (WHERE w.not_before IS NULL OR w.not_before <= now()) AS ready,
        count(*) FILTER (WHERE w.not_before > now()) AS delayed,
        min(w.created_at) AS oldest_enqueued_at
    FROM {{schema}}.workflows w WHERE w.queue_name = q.name AND w.status = 'enqueued') e
CROSS JOIN LATERAL (SELECT
        (SELECT count(*) FROM {{schema}}.workflows w WHERE w.queue_name = q.name AND w.status = 'pending')
        + (SELECT count(*) FROM {{schema}}.workflows w
            WHERE w.queue_name = q.name AND w.status = 'cancelled' AND w.executor_id IS NOT NULL
                AND w.queue_name IS NOT NULL) AS running) r;

-- One row per schedule, with the status of its last run.
CREATE OR REPLACE VIEW {{schema}}.schedules_v1 AS
SELECT s.name AS schedule_name,
    s.workflow_name,
    s.spec,
    s.location AS time_zone,
    s.catch_up,
    s.paused,
    s.next_tick,
    s.last_tick,
    s.last_run_id,
    w.status AS last_run_status,
    s.created_at,
    s.updated_at
FROM {{schema}}.schedules s
LEFT JOIN {{schema}}.workflows w ON w.id = s.last_run_id;
