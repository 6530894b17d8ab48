-- Retention of the Temporal engine's early signals (migration 00009): the
-- cleaner (package retention, runstore.Pruner) deletes the signals a wait
-- took longer ago than the age, and those no wait came to take within the
-- age (expired), oldest first. Without an index on either time each batch
-- read the whole table; early_signal_open orders by topic.
--
-- early_signal_consumed: taken signals by take time.
-- early_signal_unconsumed_age: signals not taken, by creation time.

-- +goose Up
-- taskport:heavy-lock: early migration, taskport.early_signal held no data when it shipped; on a loaded table the build blocks its writes
CREATE INDEX early_signal_consumed ON taskport.early_signal (consumed_at) WHERE consumed_by IS NOT NULL;
-- taskport:heavy-lock: early migration, taskport.early_signal held no data when it shipped; on a loaded table the build blocks its writes
CREATE INDEX early_signal_unconsumed_age ON taskport.early_signal (created_at) WHERE consumed_by IS NULL;

-- +goose Down
DROP INDEX taskport.early_signal_unconsumed_age;
DROP INDEX taskport.early_signal_consumed;
