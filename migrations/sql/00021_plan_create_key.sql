-- A retried plan create gets its plan back (issue 25): `taskport plan
-- create --idempotency-key K` (plans.NewPlan.IdempotencyKey) records K with
-- the plan, and a create with a key already recorded returns that plan,
-- writing nothing, as Enqueue does for a run (the rest of the request is not
-- compared). Plans created without a key have NULL and are not in the
-- index.
--
-- A NULL column (catalog only) and a partial unique index built
-- CONCURRENTLY; a build that failed leaves an invalid index, which running
-- the migration again drops first.

-- +goose NO TRANSACTION
-- +goose Up
ALTER TABLE plan ADD COLUMN IF NOT EXISTS create_key text;
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass('plan_create_key') AND NOT indisvalid) THEN
        DROP INDEX plan_create_key;
    END IF;
END $$;
-- +goose StatementEnd
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS plan_create_key ON plan (create_key) WHERE create_key IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS plan_create_key;
ALTER TABLE plan DROP COLUMN IF EXISTS create_key;
