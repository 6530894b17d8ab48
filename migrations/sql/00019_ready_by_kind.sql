-- The lease claim reads only the ready runs a worker serves (issue 28).
-- run_ready (priority, next_run_at) orders every ready lease run, so a
-- claim that filtered the served kind@version pairs after the scan walked
-- the ready runs of every kind and version nobody serves: with 200,000 of
-- them (a version retired, or not yet deployed, during a rolling deploy)
-- each claim removed them all by filter, 67 ms on every poll of every
-- worker. run_ready_kind leads with the pair, so the claim descends once
-- per served pair and present priority and stops after its batch, and the
-- queue-depth sample counts the served pairs' ready runs only.
--
-- run_ready stays: the claim's loose scan of the priorities present reads
-- it, and so do the claims of workers of the previous release while they
-- drain. Cost: one more index entry per lease run inserted and per status
-- change to or from pending and waiting.
--
-- Online: built CONCURRENTLY, outside a transaction; a build that failed
-- leaves an invalid index, which running the migration again drops first.

-- +goose NO TRANSACTION
-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass('taskport.run_ready_kind') AND NOT indisvalid) THEN
        DROP INDEX taskport.run_ready_kind;
    END IF;
END $$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS run_ready_kind ON taskport.run (kind, version, priority, next_run_at)
    WHERE engine = 'lease' AND status IN ('pending', 'waiting');

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS taskport.run_ready_kind;
