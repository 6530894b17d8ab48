-- Early signals on the Temporal engine (found by the model-based test of
-- issue 10, test/model).
--
-- A wait is "check the business DB, then wait for a signal with a timeout"
-- (ADR 2.2). A wake-up sent between the check and the wait found no waiter
-- on Temporal and was dropped, so the run slept its whole timeout (5 minutes
-- for an approval, 10 for a download) although the business DB already had
-- the answer. The lease engine keeps such a signal (taskport_lease.
-- task_signal); this is the same for the Temporal engine: a signal sent to a
-- topic nobody waits on is kept here, and the next wait on the topic, as it
-- registers, sends it to its own run. Senders and waiters of a topic are
-- serialized by a transaction advisory lock, so a signal either finds the
-- waiter registered or is seen by the wait.
--
-- consumed_by and consumed_step record which wait took a signal; a signal is
-- marked taken only after it was sent, so a worker that dies in between
-- sends it again.

-- +goose Up
CREATE TABLE taskport.early_signal (
    id            bigserial   PRIMARY KEY,
    topic         text        NOT NULL,
    payload       jsonb       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    consumed_by   uuid,
    consumed_step text        NOT NULL DEFAULT '',
    consumed_at   timestamptz
);
CREATE INDEX early_signal_open ON taskport.early_signal (topic, id) WHERE consumed_by IS NULL;

-- +goose Down
DROP TABLE taskport.early_signal;
