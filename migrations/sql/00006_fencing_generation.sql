-- Ordered fencing across runs (issue 10, defect 8), and the index the
-- Temporal projection reconciler reads (defect 9).
--
-- taskport.run.seq is the run's creation sequence: an identity, so every run
-- created after another has a larger one, whichever process inserted it. It
-- is the Generation of the fencing tokens both engines hand to activities
-- (port.FencingToken): a run that retries a failed one (a decision retry) is
-- a newer generation, and the ledger refuses an older generation's Begin.
-- The lease engine copies it into its task row at enqueue, so that a claim
-- reads it without a join.
--
-- asset_operation records the generation of its current attempt, and the
-- scopes of that generation that a takeover retired: within one generation
-- (one run), a different scope is the same run under a new Temporal run ID
-- after a reset; it takes the operation over once, and the scope it replaced
-- is refused from then on. Rows begun before this migration have generation
-- 0: older than any run's.
--
-- run_open_temporal serves the reconciler's batch: open Temporal runs whose
-- projection was not written recently, oldest first. Its key, updated_at, is
-- written by the lease engine only outside its hot path (step commits after a
-- failed attempt), where a status change already rewrites the row's indexes.

-- +goose Up
-- taskport:heavy-lock: early migration, taskport.run held no data when it shipped; on a loaded table the identity column rewrites every run row under ACCESS EXCLUSIVE
ALTER TABLE taskport.run ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY;

ALTER TABLE taskport_lease.task ADD COLUMN run_seq bigint;
-- taskport:heavy-lock: early migration, taskport_lease.task held no data when it shipped; on a loaded table one UPDATE of every task row
UPDATE taskport_lease.task t SET run_seq = coalesce((SELECT r.seq FROM taskport.run r WHERE r.id = t.id), 0);
-- taskport:heavy-lock: early migration, taskport_lease.task held no data when it shipped; on a loaded table SET NOT NULL scans every row under ACCESS EXCLUSIVE
ALTER TABLE taskport_lease.task ALTER COLUMN run_seq SET NOT NULL;

ALTER TABLE asset_operation
    ADD COLUMN attempt_generation bigint NOT NULL DEFAULT 0,
    ADD COLUMN retired_scopes     text[] NOT NULL DEFAULT '{}';

-- taskport:heavy-lock: early migration, taskport.run held no data when it shipped; on a loaded table the build blocks run writes
CREATE INDEX run_open_temporal ON taskport.run (updated_at, id)
    WHERE engine = 'temporal' AND status IN ('pending', 'running', 'waiting');

-- +goose Down
DROP INDEX taskport.run_open_temporal;
ALTER TABLE asset_operation DROP COLUMN retired_scopes, DROP COLUMN attempt_generation;
ALTER TABLE taskport_lease.task DROP COLUMN run_seq;
ALTER TABLE taskport.run DROP COLUMN seq;
