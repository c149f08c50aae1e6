-- A claim takes the first N ready runs of a queue in (priority, created_at,
-- id) order. With id in the index, that order is the index order: the claim
-- reads N entries and stops, instead of sorting the whole backlog of the
-- queue on every claim.
CREATE INDEX IF NOT EXISTS workflows_queue_next_idx
    ON {{schema}}.workflows (queue_name, priority, created_at, id) WHERE status = 'enqueued';
DROP INDEX IF EXISTS {{schema}}.workflows_queue_ready_idx;
