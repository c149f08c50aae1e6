-- Tags (search attributes): string keys and values a run carries
-- (StartOpts.Tags, SetTag) to be found by (ListParams.Tags), as one JSON
-- object. NULL: no tags, which costs an untagged run no bytes.
ALTER TABLE {{schema}}.workflows ADD COLUMN IF NOT EXISTS tags jsonb;

-- Runs by tags: a listing's tags @> '{"k": "v"}' reads this index. It holds
-- tagged runs only, so the insert and the updates of an untagged run write
-- nothing to it; and as no other index has the column, an update that
-- leaves a run's tags alone stays a HOT update. Built without
-- CONCURRENTLY (a migration runs in a transaction): on an install that
-- holds runs, it reads the table once, holding writes back meanwhile, and
-- enters no run (none is tagged yet).
CREATE INDEX IF NOT EXISTS workflows_tags_idx
    ON {{schema}}.workflows USING gin (tags jsonb_path_ops) WHERE tags IS NOT NULL;

-- runs_v1 gains the column at its end, as the views' contract allows
-- (migration 018): the columns before it are unchanged.
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
    w.error,
    w.tags
FROM {{schema}}.workflows w;
