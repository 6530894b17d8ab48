-- One row per lease run (issue 14: EnqueueMany against River's InsertMany).
--
-- A lease run was two rows: its taskport.run row (the idempotency authority
-- and the projection) and its taskport_lease.task row (the claim, the retry
-- policy, the wait in progress). Enqueue wrote both, every state change
-- updated both, and the projection's status said "pending" while a run was
-- claimed, so that Get and ListRuns had to read the task row to tell.
-- Inserting the second row was a fifth to a quarter of a batch enqueue's
-- cost (bench/cmd/compare enqueue -ablate, measured at commit fcf7d6b).
--
-- The task row's own columns now live in taskport.run, and the task table
-- is gone:
--   - status is the live one: a claim sets running; a run whose leases were
--     all lost ("dead" on the task row) is failed with dead_letter_at set,
--     as a run failed by its handler always was;
--   - cancel_requested_at, current_step, last_error, created_at and
--     finished_at were kept on both rows and are merged;
--   - input stays the input the run was enqueued with, as on the Temporal
--     engine; continued_input is the input of its latest continue-as-new,
--     NULL until one happens;
--   - attempts stays the projection (the attempt of the step in progress);
--     step_attempts counts the failed or lost attempts of that step;
--   - seq is the generation of the run's fencing tokens (the task row's
--     copy of it, run_seq, goes).
-- Temporal runs carry the new columns at their defaults (the fixed-width
-- ones stored in each row; the nullable ones cost a bit of the null bitmap).
--
-- run_ready and run_leased are task_ready and task_leased, restricted to
-- lease runs. step_result.task_id is renamed run_id: it always held the
-- run's id. Deleting a run still deletes its step results (the trigger of
-- 00004, now reading step_result directly).
--
-- Cost, measured before this migration was written (commit fcf7d6b,
-- bench/cmd/compare/onerow): a batch enqueue 1.09x to 1.12x River's
-- InsertMany instead of 0.90x; the worker path with pgbench, no measurable
-- difference. A claim that sets the status rewrites every index entry of
-- the run row (it was a non-HOT update of the task row before too).
--
-- Online (issue 26). The first form of this migration rewrote every lease
-- run row in one UPDATE while an ALTER TABLE held ACCESS EXCLUSIVE on
-- taskport.run, and then asked for the task table, which a lease enqueue
-- locks first: under a steady lease enqueue it deadlocked, and each attempt
-- blocked enqueue for minutes at 1M runs (docs/migrations.md). Now:
--   - the columns are added (a catalog change: constant or now() defaults);
--   - triggers note the id of every task row inserted or updated, and of
--     every lease run row updated by anyone but the copy, in
--     taskport_lease.task_changed;
--   - the task rows are copied into their runs in batches of 5,000, each its
--     own transaction, and then the rows noted meanwhile, until fewer than
--     500 are left;
--   - run_ready and run_leased are built CONCURRENTLY, and the new row check
--     is added NOT VALID;
--   - one short transaction locks the task table first (as the enqueue
--     does), copies again the rows noted since, renames step_result's
--     column, points the deletion trigger at it and drops the task table;
--   - the change log goes, and the check is validated.
-- The copy is the same statement each time and gives the same row when
-- repeated, so a run of the migration after a failure starts it again.

-- +goose NO TRANSACTION
-- +goose Up
ALTER TABLE taskport.run
    ADD COLUMN IF NOT EXISTS next_run_at         timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN IF NOT EXISTS claims              int         NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS lease_owner         text,
    ADD COLUMN IF NOT EXISTS lease_until         timestamptz,
    ADD COLUMN IF NOT EXISTS lease_token         uuid,
    ADD COLUMN IF NOT EXISTS max_attempts        int         NOT NULL DEFAULT 1,
    ADD COLUMN IF NOT EXISTS backoff_initial     interval    NOT NULL DEFAULT '0',
    ADD COLUMN IF NOT EXISTS backoff_max         interval    NOT NULL DEFAULT '0',
    ADD COLUMN IF NOT EXISTS backoff_coefficient float8      NOT NULL DEFAULT 1,
    ADD COLUMN IF NOT EXISTS step_attempts       int         NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS wait_topic          text,
    ADD COLUMN IF NOT EXISTS wait_until          timestamptz,
    ADD COLUMN IF NOT EXISTS progress            jsonb,
    ADD COLUMN IF NOT EXISTS dead_letter_at      timestamptz,
    ADD COLUMN IF NOT EXISTS continued_input     jsonb,
    ADD COLUMN IF NOT EXISTS traceparent         text        NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS tracestate          text        NOT NULL DEFAULT '';

CREATE TABLE IF NOT EXISTS taskport_lease.task_changed (id uuid PRIMARY KEY);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION taskport_lease.note_task_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO taskport_lease.task_changed VALUES (NEW.id) ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE OR REPLACE TRIGGER note_task_change AFTER INSERT OR UPDATE ON taskport_lease.task
    FOR EACH ROW EXECUTE FUNCTION taskport_lease.note_task_change();
-- The copy's own writes set taskport.copying for their transaction.
CREATE OR REPLACE TRIGGER note_lease_run_change AFTER UPDATE ON taskport.run
    FOR EACH ROW WHEN (OLD.engine = 'lease' AND current_setting('taskport.copying', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION taskport_lease.note_task_change();

-- The projection said pending for a claimed run and kept the last step's
-- name once a run ended; the task row had the live state. A lease_token
-- is kept only on a claimed run: the engine's statements now fence on it
-- alone. (Dropped at the end of this migration.)
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION taskport_lease.copy_task_rows(ids uuid[]) RETURNS void LANGUAGE sql AS $$
    UPDATE taskport.run r
    SET next_run_at = t.next_run_at, claims = t.claims, lease_owner = t.lease_owner, lease_until = t.lease_until,
        lease_token = CASE WHEN t.status = 'running' THEN t.lease_token END, max_attempts = t.max_attempts, backoff_initial = t.backoff_initial,
        backoff_max = t.backoff_max, backoff_coefficient = t.backoff_coefficient, step_attempts = t.step_attempts,
        wait_topic = t.wait_topic, wait_until = t.wait_until, progress = t.progress, dead_letter_at = t.dead_letter_at,
        continued_input = CASE WHEN t.input IS DISTINCT FROM r.input THEN t.input END,
        traceparent = t.traceparent, tracestate = t.tracestate,
        status = CASE t.status WHEN 'dead' THEN 'failed' ELSE t.status END,
        current_step = CASE WHEN t.status = 'running' THEN t.current_step ELSE r.current_step END,
        cancel_requested_at = coalesce(r.cancel_requested_at, t.cancel_requested_at),
        finished_at = coalesce(r.finished_at, t.finished_at)
    FROM taskport_lease.task t
    WHERE t.id = ANY (ids) AND r.id = t.id;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
DECLARE
    last uuid := '00000000-0000-0000-0000-000000000000';
    ids  uuid[];
BEGIN
    IF to_regclass('taskport_lease.task') IS NULL THEN
        RETURN; -- moved by an earlier run of this migration
    END IF;
    LOOP
        ids := ARRAY(SELECT id FROM taskport_lease.task WHERE id > last ORDER BY id LIMIT 5000);
        EXIT WHEN cardinality(ids) = 0;
        PERFORM set_config('taskport.copying', 'on', true);
        -- taskport:batched: 5,000 task rows a transaction, committed one by one
        PERFORM taskport_lease.copy_task_rows(ids);
        last := ids[cardinality(ids)];
        COMMIT;
    END LOOP;
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
DECLARE name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['taskport.run_ready', 'taskport.run_leased'] LOOP
        IF EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass(name) AND NOT indisvalid) THEN
            EXECUTE format('DROP INDEX %s', to_regclass(name));
        END IF;
    END LOOP;
END $$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS run_ready ON taskport.run (priority, next_run_at)
    WHERE engine = 'lease' AND status IN ('pending', 'waiting');
CREATE INDEX CONCURRENTLY IF NOT EXISTS run_leased ON taskport.run (lease_until) WHERE engine = 'lease' AND status = 'running';

ALTER TABLE taskport.run
    DROP CONSTRAINT run_row_check,
    ADD CONSTRAINT run_row_check CHECK (engine = ANY (taskport.run_engines()) AND version >= 1
        AND idempotency_key <> '' AND status = ANY (taskport.run_statuses()) AND max_attempts >= 1) NOT VALID;

-- The rows written meanwhile, until fewer than 500 are left for the switch
-- below to copy under its lock (or 100 rounds went by: then the switch copies
-- the rest). Each id leaves the log as it is copied; a write after that
-- notes it again.
-- +goose StatementBegin
DO $$
DECLARE
    ids    uuid[];
    rounds int := 0;
BEGIN
    IF to_regclass('taskport_lease.task') IS NULL THEN
        RETURN;
    END IF;
    LOOP
        WITH noted AS (
            DELETE FROM taskport_lease.task_changed
            WHERE id IN (SELECT id FROM taskport_lease.task_changed LIMIT 5000) RETURNING id
        )
        SELECT coalesce(array_agg(id), '{}') INTO ids FROM noted;
        PERFORM set_config('taskport.copying', 'on', true);
        -- taskport:batched: 5,000 noted rows a transaction, committed one by one
        PERFORM taskport_lease.copy_task_rows(ids);
        COMMIT;
        rounds := rounds + 1;
        EXIT WHEN cardinality(ids) < 500 OR rounds = 100;
    END LOOP;
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $do$
BEGIN
    IF to_regclass('taskport_lease.task') IS NULL THEN
        RETURN;
    END IF;
    -- taskport:heavy-lock: the switch: old workers' statements on the task table wait for it; it copies only the rows
    --   noted since the last round above (docs/migrations.md measures it), and it is taken before anything on
    --   taskport.run, in the order a lease enqueue takes them
    LOCK TABLE taskport_lease.task IN ACCESS EXCLUSIVE MODE;
    PERFORM set_config('taskport.copying', 'on', true);
    -- taskport:batched: the rows noted since the last batch above, fewer than 500 and those written since
    PERFORM taskport_lease.copy_task_rows(ARRAY(SELECT id FROM taskport_lease.task_changed));

    ALTER TABLE taskport_lease.step_result RENAME COLUMN task_id TO run_id;

CREATE OR REPLACE FUNCTION taskport_lease.forget_deleted_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM taskport_lease.step_result WHERE run_id = ANY (ARRAY(SELECT id FROM gone));
    RETURN NULL;
END
$$;

    DROP TABLE taskport_lease.task;
END $do$;
-- +goose StatementEnd

DROP TRIGGER IF EXISTS note_lease_run_change ON taskport.run;
DROP TABLE IF EXISTS taskport_lease.task_changed;
DROP FUNCTION IF EXISTS taskport_lease.note_task_change();
DROP FUNCTION IF EXISTS taskport_lease.copy_task_rows(uuid[]);
DROP FUNCTION IF EXISTS taskport_lease.forget_deleted_tasks();
DROP FUNCTION IF EXISTS taskport_lease.task_statuses();
ALTER TABLE taskport.run VALIDATE CONSTRAINT run_row_check;

-- +goose Down
-- +goose StatementBegin
CREATE FUNCTION taskport_lease.task_statuses() RETURNS text[] LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN '{pending,running,waiting,succeeded,failed,canceled,dead}';
END
$$;
-- +goose StatementEnd

CREATE TABLE taskport_lease.task (
    id                  uuid        PRIMARY KEY,
    kind                text        NOT NULL,
    handler_version     int         NOT NULL,
    input               jsonb       NOT NULL,
    status              text        NOT NULL DEFAULT 'pending',
    priority            int         NOT NULL DEFAULT 0,
    claims              int         NOT NULL DEFAULT 0,
    next_run_at         timestamptz NOT NULL DEFAULT now(),
    lease_owner         text,
    lease_until         timestamptz,
    lease_token         uuid,
    max_attempts        int         NOT NULL,
    backoff_initial     interval    NOT NULL,
    backoff_max         interval    NOT NULL,
    backoff_coefficient float8      NOT NULL,
    wait_topic          text,
    wait_until          timestamptz,
    cancel_requested_at timestamptz,
    current_step        text        NOT NULL DEFAULT '',
    step_attempts       int         NOT NULL DEFAULT 0,
    progress            jsonb,
    last_error          text        NOT NULL DEFAULT '',
    dead_letter_at      timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    finished_at         timestamptz,
    run_seq             bigint      NOT NULL,
    traceparent         text        NOT NULL DEFAULT '',
    tracestate          text        NOT NULL DEFAULT '',
    CONSTRAINT task_row_check CHECK (status = ANY (taskport_lease.task_statuses()) AND max_attempts >= 1)
);
CREATE INDEX task_ready ON taskport_lease.task (priority, next_run_at) WHERE status IN ('pending', 'waiting');
CREATE INDEX task_leased ON taskport_lease.task (lease_until) WHERE status = 'running';

-- A failed lease run becomes a failed task (a dead letter either way); a
-- claimed run's projection goes back to saying pending.
INSERT INTO taskport_lease.task (id, kind, handler_version, input, status, priority, claims, next_run_at,
    lease_owner, lease_until, lease_token, max_attempts, backoff_initial, backoff_max, backoff_coefficient,
    wait_topic, wait_until, cancel_requested_at, current_step, step_attempts, progress, last_error,
    dead_letter_at, created_at, updated_at, finished_at, run_seq, traceparent, tracestate)
SELECT id, kind, version, coalesce(continued_input, input), status, priority, claims, next_run_at,
    lease_owner, lease_until, lease_token, max_attempts, backoff_initial, backoff_max, backoff_coefficient,
    wait_topic, wait_until, cancel_requested_at, current_step, step_attempts, progress, last_error,
    dead_letter_at, created_at, updated_at, finished_at, seq, traceparent, tracestate
FROM taskport.run WHERE engine = 'lease';
UPDATE taskport.run SET status = 'pending' WHERE engine = 'lease' AND status = 'running';

ALTER TABLE taskport_lease.step_result RENAME COLUMN run_id TO task_id;

-- +goose StatementBegin
CREATE FUNCTION taskport_lease.forget_deleted_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM taskport_lease.step_result WHERE task_id = ANY (ARRAY(SELECT id FROM gone));
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION taskport_lease.forget_deleted_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM taskport_lease.task WHERE id = ANY (ARRAY(SELECT id FROM gone));
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER forget_step_results AFTER DELETE ON taskport_lease.task
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION taskport_lease.forget_deleted_tasks();

DROP INDEX taskport.run_leased;
DROP INDEX taskport.run_ready;
ALTER TABLE taskport.run
    DROP CONSTRAINT run_row_check,
    ADD CONSTRAINT run_row_check CHECK (engine = ANY (taskport.run_engines()) AND version >= 1
        AND idempotency_key <> '' AND status = ANY (taskport.run_statuses()));
ALTER TABLE taskport.run
    DROP COLUMN tracestate, DROP COLUMN traceparent, DROP COLUMN continued_input, DROP COLUMN dead_letter_at,
    DROP COLUMN progress, DROP COLUMN wait_until, DROP COLUMN wait_topic, DROP COLUMN step_attempts,
    DROP COLUMN backoff_coefficient, DROP COLUMN backoff_max, DROP COLUMN backoff_initial, DROP COLUMN max_attempts,
    DROP COLUMN lease_token, DROP COLUMN lease_until, DROP COLUMN lease_owner, DROP COLUMN claims,
    DROP COLUMN next_run_at;
