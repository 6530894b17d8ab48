package acquisition

// Every statement of the package, parameterized. The status sets come from
// the transition table as text[] arguments, never spliced into the text.

// moveSQL is the guarded transition: 0 rows means the plan is unknown or not
// in a status the transition allows.
const moveSQL = `
UPDATE plan SET status = $3, updated_at = now()
WHERE id = $1 AND status = ANY($2)`

const statusSQL = `SELECT status FROM plan WHERE id = $1`

// lockSQL locks the plan row until the transaction ends, so that a hand-off
// and a concurrent cancel request are serialized.
const lockSQL = `SELECT cancel_requested_at IS NOT NULL FROM plan WHERE id = $1 FOR UPDATE`

// requestCancelSQL sets the cancel flag and moves to canceling in one
// guarded update; the first request's time and reason stand.
const requestCancelSQL = `
UPDATE plan
SET cancel_requested_at = coalesce(cancel_requested_at, now()),
    cancel_reason = CASE WHEN cancel_requested_at IS NULL THEN $3 ELSE cancel_reason END,
    status = 'canceling', updated_at = now()
WHERE id = $1 AND status = ANY($2)`

// holderSQL finds a plan that holds the target path ($1, while in one of
// $2) or the info hash ($3, while in one of $4).
const holderSQL = `
SELECT id, status, target_path = $1 AND status = ANY($2) FROM plan
WHERE (target_path = $1 AND status = ANY($2)) OR (info_hash = $3 AND status = ANY($4))
ORDER BY created_at, id
LIMIT 1`
