package ledger

// Every statement of the package, parameterized.

const planColumns = `id, title, source_type, source, info_hash, target_path, expected_size, expected_sha256,
	status, cancel_requested_at, cancel_reason, created_at, updated_at`

const insertPlanSQL = `
INSERT INTO plan (id, title, source_type, source, info_hash, target_path, expected_size, expected_sha256)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
RETURNING ` + planColumns

const selectPlanSQL = `SELECT ` + planColumns + ` FROM plan WHERE id = $1`

const lockPlanSQL = `SELECT ` + planColumns + ` FROM plan WHERE id = $1 FOR UPDATE`

const selectPlansByHashSQL = `SELECT ` + planColumns + ` FROM plan WHERE info_hash = $1 ORDER BY created_at, id`

const setPlanStatusSQL = `UPDATE plan SET status = $2, updated_at = now() WHERE id = $1`

// The first cancel request wins; status moves to canceling.
const requestPlanCancelSQL = `
UPDATE plan
SET cancel_requested_at = coalesce(cancel_requested_at, now()),
    cancel_reason = CASE WHEN cancel_requested_at IS NULL THEN $2 ELSE cancel_reason END,
    status = 'canceling', updated_at = now()
WHERE id = $1`

const insertApprovalSQL = `
INSERT INTO approval (id, plan_id, decision, decided_by, note) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (plan_id) DO NOTHING`

const selectApprovalSQL = `SELECT id, plan_id, decision, decided_by, note, created_at FROM approval WHERE plan_id = $1`

const downloadColumns = `id, plan_id, info_hash, tag, save_path, content_path, state, progress, completed_at,
	created_at, updated_at`

// A resubmission (retry decision) keeps the row and its completion.
const upsertDownloadSQL = `
INSERT INTO download_task (id, plan_id, info_hash, tag, save_path, state)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (plan_id) DO UPDATE
SET state = CASE WHEN download_task.state = 'completed' THEN download_task.state ELSE EXCLUDED.state END,
    save_path = EXCLUDED.save_path, updated_at = now()
RETURNING ` + downloadColumns

const selectDownloadSQL = `SELECT ` + downloadColumns + ` FROM download_task WHERE plan_id = $1`

// Only the first report counts; a later one changes nothing.
const completeDownloadSQL = `
UPDATE download_task
SET state = 'completed', progress = 1, completed_at = now(), updated_at = now(),
    content_path = CASE WHEN $2 = '' THEN content_path ELSE $2 END
WHERE plan_id = $1 AND completed_at IS NULL AND state <> 'removed'`

const setDownloadProgressSQL = `
UPDATE download_task SET progress = $2, updated_at = now() WHERE plan_id = $1 AND completed_at IS NULL`

const setDownloadStateSQL = `UPDATE download_task SET state = $2, updated_at = now() WHERE plan_id = $1`

const operationColumns = `id, plan_id, op, attempt_token, attempt_scope, attempt_epoch, attempt_started_at,
	attempts, result, result_at`

// beginOperationSQL records a new attempt unless the operation has a result
// or the recorded attempt of the same scope is newer. A different scope is a
// new run that took the operation over (a retry decision, continue-as-new on
// another engine): it is accepted, and the old run's commit is then fenced.
const beginOperationSQL = `
INSERT INTO asset_operation (id, plan_id, op, attempt_token, attempt_scope, attempt_epoch)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (plan_id, op) DO UPDATE
SET attempt_token = EXCLUDED.attempt_token, attempt_scope = EXCLUDED.attempt_scope,
    attempt_epoch = EXCLUDED.attempt_epoch, attempt_started_at = now(),
    attempts = asset_operation.attempts + 1, updated_at = now()
WHERE asset_operation.result_at IS NULL
  AND (asset_operation.attempt_scope <> EXCLUDED.attempt_scope
       OR asset_operation.attempt_epoch <= EXCLUDED.attempt_epoch)
RETURNING ` + operationColumns

const selectOperationSQL = `SELECT ` + operationColumns + ` FROM asset_operation WHERE plan_id = $1 AND op = $2`

const commitOperationSQL = `
UPDATE asset_operation SET result = $3, result_at = now(), updated_at = now()
WHERE id = $1 AND attempt_token = $2 AND result_at IS NULL`

const decisionColumns = `id, plan_id, kind, run_id, input, reason, status, resolved_by, resolved_at, created_at`

const insertDecisionSQL = `
INSERT INTO decision (id, plan_id, kind, run_id, input, reason) VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (plan_id, kind, run_id) DO NOTHING`

const selectDecisionByRunSQL = `SELECT ` + decisionColumns + ` FROM decision WHERE plan_id = $1 AND kind = $2 AND run_id = $3`

const selectDecisionSQL = `SELECT ` + decisionColumns + ` FROM decision WHERE id = $1`

const listDecisionsSQL = `
SELECT ` + decisionColumns + ` FROM decision
WHERE ($1 = '' OR status = $1)
ORDER BY created_at, id
LIMIT $2`

const resolveDecisionSQL = `
UPDATE decision SET status = $2, resolved_by = $3, resolved_at = now()
WHERE id = $1 AND status = 'open'`

// timelineSQL reads business tables only (ADR 2.7): never the engine's step
// attempts, which keep orphan rows stuck in running.
const timelineSQL = `
SELECT at, source, event, detail FROM (
    SELECT created_at AS at, 'plan' AS source, 'created' AS event, title AS detail FROM plan WHERE id = $1
    UNION ALL
    SELECT cancel_requested_at, 'plan', 'cancel requested', cancel_reason FROM plan
    WHERE id = $1 AND cancel_requested_at IS NOT NULL
    UNION ALL
    SELECT created_at, 'approval', decision, decided_by || CASE WHEN note = '' THEN '' ELSE ': ' || note END
    FROM approval WHERE plan_id = $1
    UNION ALL
    SELECT created_at, 'download', 'submitted', tag || ' ' || info_hash FROM download_task WHERE plan_id = $1
    UNION ALL
    SELECT completed_at, 'download', 'completed', content_path FROM download_task
    WHERE plan_id = $1 AND completed_at IS NOT NULL
    UNION ALL
    SELECT attempt_started_at, 'operation', op || ' attempt ' || attempts, attempt_token FROM asset_operation
    WHERE plan_id = $1
    UNION ALL
    SELECT result_at, 'operation', op || ' done', result::text FROM asset_operation
    WHERE plan_id = $1 AND result_at IS NOT NULL
    UNION ALL
    SELECT created_at, 'handoff', kind, idempotency_key FROM outbox_event WHERE business_key = $1::text
    UNION ALL
    SELECT created_at, 'decision', 'opened for ' || kind, reason FROM decision WHERE plan_id = $1
    UNION ALL
    SELECT resolved_at, 'decision', 'resolved: ' || status, resolved_by FROM decision
    WHERE plan_id = $1 AND resolved_at IS NOT NULL
) t
ORDER BY at, source, event`
