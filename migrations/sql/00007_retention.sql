-- Retention (issue 14): the indexes the cleaner's deletes read, so that each
-- batch costs its LIMIT, not the size of the table (package retention).
--
-- run_finished: terminal runs by engine and status, oldest finish first. The
-- cleaner deletes a status's runs older than that status's age; the
-- predicate is the cleaner's own guard (its statements repeat it), so the
-- index holds no open run and an open run can never be selected.
--
-- waiter_since: waiters oldest first; the cleaner drops those whose run is
-- terminal (a Temporal run terminated or reset while waiting leaves its row).
--
-- task_signal_consumed / task_signal_unconsumed: consumed signals by
-- consume time, and signals still unconsumed (nobody waited, or their target
-- ended) by creation time.
--
-- outbox_event_dispatched: dispatched rows by dispatch time. Failed rows are
-- dead letters waiting for an operator and are never pruned.
--
-- The admin listings (dead letters, plans) are served by the indexes of
-- migrations 00008 (plan_newest) and 00011 (run_status_created).
--
-- The statement triggers of migration 00004 that cascade a run's deletion to
-- its task row and a task's to its step results joined the deleted rows to
-- the whole table: for a batch of 3,000 runs the planner hashed every task
-- row (a sequential scan per batch). They now look the rows up by key
-- (= ANY of an array), which can only be an index read.
--
-- The outbox claim and the failed-row listing order by (time, id); their
-- indexes had the time only, so each read ended in a sort of the rows of
-- equal time. They are rebuilt with id as their last column.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION taskport_lease.forget_deleted_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM taskport_lease.task WHERE id = ANY (ARRAY(SELECT id FROM gone));
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION taskport_lease.forget_deleted_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM taskport_lease.step_result WHERE task_id = ANY (ARRAY(SELECT id FROM gone));
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- taskport:heavy-lock: early migration, the table held no data when it shipped; on a loaded table the build blocks its writes
CREATE INDEX run_finished ON taskport.run (engine, status, finished_at)
    WHERE status IN ('succeeded', 'failed', 'canceled');
-- taskport:heavy-lock: early migration, the table held no data when it shipped; on a loaded table the build blocks its writes
CREATE INDEX waiter_since ON taskport.waiter (since);
-- taskport:heavy-lock: early migration, the table held no data when it shipped; on a loaded table the build blocks its writes
CREATE INDEX task_signal_consumed ON taskport_lease.task_signal (consumed_at) WHERE consumed_by IS NOT NULL;
-- taskport:heavy-lock: early migration, the table held no data when it shipped; on a loaded table the build blocks its writes
CREATE INDEX task_signal_unconsumed_age ON taskport_lease.task_signal (created_at) WHERE consumed_by IS NULL;
-- taskport:heavy-lock: early migration, the table held no data when it shipped; on a loaded table the build blocks its writes
CREATE INDEX outbox_event_dispatched ON outbox_event (dispatched_at) WHERE status = 'dispatched';
DROP INDEX outbox_event_pending;
-- taskport:heavy-lock: early migration, the table held no data when it shipped; on a loaded table the build blocks its writes
CREATE INDEX outbox_event_pending ON outbox_event (next_attempt_at, id) WHERE status = 'pending';
DROP INDEX outbox_event_failed;
-- taskport:heavy-lock: early migration, the table held no data when it shipped; on a loaded table the build blocks its writes
CREATE INDEX outbox_event_failed ON outbox_event (created_at, id) WHERE status = 'failed';

-- +goose Down
DROP INDEX outbox_event_failed;
CREATE INDEX outbox_event_failed ON outbox_event (created_at) WHERE status = 'failed';
DROP INDEX outbox_event_pending;
CREATE INDEX outbox_event_pending ON outbox_event (next_attempt_at) WHERE status = 'pending';
DROP INDEX outbox_event_dispatched;
DROP INDEX taskport_lease.task_signal_unconsumed_age;
DROP INDEX taskport_lease.task_signal_consumed;
DROP INDEX taskport.waiter_since;
DROP INDEX taskport.run_finished;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION taskport_lease.forget_deleted_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM taskport_lease.task t USING gone g WHERE t.id = g.id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION taskport_lease.forget_deleted_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM taskport_lease.step_result s USING gone g WHERE s.task_id = g.id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
