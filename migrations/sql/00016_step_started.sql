-- The lease engine charges an attempt only to a step whose body started
-- (issue 24): a killed worker's prefetched runs, runs waiting for a step
-- slot and runs replaying go back to pending uncharged.
--
-- started_seq is the seq of the step whose body ran under the current
-- claim, as the worker's heartbeat last reported it (NULL: none reported,
-- and NULL again once the claim ends). The reaper charges an expired lease
-- only when that step has no result recorded. The heartbeat writes it with
-- the renewal it sends anyway, so it costs no statement per step.
--
-- unstarted_losses counts the claims of the run reaped in a row without a
-- started step reported; from the third one the reaper charges anyway, so
-- that a step (or handler) that kills its worker before a heartbeat reports
-- it still runs out of attempts. Any claim that ends otherwise resets it.
--
-- Both are added without a table rewrite (a NULL column, a constant
-- default).

-- +goose Up
ALTER TABLE taskport.run
    ADD COLUMN started_seq int,
    ADD COLUMN unstarted_losses int NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE taskport.run
    DROP COLUMN started_seq,
    DROP COLUMN unstarted_losses;
