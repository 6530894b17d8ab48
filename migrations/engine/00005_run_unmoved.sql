-- The runs an interrupted evacuation left to move (router.Evacuate;
-- runstore.UnmovedRuns) are canceled runs told apart by their row, and
-- `taskport engine status` and every load of the /admin overview count them
-- per engine. Without an index of their own the count read every canceled
-- run retention keeps: 0.36-0.46 s at a million (docs/benchmarks.md, "What
-- counting the runs left to move costs"). run_unmoved holds only them (an
-- evacuation's cancel reason, or ended by an evacuation and not yet
-- replaced), so it stays about empty and the count reads only them.
--
-- Cost: the predicate is evaluated on each insert and update of a run row,
-- and cancel_reason, which it reads, makes a cancel request's update no
-- longer a heap-only one (a cancel is not a hot path).
--
-- Online: built CONCURRENTLY, outside a transaction; a build that failed
-- leaves an invalid index, which running the migration again drops first.

-- +goose NO TRANSACTION
-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass('taskport.run_unmoved') AND NOT indisvalid) THEN
        DROP INDEX taskport.run_unmoved;
    END IF;
END $$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS run_unmoved ON taskport.run (engine)
    WHERE status = 'canceled' AND evacuated_to IS NULL
      AND (evacuated_at IS NOT NULL OR starts_with(cancel_reason, 'evacuated from the '));

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS taskport.run_unmoved;
