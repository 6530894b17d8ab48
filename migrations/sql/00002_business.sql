-- Business tables: plans, approvals, the operation ledger, the outbox and the
-- pending-decision centre. Business truth lives here, never in an engine.
-- Ledger rows record plan -> attempt(token) -> result (ADR 2.3): a step writes
-- attempt_token when it begins and commits with
-- UPDATE ... WHERE id = $1 AND attempt_token = $2; 0 rows means fenced.

-- +goose Up
CREATE TABLE plan (
    id                  uuid        PRIMARY KEY,
    title               text        NOT NULL CHECK (title <> ''),
    source_type         text        NOT NULL CHECK (source_type IN ('magnet', 'url', 'torrent')),
    -- magnet link, .torrent URL, or the .torrent file in base64
    source              text        NOT NULL,
    info_hash           text        NOT NULL CHECK (info_hash ~ '^[0-9a-f]{40}$'),
    target_path         text        NOT NULL,
    expected_size       bigint      NOT NULL CHECK (expected_size >= 0),
    expected_sha256     text        NOT NULL CHECK (expected_sha256 ~ '^[0-9a-f]{64}$'),
    status              text        NOT NULL DEFAULT 'awaiting_approval'
        CHECK (status IN ('awaiting_approval', 'approved', 'rejected', 'downloading', 'downloaded',
                          'imported', 'verified', 'completed',
                          'canceling', 'canceled', 'failed', 'abandoned')),
    cancel_requested_at timestamptz,
    cancel_reason       text        NOT NULL DEFAULT '',
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
);
-- Reporting a completed download by hash finds the plan.
CREATE INDEX plan_info_hash ON plan (info_hash);

CREATE TABLE approval (
    id         uuid        PRIMARY KEY,
    plan_id    uuid        NOT NULL UNIQUE REFERENCES plan (id),
    decision   text        NOT NULL CHECK (decision IN ('approved', 'rejected')),
    decided_by text        NOT NULL,
    note       text        NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The download as the business sees it. Completion is written here first
-- (by the downloader's report or by a check of qBittorrent); a signal only
-- wakes the waiting run (ADR 2.2).
CREATE TABLE download_task (
    id           uuid        PRIMARY KEY,
    plan_id      uuid        NOT NULL UNIQUE REFERENCES plan (id),
    info_hash    text        NOT NULL,
    tag          text        NOT NULL,
    save_path    text        NOT NULL,
    content_path text        NOT NULL DEFAULT '',
    state        text        NOT NULL DEFAULT 'planned'
        CHECK (state IN ('planned', 'submitted', 'completed', 'removed')),
    progress     real        NOT NULL DEFAULT 0,
    completed_at timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- The operation ledger: one row per (plan, operation). attempt_scope and
-- attempt_epoch order the attempts (port.FencingToken); attempt_token is the
-- whole token that a commit must still match.
CREATE TABLE asset_operation (
    id                 uuid        PRIMARY KEY,
    plan_id            uuid        NOT NULL REFERENCES plan (id),
    op                 text        NOT NULL,
    attempt_token      text        NOT NULL,
    attempt_scope      text        NOT NULL,
    attempt_epoch      bigint      NOT NULL,
    attempt_started_at timestamptz NOT NULL DEFAULT now(),
    attempts           int         NOT NULL DEFAULT 1,
    result             jsonb,
    result_at          timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (plan_id, op),
    CHECK ((result IS NULL) = (result_at IS NULL))
);

CREATE TABLE outbox_event (
    id              uuid        PRIMARY KEY,
    kind            text        NOT NULL,
    idempotency_key text        NOT NULL CHECK (idempotency_key <> ''),
    business_key    text        NOT NULL DEFAULT '',
    payload         jsonb       NOT NULL,
    status          text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'dispatched', 'failed')),
    attempts        int         NOT NULL DEFAULT 0,
    available_at    timestamptz,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text        NOT NULL DEFAULT '',
    run_id          uuid,
    created_at      timestamptz NOT NULL DEFAULT now(),
    dispatched_at   timestamptz,
    UNIQUE (kind, idempotency_key)
);
CREATE INDEX outbox_event_pending ON outbox_event (next_attempt_at) WHERE status = 'pending';
CREATE INDEX outbox_event_business_key ON outbox_event (business_key, created_at);

-- Dispatchers LISTEN on this channel; polling remains the fallback for a
-- notification lost while a dispatcher was reconnecting.
-- +goose StatementBegin
CREATE FUNCTION outbox_event_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox_event', '');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER outbox_event_inserted AFTER INSERT ON outbox_event
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_event_notify();

-- The pending-decision centre (ADR 2.6): a run that exhausted its retries.
-- input is the failed run's input, so a retry re-enqueues the same request.
CREATE TABLE decision (
    id          uuid        PRIMARY KEY,
    plan_id     uuid        NOT NULL REFERENCES plan (id),
    kind        text        NOT NULL,
    run_id      text        NOT NULL,
    input       jsonb       NOT NULL,
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
DROP TRIGGER outbox_event_inserted ON outbox_event;
DROP FUNCTION outbox_event_notify();
DROP TABLE outbox_event;
DROP TABLE asset_operation;
DROP TABLE download_task;
DROP TABLE approval;
DROP TABLE plan;
