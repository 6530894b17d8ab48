package outbox

// Every statement of the package, parameterized.

const insertEventSQL = `
INSERT INTO outbox_event (id, action, kind, topic, idempotency_key, business_key, payload, available_at, min_version,
    traceparent, tracestate)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (kind, idempotency_key) DO NOTHING`

// claimSQL takes due rows that no other dispatcher holds and pushes their
// next_attempt_at past the claim lease, so a dispatcher that dies mid-batch
// only delays its rows; the row lock lasts only for this statement. The
// claim is (attempts, next_attempt_at) as it returns them: the writes that
// reschedule the row (releaseSQL, markRetrySQL) match it, so a dispatcher
// whose lease ended while its engine call ran leaves the next claim alone. The
// ids are an array, not an IN (subquery): a generic plan does not know $1,
// and after ANALYZE it joined an IN to a sequential scan of the whole
// table (TestPlansStayIndexedAtAMillionRows, pgtest.ExplainGeneric); an
// array is looked up in the primary key in either plan.
const claimSQL = `
UPDATE outbox_event
SET attempts = attempts + 1, next_attempt_at = now() + make_interval(secs => $2)
WHERE id = ANY(ARRAY(
    SELECT id FROM outbox_event
    WHERE status = 'pending' AND next_attempt_at <= now()
    ORDER BY next_attempt_at, id
    FOR UPDATE SKIP LOCKED
    LIMIT $1))
RETURNING id, action, kind, topic, idempotency_key, business_key, payload, available_at, min_version, attempts,
    next_attempt_at, traceparent, tracestate`

const markDispatchedSQL = `
UPDATE outbox_event SET status = 'dispatched', run_id = $2, dispatched_at = now(), last_error = ''
WHERE id = $1 AND status = 'pending'`

// markRetrySQL backs off a row whose action failed, while the claim
// ($4 attempts, $5 its lease end) is still the row's.
const markRetrySQL = `
UPDATE outbox_event SET next_attempt_at = now() + make_interval(secs => $2), last_error = $3
WHERE id = $1 AND status = 'pending' AND attempts = $4 AND next_attempt_at = $5`

// releaseSQL hands back a claimed row that was not carried out (Stop): due
// at once, and its claim not counted as an attempt; only while the claim
// ($2 attempts, $3 its lease end) is still the row's.
const releaseSQL = `
UPDATE outbox_event SET attempts = attempts - 1, next_attempt_at = now()
WHERE id = $1 AND status = 'pending' AND attempts = $2 AND next_attempt_at = $3`

const markFailedSQL = `
UPDATE outbox_event SET status = 'failed', last_error = $2 WHERE id = $1 AND status = 'pending'`

const listenSQL = `LISTEN outbox_event`

const failedColumns = `id, action, kind, topic, idempotency_key, business_key, attempts, last_error, created_at,
	retried_by, retried_at`

const listFailedSQL = `SELECT ` + failedColumns + ` FROM outbox_event WHERE status = 'failed'
ORDER BY created_at, id LIMIT $1`

const countFailedSQL = `SELECT count(*) FROM outbox_event WHERE status = 'failed'`

// retrySQL hands a failed row back to the dispatchers as if new, and
// records who did it; the last error stays visible until the next attempt.
const retrySQL = `
UPDATE outbox_event
SET status = 'pending', attempts = 0, next_attempt_at = now(), retried_by = $2, retried_at = now()
WHERE id = $1 AND status = 'failed'`

// notifySQL wakes the dispatchers after a retry (the insert trigger only
// fires on inserts).
const notifySQL = `SELECT pg_notify('outbox_event', '')`

// timelineSQL reads the outbox's part of a plan's business timeline
// (ADR 2.7), in the column order of timeline.Entry: each hand-off the
// plan's transactions wrote, keyed by its business key, and who retried a
// failed one.
const timelineSQL = `
SELECT at, source, event, detail, run_id FROM (
    SELECT created_at AS at, 'handoff' AS source,
           CASE action WHEN 'enqueue' THEN kind WHEN 'signal' THEN 'signal ' || topic ELSE 'cancel runs' END AS event,
           idempotency_key AS detail, coalesce(run_id::text, '') AS run_id
    FROM outbox_event WHERE business_key = $1
    UNION ALL
    SELECT retried_at, 'handoff', 'retried by ' || retried_by, idempotency_key, ''
    FROM outbox_event WHERE business_key = $1 AND retried_at IS NOT NULL
) t
ORDER BY at, source, event`

// pruneSQL deletes up to $2 rows dispatched more than $1 ms ago (package
// retention), oldest first, through outbox_event_dispatched. Pending and
// failed rows are never selected. It runs after dbtx.PinIndexScansSQL:
// unpinned, a planner without statistics reads every old row and sorts them
// for the LIMIT.
const pruneSQL = `
WITH o AS (
  SELECT id FROM outbox_event
  WHERE status = 'dispatched' AND dispatched_at < now() - $1 * interval '1 millisecond'
  ORDER BY dispatched_at LIMIT $2 FOR UPDATE SKIP LOCKED
)
DELETE FROM outbox_event WHERE id IN (SELECT id FROM o)`

// pruneLagSQL is pruneSQL's lag in ms, 0 when nothing is prunable.
const pruneLagSQL = `
SELECT coalesce((SELECT extract(epoch FROM now() - min(dispatched_at)) * 1000 - $1 FROM outbox_event
  WHERE status = 'dispatched' AND dispatched_at < now() - $1 * interval '1 millisecond'), 0)::bigint`
