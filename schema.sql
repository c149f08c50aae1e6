-- The whole current schema of durable, as the migrations in migrations/
-- leave a new install: every table, column, constraint, index and function,
-- in one place for a DBA to read.
--
-- {{schema}} stands for the configured schema name (Config.Schema,
-- "durable" by default). This file is not what installs or upgrades a
-- schema: Launch (or durable.Migrate) applies migrations/NNN_*.sql in
-- order, and durable.MigrationSQL (`durable migrate --print-sql`) prints
-- them as one idempotent script to review and run by hand. TestSchemaSQL
-- applies this file and the migrations to two fresh schemas and requires
-- the same catalog, so the two cannot drift apart.
--
-- Identifier columns (run IDs, executor IDs, queue names, partition and
-- dedup keys, topics, keys) compare as bytes: COLLATE "C". An install that
-- held runs when it upgraded past migration 015 keeps the database's
-- collation there (see migrations/015_identifiers_collate_c.sql).

-- The migrations applied to the schema: one row per file of migrations/.
-- Launch refuses a schema whose version is behind the library's when
-- Config.SkipMigrate is set.
CREATE TABLE {{schema}}.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO {{schema}}.schema_migrations (version, name) VALUES
    (1, 'baseline'),
    (2, 'queues'),
    (3, 'schedules'),
    (4, 'waits'),
    (5, 'streams'),
    (6, 'queue_delay_index'),
    (7, 'queue_release_parked'),
    (8, 'queue_claim_order'),
    (9, 'trace_context'),
    (10, 'retention'),
    (11, 'partial_index_traps'),
    (12, 'queue_rate_start'),
    (13, 'unowned_runs'),
    (14, 'failed_runs_index'),
    (15, 'identifiers_collate_c'),
    (16, 'cancelled_runs_hold_slots'),
    (17, 'step_attempts'),
    (18, 'views_v1'),
    (19, 'flow_control'),
    (20, 'workflow_retries'),
    (21, 'continue_as_new'),
    (22, 'select_waits'),
    (23, 'cancel_compensate'),
    (24, 'tags'),
    (25, 'nudged'),
    (26, 'creation_log'),
    (27, 'finish_time_index');

-- ---------------------------------------------------------------------------
-- Executors: one row per live or recently live process. Its lease
-- (lease_expires_at, renewed by heartbeats) is what lets other executors
-- take over its runs once it is gone.
CREATE TABLE {{schema}}.executors (
    id               text COLLATE "C" PRIMARY KEY,
    -- A new random value at every start of an engine with this ID.
    incarnation      text NOT NULL,
    app_version      text NOT NULL,
    hostname         text NOT NULL DEFAULT '',
    pid              integer NOT NULL DEFAULT 0,
    started_at       timestamptz NOT NULL DEFAULT now(),
    heartbeat_at     timestamptz NOT NULL DEFAULT now(),
    lease_expires_at timestamptz NOT NULL
);

-- ---------------------------------------------------------------------------
-- Runs: one row per workflow run. The row is narrow on purpose: the hot
-- columns are status, executor_id and epoch; payloads are written once.
CREATE TABLE {{schema}}.workflows (
    id                text COLLATE "C" PRIMARY KEY,
    name              text NOT NULL,
    -- enqueued: waiting in a queue for an executor to claim it; pending:
    -- running, sleeping or waiting; the others are final.
    status            text NOT NULL
        CONSTRAINT workflows_status_check
        CHECK (status IN ('enqueued', 'pending', 'success', 'error', 'cancelled', 'dead')),
    app_version       text NOT NULL,
    -- The owner of a pending run; NULL means unowned (any compatible
    -- executor may claim it). A cancelled queued run keeps its owner until
    -- its code has stopped, which holds its queue slot till then.
    executor_id       text COLLATE "C",
    -- The fencing token: it grows on every change of owner, and every write
    -- made on behalf of a run checks it.
    epoch             bigint NOT NULL DEFAULT 0,
    recovery_attempts integer NOT NULL DEFAULT 0,
    -- Asks the finishing executor for a NOTIFY: set by a waiter in another
    -- process. Runs nobody waits for remotely finish without one, which
    -- keeps commits free of the server-wide notification lock.
    notify            boolean NOT NULL DEFAULT false,
    parent_id         text COLLATE "C",
    input             json,
    output            json,
    error             json,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),

    -- Queued runs (NULL queue_name: started directly).
    queue_name        text COLLATE "C",
    priority          integer NOT NULL DEFAULT 0,
    partition_key     text COLLATE "C",
    dedup_id          text COLLATE "C",
    -- Not claimed before this time (a delayed enqueue, or a parked run
    -- that gave its slot back).
    not_before        timestamptz,
    -- The end of the run's StartOpts.Timeout; NULL: none.
    deadline          timestamptz,
    -- When an executor claimed the queued run.
    started_at        timestamptz,

    -- A parked run is pending with no owner and a wake-up time: it holds no
    -- goroutine anywhere, and any compatible executor resumes it (by replay)
    -- when wake_at passes (infinity: it waits for a message without a
    -- timeout). wait_topic names the topic it waits for, so a Send can wake
    -- it early.
    wake_at           timestamptz,
    wait_topic        text,

    -- The W3C traceparent of the span that started the run, so every
    -- execution of it joins one trace; NULL without a tracer provider.
    trace_context     text,

    -- The claim time, set only while the run's queue has a rate limit: the
    -- rate limit counts these recent starts.
    rate_start        timestamptz,

    -- A debounced run: enqueues with the same key while it is queued
    -- collapse into it. debounce_until is the latest time it may be pushed
    -- back to (its first enqueue plus the longest wait); NULL: no bound.
    debounce_key      text COLLATE "C",
    debounce_until    timestamptz,

    -- Workflow-level retries (WorkflowOpts.Retry): how many times the
    -- run's code failed and was scheduled to run again from its last
    -- checkpoint. NULL: never.
    retries           integer,

    -- Continue-as-new (Workflow.ContinueAsNew): the run this one continued
    -- as, the next link of its chain. NULL: it did not continue.
    continued_as      text COLLATE "C",

    -- Select (durable.Select): the waits of a run parked in a Select, any
    -- of which wakes it ("msg:" topic, "child:" run ID, "event:" length of
    -- the ID ":" ID key). NULL for every other run.
    wait_any          text[],

    -- Cancel with compensations (CancelOpts.Compensate): the run was asked
    -- to run its compensations and end as cancelled; it stays pending
    -- until an execution has done so. NULL: not asked.
    cancel_requested  boolean,

    -- Tags (StartOpts.Tags, SetTag): the run's string keys and values, as
    -- one JSON object. NULL: none.
    tags              jsonb,

    -- A wake-up that came while the run executed (a message sent to it, a
    -- child of it finished): a park that commits after it is due at once,
    -- whether or not its process lives to look again. Park clears it.
    nudged            boolean
);

-- The indexes below on workflows are all partial but the primary key.
-- Each one's predicate holds a condition on a column that its own queries
-- test and a lookup by ID does not, so an
-- UPDATE ... WHERE id = $1 AND status = 'pending' can only use the
-- primary key, whatever the statistics say about how few runs match.

-- Pending runs by owner (an executor's own runs, those of a dead one).
CREATE INDEX workflows_owned_idx
    ON {{schema}}.workflows (executor_id) WHERE status = 'pending' AND executor_id IS NOT NULL;
-- Child runs of a run.
CREATE INDEX workflows_parent_idx
    ON {{schema}}.workflows (parent_id) WHERE parent_id IS NOT NULL;
-- Listing of failed, cancelled and dead runs, without walking every
-- successful run; a successful finish never enters it.
CREATE INDEX workflows_failed_idx
    ON {{schema}}.workflows (created_at, id) WHERE status IN ('error', 'cancelled', 'dead');
-- Finished runs by finish time: retention (oldest first), the dashboard's
-- activity (the newest). Keyed by the time alone: the runs one finish
-- statement finishes share it, and their entries collapse into one key's
-- list of rows; readers order runs of one finish time by ID after it.
CREATE INDEX workflows_finish_time_idx
    ON {{schema}}.workflows (updated_at)
    WHERE status IN ('success', 'error', 'cancelled', 'dead') AND updated_at IS NOT NULL;
-- Parked runs by wake-up time.
CREATE INDEX workflows_parked_due_idx
    ON {{schema}}.workflows (wake_at) WHERE status = 'pending' AND executor_id IS NULL AND wake_at IS NOT NULL;
-- Runs parked in a Select by what they wait for: SetEvent finds the runs
-- waiting for its event here. Only parked Selects have entries.
CREATE INDEX workflows_wait_any_idx
    ON {{schema}}.workflows USING gin (wait_any) WHERE wait_any IS NOT NULL;
-- Runs by tags (ListParams.Tags: tags @> '{"k": "v"}'). Only tagged runs
-- have entries, and no other index has the column: an untagged run's
-- writes never touch it, and an update that leaves the tags alone stays
-- HOT.
CREATE INDEX workflows_tags_idx
    ON {{schema}}.workflows USING gin (tags jsonb_path_ops) WHERE tags IS NOT NULL;
-- Pending runs with no owner and no wake-up time (started in the caller's
-- transaction, forked or handed back), for the takeover sweep.
CREATE INDEX workflows_unowned_idx
    ON {{schema}}.workflows (created_at) WHERE status = 'pending' AND executor_id IS NULL AND wake_at IS NULL;

-- Queues. The claim of a queue's next runs, in dispatch order: it reads N
-- entries and stops, with no sort.
CREATE INDEX workflows_queue_claim_idx
    ON {{schema}}.workflows (queue_name, priority, created_at, id)
    WHERE status = 'enqueued' AND queue_name IS NOT NULL;
-- The next delayed run of a queue.
CREATE INDEX workflows_queue_delayed_idx
    ON {{schema}}.workflows (queue_name, not_before) WHERE status = 'enqueued' AND not_before IS NOT NULL;
-- Running work per queue and partition (concurrency limits) ...
CREATE INDEX workflows_queue_running_idx
    ON {{schema}}.workflows (queue_name, partition_key) WHERE status = 'pending' AND queue_name IS NOT NULL;
-- ... and the cancelled runs whose code has not stopped yet, which still
-- hold their slots.
CREATE INDEX workflows_queue_stopping_idx
    ON {{schema}}.workflows (queue_name, partition_key)
    WHERE status = 'cancelled' AND executor_id IS NOT NULL AND queue_name IS NOT NULL;
-- Recent starts of rate-limited queues.
CREATE INDEX workflows_queue_rate_idx
    ON {{schema}}.workflows (queue_name, rate_start) WHERE rate_start IS NOT NULL;
-- Deduplication: one queued or running run per queue and dedup ID.
CREATE UNIQUE INDEX workflows_queue_dedup_idx
    ON {{schema}}.workflows (queue_name, dedup_id) WHERE dedup_id IS NOT NULL AND status IN ('enqueued', 'pending');
-- The ready runs of a queue by partition key: a fair dispatch finds the
-- keys with work by skipping along it, and takes each key's first runs.
-- An entry is written at the enqueue only: the claim's new row version is
-- not enqueued, so it enters no entry.
CREATE INDEX workflows_queue_fair_idx
    ON {{schema}}.workflows (queue_name, partition_key, priority, created_at, id)
    WHERE status = 'enqueued' AND queue_name IS NOT NULL;
-- Recent starts of each key, for the rate limit per partition key.
CREATE INDEX workflows_queue_partition_rate_idx
    ON {{schema}}.workflows (queue_name, partition_key, rate_start) WHERE rate_start IS NOT NULL;
-- One queued run per queue and debounce key.
CREATE UNIQUE INDEX workflows_queue_debounce_idx
    ON {{schema}}.workflows (queue_name, debounce_key)
    WHERE debounce_key IS NOT NULL AND status = 'enqueued';

-- The runs in creation order, for listings: one row per run, written by
-- the statement that writes the run's row (the trigger below) and never
-- updated. An index of workflows on (created_at, id) would get an entry
-- at every change of a run's status (a claim and a finish are not HOT
-- updates): this table gets one per run. A listing walks
-- workflows_created_at_idx newest first (keyset paging on (at, run_id)) and
-- finds each run by its primary key, the other filters applied along the
-- walk; one that reads a rare status from its partial index finds the
-- run's entry here by run_id.
CREATE TABLE {{schema}}.workflows_created (
    run_id text COLLATE "C" PRIMARY KEY,
    at     timestamptz NOT NULL
);
CREATE INDEX workflows_created_at_idx
    ON {{schema}}.workflows_created (at, run_id);

CREATE FUNCTION {{schema}}.workflows_created_log() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {{schema}}.workflows_created (at, run_id)
    SELECT created_at, id FROM created_runs
    ON CONFLICT (run_id) DO UPDATE SET at = excluded.at;
    RETURN NULL;
END
$$;

-- One INSERT per statement that wrote runs, however many.
CREATE TRIGGER workflows_created_log AFTER INSERT ON {{schema}}.workflows
    REFERENCING NEW TABLE AS created_runs
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.workflows_created_log();

-- ---------------------------------------------------------------------------
-- Steps: one row per recorded step, keyed by the step's position in its run.
CREATE TABLE {{schema}}.steps (
    workflow_id text COLLATE "C" NOT NULL,
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

-- Failed attempts of steps whose outcome is not recorded yet: an attempt
-- that fails and will be retried counts itself here, so a run resumed after
-- a crash goes on from the next attempt instead of a whole new retry
-- budget. A step that succeeds at its first attempt writes nothing here;
-- once the step's row in steps is written, this one only waits for the
-- run's retention. Resuming a failed or cancelled run clears its rows.
CREATE TABLE {{schema}}.step_attempts (
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

-- Raised by a transaction step's checkpoint when it cannot be written (the
-- run changed owner or ended, or the step is already recorded): the error
-- aborts the caller's transaction, so the COMMIT pipelined behind it rolls
-- back instead of committing app writes without their checkpoint.
CREATE FUNCTION {{schema}}.checkpoint_refused() RETURNS integer
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'durable: checkpoint refused' USING ERRCODE = 'DU001';
END
$$;

-- ---------------------------------------------------------------------------
-- Queues: declared settings, changeable while the system runs.
CREATE TABLE {{schema}}.queues (
    name                  text COLLATE "C" PRIMARY KEY,
    -- 0 means unlimited for every limit below.
    global_concurrency    integer NOT NULL DEFAULT 0,
    worker_concurrency    integer NOT NULL DEFAULT 0,
    partition_concurrency integer NOT NULL DEFAULT 0,
    rate_limit            integer NOT NULL DEFAULT 0,
    rate_period_ms        bigint NOT NULL DEFAULT 0,
    paused                boolean NOT NULL DEFAULT false,
    -- The settings last declared by code; a deploy that declares different
    -- ones overwrites the live settings, a restart with the same code keeps
    -- changes made at run time. 'schema': declared outside code, with
    -- settings that the first declaration by code keeps (Client.DeclareQueue).
    declared              text NOT NULL DEFAULT '',
    updated_at            timestamptz NOT NULL DEFAULT now(),
    -- Give back the slot of a run that parks (a long sleep or wait): it
    -- re-enters the queue, delayed until its wake-up time.
    release_parked        boolean NOT NULL DEFAULT false,
    -- Share the capacity among the partition keys with ready runs (least
    -- loaded first, by weight) instead of going in priority order.
    fair_share            boolean NOT NULL DEFAULT false,
    -- At most partition_rate_limit starts of each key per period.
    partition_rate_limit  integer NOT NULL DEFAULT 0,
    partition_rate_period_ms bigint NOT NULL DEFAULT 0,
    -- The last key a fair dispatch looked at, where the next one goes on
    -- when more keys have work than one dispatch reads.
    fair_cursor           text COLLATE "C"
);

-- Limits of one partition key of a queue, set at run time (a customer's
-- plan): concurrency replaces the queue's partition_concurrency for that
-- key (0: the queue's), weight is the key's share under fair_share.
CREATE TABLE {{schema}}.queue_partitions (
    queue_name    text COLLATE "C" NOT NULL REFERENCES {{schema}}.queues (name) ON DELETE CASCADE,
    partition_key text COLLATE "C" NOT NULL,
    concurrency   integer NOT NULL DEFAULT 0 CHECK (concurrency >= 0),
    weight        integer NOT NULL DEFAULT 1 CHECK (weight >= 1),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_name, partition_key)
);

-- ---------------------------------------------------------------------------
-- Cron schedules. Every executor that declares a schedule evaluates it from
-- its row, with no leader: the deterministic workflow ID of each tick makes
-- a duplicate start impossible, and version turns each change of the row
-- into a compare-and-set.
CREATE TABLE {{schema}}.schedules (
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
    -- Ticks at or before cursor_at were started or skipped.
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
    updated_at    timestamptz NOT NULL DEFAULT now(),
    -- Manual ticks asked for by a process that does not declare the
    -- schedule (the CLI): an executor that declares it starts each one and
    -- removes it.
    triggers      timestamptz[] NOT NULL DEFAULT '{}'
);

-- ---------------------------------------------------------------------------
-- Messages sent to runs (Send / Recv), consumed once each.
CREATE TABLE {{schema}}.messages (
    id          bigserial PRIMARY KEY,
    workflow_id text COLLATE "C" NOT NULL,
    topic       text COLLATE "C" NOT NULL,
    payload     json,
    -- A Send with an idempotency key delivers once however often retried.
    idem_key    text COLLATE "C",
    created_at  timestamptz NOT NULL DEFAULT now(),
    consumed_at timestamptz
);
CREATE INDEX messages_unconsumed_idx
    ON {{schema}}.messages (workflow_id, topic, id) WHERE consumed_at IS NULL;
CREATE UNIQUE INDEX messages_idem_idx
    ON {{schema}}.messages (workflow_id, idem_key) WHERE idem_key IS NOT NULL;
-- All of a run's messages, consumed or not, for retention.
CREATE INDEX messages_workflow_idx
    ON {{schema}}.messages (workflow_id);

-- Events a run publishes (SetEvent, read by GetEvent): the latest value per key.
CREATE TABLE {{schema}}.events (
    workflow_id text COLLATE "C" NOT NULL,
    key         text COLLATE "C" NOT NULL,
    value       json,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workflow_id, key)
);

-- ---------------------------------------------------------------------------
-- Streams: an ordered, offset-addressed side channel per run and key (model
-- tokens, lifecycle events).
CREATE TABLE {{schema}}.streams (
    workflow_id text COLLATE "C" NOT NULL,
    key         text COLLATE "C" NOT NULL,
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
CREATE INDEX streams_wseq_idx
    ON {{schema}}.streams (workflow_id, key, wseq) WHERE wseq IS NOT NULL;

-- ---------------------------------------------------------------------------
-- Views: the public contract for reading the engine's state with SQL (see
-- migrations/018_views_v1.sql and docs/operations.md). A view's columns
-- keep their names, types and meaning; columns may be added at the end; an
-- incompatible change comes as a new view (runs_v2) beside the old one.

-- One row per run.
CREATE OR REPLACE VIEW {{schema}}.runs_v1 AS
SELECT w.id AS workflow_id,
    w.name AS workflow_name,
    w.status,
    w.app_version,
    w.executor_id,
    w.parent_id,
    w.queue_name,
    w.priority,
    w.partition_key,
    w.dedup_id,
    w.recovery_attempts,
    w.created_at,
    w.started_at AS claimed_at,
    w.updated_at,
    CASE WHEN w.status IN ('success', 'error', 'cancelled', 'dead') THEN w.updated_at END AS finished_at,
    w.deadline,
    w.not_before,
    w.wake_at,
    w.wait_topic,
    nullif(split_part(w.trace_context, '-', 2), '') AS trace_id,
    w.input,
    w.output,
    w.error,
    w.tags
FROM {{schema}}.workflows w;

-- One row per step with a recorded outcome or intent, and per step whose
-- attempts failed and that waits for its next one (status retrying).
CREATE OR REPLACE VIEW {{schema}}.steps_v1 AS
SELECT s.workflow_id,
    s.pos,
    s.name,
    s.status,
    CASE WHEN s.status = 'intent' THEN coalesce(a.attempts, 0) ELSE s.attempts END AS attempts,
    s.output,
    coalesce(s.error, a.error) AS error,
    s.started_at,
    CASE WHEN s.status = 'intent' THEN NULL ELSE s.finished_at END AS finished_at
FROM {{schema}}.steps s
LEFT JOIN {{schema}}.step_attempts a ON s.status = 'intent' AND a.workflow_id = s.workflow_id AND a.pos = s.pos
UNION ALL
SELECT a.workflow_id,
    a.pos,
    a.name,
    'retrying'::text,
    a.attempts,
    NULL::json,
    a.error,
    NULL::timestamptz,
    NULL::timestamptz
FROM {{schema}}.step_attempts a
WHERE NOT EXISTS (SELECT 1 FROM {{schema}}.steps s WHERE s.workflow_id = a.workflow_id AND s.pos = a.pos);

-- One row per declared queue, with its live settings and counts.
CREATE OR REPLACE VIEW {{schema}}.queues_v1 AS
SELECT q.name AS queue_name,
    q.paused,
    q.global_concurrency,
    q.worker_concurrency,
    q.partition_concurrency,
    q.rate_limit,
    q.rate_period_ms * interval '1 millisecond' AS rate_period,
    q.release_parked,
    e.ready + e.delayed AS enqueued,
    e.ready,
    e.delayed,
    r.running,
    e.oldest_enqueued_at,
    q.updated_at
FROM {{schema}}.queues q
CROSS JOIN LATERAL (SELECT
        count(*) FILTER (WHERE w.not_before IS NULL OR w.not_before <= now()) AS ready,
        count(*) FILTER (WHERE w.not_before > now()) AS delayed,
        min(w.created_at) AS oldest_enqueued_at
    FROM {{schema}}.workflows w WHERE w.queue_name = q.name AND w.status = 'enqueued') e
CROSS JOIN LATERAL (SELECT
        (SELECT count(*) FROM {{schema}}.workflows w WHERE w.queue_name = q.name AND w.status = 'pending')
        + (SELECT count(*) FROM {{schema}}.workflows w
            WHERE w.queue_name = q.name AND w.status = 'cancelled' AND w.executor_id IS NOT NULL
                AND w.queue_name IS NOT NULL) AS running) r;

-- One row per schedule, with the status of its last run.
CREATE OR REPLACE VIEW {{schema}}.schedules_v1 AS
SELECT s.name AS schedule_name,
    s.workflow_name,
    s.spec,
    s.location AS time_zone,
    s.catch_up,
    s.paused,
    s.next_tick,
    s.last_tick,
    s.last_run_id,
    w.status AS last_run_status,
    s.created_at,
    s.updated_at
FROM {{schema}}.schedules s
LEFT JOIN {{schema}}.workflows w ON w.id = s.last_run_id;
