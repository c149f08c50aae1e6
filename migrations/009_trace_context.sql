-- The W3C trace context (traceparent) of the span that started a run, written
-- by the start statement itself, so that every execution of the run (in any
-- process, after any number of recoveries) joins the same trace. NULL when the
-- starting engine had no tracer provider. A nullable column without a default
-- is added without rewriting the table.
ALTER TABLE {{schema}}.workflows
    ADD COLUMN IF NOT EXISTS trace_context text;
