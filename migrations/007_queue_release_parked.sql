-- A queue may give back the slot of a run that parks (a long sleep or
-- wait): the run re-enters the queue, delayed until its wake-up time.
ALTER TABLE {{schema}}.queues
    ADD COLUMN IF NOT EXISTS release_parked boolean NOT NULL DEFAULT false;
