-- durable baseline schema (migration 1).
-- {{schema}} is replaced by the configured schema name, sanitised as one identifier.

CREATE TABLE IF NOT EXISTS {{schema}}.executors (
    id               text PRIMARY KEY,
    incarnation      text NOT NULL,
    app_version      text NOT NULL,
    hostname         text NOT NULL DEFAULT '',
    pid              integer NOT NULL DEFAULT 0,
    started_at       timestamptz NOT NULL DEFAULT now(),
    heartbeat_at     timestamptz NOT NULL DEFAULT now(),
    lease_expires_at timestamptz NOT NULL
);

-- One row per workflow run. The row is narrow on purpose: the hot columns are
-- status, executor_id and epoch; payloads are written once.
CREATE TABLE IF NOT EXISTS {{schema}}.workflows (
    id                text PRIMARY KEY,
    name              text NOT NULL,
    status            text NOT NULL CHECK (status IN ('pending', 'success', 'error', 'cancelled', 'dead')),
    app_version       text NOT NULL,
    -- executor_id is the owner of a pending run; NULL means unowned (any
    -- compatible executor may claim it).
    executor_id       text,
    -- epoch is the fencing token: it grows on every change of owner, and every
    -- write made on behalf of a run checks it.
    epoch             bigint NOT NULL DEFAULT 0,
    recovery_attempts integer NOT NULL DEFAULT 0,
    -- notify asks the finishing executor for a NOTIFY: set by a waiter in
    -- another process. Runs nobody waits for remotely finish without one,
    -- which keeps commits free of the server-wide notification lock.
    notify            boolean NOT NULL DEFAULT false,
    parent_id         text,
    input             json,
    output            json,
    error             json,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS workflows_pending_owner_idx
    ON {{schema}}.workflows (executor_id) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS workflows_parent_idx
    ON {{schema}}.workflows (parent_id) WHERE parent_id IS NOT NULL;

-- One row per recorded step, keyed by the step's position in its run.
CREATE TABLE IF NOT EXISTS {{schema}}.steps (
    workflow_id text NOT NULL,
    pos         integer NOT NULL,
    name        text NOT NULL,
    -- done: output recorded; error: failure recorded; intent: an effect was
    -- started (IntentStep) and its completion is not recorded yet.
    status      text NOT NULL CHECK (status IN ('done', 'error', 'intent')),
    output      json,
    error       json,
    attempts    integer NOT NULL DEFAULT 1,
    started_at  timestamptz,
    finished_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workflow_id, pos)
);

-- Raised by a transaction step's checkpoint when it cannot be written (the
-- run changed owner or ended, or the step is already recorded): the error
-- aborts the caller's transaction, so the COMMIT pipelined behind it rolls
-- back instead of committing app writes without their checkpoint.
CREATE OR REPLACE FUNCTION {{schema}}.checkpoint_refused() RETURNS integer
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'durable: checkpoint refused' USING ERRCODE = 'DU001';
END
$$;
