-- Cancel with compensations (CancelOpts.Compensate): the run was asked to
-- run its compensations and end as cancelled; it stays pending until an
-- execution has done so. NULL: not asked.
ALTER TABLE {{schema}}.workflows ADD COLUMN IF NOT EXISTS cancel_requested boolean;
