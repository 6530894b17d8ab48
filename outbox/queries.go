package outbox

// Every statement of the package, parameterized.

const insertEventSQL = `
INSERT INTO outbox_event (id, kind, idempotency_key, business_key, payload, available_at)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (kind, idempotency_key) DO NOTHING`

// claimSQL takes due rows that no other dispatcher holds and pushes their
// next_attempt_at past the claim lease, so a dispatcher that dies mid-batch
// only delays its rows; the row lock lasts only for this statement.
const claimSQL = `
UPDATE outbox_event
SET attempts = attempts + 1, next_attempt_at = now() + make_interval(secs => $2)
WHERE id IN (
    SELECT id FROM outbox_event
    WHERE status = 'pending' AND next_attempt_at <= now()
    ORDER BY next_attempt_at, id
    FOR UPDATE SKIP LOCKED
    LIMIT $1)
RETURNING id, kind, idempotency_key, business_key, payload, available_at, attempts`

const markDispatchedSQL = `
UPDATE outbox_event SET status = 'dispatched', run_id = $2, dispatched_at = now(), last_error = ''
WHERE id = $1 AND status = 'pending'`

const markRetrySQL = `
UPDATE outbox_event SET next_attempt_at = now() + make_interval(secs => $2), last_error = $3
WHERE id = $1 AND status = 'pending'`

const markFailedSQL = `
UPDATE outbox_event SET status = 'failed', last_error = $2 WHERE id = $1 AND status = 'pending'`

const listenSQL = `LISTEN outbox_event`
