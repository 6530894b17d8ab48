-- The lease-table engine (ADR appendix, improved): its own schema on the same
-- database as the business tables. Its runs are also rows of taskport.run
-- (same id), which stays the idempotency authority.

-- +goose Up
CREATE SCHEMA IF NOT EXISTS taskport_lease;

CREATE TABLE taskport_lease.task (
    id                  uuid        PRIMARY KEY REFERENCES taskport.run (id) ON DELETE CASCADE,
    kind                text        NOT NULL,
    handler_version     int         NOT NULL,
    input               jsonb       NOT NULL,
    status              text        NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'running', 'waiting', 'succeeded', 'failed', 'canceled', 'dead')),
    priority            int         NOT NULL DEFAULT 0,
    claims              int         NOT NULL DEFAULT 0,
    next_run_at         timestamptz NOT NULL DEFAULT now(),
    lease_owner         text,
    lease_until         timestamptz,
    lease_token         uuid,
    wait_topic          text,
    wait_until          timestamptz,
    cancel_requested_at timestamptz,
    current_step        text        NOT NULL DEFAULT '',
    step_attempts       int         NOT NULL DEFAULT 0,
    last_error          text        NOT NULL DEFAULT '',
    dead_letter_at      timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    finished_at         timestamptz
);
CREATE INDEX task_ready ON taskport_lease.task (priority, next_run_at) WHERE status IN ('pending', 'waiting');
CREATE INDEX task_leased ON taskport_lease.task (lease_until) WHERE status = 'running';

-- Completed steps, waits, sleeps and version markers, by position: replay
-- checks (seq, name) and returns the stored result.
CREATE TABLE taskport_lease.step_result (
    task_id      uuid        NOT NULL REFERENCES taskport_lease.task (id) ON DELETE CASCADE,
    seq          int         NOT NULL,
    name         text        NOT NULL,
    result       jsonb,
    attempts     int         NOT NULL DEFAULT 1,
    completed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, seq)
);

-- Persisted signals: a waiter consumes unconsumed rows for its topic before it
-- waits, so a signal that arrives early is not lost.
CREATE TABLE taskport_lease.task_signal (
    id          bigserial   PRIMARY KEY,
    topic       text        NOT NULL,
    payload     jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    consumed_by uuid,
    consumed_at timestamptz
);
CREATE INDEX task_signal_unconsumed ON taskport_lease.task_signal (topic, id) WHERE consumed_by IS NULL;

-- +goose Down
DROP TABLE taskport_lease.task_signal;
DROP TABLE taskport_lease.step_result;
DROP TABLE taskport_lease.task;
DROP SCHEMA taskport_lease;
