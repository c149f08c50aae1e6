-- The dispatcher looks for the next delayed run of a queue on every
-- dispatch; without this index that is a scan of the queue's backlog.
CREATE INDEX IF NOT EXISTS workflows_queue_delayed_idx
    ON {{schema}}.workflows (queue_name, not_before) WHERE status = 'enqueued' AND not_before IS NOT NULL;
