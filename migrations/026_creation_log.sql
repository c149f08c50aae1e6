-- The runs in creation order, for listings: one row per run, written by
-- the statement that writes the run's row (the trigger below) and never
-- updated. It replaces workflows_created_idx, an index of workflows on
-- (created_at, id) that every change of a run's status entered anew: a
-- claim and a finish change indexed columns, so neither is a HOT update,
-- and each wrote an entry there that only listings read. Without those
-- two entries a queue drain of 1-step runs took ~12% less time per run
-- (BenchmarkDrainLevers, 2026-12-04). A listing walks
-- workflows_created_at_idx newest first and finds each run by its primary
-- key; one that reads a rare status from its partial index finds the
-- run's entry here by run_id.
--
-- run_id compares as the runs' IDs do: COLLATE "C", or the database's
-- collation on an install that kept it at migration 015, so that both
-- primary keys serve the listing's join.
CREATE TABLE IF NOT EXISTS {{schema}}.workflows_created (
    run_id text COLLATE "C" PRIMARY KEY,
    at     timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS workflows_created_at_idx
    ON {{schema}}.workflows_created (at, run_id);

DO $$
DECLARE
    coll regcollation := (SELECT a.attcollation FROM pg_attribute a
        WHERE a.attrelid = '{{schema}}.workflows'::regclass AND a.attname = 'id');
BEGIN
    IF coll <> '"C"'::regcollation AND NOT EXISTS (SELECT 1 FROM {{schema}}.workflows_created) THEN
        EXECUTE format('ALTER TABLE {{schema}}.workflows_created ALTER COLUMN run_id TYPE text COLLATE %s', coll);
    END IF;
END
$$;

-- A statement-level trigger: one INSERT per statement that wrote runs,
-- however many (EnqueueMany, StartMany), from the rows it wrote. A run
-- written again under the ID of one deleted by hand (not by retention,
-- which deletes its entry too) takes its own creation time.
CREATE OR REPLACE FUNCTION {{schema}}.workflows_created_log() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {{schema}}.workflows_created (at, run_id)
    SELECT created_at, id FROM created_runs
    ON CONFLICT (run_id) DO UPDATE SET at = excluded.at;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS workflows_created_log ON {{schema}}.workflows;
CREATE TRIGGER workflows_created_log AFTER INSERT ON {{schema}}.workflows
    REFERENCING NEW TABLE AS created_runs
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.workflows_created_log();

-- The runs written before the trigger. The trigger's lock on workflows
-- holds new runs back until this transaction commits, so none is missed;
-- ~1-2 s per 1,000,000 runs.
INSERT INTO {{schema}}.workflows_created (at, run_id)
SELECT created_at, id FROM {{schema}}.workflows
ON CONFLICT DO NOTHING;

DROP INDEX IF EXISTS {{schema}}.workflows_created_idx;
ANALYZE {{schema}}.workflows_created;
