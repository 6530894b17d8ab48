-- The text keys of taskport.run compare byte by byte (issue 14:
-- EnqueueMany's rate).
--
-- kind, idempotency_key, engine, status and business_key took the
-- database's collation. Unless that is "C", every comparison of two of them
-- goes through the locale (strcoll), and a batch insert places each run's
-- entries in UNIQUE (kind, idempotency_key), run_kind_version_status_created
-- and run_business_key by such comparisons. In EnqueueMany's insert, text
-- comparison (bttextcmp) was 11% of the server's time, 4.5% under "C" (perf
-- on a C.UTF-8 database; a locale such as en_US.UTF-8 costs more).
-- These are identifiers: nothing sorts them for a reader, and equality is
-- the same in every deterministic collation, so under "C" every statement
-- finds the same rows. Only the order of the index entries changes, which
-- no statement reads (listings order by created_at and id, version lists
-- by version).
--
-- Online (issue 26). Changing a column's collation keeps the table's rows
-- (text to text) but rebuilds every index on the column; the first form of
-- this migration did that under an ACCESS EXCLUSIVE lock, blocking enqueue
-- and claim for 25 s at 1M runs (docs/migrations.md). Now:
--   - the three indexes with these columns in their keys are first built
--     CONCURRENTLY beside the old ones, with COLLATE "C" on those columns;
--   - one short transaction drops the old indexes, the unique constraint
--     and the row check, the five partial indexes whose predicates read
--     these columns (Postgres would rebuild them), changes the collations
--     (a catalog change: the "C" copies are already what the columns need,
--     so they are kept as they are), gives the copies the old names, makes
--     the unique copy the constraint again, and adds the check NOT VALID;
--   - the partial indexes are built again CONCURRENTLY (run_ready, the
--     claim's, first; until each is back, what it serves reads another
--     index and is slower, but nothing waits for a lock), and the check is
--     validated.
-- Run again after a failure, the migration drops what a failed build left
-- and goes on; run again after the swap, it builds the copies once more and
-- drops them.

-- +goose NO TRANSACTION
-- +goose Up
-- +goose StatementBegin
DO $$
DECLARE name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['taskport.run_kind_idempotency_key_c', 'taskport.run_kind_version_status_created_c',
        'taskport.run_status_created_c', 'taskport.run_ready', 'taskport.run_leased', 'taskport.run_open_temporal',
        'taskport.run_finished', 'taskport.run_business_key'] LOOP
        IF EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass(name) AND NOT indisvalid) THEN
            EXECUTE format('DROP INDEX %s', to_regclass(name));
        END IF;
    END LOOP;
END $$;
-- +goose StatementEnd
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS run_kind_idempotency_key_c
    ON taskport.run (kind COLLATE "C", idempotency_key COLLATE "C");
CREATE INDEX CONCURRENTLY IF NOT EXISTS run_kind_version_status_created_c
    ON taskport.run (kind COLLATE "C", version, status COLLATE "C", created_at, id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS run_status_created_c ON taskport.run (status COLLATE "C", created_at, id);

-- +goose StatementBegin
DO $$
BEGIN
    IF (SELECT collname FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation
        WHERE a.attrelid = 'taskport.run'::regclass AND a.attname = 'kind') = 'C' THEN
        -- Swapped by an earlier run of this migration: the copies built
        -- again above are not needed.
        DROP INDEX IF EXISTS taskport.run_kind_idempotency_key_c, taskport.run_kind_version_status_created_c,
            taskport.run_status_created_c;
        RETURN;
    END IF;
    ALTER TABLE taskport.run DROP CONSTRAINT run_kind_idempotency_key_key, DROP CONSTRAINT run_row_check;
    DROP INDEX taskport.run_kind_version_status_created, taskport.run_status_created, taskport.run_ready,
        taskport.run_leased, taskport.run_open_temporal, taskport.run_finished, taskport.run_business_key;
    -- taskport:heavy-lock: a catalog change here: no index or constraint that reads these columns is left to
    --   rebuild or recheck but the "C" copies, which Postgres keeps as they are (docs/migrations.md)
    ALTER TABLE taskport.run
        ALTER COLUMN kind TYPE text COLLATE "C",
        ALTER COLUMN idempotency_key TYPE text COLLATE "C",
        ALTER COLUMN engine TYPE text COLLATE "C",
        ALTER COLUMN status TYPE text COLLATE "C",
        ALTER COLUMN business_key TYPE text COLLATE "C";
    ALTER INDEX taskport.run_kind_idempotency_key_c RENAME TO run_kind_idempotency_key_key;
    ALTER TABLE taskport.run ADD CONSTRAINT run_kind_idempotency_key_key UNIQUE USING INDEX run_kind_idempotency_key_key;
    ALTER INDEX taskport.run_kind_version_status_created_c RENAME TO run_kind_version_status_created;
    ALTER INDEX taskport.run_status_created_c RENAME TO run_status_created;
    ALTER TABLE taskport.run ADD CONSTRAINT run_row_check CHECK (engine = ANY (taskport.run_engines()) AND version >= 1
        AND idempotency_key <> '' AND status = ANY (taskport.run_statuses()) AND max_attempts >= 1) NOT VALID;
END $$;
-- +goose StatementEnd

CREATE INDEX CONCURRENTLY IF NOT EXISTS run_ready ON taskport.run (priority, next_run_at)
    WHERE engine = 'lease' AND status IN ('pending', 'waiting');
CREATE INDEX CONCURRENTLY IF NOT EXISTS run_leased ON taskport.run (lease_until) WHERE engine = 'lease' AND status = 'running';
CREATE INDEX CONCURRENTLY IF NOT EXISTS run_open_temporal ON taskport.run (updated_at, id)
    WHERE engine = 'temporal' AND status IN ('pending', 'running', 'waiting');
CREATE INDEX CONCURRENTLY IF NOT EXISTS run_finished ON taskport.run (engine, status, finished_at)
    WHERE status IN ('succeeded', 'failed', 'canceled');
CREATE INDEX CONCURRENTLY IF NOT EXISTS run_business_key ON taskport.run (business_key) WHERE business_key <> '';
ALTER TABLE taskport.run VALIDATE CONSTRAINT run_row_check;

-- +goose Down
ALTER TABLE taskport.run
    ALTER COLUMN kind TYPE text COLLATE "default",
    ALTER COLUMN idempotency_key TYPE text COLLATE "default",
    ALTER COLUMN engine TYPE text COLLATE "default",
    ALTER COLUMN status TYPE text COLLATE "default",
    ALTER COLUMN business_key TYPE text COLLATE "default";
