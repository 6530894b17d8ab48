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
--
-- Online (issue 26): the indexes are built CONCURRENTLY, outside a
-- transaction, so that the tables' writers go on while they build; the two
-- rebuilt outbox indexes are built beside the old ones under a new name and
-- take the old name once the old index is dropped. Run again after a
-- failure, the migration drops what a failed build left (an invalid index)
-- and builds it again.

-- +goose NO TRANSACTION
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

-- +goose StatementBegin
DO $$
DECLARE name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['taskport.run_finished', 'taskport.waiter_since', 'taskport_lease.task_signal_consumed',
        'taskport_lease.task_signal_unconsumed_age', 'public.outbox_event_dispatched', 'public.outbox_event_pending_new',
        'public.outbox_event_failed_new'] LOOP
        IF EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass(name) AND NOT indisvalid) THEN
            EXECUTE format('DROP INDEX %s', to_regclass(name));
        END IF;
    END LOOP;
END $$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS run_finished ON taskport.run (engine, status, finished_at)
    WHERE status IN ('succeeded', 'failed', 'canceled');
CREATE INDEX CONCURRENTLY IF NOT EXISTS waiter_since ON taskport.waiter (since);
CREATE INDEX CONCURRENTLY IF NOT EXISTS task_signal_consumed ON taskport_lease.task_signal (consumed_at) WHERE consumed_by IS NOT NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS task_signal_unconsumed_age ON taskport_lease.task_signal (created_at) WHERE consumed_by IS NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_event_dispatched ON outbox_event (dispatched_at) WHERE status = 'dispatched';

-- The claim's and the listing's indexes gain id: the new ones are built
-- beside the old, then take their names. Run again after the swap, it builds
-- and swaps once more, which leaves the same indexes.
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_event_pending_new ON outbox_event (next_attempt_at, id) WHERE status = 'pending';
DROP INDEX CONCURRENTLY IF EXISTS outbox_event_pending;
ALTER INDEX IF EXISTS outbox_event_pending_new RENAME TO outbox_event_pending;
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_event_failed_new ON outbox_event (created_at, id) WHERE status = 'failed';
DROP INDEX CONCURRENTLY IF EXISTS outbox_event_failed;
ALTER INDEX IF EXISTS outbox_event_failed_new RENAME TO outbox_event_failed;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS outbox_event_failed;
CREATE INDEX CONCURRENTLY outbox_event_failed ON outbox_event (created_at) WHERE status = 'failed';
DROP INDEX CONCURRENTLY IF EXISTS outbox_event_pending;
CREATE INDEX CONCURRENTLY outbox_event_pending ON outbox_event (next_attempt_at) WHERE status = 'pending';
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
