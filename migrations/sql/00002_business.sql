-- Business tables: plans, approvals, the operation ledger, the outbox and the
-- pending-decision centre. Business truth lives here, never in an engine.
-- Ledger rows record plan -> attempt(token) -> result (ADR 2.3): a step writes
-- attempt_token when it begins and commits with
-- UPDATE ... WHERE id = $1 AND attempt_token = $2; 0 rows means fenced.

-- +goose Up
CREATE TABLE plan (
    id                  uuid        PRIMARY KEY,
    title               text        NOT NULL,
    source_type         text        NOT NULL CHECK (source_type IN ('magnet', 'url', 'torrent')),
    source              text        NOT NULL,
    info_hash           text        NOT NULL CHECK (info_hash ~ '^[0-9a-f]{40}$'),
    target_path         text        NOT NULL,
    expected_size       bigint      NOT NULL CHECK (expected_size >= 0),
    expected_sha256     text        NOT NULL CHECK (expected_sha256 ~ '^[0-9a-f]{64}$'),
    status              text        NOT NULL DEFAULT 'awaiting_approval'
        CHECK (status IN ('awaiting_approval', 'approved', 'rejected', 'downloading', 'downloaded',
                          'importing', 'imported', 'verified', 'completed',
                          'canceling', 'canceled', 'failed', 'abandoned')),
    cancel_requested_at timestamptz,
    cancel_reason       text        NOT NULL DEFAULT '',
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE approval (
    id         uuid        PRIMARY KEY,
    plan_id    uuid        NOT NULL UNIQUE REFERENCES plan (id),
    decision   text        NOT NULL CHECK (decision IN ('approved', 'rejected')),
    decided_by text        NOT NULL,
    note       text        NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The download as the business sees it; the submit and cleanup operations on
-- it are ledger rows in asset_operation.
CREATE TABLE download_task (
    id           uuid        PRIMARY KEY,
    plan_id      uuid        NOT NULL UNIQUE REFERENCES plan (id),
    info_hash    text        NOT NULL,
    tag          text        NOT NULL,
    save_path    text        NOT NULL,
    state        text        NOT NULL DEFAULT 'planned'
        CHECK (state IN ('planned', 'submitted', 'completed', 'paused', 'removed', 'failed')),
    progress     real        NOT NULL DEFAULT 0,
    completed_at timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- The operation ledger: one row per (plan, operation).
CREATE TABLE asset_operation (
    id                 uuid        PRIMARY KEY,
    plan_id            uuid        NOT NULL REFERENCES plan (id),
    op                 text        NOT NULL,
    attempt_token      text,
    attempt_scope      text,
    attempt_epoch      bigint      NOT NULL DEFAULT 0,
    attempt_started_at timestamptz,
    attempts           int         NOT NULL DEFAULT 0,
    result             jsonb,
    result_at          timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (plan_id, op)
);

CREATE TABLE outbox_event (
    id              uuid        PRIMARY KEY,
    kind            text        NOT NULL,
    idempotency_key text        NOT NULL CHECK (idempotency_key <> ''),
    business_key    text        NOT NULL DEFAULT '',
    payload         jsonb       NOT NULL,
    status          text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'dispatched', 'failed')),
    attempts        int         NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text        NOT NULL DEFAULT '',
    run_id          uuid,
    created_at      timestamptz NOT NULL DEFAULT now(),
    dispatched_at   timestamptz,
    UNIQUE (kind, idempotency_key)
);
CREATE INDEX outbox_event_pending ON outbox_event (next_attempt_at) WHERE status = 'pending';

-- The pending-decision centre (ADR 2.6): a run that exhausted its retries.
CREATE TABLE decision (
    id          uuid        PRIMARY KEY,
    plan_id     uuid        NOT NULL REFERENCES plan (id),
    kind        text        NOT NULL,
    run_id      uuid,
    reason      text        NOT NULL,
    status      text        NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'retry', 'abandon')),
    resolved_by text        NOT NULL DEFAULT '',
    resolved_at timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (plan_id, kind, run_id)
);
CREATE INDEX decision_open ON decision (created_at) WHERE status = 'open';

-- +goose Down
DROP TABLE decision;
DROP TABLE outbox_event;
DROP TABLE asset_operation;
DROP TABLE download_task;
DROP TABLE approval;
DROP TABLE plan;
