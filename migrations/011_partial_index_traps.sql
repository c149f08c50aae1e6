-- Partial indexes whose only condition is a status (or a status and a column
-- that lookups by ID also test) are traps for those lookups. A statement like
-- "UPDATE ... WHERE id = $1 AND epoch = $2 AND status = 'pending'" implies the
-- predicate of an index on (executor_id) WHERE status = 'pending'; when the
-- statistics say few runs are pending (they were gathered before a burst),
-- the planner prefers that small index to the primary key and filters every
-- pending run by ID. Each step checkpoint and each finish then costs a scan
-- of all pending runs (measured with 10,000 runs pending and statistics from
-- before: ~1 ms per step write instead of ~0.01 ms; a 500-row group commit
-- 1.5 s). Each index below gains a condition on a column that its intended
-- queries imply (executor_id = $1, queue_name = $1, wake_at > now(),
-- updated_at < $1) and lookups by ID do not, which leaves the primary key as
-- the only index such a lookup can use.
DROP INDEX IF EXISTS {{schema}}.workflows_pending_owner_idx;
CREATE INDEX IF NOT EXISTS workflows_owned_idx
    ON {{schema}}.workflows (executor_id) WHERE status = 'pending' AND executor_id IS NOT NULL;

DROP INDEX IF EXISTS {{schema}}.workflows_queue_next_idx;
CREATE INDEX IF NOT EXISTS workflows_queue_claim_idx
    ON {{schema}}.workflows (queue_name, priority, created_at, id) WHERE status = 'enqueued' AND queue_name IS NOT NULL;

-- A parked run always has a wake-up time (infinity when it waits for a
-- message without a timeout).
DROP INDEX IF EXISTS {{schema}}.workflows_parked_idx;
CREATE INDEX IF NOT EXISTS workflows_parked_due_idx
    ON {{schema}}.workflows (wake_at) WHERE status = 'pending' AND executor_id IS NULL AND wake_at IS NOT NULL;

DROP INDEX IF EXISTS {{schema}}.workflows_finished_idx;
CREATE INDEX IF NOT EXISTS workflows_finished_at_idx
    ON {{schema}}.workflows (updated_at, id) WHERE status IN ('success', 'error', 'cancelled', 'dead') AND updated_at IS NOT NULL;
