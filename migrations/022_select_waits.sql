-- Select (durable.Select): the waits of a run parked in a Select, any of
-- which wakes it: "msg:" topic, "child:" run ID, "event:" length ":" run ID
-- key. NULL for every other run, so only parked Selects enter the index,
-- which SetEvent reads to find the runs waiting for its event.
ALTER TABLE {{schema}}.workflows ADD COLUMN IF NOT EXISTS wait_any text[];
CREATE INDEX IF NOT EXISTS workflows_wait_any_idx
    ON {{schema}}.workflows USING gin (wait_any) WHERE wait_any IS NOT NULL;
