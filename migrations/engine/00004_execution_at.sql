-- Flow.Now before an execution's first step reads when the execution
-- began, as on the Temporal engine (the first workflow task's time): the
-- lease engine read the run's created_at, before a delayed run was due,
-- and, after a ContinueAsNew, the first execution's creation again (the
-- clock went backwards). execution_at is set by the run's first claim and
-- by each ContinueAsNew; NULL (a run an earlier release claimed first)
-- reads created_at, as that release did, so a replay sees what it saw.
--
-- A NULL column without a default: catalog only, the lock is held for
-- milliseconds.

-- +goose Up
ALTER TABLE taskport.run ADD COLUMN execution_at timestamptz;

-- +goose Down
ALTER TABLE taskport.run DROP COLUMN execution_at;
