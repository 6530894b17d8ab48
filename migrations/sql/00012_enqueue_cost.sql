-- What a run costs to insert (issue 14: EnqueueMany's rate).
--
-- Fewer index entries per run. A run of taskport.run wrote six: the
-- primary key, UNIQUE(kind, idempotency_key) and four for listings:
-- run_created (every run), run_status_created (one status),
-- run_kind_created (one kind) and run_kind_version_status (a kind's open
-- runs on old versions). Index inserts were a third of the server's time
-- in a batch insert (perf).
--
-- Two listing indexes now serve every listing, in its order, from seeks:
--   - run_status_created (status, created_at, id): one status, as before;
--     every run, or several statuses, as one branch per status merged in
--     order (runstore's listQuery: UNION ALL, Merge Append);
--   - run_kind_version_status_created (kind, version, status, created_at,
--     id): one kind, as one branch per (version, status) of the kind, its
--     versions read first by a loose scan of the same index. A kind's open
--     runs on old versions are found by (kind, version, status), no longer
--     by a scan of every run of the old versions.
--
-- Row checks without a call per row. 00004 made each a PL/pgSQL call per
-- row, so that a one-row statement would not rebuild IN lists of constants
-- from the stored CHECK expression; a batch of 1000 runs then made 2000
-- calls (3.5% of the server's time, perf). The lists now come from
-- immutable functions without arguments, which Postgres folds into
-- constants once as it prepares a statement's checks: a statement makes one
-- call per list, a row compares against a constant array (under 0.1 us a
-- row instead of about 0.4, over 200k rows; the backend CPU of one-row
-- UPDATEs unchanged within noise). The rules, and the constraints' names,
-- are unchanged.
--
-- Online (issue 26): no statement holds a table lock for longer than a
-- catalog change. The new checks are added NOT VALID (checking new rows
-- only) and validated afterwards, which reads the table under a lock that
-- lets writes go on; the new index is built CONCURRENTLY and the old ones
-- dropped CONCURRENTLY; each table is locked in a statement of its own, so
-- that the migration no longer deadlocks with a lease enqueue that locks the
-- task table and then the run table (docs/migrations.md). Every statement can
-- run again after a failure.

-- +goose NO TRANSACTION
-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION taskport.run_engines() RETURNS text[] LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN '{lease,temporal}';
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION taskport.run_statuses() RETURNS text[] LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN '{pending,running,waiting,succeeded,failed,canceled}';
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION taskport_lease.task_statuses() RETURNS text[] LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN '{pending,running,waiting,succeeded,failed,canceled,dead}';
END
$$;
-- +goose StatementEnd

ALTER TABLE taskport.run
    DROP CONSTRAINT run_row_check,
    ADD CONSTRAINT run_row_check CHECK (engine = ANY (taskport.run_engines()) AND version >= 1
        AND idempotency_key <> '' AND status = ANY (taskport.run_statuses())) NOT VALID;
ALTER TABLE taskport.run VALIDATE CONSTRAINT run_row_check;
ALTER TABLE taskport_lease.task
    DROP CONSTRAINT task_row_check,
    ADD CONSTRAINT task_row_check CHECK (status = ANY (taskport_lease.task_statuses()) AND max_attempts >= 1) NOT VALID;
ALTER TABLE taskport_lease.task VALIDATE CONSTRAINT task_row_check;
DROP FUNCTION IF EXISTS taskport.run_row_ok(text, int, text, text);
DROP FUNCTION IF EXISTS taskport_lease.task_row_ok(text, int);

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass('taskport.run_kind_version_status_created') AND NOT indisvalid) THEN
        DROP INDEX taskport.run_kind_version_status_created;
    END IF;
END $$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS run_kind_version_status_created ON taskport.run (kind, version, status, created_at, id);
DROP INDEX CONCURRENTLY IF EXISTS taskport.run_kind_version_status;
DROP INDEX CONCURRENTLY IF EXISTS taskport.run_kind_created;
DROP INDEX CONCURRENTLY IF EXISTS taskport.run_created;

-- +goose Down
CREATE INDEX CONCURRENTLY run_created ON taskport.run (created_at, id);
CREATE INDEX CONCURRENTLY run_kind_created ON taskport.run (kind, created_at, id);
CREATE INDEX CONCURRENTLY run_kind_version_status ON taskport.run (kind, version, status);
DROP INDEX CONCURRENTLY taskport.run_kind_version_status_created;

-- +goose StatementBegin
CREATE FUNCTION taskport.run_row_ok(engine text, version int, idempotency_key text, status text)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN engine IN ('lease', 'temporal') AND version >= 1 AND idempotency_key <> ''
        AND status IN ('pending', 'running', 'waiting', 'succeeded', 'failed', 'canceled');
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION taskport_lease.task_row_ok(status text, max_attempts int)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN status IN ('pending', 'running', 'waiting', 'succeeded', 'failed', 'canceled', 'dead')
        AND max_attempts >= 1;
END
$$;
-- +goose StatementEnd

ALTER TABLE taskport.run
    DROP CONSTRAINT run_row_check,
    ADD CONSTRAINT run_row_check CHECK (taskport.run_row_ok(engine, version, idempotency_key, status));
ALTER TABLE taskport_lease.task
    DROP CONSTRAINT task_row_check,
    ADD CONSTRAINT task_row_check CHECK (taskport_lease.task_row_ok(status, max_attempts));
DROP FUNCTION taskport_lease.task_statuses();
DROP FUNCTION taskport.run_statuses();
DROP FUNCTION taskport.run_engines();
