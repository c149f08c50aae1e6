-- Retention (retention.go): finding the runs that finished before a cutoff,
-- oldest first, and the rows hanging off them.

-- Finished runs by finish time. A run enters this index once, when it
-- finishes: the update that finishes it is never a HOT update anyway (it
-- changes status, which other indexes' predicates read), so this adds one
-- index entry per finished run and nothing to the updates of pending runs.
CREATE INDEX IF NOT EXISTS workflows_finished_idx
    ON {{schema}}.workflows (updated_at, id) WHERE status IN ('success', 'error', 'cancelled', 'dead');

-- The messages of a run, consumed or not (messages_unconsumed_idx only
-- covers the unconsumed ones), so pruning a run does not scan the table.
CREATE INDEX IF NOT EXISTS messages_workflow_idx
    ON {{schema}}.messages (workflow_id);

-- Manual ticks asked for by a process that does not declare the schedule
-- (Engine.TriggerSchedule from the CLI): an executor that declares it
-- starts each one and removes it.
ALTER TABLE {{schema}}.schedules
    ADD COLUMN IF NOT EXISTS triggers timestamptz[] NOT NULL DEFAULT '{}';
