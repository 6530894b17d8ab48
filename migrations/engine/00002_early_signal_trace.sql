-- A signal the Temporal engine keeps carries its sender's trace, as the
-- lease engine's task_signal does (migration 00010). Signal now keeps a
-- signal sent while a run that waited on the topic is past its wait, where
-- it used to buffer it in that run's workflow, which lost it when the run
-- ended without waiting again; the next wait on the topic takes it, that
-- run's or another's, as on the lease engine. The trace is what the buffered
-- signal carried and the kept one must not lose: the wait that takes it
-- continues the sender's trace. Empty means no trace.
--
-- Constant defaults: adding the columns changes the catalog and rewrites
-- no rows, so the lock is held for milliseconds.

-- +goose Up
ALTER TABLE taskport.early_signal
    ADD COLUMN traceparent text NOT NULL DEFAULT '',
    ADD COLUMN tracestate  text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE taskport.early_signal DROP COLUMN tracestate, DROP COLUMN traceparent;
