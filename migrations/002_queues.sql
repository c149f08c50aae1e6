-- Queues: declared settings (changeable while the system runs) and the
-- queue columns of a run. A queued run is 'enqueued' until an executor
-- claims it; from then on it is 'pending' like any other run.

CREATE TABLE IF NOT EXISTS {{schema}}.queues (
    name                  text PRIMARY KEY,
    -- 0 means unlimited for every limit below.
    global_concurrency    integer NOT NULL DEFAULT 0,
    worker_concurrency    integer NOT NULL DEFAULT 0,
    partition_concurrency integer NOT NULL DEFAULT 0,
    rate_limit            integer NOT NULL DEFAULT 0,
    rate_period_ms        bigint NOT NULL DEFAULT 0,
    paused                boolean NOT NULL DEFAULT false,
    -- The settings last declared by code; a deploy that declares different
    -- ones overwrites the live settings, a restart with the same code keeps
    -- changes made at run time.
    declared              text NOT NULL DEFAULT '',
    updated_at            timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE {{schema}}.workflows
    ADD COLUMN IF NOT EXISTS queue_name    text,
    ADD COLUMN IF NOT EXISTS priority      integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS partition_key text,
    ADD COLUMN IF NOT EXISTS dedup_id      text,
    ADD COLUMN IF NOT EXISTS not_before    timestamptz,
    ADD COLUMN IF NOT EXISTS deadline      timestamptz,
    ADD COLUMN IF NOT EXISTS started_at    timestamptz;

ALTER TABLE {{schema}}.workflows DROP CONSTRAINT IF EXISTS workflows_status_check;
ALTER TABLE {{schema}}.workflows ADD CONSTRAINT workflows_status_check
    CHECK (status IN ('enqueued', 'pending', 'success', 'error', 'cancelled', 'dead'));

-- Ready work, in dispatch order.
CREATE INDEX IF NOT EXISTS workflows_queue_ready_idx
    ON {{schema}}.workflows (queue_name, priority, created_at) WHERE status = 'enqueued';
-- Running work per queue and partition (concurrency limits).
CREATE INDEX IF NOT EXISTS workflows_queue_running_idx
    ON {{schema}}.workflows (queue_name, partition_key) WHERE status = 'pending' AND queue_name IS NOT NULL;
-- Recent starts per queue (rate limits).
CREATE INDEX IF NOT EXISTS workflows_queue_started_idx
    ON {{schema}}.workflows (queue_name, started_at) WHERE queue_name IS NOT NULL AND started_at IS NOT NULL;
-- Deduplication while a run with the same ID is queued or running.
CREATE UNIQUE INDEX IF NOT EXISTS workflows_queue_dedup_idx
    ON {{schema}}.workflows (queue_name, dedup_id) WHERE dedup_id IS NOT NULL AND status IN ('enqueued', 'pending');
