-- Admin audit (issue 11): who requested a plan's cancel. Approvals
-- (approval.decided_by), decision resolutions (decision.resolved_by) and
-- outbox retries (outbox_event.retried_by) already record who acted; a
-- cancel recorded only why. Rows from before this migration read ''.

-- +goose Up
ALTER TABLE plan ADD COLUMN cancel_requested_by text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE plan DROP COLUMN cancel_requested_by;
