package runstore

// All statements of the package, parameterized; the column list matches scanRun.
const runColumns = `id, engine, kind, version, idempotency_key, business_key, priority, input,
	available_at, status, attempts, last_error, current_step, cancel_requested_at, cancel_reason,
	created_at, updated_at, finished_at, seq`

const insertRunSQL = `
INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, business_key, priority, input, available_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, coalesce($9::timestamptz, now()))
ON CONFLICT (kind, idempotency_key) DO NOTHING
RETURNING ` + runColumns

const selectRunByKeySQL = `SELECT ` + runColumns + ` FROM taskport.run WHERE kind = $1 AND idempotency_key = $2`

const selectRunSQL = `SELECT ` + runColumns + ` FROM taskport.run WHERE id = $1`

// A terminal run keeps its status; the first cancel request wins.
const requestCancelSQL = `
UPDATE taskport.run
SET cancel_requested_at = coalesce(cancel_requested_at, now()),
    cancel_reason = CASE WHEN cancel_requested_at IS NULL THEN $2 ELSE cancel_reason END,
    updated_at = now()
WHERE id = $1
RETURNING ` + runColumns

const projectSQL = `
UPDATE taskport.run
SET status = $2, attempts = $3, last_error = $4, current_step = $5, updated_at = now(),
    finished_at = CASE WHEN $2 IN ('succeeded', 'failed', 'canceled') THEN coalesce(finished_at, now()) END
WHERE id = $1 AND status NOT IN ('succeeded', 'failed', 'canceled')`

const listRunsSQL = `
SELECT ` + runColumns + ` FROM taskport.run
WHERE ($1 = '' OR kind = $1)
  AND ($2 = 0 OR version = $2)
  AND ($3 = 0 OR version < $3)
  AND (cardinality($4::text[]) = 0 OR status = ANY($4))
  AND ($6 = '' OR business_key = $6)
ORDER BY created_at DESC, id DESC
LIMIT $5`

const addWaiterSQL = `
INSERT INTO taskport.waiter (topic, run_id, step) VALUES ($1, $2, $3)
ON CONFLICT (topic, run_id) DO UPDATE SET step = EXCLUDED.step, since = now()`

const removeWaiterSQL = `DELETE FROM taskport.waiter WHERE topic = $1 AND run_id = $2`

const waitersSQL = `SELECT run_id FROM taskport.waiter WHERE topic = $1 ORDER BY since, run_id`

// staleTemporalSQL pages through open Temporal runs whose projection was not
// written for $1 ms, in (updated_at, id) order after the cursor ($2, $3). The
// engine and statuses are literals so that every plan, generic ones
// included, can use the partial index run_open_temporal.
const staleTemporalSQL = `
SELECT ` + runColumns + ` FROM taskport.run
WHERE engine = 'temporal' AND status IN ('pending', 'running', 'waiting')
  AND updated_at < now() - $1 * interval '1 millisecond'
  AND (updated_at, id) > ($2, $3)
ORDER BY updated_at, id
LIMIT $4`

// topicLockSQL serializes the senders and waiters of a topic (the early
// signals of the Temporal engine), so that a signal either finds the waiter
// registered or is seen by the wait. The key is the lease engine's topic
// lock's, which serializes the same thing there.
const topicLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended($1, 7454))`

const keepEarlySignalSQL = `INSERT INTO taskport.early_signal (topic, payload) VALUES ($1, $2)`

// keptSignalsSQL lists the signals kept on a topic and not taken yet.
const keptSignalsSQL = `
SELECT id, payload FROM taskport.early_signal WHERE topic = $1 AND consumed_by IS NULL ORDER BY id`

const takeKeptSignalSQL = `
UPDATE taskport.early_signal SET consumed_by = $2, consumed_step = $3, consumed_at = now()
WHERE id = $1 AND consumed_by IS NULL`
