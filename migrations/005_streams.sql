-- Streams: an ordered, offset-addressed side channel per workflow and key
-- (model tokens, lifecycle events), and the index of workflow listing.

CREATE TABLE IF NOT EXISTS {{schema}}.streams (
    workflow_id text NOT NULL,
    key         text NOT NULL,
    -- 0, 1, 2, ... per (workflow_id, key) in write order, without gaps.
    off         bigint NOT NULL,
    value       json,
    -- The close marker: the last entry of a closed stream, with no value.
    closed      boolean NOT NULL DEFAULT false,
    -- Entries written by workflow code (not by a step) carry their rank
    -- among the run's workflow-code stream calls, so a replay of the
    -- workflow skips the ones already written. NULL: written by a step.
    wseq        bigint,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workflow_id, key, off)
);

CREATE INDEX IF NOT EXISTS streams_wseq_idx
    ON {{schema}}.streams (workflow_id, key, wseq) WHERE wseq IS NOT NULL;

-- Workflow listing: newest first, keyset paging on (created_at, id). The
-- other filters (status, name, queue, ID prefix) are applied along this
-- scan; parent_id has its own index (workflows_parent_idx).
CREATE INDEX IF NOT EXISTS workflows_created_idx
    ON {{schema}}.workflows (created_at, id);
