-- Workflow-level retries (WorkflowOpts.Retry): how many times the run's
-- code failed and was scheduled to run again from its last checkpoint.
-- NULL: never, which costs a run that never retries no bytes.
ALTER TABLE {{schema}}.workflows ADD COLUMN IF NOT EXISTS retries integer;
