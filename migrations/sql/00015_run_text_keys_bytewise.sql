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
-- Changing a column's collation keeps the table's rows (text to text) and
-- rebuilds the indexes on the columns: on a large table the migration
-- takes the time of those builds, under an ACCESS EXCLUSIVE lock.

-- +goose Up
-- taskport:heavy-lock: NOT acceptable on a running system, kept as shipped: the collation change rebuilds every index on
--   these columns under ACCESS EXCLUSIVE on taskport.run, blocking enqueue and claim for the whole build
--   (docs/migrations.md measures it); the online pattern (new indexes built CONCURRENTLY, then swapped)
--   is what would replace it
ALTER TABLE taskport.run
    ALTER COLUMN kind TYPE text COLLATE "C",
    ALTER COLUMN idempotency_key TYPE text COLLATE "C",
    ALTER COLUMN engine TYPE text COLLATE "C",
    ALTER COLUMN status TYPE text COLLATE "C",
    ALTER COLUMN business_key TYPE text COLLATE "C";

-- +goose Down
ALTER TABLE taskport.run
    ALTER COLUMN kind TYPE text COLLATE "default",
    ALTER COLUMN idempotency_key TYPE text COLLATE "default",
    ALTER COLUMN engine TYPE text COLLATE "default",
    ALTER COLUMN status TYPE text COLLATE "default",
    ALTER COLUMN business_key TYPE text COLLATE "default";
