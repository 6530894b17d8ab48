-- Tracing end to end (issue 13): the W3C trace context (traceparent,
-- tracestate) of the transaction that wrote an outbox row, which the
-- dispatcher continues; of the Enqueue that created a lease-engine task,
-- which its steps continue; and of the Signal that stored a task_signal row,
-- which replaces the task's when a wait consumes the signal. Empty means no
-- trace. Constant defaults: adding the columns rewrites no rows.

-- +goose Up
ALTER TABLE outbox_event
    ADD COLUMN traceparent text NOT NULL DEFAULT '',
    ADD COLUMN tracestate  text NOT NULL DEFAULT '';

ALTER TABLE taskport_lease.task
    ADD COLUMN traceparent text NOT NULL DEFAULT '',
    ADD COLUMN tracestate  text NOT NULL DEFAULT '';

ALTER TABLE taskport_lease.task_signal
    ADD COLUMN traceparent text NOT NULL DEFAULT '',
    ADD COLUMN tracestate  text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE taskport_lease.task_signal DROP COLUMN tracestate, DROP COLUMN traceparent;
ALTER TABLE taskport_lease.task DROP COLUMN tracestate, DROP COLUMN traceparent;
ALTER TABLE outbox_event DROP COLUMN tracestate, DROP COLUMN traceparent;
