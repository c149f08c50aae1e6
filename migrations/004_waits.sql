-- Durable waits: parked runs, messages and events.

-- A parked run is pending with no owner and a wake-up time: it holds no
-- goroutine anywhere, and any compatible executor resumes it (by replay)
-- when wake_at passes. wait_topic names the message topic it waits for, so
-- a Send can wake it early.
ALTER TABLE {{schema}}.workflows
    ADD COLUMN IF NOT EXISTS wake_at    timestamptz,
    ADD COLUMN IF NOT EXISTS wait_topic text;

CREATE INDEX IF NOT EXISTS workflows_parked_idx
    ON {{schema}}.workflows (wake_at) WHERE status = 'pending' AND executor_id IS NULL;

CREATE TABLE IF NOT EXISTS {{schema}}.messages (
    id          bigserial PRIMARY KEY,
    workflow_id text NOT NULL,
    topic       text NOT NULL,
    payload     json,
    idem_key    text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    consumed_at timestamptz
);
CREATE INDEX IF NOT EXISTS messages_unconsumed_idx
    ON {{schema}}.messages (workflow_id, topic, id) WHERE consumed_at IS NULL;
CREATE UNIQUE INDEX IF NOT EXISTS messages_idem_idx
    ON {{schema}}.messages (workflow_id, idem_key) WHERE idem_key IS NOT NULL;

CREATE TABLE IF NOT EXISTS {{schema}}.events (
    workflow_id text NOT NULL,
    key         text NOT NULL,
    value       json,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workflow_id, key)
);
