-- Schema "one row": the lease state of a run kept in taskport.run, beside
-- its projection, instead of in a task row of its own. Applied on top of
-- taskport's migrations; a diagnostic, not a migration taskport ships.
-- run_ready is the claim source (task_ready's twin). No column that a claim
-- or a heart beat changes is indexed, so that those updates can be HOT.
ALTER TABLE taskport.run
    ADD COLUMN next_run_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN claims int NOT NULL DEFAULT 0,
    ADD COLUMN lease_owner text,
    ADD COLUMN lease_until timestamptz,
    ADD COLUMN lease_token uuid,
    ADD COLUMN max_attempts int NOT NULL DEFAULT 1,
    ADD COLUMN backoff_initial interval NOT NULL DEFAULT '0',
    ADD COLUMN backoff_max interval NOT NULL DEFAULT '0',
    ADD COLUMN backoff_coefficient float8 NOT NULL DEFAULT 1,
    ADD COLUMN step_attempts int NOT NULL DEFAULT 0,
    ADD COLUMN wait_topic text,
    ADD COLUMN wait_until timestamptz,
    ADD COLUMN progress jsonb,
    ADD COLUMN dead_letter_at timestamptz,
    ADD COLUMN traceparent text NOT NULL DEFAULT '',
    ADD COLUMN tracestate text NOT NULL DEFAULT '';
CREATE INDEX run_ready ON taskport.run (priority, next_run_at) WHERE engine = 'lease' AND status IN ('pending', 'waiting');
