-- Failed attempts of steps whose outcome is not recorded yet. A step
-- attempt that fails and will be retried counts itself here before the
-- retry's backoff, so an execution that resumes the run after a crash goes
-- on from the next attempt instead of granting the step its whole retry
-- budget again. A step that succeeds at its first attempt writes nothing
-- here. The step's row in steps, once written, is its outcome (with its
-- total attempts); the row here then only waits for the run's retention.
-- Resuming a failed or cancelled run clears its rows: a new budget.
CREATE TABLE IF NOT EXISTS {{schema}}.step_attempts (
    workflow_id text COLLATE "C" NOT NULL,
    pos         integer NOT NULL,
    name        text NOT NULL,
    -- Attempts that failed so far; the next one is attempts + 1.
    attempts    integer NOT NULL CHECK (attempts > 0),
    -- The last failure, encoded as a step's error.
    error       json,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workflow_id, pos)
);
