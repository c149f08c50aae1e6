-- A queued run cancelled while its code runs keeps its queue slot until
-- that code returns: the Cancel leaves executor_id set, and the executor
-- clears it once the run's code has stopped (the sweeper does, once that
-- executor is dead). The global and partition limits count these runs
-- beside the pending ones, from this index of them: a handful at any time.
CREATE INDEX IF NOT EXISTS workflows_queue_stopping_idx
    ON {{schema}}.workflows (queue_name, partition_key)
    WHERE status = 'cancelled' AND executor_id IS NOT NULL AND queue_name IS NOT NULL;

-- Runs cancelled before this migration are not held: their executors
-- never clear the column.
UPDATE {{schema}}.workflows SET executor_id = NULL
WHERE status = 'cancelled' AND executor_id IS NOT NULL AND queue_name IS NOT NULL;
