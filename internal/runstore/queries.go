package runstore

// All statements of the package, parameterized; the column list matches scanRun.
const runColumns = `id, engine, kind, version, idempotency_key, business_key, priority, input,
	available_at, status, attempts, last_error, current_step, cancel_requested_at, cancel_reason,
	created_at, updated_at, finished_at, seq, output, evacuated_to`

const insertRunSQL = `
INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, business_key, priority, input, available_at,
  start_wanted_at, traceparent, tracestate)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, coalesce($9::timestamptz, now()), CASE WHEN $10::boolean THEN now() END, $11, $12)
ON CONFLICT (kind, idempotency_key) DO NOTHING
RETURNING ` + runColumns

// startWantedSQL takes up to $1 runs whose workflow EnqueueTx left to
// start (migration 00020), oldest first, locked so that two starters
// share them out; startDoneSQL clears the mark of the ones started.
const startWantedSQL = `SELECT ` + runColumns + `, traceparent, tracestate FROM taskport.run
WHERE start_wanted_at IS NOT NULL ORDER BY start_wanted_at LIMIT $1 FOR UPDATE SKIP LOCKED`

const startDoneSQL = `UPDATE taskport.run SET start_wanted_at = NULL WHERE id = ANY($1::uuid[])`

// BatchInsert is a batch insert of runs in its two forms, which differ
// only in what a key already taken does: Fresh fails (unique_violation on
// runKeyConstraint) and writes nothing, Idempotent skips that run (ON
// CONFLICT DO NOTHING). See insertBatch for why there are two.
type BatchInsert struct {
	Fresh, Idempotent string
}

// InsertRunsWith builds the batch insert of runs: insertRunSQL for a batch,
// one array per column ($1-$9), a NULL available_at being now. An engine
// that keeps state of its own in the run row sets it in the same insert:
// cols is appended to the column list (", next_run_at, ..."), exprs to the
// select list, reading the batch as i and anything that from joins to it.
// The insert ends in RETURNING; embed completes it into the statement that
// runs it (naming the columns it returns, or wrapping it in a
// data-modifying WITH query). The ORDER BY fixes the order in which the
// rows take their unique-index entries (see InsertMany), the order of
// that index: the key columns compare byte by byte (migration 00015).
func InsertRunsWith(cols, exprs, from string, embed func(insert string) string) BatchInsert {
	insert := func(onConflict string) string {
		return embed(`
INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, business_key, priority, input, available_at` + cols + `)
SELECT i.id, i.engine, i.kind, i.version, i.key, i.business_key, i.priority, i.input::jsonb, coalesce(i.available_at, now())` + exprs + `
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::int[], $5::text[], $6::text[], $7::int[], $8::text[], $9::timestamptz[])
  AS i(id, engine, kind, version, key, business_key, priority, input, available_at)` + from + `
ORDER BY i.kind COLLATE "C", i.key COLLATE "C"` + onConflict + `
RETURNING `)
	}
	return BatchInsert{Fresh: insert(""), Idempotent: insert(`
ON CONFLICT (kind, idempotency_key) DO NOTHING`)}
}

// insertRunsSQL is InsertMany's statement: the batch insert with the run
// store's columns, returning the inserted runs whole.
var insertRunsSQL = InsertRunsWith("", "", "", func(insert string) string { return insert + runColumns })

// selectRunsByKeysSQL finds the runs of the (kind, key) pairs $1, $2.
const selectRunsByKeysSQL = `
SELECT ` + runColumns + ` FROM taskport.run
WHERE (kind, idempotency_key) IN (SELECT * FROM unnest($1::text[], $2::text[]))`

const selectRunByKeySQL = `SELECT ` + runColumns + ` FROM taskport.run WHERE kind = $1 AND idempotency_key = $2`

const selectRunSQL = `SELECT ` + runColumns + ` FROM taskport.run WHERE id = $1`

// requestCancelSQL flags run $1 of engine $3 with the reason $2, unless it
// belongs to another engine or is finished: then it writes nothing. The
// first cancel request wins. It returns whether it wrote, and the run's
// engine; no row: no such run. The UPDATE checks owner and state on the
// row's latest version as it writes, so nothing can change in between; when
// it wrote nothing, the row read instead is the statement's snapshot, whose
// engine is exact (it never changes) but whose status may still read open
// for a run that finished meanwhile, which is why the status is not returned.
const requestCancelSQL = `
WITH u AS (
  UPDATE taskport.run
  SET cancel_requested_at = coalesce(cancel_requested_at, now()),
      cancel_reason = CASE WHEN cancel_requested_at IS NULL THEN $2 ELSE cancel_reason END,
      updated_at = now()
  WHERE id = $1 AND engine = $3 AND status NOT IN ('succeeded', 'failed', 'canceled')
  RETURNING engine
)
SELECT true, engine FROM u
UNION ALL
SELECT false, engine FROM taskport.run WHERE id = $1 AND NOT EXISTS (SELECT FROM u)`

// endCanceledIfIdleSQL is EndCanceledIfIdle: attempts and current_step
// stay what they were, as the lease engine's cancel of a pending or
// waiting run leaves them, unless the caller names the step the run was
// last in ($3, with its attempts $4; an empty $3 keeps them).
const endCanceledIfIdleSQL = `
WITH t AS (
  UPDATE taskport.run
  SET status = 'canceled', finished_at = now(), last_error = '', updated_at = now(),
      current_step = CASE WHEN $3 <> '' THEN $3 ELSE current_step END,
      attempts = CASE WHEN $3 <> '' THEN $4 ELSE attempts END
  WHERE id = $1 AND engine = 'temporal' AND cancel_requested_at IS NOT NULL
    AND (status IN ('pending', 'waiting') OR ($2 AND status = 'running'))
  RETURNING id
), w AS (
  DELETE FROM taskport.waiter WHERE run_id IN (SELECT id FROM t)
)
SELECT EXISTS (SELECT FROM t)`

// CancelRequestedSQL reads a run's cancel flag (CancelRequested); the
// lease engine sends it in its group commits.
const CancelRequestedSQL = `SELECT cancel_requested_at IS NOT NULL FROM taskport.run WHERE id = $1`

// canceledAmongSQL reads which of some runs have their cancel flag set
// (CanceledAmong).
const canceledAmongSQL = `SELECT id FROM taskport.run WHERE id = ANY($1::uuid[]) AND cancel_requested_at IS NOT NULL`

// startStepSQL is CancelRequestedSQL and, unless the cancel was requested
// or the run ended, the projection of its step as running, in one
// statement (StartStep). The read and the update's own recheck of the flag
// see the same commits but one: a cancel committed between the statement's
// snapshot and the update's row lock is missed by the read (the body
// starts, as it would had the read come first) and stops the projection.
const startStepSQL = `
WITH r AS (SELECT cancel_requested_at IS NOT NULL AS canceled FROM taskport.run WHERE id = $1),
u AS (
  UPDATE taskport.run
  SET status = 'running', attempts = $2, last_error = '', current_step = $3, updated_at = now()
  WHERE id = $1 AND cancel_requested_at IS NULL AND status NOT IN ('succeeded', 'failed', 'canceled')
)
SELECT canceled FROM r`

// projectSQL records an engine's projection of a run (Project); a terminal
// row is never written again. With $6 (EndLazily) a run whose cancel was requested ends canceled, with
// no last error, whatever terminal status $2 says.
const projectSQL = `
UPDATE taskport.run
SET status = CASE WHEN $6 AND cancel_requested_at IS NOT NULL THEN 'canceled' ELSE $2 END,
    attempts = $3,
    last_error = CASE WHEN $6 AND cancel_requested_at IS NOT NULL THEN '' ELSE $4 END,
    current_step = $5, updated_at = now(),
    finished_at = CASE WHEN $2 IN ('succeeded', 'failed', 'canceled') THEN coalesce(finished_at, now()) END,
    output = CASE WHEN $2 = 'succeeded' AND NOT ($6 AND cancel_requested_at IS NOT NULL) THEN $7::jsonb END
WHERE id = $1 AND status NOT IN ('succeeded', 'failed', 'canceled')
RETURNING status`

// The run listing (List) is built from these fixed parts and one condition
// per filter that is set, so that each combination of filters is a statement
// of its own with a plan of its own: a filter that the statement switches
// off by a parameter's value (kind = $1 OR $1 is empty) leaves a generic
// plan no index to page with. The keyset condition is always there (the
// first page starts after an infinite cursor), so that every branch of a
// listing begins with an index seek on run_status_created or
// run_kind_version_status_created (migration 00012; see listQuery).
//
// The engine condition filters the rows those seeks yield (see List). It
// reads "not owned by any of the other engines" ($3, Engine.others), not
// "engine = this one": the same rows, since run_row_check admits only the
// engines this package knows, but the planner's estimates differ. It
// prices an equality on a column it has no statistics for (a table never
// analyzed) at 0.5% of the rows, and then sorts all the runs of a status
// rather than walk them in order to the LIMIT; an inequality it prices at
// 99.5%, the truth in a database that serves one engine. Neither form
// matches run_finished (engine, status, ...) or a partial index on engine,
// which would yield the runs out of the listing's order.
const (
	listRunsSelect = `SELECT ` + runColumns + ` FROM taskport.run WHERE (created_at, id) < ($1, $2) AND engine <> ALL($3::text[])`
	listRunsOrder  = ` ORDER BY created_at DESC, id DESC LIMIT `
)

// kindVersionsSQL lists the versions of kind $1 below $2 that have runs,
// ascending: a loose scan of run_kind_version_status_created, one seek per
// version however many runs each has.
const kindVersionsSQL = `
WITH RECURSIVE v AS (
  SELECT min(version) AS version FROM taskport.run WHERE kind = $1
  UNION ALL
  SELECT (SELECT min(r.version) FROM taskport.run r WHERE r.kind = $1 AND r.version > v.version)
  FROM v WHERE v.version < $2
)
SELECT version FROM v WHERE version < $2`

const addWaiterSQL = `
INSERT INTO taskport.waiter (topic, run_id, step) VALUES ($1, $2, $3)
ON CONFLICT (topic, run_id) DO UPDATE SET step = EXCLUDED.step, since = now()`

const removeWaiterSQL = `DELETE FROM taskport.waiter WHERE topic = $1 AND run_id = $2`

// countParkedSQL records on each registration of the Temporal engine's runs
// parked in a wait on topic $1 (step "" is registered but past its wait:
// waitReturnedSQL) that a signal counted the wait it is in (signaled_wait
// becomes that wait's since), and returns the runs, oldest wait first. Both
// engines register in taskport.waiter, and a signal must not reach for the
// other engine's runs: the Temporal engine would call a server that, after
// a switch away from it, may be gone. A wait marking itself returned
// meanwhile waits for the row and then reads the record.
const countParkedSQL = `
WITH c AS (
  UPDATE taskport.waiter w SET signaled_wait = w.since
  FROM taskport.run r
  WHERE w.topic = $1 AND w.step <> '' AND r.id = w.run_id AND r.engine = 'temporal'
  RETURNING w.run_id, w.since
)
SELECT run_id FROM c ORDER BY since, run_id`

// waitReturnedSQL marks the registration past its wait and reports whether
// a Signal counted this wait (signaled_wait is this registration's since).
const waitReturnedSQL = `
UPDATE taskport.waiter SET step = '' WHERE topic = $1 AND run_id = $2
RETURNING signaled_wait IS NOT DISTINCT FROM since`

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

// PrunableRunsCTE is the head of a retention delete: CTEs p1, p2, p3 lock up
// to $5 runs each of engine $1 that succeeded, were canceled and failed more
// than $2, $3 and $4 ms ago (NULL: keep them), oldest first, skipping rows
// another transaction holds, and CTE r is their ids. Each status is a
// literal next to the index's own predicate, so that every plan, generic ones
// included, reads run_finished in finished_at order and no open run can be
// selected. A canceled run an interrupted evacuation left to move
// (unmovedSQL) is kept, whatever its age: deleting it would lose its work.
// p2 filters those out of its walk of run_finished, so each batch also
// reads the ones older than its oldest prunable run: at most the runs of
// an evacuation not run again. The engines follow it with their deletes.
const PrunableRunsCTE = `
WITH p1 AS (
  SELECT id FROM taskport.run
  WHERE engine = $1 AND status = 'succeeded' AND status IN ('succeeded', 'failed', 'canceled')
    AND finished_at < now() - $2 * interval '1 millisecond'
  ORDER BY finished_at LIMIT $5 FOR UPDATE SKIP LOCKED
), p2 AS (
  SELECT id FROM taskport.run
  WHERE engine = $1 AND status = 'canceled' AND status IN ('succeeded', 'failed', 'canceled')
    AND finished_at < now() - $3 * interval '1 millisecond' AND NOT ` + unmovedSQL + `
  ORDER BY finished_at LIMIT $5 FOR UPDATE SKIP LOCKED
), p3 AS (
  SELECT id FROM taskport.run
  WHERE engine = $1 AND status = 'failed' AND status IN ('succeeded', 'failed', 'canceled')
    AND finished_at < now() - $4 * interval '1 millisecond'
  ORDER BY finished_at LIMIT $5 FOR UPDATE SKIP LOCKED
), r AS (
  SELECT id FROM p1 UNION ALL SELECT id FROM p2 UNION ALL SELECT id FROM p3
)`

// pruneRunsSQL deletes the runs PrunableRunsCTE selects; their waiters go
// with them (ON DELETE CASCADE).
const pruneRunsSQL = PrunableRunsCTE + `
DELETE FROM taskport.run WHERE id IN (SELECT id FROM r)`

// RunLagSQL is how long ago, in ms, the oldest run of engine $1 still there
// became prunable under the ages $2, $3, $4 (as in PrunableRunsCTE, which
// keeps the runs an interrupted evacuation left: they are no backlog); 0
// when none is. Each min() is one probe of run_finished, the canceled one
// past those kept runs.
const RunLagSQL = `
SELECT coalesce(max(extract(epoch FROM now() - f.finished_at) * 1000 - f.age), 0)::bigint FROM (
  SELECT (SELECT min(finished_at) FROM taskport.run WHERE engine = $1 AND status = 'succeeded'
      AND status IN ('succeeded', 'failed', 'canceled') AND finished_at < now() - $2 * interval '1 millisecond'),
    $2::bigint
  UNION ALL
  SELECT (SELECT min(finished_at) FROM taskport.run WHERE engine = $1 AND status = 'canceled'
      AND status IN ('succeeded', 'failed', 'canceled') AND finished_at < now() - $3 * interval '1 millisecond'
      AND NOT ` + unmovedSQL + `),
    $3::bigint
  UNION ALL
  SELECT (SELECT min(finished_at) FROM taskport.run WHERE engine = $1 AND status = 'failed'
      AND status IN ('succeeded', 'failed', 'canceled') AND finished_at < now() - $4 * interval '1 millisecond'),
    $4::bigint
) f(finished_at, age)`

// pruneWaitersSQL deletes up to $2 waiters registered more than $1 ms ago
// whose run ended: nobody waits there any more (a Temporal run terminated or
// reset while waiting). It runs after dbtx.PinIndexScansSQL and walks waiter_since,
// checking each waiter's run by its key (a subquery, so that the planner
// cannot turn it into a join over every ended run); its cost is bounded by
// the waiters older than the age, which are the open long waits and the
// orphans. The rows are deleted by their ctid, read under the row lock.
const pruneWaitersSQL = `
WITH w AS (
  SELECT w.ctid FROM taskport.waiter w
  WHERE w.since < now() - $1 * interval '1 millisecond'
    AND (SELECT r.status FROM taskport.run r WHERE r.id = w.run_id) IN ('succeeded', 'failed', 'canceled')
  ORDER BY w.since LIMIT $2
  FOR UPDATE SKIP LOCKED
)
DELETE FROM taskport.waiter WHERE ctid = ANY(ARRAY(SELECT ctid FROM w))`

// waiterLagSQL is pruneWaitersSQL's lag: ms since the oldest orphaned waiter
// became prunable, 0 when none.
const waiterLagSQL = `
SELECT coalesce((
  SELECT (extract(epoch FROM now() - w.since) * 1000 - $1)::bigint FROM taskport.waiter w
  WHERE w.since < now() - $1 * interval '1 millisecond'
    AND (SELECT r.status FROM taskport.run r WHERE r.id = w.run_id) IN ('succeeded', 'failed', 'canceled')
  ORDER BY w.since LIMIT 1), 0)`

// topicLockSQL serializes the senders and waiters of a topic (the early
// signals of the Temporal engine), so that a signal either finds the waiter
// registered or is seen by the wait. The key is the lease engine's topic
// lock's, which serializes the same thing there.
const topicLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended($1, 7454))`

const keepEarlySignalSQL = `INSERT INTO taskport.early_signal (topic, payload, traceparent, tracestate) VALUES ($1, $2, $3, $4)`

// oldestKeptSignalSQL reads the oldest signal kept on a topic and not
// taken yet (the caller holds the topic's lock).
const oldestKeptSignalSQL = `
SELECT id, payload, traceparent, tracestate FROM taskport.early_signal WHERE topic = $1 AND consumed_by IS NULL ORDER BY id LIMIT 1`

// takeOneKeptSignalSQL takes the oldest signal kept for topic $1 for run
// $2's wait $3, if there is one and the run's cancel was not requested, and
// returns its payload and its sender's trace.
const takeOneKeptSignalSQL = `
UPDATE taskport.early_signal SET consumed_by = $2, consumed_step = $3, consumed_at = now()
WHERE id = (SELECT id FROM taskport.early_signal WHERE topic = $1 AND consumed_by IS NULL ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
  AND NOT EXISTS (SELECT FROM taskport.run WHERE id = $2 AND cancel_requested_at IS NOT NULL)
RETURNING payload, traceparent, tracestate`

const takeKeptSignalSQL = `
UPDATE taskport.early_signal SET consumed_by = $2, consumed_step = $3, consumed_at = now()
WHERE id = $1 AND consumed_by IS NULL`

// pruneEarlySignalsSQL deletes up to $2 kept signals that a wait took more
// than $1 ms ago (nothing reads them again: oldestKeptSignalSQL skips them), and
// up to $2 that no wait took within $1 ms of being sent: an early signal
// expires, as the lease engine's untargeted ones do. Each reads its own
// index of migration 00013 in age order, skipping rows another transaction
// holds (a wait taking the signal). earlySignalLagSQL is its lag.
var pruneEarlySignalsSQL, earlySignalLagSQL = SignalRetentionSQL("taskport.early_signal", "")

// SignalRetentionSQL is the retention of a signal table (the run store's
// early signals, the lease engine's task signals; columns id, created_at,
// consumed_by, consumed_at): prune deletes up to $2 signals consumed more
// than $1 ms ago and up to $2 never consumed and sent more than $1 ms ago
// that also meet unconsumed (a condition on alias s; "" for none), each
// set walked in age order skipping rows another transaction holds; lag is
// the age in ms beyond $1 of the oldest such row, 0 when there is none.
// Each side of lag is one probe of its index.
func SignalRetentionSQL(table, unconsumed string) (prune, lag string) {
	if unconsumed != "" {
		unconsumed = "\n    AND " + unconsumed
	}
	consumed := `FROM ` + table + ` WHERE consumed_by IS NOT NULL AND consumed_at < now() - $1 * interval '1 millisecond'`
	open := `FROM ` + table + ` s WHERE s.consumed_by IS NULL AND s.created_at < now() - $1 * interval '1 millisecond'` + unconsumed
	prune = `
WITH c AS (
  SELECT id ` + consumed + `
  ORDER BY consumed_at LIMIT $2 FOR UPDATE SKIP LOCKED
), u AS (
  SELECT s.id ` + open + `
  ORDER BY s.created_at LIMIT $2 FOR UPDATE SKIP LOCKED
), x AS MATERIALIZED (
  SELECT id FROM c UNION ALL SELECT id FROM u
)
DELETE FROM ` + table + ` WHERE id IN (SELECT id FROM x)`
	lag = `
SELECT coalesce(max(extract(epoch FROM now() - at) * 1000 - $1), 0)::bigint FROM (
  SELECT (SELECT min(consumed_at) ` + consumed + `)
  UNION ALL
  SELECT (SELECT s.created_at ` + open + `
          ORDER BY s.created_at LIMIT 1)
) x(at)`
	return prune, lag
}
