-- A Temporal run's wait that times out as a signal reaches it must still
-- return received, as the lease engine's does: Signal counted the run as
-- parked and told its caller so. Signal now locks the parked waiters' rows
-- while it sends, and records on each row it reached the registration it
-- reached (signaled_wait = since, the wait's own timestamp); the wait, on
-- marking itself returned, waits for that lock and reads whether its own
-- registration was signaled. A later registration of the run on the topic
-- moves since, so a mark left from an earlier wait (or written by none, as
-- by a worker of an earlier release) reads false. NULL: not signaled.
--
-- A NULL column without a default: catalog only, the lock is held for
-- milliseconds.

-- +goose Up
ALTER TABLE taskport.waiter ADD COLUMN signaled_wait timestamptz;

-- +goose Down
ALTER TABLE taskport.waiter DROP COLUMN signaled_wait;
