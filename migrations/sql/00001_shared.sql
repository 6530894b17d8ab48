-- Tables both engines share (DESIGN: "the shared run store").
-- taskport.run is the idempotency authority on both engines: UNIQUE(kind,
-- idempotency_key) forever, not a retention window. It also keeps the run
-- projection (status, attempts, last error, current step) readable after
-- Temporal's retention has dropped the history.

-- +goose Up
CREATE SCHEMA IF NOT EXISTS taskport;

CREATE TABLE taskport.run (
    id                  uuid        PRIMARY KEY,
    engine              text        NOT NULL CHECK (engine IN ('lease', 'temporal')),
    kind                text        NOT NULL,
    version             int         NOT NULL CHECK (version >= 1),
    idempotency_key     text        NOT NULL CHECK (idempotency_key <> ''),
    business_key        text        NOT NULL DEFAULT '',
    priority            int         NOT NULL DEFAULT 0,
    input               jsonb       NOT NULL,
    available_at        timestamptz NOT NULL DEFAULT now(),
    status              text        NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'running', 'waiting', 'succeeded', 'failed', 'canceled')),
    attempts            int         NOT NULL DEFAULT 0,
    last_error          text        NOT NULL DEFAULT '',
    current_step        text        NOT NULL DEFAULT '',
    cancel_requested_at timestamptz,
    cancel_reason       text        NOT NULL DEFAULT '',
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    finished_at         timestamptz,
    UNIQUE (kind, idempotency_key)
);

-- Admin listings: dead letters (status) and runs open on an old version.
CREATE INDEX run_kind_version_status ON taskport.run (kind, version, status);
CREATE INDEX run_business_key ON taskport.run (business_key) WHERE business_key <> '';

-- Topic-addressed signalling needs a strongly consistent topic -> waiting
-- runs map; Temporal visibility is eventually consistent, so both engines
-- register here as a run starts waiting and remove the row after.
CREATE TABLE taskport.waiter (
    topic      text        NOT NULL,
    run_id     uuid        NOT NULL REFERENCES taskport.run (id) ON DELETE CASCADE,
    step       text        NOT NULL,
    since      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, run_id)
);
CREATE INDEX waiter_run ON taskport.waiter (run_id);

-- +goose Down
DROP TABLE taskport.waiter;
DROP TABLE taskport.run;
DROP SCHEMA taskport;
