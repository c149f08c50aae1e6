-- A wake-up that came while the run was executing (a message sent to it, a
-- child of it finished): a park of the run that commits after it does not
-- wait for its wake-up time but is due at once, even when the process that
-- parked it died before it could look again. Park clears it. NULL: none.
ALTER TABLE {{schema}}.workflows ADD COLUMN IF NOT EXISTS nudged boolean;
