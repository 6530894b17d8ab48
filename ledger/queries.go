package ledger

// Every statement of the package, hand-written on purpose: the fence is in
// their predicates (Begin's ON CONFLICT rule, the commit's and the note's
// attempt_token match), and a builder would hide it in method chains.

const operationColumns = `id, plan_id, op, attempt_token, attempt_scope, attempt_epoch, attempt_generation,
	retired_scopes, attempt_started_at, attempts, result, result_at`

// beginOperationSQL records a new attempt unless the operation has a result
// or the recorded attempt is newer (see Begin for the order): a higher
// generation always takes over and starts a fresh list of retired scopes; in
// the same generation, the same scope needs an epoch no lower than the
// recorded one, and a different scope takes over only if it was never
// retired, retiring the scope it replaces.
const beginOperationSQL = `
INSERT INTO asset_operation (id, plan_id, op, attempt_token, attempt_scope, attempt_epoch, attempt_generation)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (plan_id, op) DO UPDATE
SET attempt_token = EXCLUDED.attempt_token, attempt_scope = EXCLUDED.attempt_scope,
    attempt_epoch = EXCLUDED.attempt_epoch, attempt_generation = EXCLUDED.attempt_generation,
    retired_scopes = CASE
        WHEN asset_operation.attempt_generation < EXCLUDED.attempt_generation THEN '{}'
        WHEN asset_operation.attempt_scope <> EXCLUDED.attempt_scope
            THEN asset_operation.retired_scopes || asset_operation.attempt_scope
        ELSE asset_operation.retired_scopes END,
    attempt_started_at = now(), attempts = asset_operation.attempts + 1, updated_at = now()
WHERE asset_operation.result_at IS NULL
  AND (asset_operation.attempt_generation < EXCLUDED.attempt_generation
       OR (asset_operation.attempt_generation = EXCLUDED.attempt_generation
           AND CASE WHEN asset_operation.attempt_scope = EXCLUDED.attempt_scope
                    THEN asset_operation.attempt_epoch <= EXCLUDED.attempt_epoch
                    ELSE EXCLUDED.attempt_scope <> ALL (asset_operation.retired_scopes) END))
RETURNING ` + operationColumns

const selectOperationSQL = `SELECT ` + operationColumns + ` FROM asset_operation WHERE plan_id = $1 AND op = $2`

// commitOperationSQL is the fence of ADR 2.3, kept in the exact form the
// migration documents: it matches only while the attempt that began is still
// the recorded one, and 0 rows means fenced.
const commitOperationSQL = `
UPDATE asset_operation SET result = $3, result_at = now(), updated_at = now()
WHERE id = $1 AND attempt_token = $2 AND result_at IS NULL`

// noteOperationSQL is fenced like the commit: the detail is written only
// while the attempt that noted it is the recorded one and has no result.
const noteOperationSQL = `
UPDATE asset_operation SET detail = $3, updated_at = now()
WHERE id = $1 AND attempt_token = $2 AND result_at IS NULL`

const selectNoteSQL = `SELECT detail FROM asset_operation WHERE plan_id = $1 AND op = $2`

// timelineSQL reads the ledger's part of a plan's business timeline
// (ADR 2.7), in the column order of timeline.Entry: each attempt's start,
// and the result once committed (never the engine's step attempts, which
// keep orphan rows stuck in running). The run of an attempt is read from its
// fencing scope (port.FencingToken): "<run>/<step>" on the lease engine,
// "taskport/<run>/<temporal run>/<activity>" on Temporal (whose workflow ID
// is "taskport/<run>").
const timelineSQL = `
SELECT at, source, event, detail, run_id FROM (
    SELECT attempt_started_at AS at, 'operation' AS source, op || ' attempt ' || attempts AS event,
           attempt_token AS detail, ` + scopeRunSQL + ` AS run_id
    FROM asset_operation WHERE plan_id = $1
    UNION ALL
    SELECT result_at, 'operation', op || ' done', result::text, ` + scopeRunSQL + ` FROM asset_operation
    WHERE plan_id = $1 AND result_at IS NOT NULL
) t
ORDER BY at, source, event`

// scopeRunSQL is the run id in an attempt's fencing scope.
const scopeRunSQL = `CASE WHEN attempt_scope LIKE 'taskport/%' THEN split_part(attempt_scope, '/', 2)
    ELSE split_part(attempt_scope, '/', 1) END`
