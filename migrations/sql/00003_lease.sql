-- The lease-table engine (ADR appendix, improved): its own schema on the same
-- database as the business tables. Its runs are also rows of taskport.run
-- (same id), which stays the idempotency authority and keeps the projection.

-- +goose Up
CREATE SCHEMA IF NOT EXISTS taskport_lease;

-- One row per run. status 'waiting' holds no lease: the run is parked until
-- next_run_at (a signal sets it to now). claims counts claims and is the
-- epoch of the fencing tokens handed to activities; lease_token is fresh for
-- each claim and every commit of a claim carries it.
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
    -- The kind's retry policy, so that the reaper can back off a lost lease
    -- without knowing the kind.
    max_attempts        int         NOT NULL CHECK (max_attempts >= 1),
    backoff_initial     interval    NOT NULL,
    backoff_max         interval    NOT NULL,
    backoff_coefficient float8      NOT NULL,
    -- The wait or sleep in progress: current_step names it, wait_until is
    -- its deadline.
    wait_topic          text,
    wait_until          timestamptz,
    cancel_requested_at timestamptz,
    current_step        text        NOT NULL DEFAULT '',
    -- Failed or lost attempts of the first step not yet completed.
    step_attempts       int         NOT NULL DEFAULT 0,
    progress            jsonb,
    last_error          text        NOT NULL DEFAULT '',
    dead_letter_at      timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    finished_at         timestamptz
);
CREATE INDEX task_ready ON taskport_lease.task (priority, next_run_at) WHERE status IN ('pending', 'waiting');
CREATE INDEX task_leased ON taskport_lease.task (lease_until) WHERE status = 'running';

-- Completed steps, waits, sleeps and version markers, by position: replay
-- checks (seq, name) and returns the stored result. A step that failed for
-- good is stored too (failed, with its *port.StepError as result), so that a
-- replay hands the handler the same error.
CREATE TABLE taskport_lease.step_result (
    task_id      uuid        NOT NULL REFERENCES taskport_lease.task (id) ON DELETE CASCADE,
    seq          int         NOT NULL,
    name         text        NOT NULL,
    result       jsonb,
    failed       boolean     NOT NULL DEFAULT false,
    attempts     int         NOT NULL DEFAULT 1,
    completed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, seq)
);

-- Persisted signals. A signal sent while runs wait on its topic gets one row
-- per waiter (target set); with no waiter it gets one row with target NULL,
-- which the first run to wait on the topic consumes, so that an early signal
-- is not lost.
CREATE TABLE taskport_lease.task_signal (
    id          bigserial   PRIMARY KEY,
    topic       text        NOT NULL,
    payload     jsonb,
    target      uuid,
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
