-- Cron schedules (schedule.go). One row per schedule name; every executor
-- that declares the schedule evaluates it from this row, with no leader:
-- the deterministic workflow ID of each tick makes a duplicate start
-- impossible, and the version column turns each change of the row into a
-- compare-and-set.
CREATE TABLE IF NOT EXISTS {{schema}}.schedules (
    name          text PRIMARY KEY,
    workflow_name text NOT NULL,
    -- The spec and time zone in force: set by the code at Launch, or
    -- changed at run time (a change made at run time stays until the code
    -- declares another spec).
    spec          text NOT NULL,
    location      text NOT NULL DEFAULT 'UTC',
    -- How many missed ticks are run, besides the most recent due one, after
    -- a downtime.
    catch_up      integer NOT NULL DEFAULT 0 CHECK (catch_up >= 0),
    paused        boolean NOT NULL DEFAULT false,
    -- Ticks at or before cursor_at were started or skipped; the next tick
    -- to run is the first one after it.
    cursor_at     timestamptz NOT NULL,
    last_tick     timestamptz,
    last_run_id   text,
    -- First tick after cursor_at, for people reading this table; NULL while
    -- paused or when the spec never fires again.
    next_tick     timestamptz,
    -- The spec, time zone and catch-up last declared by code: a Launch only
    -- overwrites the values in force when the code's declaration changed.
    code_spec     text NOT NULL,
    code_location text NOT NULL,
    code_catch_up integer NOT NULL,
    version       bigint NOT NULL DEFAULT 1,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
