-- Transactional enqueue on the Temporal engine (issue 25): EnqueueTx
-- records the run in the caller's transaction with start_wanted_at set,
-- since a workflow cannot be started inside a Postgres transaction. Once
-- that transaction commits, a serving Temporal worker starts the
-- workflow (woken by a NOTIFY, or at its next poll) and clears the column:
-- the engine's own outbox, one column of the run's row. A rolled back
-- transaction leaves nothing to start.
--
-- run_start_wanted holds only the runs waiting for their start, so the
-- starter's poll reads an empty index when there are none. A NULL column
-- (catalog only) and a partial index built CONCURRENTLY.

-- +goose NO TRANSACTION
-- +goose Up
ALTER TABLE taskport.run ADD COLUMN IF NOT EXISTS start_wanted_at timestamptz;
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass('taskport.run_start_wanted') AND NOT indisvalid) THEN
        DROP INDEX taskport.run_start_wanted;
    END IF;
END $$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS run_start_wanted ON taskport.run (start_wanted_at)
    WHERE start_wanted_at IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS taskport.run_start_wanted;
ALTER TABLE taskport.run DROP COLUMN IF EXISTS start_wanted_at;
