-- Pending runs with no owner and no wake-up time: started by StartTx (or
-- forked, or handed back) and not claimed yet. The takeover sweep, which
-- every executor runs every second or so, finds them here instead of
-- reading the whole table. No write on the hot path enters this index: a
-- start owns its run, a claim sets the owner, a park sets a wake-up time.
CREATE INDEX IF NOT EXISTS workflows_unowned_idx
    ON {{schema}}.workflows (created_at) WHERE status = 'pending' AND executor_id IS NULL AND wake_at IS NULL;
