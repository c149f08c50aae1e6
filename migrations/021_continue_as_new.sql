-- Continue-as-new (Workflow.ContinueAsNew): the run this one continued as,
-- the next link of its chain. NULL: it did not continue.
ALTER TABLE {{schema}}.workflows ADD COLUMN IF NOT EXISTS continued_as text COLLATE "C";
