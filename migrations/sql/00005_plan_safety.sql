-- Plan safety (issue 10).
--
-- plan: no two plans may write one library file, and no two active plans
-- may drive one torrent. The partial unique indexes back the check in Go
-- (acquisition), so two concurrent creates cannot both pass it; their names
-- are what acquisition maps a unique violation back from. The status lists
-- are the lifecycle's (acquisition/lifecycle.go): a plan holds its target
-- until it ends without a file (rejected, canceled, abandoned), and its info
-- hash until it ends at all.
--
-- asset_operation.detail: what an attempt recorded, fenced by its token,
-- before acting (the import records whether it creates the target file or
-- adopts an identical one that was already there), so that compensation
-- removes only a file its plan created.
--
-- outbox_event: after-commit actions ride the outbox like enqueues (ADR
-- 2.1): a signal to a topic, or the cancel of a plan's open runs. min_version
-- is the lowest version of the kind that understands the row's input, so a
-- process that only has older versions leaves the row for another one
-- instead of failing it. Failed rows are retried by an operator, who is
-- recorded.

-- +goose Up
-- taskport:heavy-lock: early migration, plan held no data when it shipped; on a loaded table the build blocks plan writes
CREATE UNIQUE INDEX plan_target_path_held ON plan (target_path)
    WHERE status NOT IN ('rejected', 'canceled', 'abandoned');
-- taskport:heavy-lock: early migration, plan held no data when it shipped; on a loaded table the build blocks plan writes
CREATE UNIQUE INDEX plan_info_hash_active ON plan (info_hash)
    WHERE status NOT IN ('rejected', 'completed', 'canceled', 'abandoned');

ALTER TABLE asset_operation ADD COLUMN detail jsonb;

-- taskport:heavy-lock: early migration, outbox_event held no data when it shipped; on a loaded table the inline and table CHECKs scan every row under ACCESS EXCLUSIVE
ALTER TABLE outbox_event
    ADD COLUMN action      text        NOT NULL DEFAULT 'enqueue'
        CHECK (action IN ('enqueue', 'signal', 'cancel_plan_runs')),
    ADD COLUMN topic       text        NOT NULL DEFAULT '',
    ADD COLUMN min_version int         NOT NULL DEFAULT 1 CHECK (min_version >= 1),
    ADD COLUMN retried_by  text        NOT NULL DEFAULT '',
    ADD COLUMN retried_at  timestamptz,
    ADD CONSTRAINT outbox_event_action_fields CHECK (
        (action = 'enqueue') = (kind <> '') AND (action = 'signal') = (topic <> ''));
-- taskport:heavy-lock: early migration, outbox_event held no data when it shipped; on a loaded table the build blocks outbox writes
CREATE INDEX outbox_event_failed ON outbox_event (created_at) WHERE status = 'failed';

-- +goose Down
DROP INDEX outbox_event_failed;
-- The code before this migration would enqueue a signal or cancel row as a
-- kind named ''; they are after-commit hints of the past, dropped.
DELETE FROM outbox_event WHERE action <> 'enqueue';
ALTER TABLE outbox_event
    DROP CONSTRAINT outbox_event_action_fields,
    DROP COLUMN retried_at, DROP COLUMN retried_by, DROP COLUMN min_version,
    DROP COLUMN topic, DROP COLUMN action;
ALTER TABLE asset_operation DROP COLUMN detail;
DROP INDEX plan_info_hash_active;
DROP INDEX plan_target_path_held;
