-- Finished runs by finish time, for retention (oldest first) and the
-- dashboard's activity (the newest), keyed by the finish time alone. The
-- runs that one finish statement finishes share that time (now()), so
-- their entries collapse into one key's list of rows; keyed by
-- (updated_at, id) instead (workflows_finished_at_idx, dropped below),
-- each finish wrote a key of its own, and a queue drain of 1-step runs
-- took ~6% more time per run (BenchmarkDrain/plain on either schema,
-- medians of eight alternating pairs, 2026-12-04; a noisy measure). The
-- readers order runs of one finish time by ID after the index.
--
-- Built without CONCURRENTLY (a migration runs in a transaction): writes
-- to workflows wait while it builds, ~1 s per 1,000,000 finished runs.
CREATE INDEX IF NOT EXISTS workflows_finish_time_idx
    ON {{schema}}.workflows (updated_at)
    WHERE status IN ('success', 'error', 'cancelled', 'dead') AND updated_at IS NOT NULL;
DROP INDEX IF EXISTS {{schema}}.workflows_finished_at_idx;
