-- The engine's tables, as the application's migrations 00001-00021
-- (migrations/sql) left them: the run store both engines share (schema
-- taskport) and the lease engine's own tables (taskport_lease). Generated
-- once with pg_dump --schema-only from a database those migrations built;
-- TestBaselinesEqualTheLegacyMigrations holds the two to the same catalog.
-- Written against the default layout: in a named schema every "taskport."
-- and "taskport_lease." is that schema (dbtx.Schema.SQL), and the schemas
-- are created by the migrator, not here.

CREATE FUNCTION taskport.run_engines() RETURNS text[]
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    RETURN '{lease,temporal}';
END
$$;

CREATE FUNCTION taskport.run_statuses() RETURNS text[]
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    RETURN '{pending,running,waiting,succeeded,failed,canceled}';
END
$$;

CREATE FUNCTION taskport_lease.forget_deleted_runs() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM taskport_lease.step_result WHERE run_id = ANY (ARRAY(SELECT id FROM gone));
    RETURN NULL;
END
$$;

CREATE TABLE taskport.early_signal (
    id bigint NOT NULL,
    topic text NOT NULL,
    payload jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    consumed_by uuid,
    consumed_step text DEFAULT ''::text NOT NULL,
    consumed_at timestamp with time zone
);

CREATE SEQUENCE taskport.early_signal_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE taskport.early_signal_id_seq OWNED BY taskport.early_signal.id;

CREATE TABLE taskport.engine_switch (
    id bigint NOT NULL,
    engine text NOT NULL,
    switched_by text NOT NULL,
    reason text DEFAULT ''::text NOT NULL,
    switched_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT engine_switch_engine_check CHECK ((engine = ANY (ARRAY['lease'::text, 'temporal'::text]))),
    CONSTRAINT engine_switch_switched_by_check CHECK ((switched_by <> ''::text))
);

ALTER TABLE taskport.engine_switch ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME taskport.engine_switch_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE taskport.run (
    id uuid NOT NULL,
    engine text NOT NULL COLLATE pg_catalog."C",
    kind text NOT NULL COLLATE pg_catalog."C",
    version integer NOT NULL,
    idempotency_key text NOT NULL COLLATE pg_catalog."C",
    business_key text DEFAULT ''::text NOT NULL COLLATE pg_catalog."C",
    priority integer DEFAULT 0 NOT NULL,
    input jsonb NOT NULL,
    available_at timestamp with time zone DEFAULT now() NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL COLLATE pg_catalog."C",
    attempts integer DEFAULT 0 NOT NULL,
    last_error text DEFAULT ''::text NOT NULL,
    current_step text DEFAULT ''::text NOT NULL,
    cancel_requested_at timestamp with time zone,
    cancel_reason text DEFAULT ''::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    seq bigint NOT NULL,
    next_run_at timestamp with time zone DEFAULT now() NOT NULL,
    claims integer DEFAULT 0 NOT NULL,
    lease_owner text,
    lease_until timestamp with time zone,
    lease_token uuid,
    max_attempts integer DEFAULT 1 NOT NULL,
    backoff_initial interval DEFAULT '00:00:00'::interval NOT NULL,
    backoff_max interval DEFAULT '00:00:00'::interval NOT NULL,
    backoff_coefficient double precision DEFAULT 1 NOT NULL,
    step_attempts integer DEFAULT 0 NOT NULL,
    wait_topic text,
    wait_until timestamp with time zone,
    progress jsonb,
    dead_letter_at timestamp with time zone,
    continued_input jsonb,
    traceparent text DEFAULT ''::text NOT NULL,
    tracestate text DEFAULT ''::text NOT NULL,
    started_seq integer,
    unstarted_losses integer DEFAULT 0 NOT NULL,
    evacuated_at timestamp with time zone,
    evacuated_to uuid,
    output jsonb,
    start_wanted_at timestamp with time zone,
    CONSTRAINT run_row_check CHECK (((engine = ANY (taskport.run_engines())) AND (version >= 1) AND (idempotency_key <> ''::text) AND (status = ANY (taskport.run_statuses())) AND (max_attempts >= 1)))
);

ALTER TABLE taskport.run ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME taskport.run_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE taskport.waiter (
    topic text NOT NULL,
    run_id uuid NOT NULL,
    step text NOT NULL,
    since timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE taskport_lease.step_result (
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    name text NOT NULL,
    result jsonb,
    failed boolean DEFAULT false NOT NULL,
    attempts integer DEFAULT 1 NOT NULL,
    completed_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE taskport_lease.task_signal (
    id bigint NOT NULL,
    topic text NOT NULL,
    payload jsonb,
    target uuid,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    consumed_by uuid,
    consumed_at timestamp with time zone,
    traceparent text DEFAULT ''::text NOT NULL,
    tracestate text DEFAULT ''::text NOT NULL
);

CREATE SEQUENCE taskport_lease.task_signal_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE taskport_lease.task_signal_id_seq OWNED BY taskport_lease.task_signal.id;

ALTER TABLE ONLY taskport.early_signal ALTER COLUMN id SET DEFAULT nextval('taskport.early_signal_id_seq'::regclass);

ALTER TABLE ONLY taskport_lease.task_signal ALTER COLUMN id SET DEFAULT nextval('taskport_lease.task_signal_id_seq'::regclass);

ALTER TABLE ONLY taskport.early_signal
    ADD CONSTRAINT early_signal_pkey PRIMARY KEY (id);

ALTER TABLE ONLY taskport.engine_switch
    ADD CONSTRAINT engine_switch_pkey PRIMARY KEY (id);

ALTER TABLE ONLY taskport.run
    ADD CONSTRAINT run_kind_idempotency_key_key UNIQUE (kind, idempotency_key);

ALTER TABLE ONLY taskport.run
    ADD CONSTRAINT run_pkey PRIMARY KEY (id);

ALTER TABLE ONLY taskport.waiter
    ADD CONSTRAINT waiter_pkey PRIMARY KEY (topic, run_id);

ALTER TABLE ONLY taskport_lease.step_result
    ADD CONSTRAINT step_result_pkey PRIMARY KEY (run_id, seq);

ALTER TABLE ONLY taskport_lease.task_signal
    ADD CONSTRAINT task_signal_pkey PRIMARY KEY (id);

CREATE INDEX early_signal_consumed ON taskport.early_signal USING btree (consumed_at) WHERE (consumed_by IS NOT NULL);

CREATE INDEX early_signal_open ON taskport.early_signal USING btree (topic, id) WHERE (consumed_by IS NULL);

CREATE INDEX early_signal_unconsumed_age ON taskport.early_signal USING btree (created_at) WHERE (consumed_by IS NULL);

CREATE INDEX run_business_key ON taskport.run USING btree (business_key) WHERE (business_key <> ''::text);

CREATE INDEX run_finished ON taskport.run USING btree (engine, status, finished_at) WHERE (status = ANY (ARRAY['succeeded'::text, 'failed'::text, 'canceled'::text]));

CREATE INDEX run_kind_version_status_created ON taskport.run USING btree (kind, version, status, created_at, id);

CREATE INDEX run_leased ON taskport.run USING btree (lease_until) WHERE ((engine = 'lease'::text) AND (status = 'running'::text));

CREATE INDEX run_open_temporal ON taskport.run USING btree (updated_at, id) WHERE ((engine = 'temporal'::text) AND (status = ANY (ARRAY['pending'::text, 'running'::text, 'waiting'::text])));

CREATE INDEX run_ready ON taskport.run USING btree (priority, next_run_at) WHERE ((engine = 'lease'::text) AND (status = ANY (ARRAY['pending'::text, 'waiting'::text])));

CREATE INDEX run_ready_kind ON taskport.run USING btree (kind, version, priority, next_run_at) WHERE ((engine = 'lease'::text) AND (status = ANY (ARRAY['pending'::text, 'waiting'::text])));

CREATE INDEX run_start_wanted ON taskport.run USING btree (start_wanted_at) WHERE (start_wanted_at IS NOT NULL);

CREATE INDEX run_status_created ON taskport.run USING btree (status, created_at, id);

CREATE INDEX waiter_run ON taskport.waiter USING btree (run_id);

CREATE INDEX waiter_since ON taskport.waiter USING btree (since);

CREATE INDEX task_signal_consumed ON taskport_lease.task_signal USING btree (consumed_at) WHERE (consumed_by IS NOT NULL);

CREATE INDEX task_signal_unconsumed ON taskport_lease.task_signal USING btree (topic, id) WHERE (consumed_by IS NULL);

CREATE INDEX task_signal_unconsumed_age ON taskport_lease.task_signal USING btree (created_at) WHERE (consumed_by IS NULL);

CREATE TRIGGER forget_lease_task AFTER DELETE ON taskport.run REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION taskport_lease.forget_deleted_runs();

ALTER TABLE ONLY taskport.waiter
    ADD CONSTRAINT waiter_run_id_fkey FOREIGN KEY (run_id) REFERENCES taskport.run(id) ON DELETE CASCADE;

