-- A Temporal run's wait that times out as a signal reaches it must still
-- return received, as the lease engine's does: Signal counted the run as
-- parked and told its caller so. Signal now records on each parked
-- waiter's row, in the transaction that reads it and before it sends, the
-- registration it counted (signaled_wait = since, the wait's own
-- timestamp); the wait, on marking itself returned, reads whether its own
-- registration was counted, and then waits for that signal. A later
-- registration of the run on the topic moves since, so a mark left from an
-- earlier wait (or written by none, as by a worker of an earlier release)
-- reads false. NULL: not counted.
--
-- A NULL column without a default: catalog only, the lock is held for
-- milliseconds.

-- +goose Up
ALTER TABLE taskport.waiter ADD COLUMN signaled_wait timestamptz;

-- +goose Down
ALTER TABLE taskport.waiter DROP COLUMN signaled_wait;
