-- Rate limits count recent starts. The index they used, on (queue_name,
-- started_at) for every queued run ever started, took an entry at each claim
-- and again at each finish (a non-HOT update re-enters every index whose
-- predicate still holds), for every queue, limited or not: two of the ten
-- index entries a queued one-step run writes. rate_start is set by the claim
-- only while the queue has a rate limit, so only those runs enter the index.
ALTER TABLE {{schema}}.workflows
    ADD COLUMN IF NOT EXISTS rate_start timestamptz;

-- Starts that still count toward a current limit keep counting.
UPDATE {{schema}}.workflows w SET rate_start = w.started_at
FROM {{schema}}.queues q
WHERE q.name = w.queue_name AND q.rate_limit > 0 AND w.started_at IS NOT NULL
    AND w.started_at > now() - q.rate_period_ms * interval '1 millisecond';

DROP INDEX IF EXISTS {{schema}}.workflows_queue_started_idx;
CREATE INDEX IF NOT EXISTS workflows_queue_rate_idx
    ON {{schema}}.workflows (queue_name, rate_start) WHERE rate_start IS NOT NULL;
