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

// RunColumns are the columns of a run as scanRun reads them, for a
// statement handed to InsertManyWith.
const RunColumns = runColumns

// InsertRunsSQL is insertRunSQL for a batch, one array per column; a NULL
// available_at is now. The ORDER BY fixes the order in which the rows take
// their unique-index entries (see InsertMany).
const InsertRunsSQL = `
INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, business_key, priority, input, available_at)
SELECT i.id, i.engine, i.kind, i.version, i.key, i.business_key, i.priority, i.input::jsonb, coalesce(i.available_at, now())
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::int[], $5::text[], $6::text[], $7::int[], $8::text[], $9::timestamptz[])
  AS i(id, engine, kind, version, key, business_key, priority, input, available_at)
ORDER BY i.kind, i.key
ON CONFLICT (kind, idempotency_key) DO NOTHING
RETURNING ` + runColumns

// selectRunsByKeysSQL finds the runs of the (kind, key) pairs $1, $2.
const selectRunsByKeysSQL = `
SELECT ` + runColumns + ` FROM taskport.run
WHERE (kind, idempotency_key) IN (SELECT * FROM unnest($1::text[], $2::text[]))`

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

// The run listing (List) is built from these fixed parts and one condition
// per filter that is set, so that each combination of filters is a statement
// of its own with a plan of its own: a filter that the statement switches
// off by a parameter's value (kind = $1 OR $1 is empty) leaves a generic
// plan no index to page with. The keyset condition is
// always there (the first page starts after an infinite cursor), so that
// every page begins with an index seek on one of run_created,
// run_status_created and run_kind_created (migration 00011).
const (
	listRunsSelect = `SELECT ` + runColumns + ` FROM taskport.run WHERE (created_at, id) < ($1, $2)`
	listRunsOrder  = ` ORDER BY created_at DESC, id DESC LIMIT `
)

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
