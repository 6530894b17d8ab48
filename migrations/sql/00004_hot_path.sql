-- Integrity checks that cost less per statement, on the tables every run
-- writes several times (taskport.run, taskport_lease.task and .step_result).
--
-- Foreign keys. Every task insert and every step result paid an RI trigger
-- (a SELECT ... FOR KEY SHARE through SPI): four per run of a three-step
-- kind. They repeat what the statements already prove: a task row is inserted
-- only by the statement (enqueueSQL) or transaction (EnqueueTx) that inserts
-- its taskport.run row, and a step result only by a statement that reads and
-- locks its task row under the lease check. What the keys also gave, deleting
-- a run's rows with the run, stays: statement-level AFTER DELETE triggers
-- cascade instead, and cost nothing until something deletes.
--
-- CHECK constraints. Postgres rebuilds every CHECK expression of a table from
-- its stored node tree for each INSERT or UPDATE statement; an IN list of
-- seven strings is a few hundred tokens to parse, for a statement that writes
-- one row. One call to a PL/pgSQL function per table checks the same rules
-- (the function's body is compiled once per connection).
--
-- Measured with bench/cmd/compare at concurrency 8 (interleaved rounds):
-- about +4% for the foreign keys, +8% for the CHECKs.
--
-- Online (issue 26): each statement holds its table's lock for a catalog
-- change only. The new checks are added NOT VALID and validated afterwards
-- (a read of the table under a lock that lets writes go on), each table in
-- statements of its own. Every statement can run again after a failure.

-- +goose NO TRANSACTION
-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION taskport_lease.forget_deleted_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM taskport_lease.task t USING gone g WHERE t.id = g.id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION taskport_lease.forget_deleted_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM taskport_lease.step_result s USING gone g WHERE s.task_id = g.id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- The triggers take over before the keys go, so that no deletion in
-- between leaves a run's lease rows behind.
CREATE OR REPLACE TRIGGER forget_lease_task AFTER DELETE ON taskport.run
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION taskport_lease.forget_deleted_runs();
CREATE OR REPLACE TRIGGER forget_step_results AFTER DELETE ON taskport_lease.task
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION taskport_lease.forget_deleted_tasks();
ALTER TABLE taskport_lease.step_result DROP CONSTRAINT IF EXISTS step_result_task_id_fkey;
ALTER TABLE taskport_lease.task DROP CONSTRAINT IF EXISTS task_id_fkey;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION taskport.run_row_ok(engine text, version int, idempotency_key text, status text)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN engine IN ('lease', 'temporal') AND version >= 1 AND idempotency_key <> ''
        AND status IN ('pending', 'running', 'waiting', 'succeeded', 'failed', 'canceled');
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION taskport_lease.task_row_ok(status text, max_attempts int)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN status IN ('pending', 'running', 'waiting', 'succeeded', 'failed', 'canceled', 'dead')
        AND max_attempts >= 1;
END
$$;
-- +goose StatementEnd

ALTER TABLE taskport.run
    DROP CONSTRAINT IF EXISTS run_engine_check, DROP CONSTRAINT IF EXISTS run_version_check,
    DROP CONSTRAINT IF EXISTS run_idempotency_key_check, DROP CONSTRAINT IF EXISTS run_status_check,
    DROP CONSTRAINT IF EXISTS run_row_check,
    ADD CONSTRAINT run_row_check CHECK (taskport.run_row_ok(engine, version, idempotency_key, status)) NOT VALID;
ALTER TABLE taskport.run VALIDATE CONSTRAINT run_row_check;
ALTER TABLE taskport_lease.task
    DROP CONSTRAINT IF EXISTS task_status_check, DROP CONSTRAINT IF EXISTS task_max_attempts_check,
    DROP CONSTRAINT IF EXISTS task_row_check,
    ADD CONSTRAINT task_row_check CHECK (taskport_lease.task_row_ok(status, max_attempts)) NOT VALID;
ALTER TABLE taskport_lease.task VALIDATE CONSTRAINT task_row_check;

-- +goose Down
ALTER TABLE taskport_lease.task
    DROP CONSTRAINT task_row_check,
    ADD CONSTRAINT task_status_check
        CHECK (status IN ('pending', 'running', 'waiting', 'succeeded', 'failed', 'canceled', 'dead')),
    ADD CONSTRAINT task_max_attempts_check CHECK (max_attempts >= 1);
ALTER TABLE taskport.run
    DROP CONSTRAINT run_row_check,
    ADD CONSTRAINT run_engine_check CHECK (engine IN ('lease', 'temporal')),
    ADD CONSTRAINT run_version_check CHECK (version >= 1),
    ADD CONSTRAINT run_idempotency_key_check CHECK (idempotency_key <> ''),
    ADD CONSTRAINT run_status_check
        CHECK (status IN ('pending', 'running', 'waiting', 'succeeded', 'failed', 'canceled'));
DROP FUNCTION taskport_lease.task_row_ok(text, int);
DROP FUNCTION taskport.run_row_ok(text, int, text, text);

DROP TRIGGER forget_step_results ON taskport_lease.task;
DROP TRIGGER forget_lease_task ON taskport.run;
DROP FUNCTION taskport_lease.forget_deleted_tasks();
DROP FUNCTION taskport_lease.forget_deleted_runs();
-- Rows orphaned while the triggers stood in for the keys would fail the
-- constraints; they belong to no run.
DELETE FROM taskport_lease.step_result s WHERE NOT EXISTS (SELECT 1 FROM taskport_lease.task t WHERE t.id = s.task_id);
DELETE FROM taskport_lease.task t WHERE NOT EXISTS (SELECT 1 FROM taskport.run r WHERE r.id = t.id);
ALTER TABLE taskport_lease.task
    ADD CONSTRAINT task_id_fkey FOREIGN KEY (id) REFERENCES taskport.run (id) ON DELETE CASCADE;
ALTER TABLE taskport_lease.step_result
    ADD CONSTRAINT step_result_task_id_fkey FOREIGN KEY (task_id) REFERENCES taskport_lease.task (id) ON DELETE CASCADE;
