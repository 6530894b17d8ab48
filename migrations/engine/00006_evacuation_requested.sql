-- An evacuation (router.Evacuate) cancels each run it moves through the
-- run's engine, and an evacuation interrupted after the engine took that
-- cancel leaves the run to the next one to move. Until this migration the
-- cancel reason was all that told such a run apart, so a cancel someone
-- requested with a reason that merely began like an evacuation's
-- ("evacuated from the lease engine to the ...") was taken for one: the
-- next evacuation started the canceled run again on the other engine, and
-- status counted it as left to move. evacuation_requested_at is written by
-- the evacuation itself, before it sends the cancel, and only a run that
-- carries it and whose first cancel reason is the evacuation's is moved.
--
-- Online: a NULL column without a default is a catalog change (the lock is
-- held for milliseconds). The backfill gives the mark to the runs the
-- previous release would have moved, so that none of them is lost in the
-- upgrade; it runs in its own transaction, after the column's.

-- +goose NO TRANSACTION
-- +goose Up
ALTER TABLE taskport.run ADD COLUMN IF NOT EXISTS evacuation_requested_at timestamptz;

-- taskport:batched: it writes only the runs an interrupted evacuation left (open ones whose cancel it sent, canceled ones not yet moved: the entries of run_unmoved, whose predicate it repeats), a handful; the other rows are read, not locked
UPDATE taskport.run SET evacuation_requested_at = coalesce(cancel_requested_at, now())
WHERE evacuation_requested_at IS NULL AND evacuated_at IS NULL
  AND starts_with(cancel_reason, 'evacuated from the ' || engine || ' engine to the ')
  AND (status IN ('pending', 'running', 'waiting')
    OR status = 'canceled' AND evacuated_to IS NULL AND starts_with(cancel_reason, 'evacuated from the '));

-- +goose Down
ALTER TABLE taskport.run DROP COLUMN IF EXISTS evacuation_requested_at;
