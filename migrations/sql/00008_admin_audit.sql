-- Admin (issue 11): audit and lists.
--
-- plan.cancel_requested_by: who requested a plan's cancel. Approvals
-- (approval.decided_by), decision resolutions (decision.resolved_by) and
-- outbox retries (outbox_event.retried_by) already record who acted; a
-- cancel recorded only why. Rows from before this migration read ''.
--
-- The plans list of /admin pages newest first by keyset (created_at, id),
-- with or without a status filter, and searches titles by substring: each
-- has an index, so a page stays an index scan at a million plans
-- (acquisition's TestPlanListUsesIndexes shows the plans). Search by id is
-- the primary key, by info hash plan_info_hash. pg_trgm is a trusted
-- extension (Postgres 13+): the database owner may create it.

-- +goose Up
ALTER TABLE plan ADD COLUMN cancel_requested_by text NOT NULL DEFAULT '';
CREATE EXTENSION IF NOT EXISTS pg_trgm;
-- taskport:heavy-lock: early migration, the table held no data when it shipped; on a loaded table the build blocks its writes
CREATE INDEX plan_newest ON plan (created_at DESC, id DESC);
-- taskport:heavy-lock: early migration, the table held no data when it shipped; on a loaded table the build blocks its writes
CREATE INDEX plan_status_newest ON plan (status, created_at DESC, id DESC);
-- taskport:heavy-lock: early migration, the table held no data when it shipped; on a loaded table the build blocks its writes
CREATE INDEX plan_title_trgm ON plan USING gin (title gin_trgm_ops);
-- A dead letter's retry looks for the decision its run opened.
-- taskport:heavy-lock: early migration, the table held no data when it shipped; on a loaded table the build blocks its writes
CREATE INDEX decision_run ON decision (run_id);
-- The open decisions, oldest first: the list orders by (created_at, id),
-- so the index ends in id (acquisition's TestDecisionListStaysIndexed;
-- with created_at alone each page sorted its ties).
DROP INDEX decision_open;
-- taskport:heavy-lock: early migration, the table held no data when it shipped; on a loaded table the build blocks its writes
CREATE INDEX decision_open ON decision (created_at, id) WHERE status = 'open';

-- +goose Down
-- pg_trgm stays: another schema in the database may use it.
DROP INDEX decision_open;
CREATE INDEX decision_open ON decision (created_at) WHERE status = 'open';
DROP INDEX decision_run;
DROP INDEX plan_title_trgm;
DROP INDEX plan_status_newest;
DROP INDEX plan_newest;
ALTER TABLE plan DROP COLUMN cancel_requested_by;
