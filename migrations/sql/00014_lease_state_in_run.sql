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

-- +goose Up
ALTER TABLE taskport.run
    ADD COLUMN next_run_at         timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN claims              int         NOT NULL DEFAULT 0,
    ADD COLUMN lease_owner         text,
    ADD COLUMN lease_until         timestamptz,
    ADD COLUMN lease_token         uuid,
    ADD COLUMN max_attempts        int         NOT NULL DEFAULT 1,
    ADD COLUMN backoff_initial     interval    NOT NULL DEFAULT '0',
    ADD COLUMN backoff_max         interval    NOT NULL DEFAULT '0',
    ADD COLUMN backoff_coefficient float8      NOT NULL DEFAULT 1,
    ADD COLUMN step_attempts       int         NOT NULL DEFAULT 0,
    ADD COLUMN wait_topic          text,
    ADD COLUMN wait_until          timestamptz,
    ADD COLUMN progress            jsonb,
    ADD COLUMN dead_letter_at      timestamptz,
    ADD COLUMN continued_input     jsonb,
    ADD COLUMN traceparent         text        NOT NULL DEFAULT '',
    ADD COLUMN tracestate          text        NOT NULL DEFAULT '';

-- The projection said pending for a claimed run and kept the last step's
-- name once a run ended; the task row had the live state. A lease_token
-- is kept only on a claimed run: the engine's statements now fence on it
-- alone.
-- taskport:heavy-lock: NOT acceptable on a running system, kept as shipped: one UPDATE rewrites every lease run row while the
--   ALTER TABLE above holds ACCESS EXCLUSIVE on taskport.run to the end of the migration (docs/migrations.md
--   measures it); the online pattern (nullable columns, batched backfill, NOT VALID then VALIDATE,
--   CREATE INDEX CONCURRENTLY) is what would replace it
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
WHERE t.id = r.id;

-- taskport:heavy-lock: part of the same transaction as the rewrite above, under the same ACCESS EXCLUSIVE lock; the online
--   pattern would add it NOT VALID and VALIDATE it in a later statement
ALTER TABLE taskport.run
    DROP CONSTRAINT run_row_check,
    ADD CONSTRAINT run_row_check CHECK (engine = ANY (taskport.run_engines()) AND version >= 1
        AND idempotency_key <> '' AND status = ANY (taskport.run_statuses()) AND max_attempts >= 1);

-- taskport:heavy-lock: under the ACCESS EXCLUSIVE lock this migration already holds; the online pattern would build it
--   CONCURRENTLY in a NO TRANSACTION migration
CREATE INDEX run_ready ON taskport.run (priority, next_run_at)
    WHERE engine = 'lease' AND status IN ('pending', 'waiting');
-- taskport:heavy-lock: as run_ready above
CREATE INDEX run_leased ON taskport.run (lease_until) WHERE engine = 'lease' AND status = 'running';

ALTER TABLE taskport_lease.step_result RENAME COLUMN task_id TO run_id;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION taskport_lease.forget_deleted_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM taskport_lease.step_result WHERE run_id = ANY (ARRAY(SELECT id FROM gone));
    RETURN NULL;
END
$$;
-- +goose StatementEnd

DROP TABLE taskport_lease.task;
DROP FUNCTION taskport_lease.forget_deleted_tasks();
DROP FUNCTION taskport_lease.task_statuses();

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
