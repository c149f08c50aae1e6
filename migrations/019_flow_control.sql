-- Flow control beyond fixed limits: fair sharing between partition keys,
-- a rate limit per partition key, limits and weights set per key at run
-- time, and debounced enqueues.

-- fair_share: the queue's capacity is shared among the partition keys with
-- ready runs (least loaded first, by weight) instead of going in priority
-- order. fair_cursor: the last key a fair dispatch looked at, where the
-- next one goes on when more keys have work than one dispatch reads.
-- partition_rate_*: at most that many starts of each key per period.
ALTER TABLE {{schema}}.queues
    ADD COLUMN IF NOT EXISTS fair_share boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS partition_rate_limit integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS partition_rate_period_ms bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS fair_cursor text COLLATE "C";

-- Limits of one partition key of a queue, set at run time (a customer's
-- plan): concurrency replaces the queue's partition_concurrency for that
-- key (0: the queue's), weight is the key's share under fair_share.
CREATE TABLE IF NOT EXISTS {{schema}}.queue_partitions (
    queue_name    text COLLATE "C" NOT NULL REFERENCES {{schema}}.queues (name) ON DELETE CASCADE,
    partition_key text COLLATE "C" NOT NULL,
    concurrency   integer NOT NULL DEFAULT 0 CHECK (concurrency >= 0),
    weight        integer NOT NULL DEFAULT 1 CHECK (weight >= 1),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_name, partition_key)
);

-- A debounced run: enqueues with the same key while it is queued collapse
-- into it. debounce_until is the latest time it may be pushed back to (its
-- first enqueue plus the longest wait); NULL: no bound.
ALTER TABLE {{schema}}.workflows
    ADD COLUMN IF NOT EXISTS debounce_key text COLLATE "C",
    ADD COLUMN IF NOT EXISTS debounce_until timestamptz;

-- The ready runs of a queue by partition key: a fair dispatch finds the
-- keys with work by skipping along it, and takes each key's first runs.
-- An entry is written at the enqueue only: the claim's new row version is
-- not enqueued, so it enters no entry.
CREATE INDEX IF NOT EXISTS workflows_queue_fair_idx
    ON {{schema}}.workflows (queue_name, partition_key, priority, created_at, id)
    WHERE status = 'enqueued' AND queue_name IS NOT NULL;
-- Recent starts of each key, for the rate limit per partition key.
CREATE INDEX IF NOT EXISTS workflows_queue_partition_rate_idx
    ON {{schema}}.workflows (queue_name, partition_key, rate_start) WHERE rate_start IS NOT NULL;
-- One queued run per queue and debounce key.
CREATE UNIQUE INDEX IF NOT EXISTS workflows_queue_debounce_idx
    ON {{schema}}.workflows (queue_name, debounce_key)
    WHERE debounce_key IS NOT NULL AND status = 'enqueued';
