-- Failed, cancelled and dead runs in listing order (newest first by
-- created_at, id). A listing of these statuses reads this index instead of
-- walking every run's entry of workflows_created_idx, which is the whole
-- history when failures are rare among many successes (a sequential scan
-- of 1,000,000 runs, 230-310 ms, per page). A successful finish never enters
-- it, so the hot path does not pay for it.
CREATE INDEX IF NOT EXISTS workflows_failed_idx
    ON {{schema}}.workflows (created_at, id) WHERE status IN ('error', 'cancelled', 'dead');
