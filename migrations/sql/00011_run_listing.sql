-- Keyset paging of the run listing (issue 11): port.Admin.ListRuns, the
-- `taskport runs list` command and the admin's dead letters page through
-- taskport.run newest first, by (created_at, id), after a cursor. Each index
-- below yields one listing in that order from a seek, so a page costs its
-- size, not the number of runs before it:
--   - run_created: every run (no kind or status filter);
--   - run_status_created: one status, e.g. the dead letters (failed);
--   - run_kind_created: one kind, with or without a version.
-- A business key's runs are few; run_business_key finds them.
--
-- Cost: three more index entries per run inserted, and per status change
-- (already not a HOT update: run_kind_version_status indexes status).

-- +goose Up
-- taskport:heavy-lock: early migration, taskport.run held no data when it shipped; on a loaded table the build blocks run writes
CREATE INDEX run_created ON taskport.run (created_at, id);
-- taskport:heavy-lock: early migration, taskport.run held no data when it shipped; on a loaded table the build blocks run writes
CREATE INDEX run_status_created ON taskport.run (status, created_at, id);
-- taskport:heavy-lock: early migration, taskport.run held no data when it shipped; on a loaded table the build blocks run writes
CREATE INDEX run_kind_created ON taskport.run (kind, created_at, id);

-- +goose Down
DROP INDEX taskport.run_kind_created;
DROP INDEX taskport.run_status_created;
DROP INDEX taskport.run_created;
