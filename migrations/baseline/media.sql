-- The media application's tables, as the application's migrations
-- 00001-00021 (migrations/sql) left them, in the current schema (public),
-- with pg_trgm for the plan title search. Generated once with pg_dump
-- --schema-only from a database those migrations built;
-- TestBaselinesEqualTheLegacyMigrations holds the two to the same catalog.

CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE FUNCTION outbox_event_notify() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('outbox_event', '');
    RETURN NULL;
END;
$$;

CREATE TABLE approval (
    id uuid NOT NULL,
    plan_id uuid NOT NULL,
    decision text NOT NULL,
    decided_by text NOT NULL,
    note text DEFAULT ''::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT approval_decision_check CHECK ((decision = ANY (ARRAY['approved'::text, 'rejected'::text])))
);

CREATE TABLE asset_operation (
    id uuid NOT NULL,
    plan_id uuid NOT NULL,
    op text NOT NULL,
    attempt_token text NOT NULL,
    attempt_scope text NOT NULL,
    attempt_epoch bigint NOT NULL,
    attempt_started_at timestamp with time zone DEFAULT now() NOT NULL,
    attempts integer DEFAULT 1 NOT NULL,
    result jsonb,
    result_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    detail jsonb,
    attempt_generation bigint DEFAULT 0 NOT NULL,
    retired_scopes text[] DEFAULT '{}'::text[] NOT NULL,
    CONSTRAINT asset_operation_check CHECK (((result IS NULL) = (result_at IS NULL)))
);

CREATE TABLE decision (
    id uuid NOT NULL,
    plan_id uuid NOT NULL,
    kind text NOT NULL,
    run_id text NOT NULL,
    input jsonb NOT NULL,
    reason text NOT NULL,
    status text DEFAULT 'open'::text NOT NULL,
    resolved_by text DEFAULT ''::text NOT NULL,
    resolved_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT decision_status_check CHECK ((status = ANY (ARRAY['open'::text, 'retry'::text, 'abandon'::text])))
);

CREATE TABLE download_task (
    id uuid NOT NULL,
    plan_id uuid NOT NULL,
    info_hash text NOT NULL,
    tag text NOT NULL,
    save_path text NOT NULL,
    content_path text DEFAULT ''::text NOT NULL,
    state text DEFAULT 'planned'::text NOT NULL,
    progress real DEFAULT 0 NOT NULL,
    completed_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT download_task_state_check CHECK ((state = ANY (ARRAY['planned'::text, 'submitted'::text, 'completed'::text, 'removed'::text])))
);

CREATE TABLE outbox_event (
    id uuid NOT NULL,
    kind text NOT NULL,
    idempotency_key text NOT NULL,
    business_key text DEFAULT ''::text NOT NULL,
    payload jsonb NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    available_at timestamp with time zone,
    next_attempt_at timestamp with time zone DEFAULT now() NOT NULL,
    last_error text DEFAULT ''::text NOT NULL,
    run_id uuid,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    dispatched_at timestamp with time zone,
    action text DEFAULT 'enqueue'::text NOT NULL,
    topic text DEFAULT ''::text NOT NULL,
    min_version integer DEFAULT 1 NOT NULL,
    retried_by text DEFAULT ''::text NOT NULL,
    retried_at timestamp with time zone,
    traceparent text DEFAULT ''::text NOT NULL,
    tracestate text DEFAULT ''::text NOT NULL,
    CONSTRAINT outbox_event_action_check CHECK ((action = ANY (ARRAY['enqueue'::text, 'signal'::text, 'cancel_plan_runs'::text]))),
    CONSTRAINT outbox_event_action_fields CHECK ((((action = 'enqueue'::text) = (kind <> ''::text)) AND ((action = 'signal'::text) = (topic <> ''::text)))),
    CONSTRAINT outbox_event_idempotency_key_check CHECK ((idempotency_key <> ''::text)),
    CONSTRAINT outbox_event_min_version_check CHECK ((min_version >= 1)),
    CONSTRAINT outbox_event_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'dispatched'::text, 'failed'::text])))
);

CREATE TABLE plan (
    id uuid NOT NULL,
    title text NOT NULL,
    source_type text NOT NULL,
    source text NOT NULL,
    info_hash text NOT NULL,
    target_path text NOT NULL,
    expected_size bigint NOT NULL,
    expected_sha256 text NOT NULL,
    status text DEFAULT 'awaiting_approval'::text NOT NULL,
    cancel_requested_at timestamp with time zone,
    cancel_reason text DEFAULT ''::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    cancel_requested_by text DEFAULT ''::text NOT NULL,
    create_key text,
    CONSTRAINT plan_expected_sha256_check CHECK ((expected_sha256 ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT plan_expected_size_check CHECK ((expected_size >= 0)),
    CONSTRAINT plan_info_hash_check CHECK ((info_hash ~ '^[0-9a-f]{40}$'::text)),
    CONSTRAINT plan_source_type_check CHECK ((source_type = ANY (ARRAY['magnet'::text, 'url'::text, 'torrent'::text]))),
    CONSTRAINT plan_status_check CHECK ((status = ANY (ARRAY['awaiting_approval'::text, 'approved'::text, 'rejected'::text, 'downloading'::text, 'downloaded'::text, 'imported'::text, 'verified'::text, 'completed'::text, 'canceling'::text, 'canceled'::text, 'failed'::text, 'abandoned'::text]))),
    CONSTRAINT plan_title_check CHECK ((title <> ''::text))
);

ALTER TABLE ONLY approval
    ADD CONSTRAINT approval_pkey PRIMARY KEY (id);

ALTER TABLE ONLY approval
    ADD CONSTRAINT approval_plan_id_key UNIQUE (plan_id);

ALTER TABLE ONLY asset_operation
    ADD CONSTRAINT asset_operation_pkey PRIMARY KEY (id);

ALTER TABLE ONLY asset_operation
    ADD CONSTRAINT asset_operation_plan_id_op_key UNIQUE (plan_id, op);

ALTER TABLE ONLY decision
    ADD CONSTRAINT decision_pkey PRIMARY KEY (id);

ALTER TABLE ONLY decision
    ADD CONSTRAINT decision_plan_id_kind_run_id_key UNIQUE (plan_id, kind, run_id);

ALTER TABLE ONLY download_task
    ADD CONSTRAINT download_task_pkey PRIMARY KEY (id);

ALTER TABLE ONLY download_task
    ADD CONSTRAINT download_task_plan_id_key UNIQUE (plan_id);

ALTER TABLE ONLY outbox_event
    ADD CONSTRAINT outbox_event_kind_idempotency_key_key UNIQUE (kind, idempotency_key);

ALTER TABLE ONLY outbox_event
    ADD CONSTRAINT outbox_event_pkey PRIMARY KEY (id);

ALTER TABLE ONLY plan
    ADD CONSTRAINT plan_pkey PRIMARY KEY (id);

CREATE INDEX decision_open ON decision USING btree (created_at, id) WHERE (status = 'open'::text);

CREATE INDEX decision_run ON decision USING btree (run_id);

CREATE INDEX outbox_event_business_key ON outbox_event USING btree (business_key, created_at);

CREATE INDEX outbox_event_dispatched ON outbox_event USING btree (dispatched_at) WHERE (status = 'dispatched'::text);

CREATE INDEX outbox_event_failed ON outbox_event USING btree (created_at, id) WHERE (status = 'failed'::text);

CREATE INDEX outbox_event_pending ON outbox_event USING btree (next_attempt_at, id) WHERE (status = 'pending'::text);

CREATE UNIQUE INDEX plan_create_key ON plan USING btree (create_key) WHERE (create_key IS NOT NULL);

CREATE INDEX plan_info_hash ON plan USING btree (info_hash);

CREATE UNIQUE INDEX plan_info_hash_active ON plan USING btree (info_hash) WHERE (status <> ALL (ARRAY['rejected'::text, 'completed'::text, 'canceled'::text, 'abandoned'::text]));

CREATE INDEX plan_newest ON plan USING btree (created_at DESC, id DESC);

CREATE INDEX plan_status_newest ON plan USING btree (status, created_at DESC, id DESC);

CREATE UNIQUE INDEX plan_target_path_held ON plan USING btree (target_path) WHERE (status <> ALL (ARRAY['rejected'::text, 'canceled'::text, 'abandoned'::text]));

CREATE INDEX plan_title_trgm ON plan USING gin (title gin_trgm_ops);

CREATE TRIGGER outbox_event_inserted AFTER INSERT ON outbox_event FOR EACH STATEMENT EXECUTE FUNCTION outbox_event_notify();

ALTER TABLE ONLY approval
    ADD CONSTRAINT approval_plan_id_fkey FOREIGN KEY (plan_id) REFERENCES plan(id);

ALTER TABLE ONLY asset_operation
    ADD CONSTRAINT asset_operation_plan_id_fkey FOREIGN KEY (plan_id) REFERENCES plan(id);

ALTER TABLE ONLY decision
    ADD CONSTRAINT decision_plan_id_fkey FOREIGN KEY (plan_id) REFERENCES plan(id);

ALTER TABLE ONLY download_task
    ADD CONSTRAINT download_task_plan_id_fkey FOREIGN KEY (plan_id) REFERENCES plan(id);

