-- Keyset paging of the run listing (issue 11): port.Admin.ListRuns, the
-- `taskport runs list` command and the admin's dead letters page through
-- taskport.run newest first, by (created_at, id), after a cursor. Each index
-- below yields one listing in that order from a seek, so a page costs its
-- size, not the number of runs before it:
--   - run_created: every run (no kind or status filter);
--   - run_status_created: one status, e.g. the dead letters (failed);
--   - run_kind_created: one kind, with or without a version.
-- A business key's runs are few; run_business_key finds them.
--
-- Cost: three more index entries per run inserted, and per status change
-- (already not a HOT update: run_kind_version_status indexes status).
--
-- Online (issue 26): each index is built CONCURRENTLY, outside a
-- transaction, so that enqueue and claim go on writing taskport.run while it
-- builds (the first form of this migration built them under a lock that
-- blocked run writes for 20 s at 1M runs, docs/migrations.md). A build that
-- failed leaves an invalid index behind; running the migration again drops
-- it first (the DO block below) and builds it again.

-- +goose NO TRANSACTION
-- +goose Up
-- +goose StatementBegin
DO $$
DECLARE name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['taskport.run_created', 'taskport.run_status_created', 'taskport.run_kind_created'] LOOP
        IF EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass(name) AND NOT indisvalid) THEN
            EXECUTE format('DROP INDEX %s', to_regclass(name));
        END IF;
    END LOOP;
END $$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS run_created ON taskport.run (created_at, id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS run_status_created ON taskport.run (status, created_at, id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS run_kind_created ON taskport.run (kind, created_at, id);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS taskport.run_kind_created;
DROP INDEX CONCURRENTLY IF EXISTS taskport.run_status_created;
DROP INDEX CONCURRENTLY IF EXISTS taskport.run_created;
