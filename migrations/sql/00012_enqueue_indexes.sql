-- Fewer index entries per run inserted (issue 14: EnqueueMany's rate). A
-- run of taskport.run wrote six: the primary key, UNIQUE(kind,
-- idempotency_key) and four for listings: run_created (every run),
-- run_status_created (one status), run_kind_created (one kind) and
-- run_kind_version_status (a kind's open runs on old versions). Index
-- inserts were a third of the server's time in a batch insert (perf).
--
-- Two listing indexes now serve every listing, in its order, from seeks:
--   - run_status_created (status, created_at, id): one status, as before;
--     every run, or several statuses, as one branch per status merged in
--     order (runstore's listQuery: UNION ALL, Merge Append);
--   - run_kind_version_status_created (kind, version, status, created_at,
--     id): one kind, as one branch per (version, status) of the kind, its
--     versions read first by a loose scan of the same index. A kind's open
--     runs on old versions are found by (kind, version, status), no longer
--     by a scan of every run of the old versions.

-- +goose Up
CREATE INDEX run_kind_version_status_created ON taskport.run (kind, version, status, created_at, id);
DROP INDEX taskport.run_kind_version_status;
DROP INDEX taskport.run_kind_created;
DROP INDEX taskport.run_created;

-- +goose Down
CREATE INDEX run_created ON taskport.run (created_at, id);
CREATE INDEX run_kind_created ON taskport.run (kind, created_at, id);
CREATE INDEX run_kind_version_status ON taskport.run (kind, version, status);
DROP INDEX taskport.run_kind_version_status_created;
