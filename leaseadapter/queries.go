package leaseadapter

// Every statement of the engine, parameterized. Durations are passed as
// milliseconds (int64) and turned into intervals in SQL.
//
// Statements that a worker runs on behalf of a claim carry
// "id = $1 AND lease_token = $2 AND status = 'running'" on the task row and
// make every other write of the statement depend on that row (data-modifying
// CTEs reading from it), so a stale claim writes nothing; they return the
// number of task rows matched (0 = fenced) and the commit time.

import (
	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/runstore"
)

// notifyChannel carries wake-up hints: "e:<worker id>" (a run was enqueued
// by that process, which woke its own worker already) or an empty payload
// mean "work may be ready"; "c:<run id>" means "this run was canceled".
const notifyChannel = "taskport_lease"

// insertTaskSQL adds the task row of a run inserted by runstore.Insert
// (EnqueueTx); $13 is the run's seq, $14 and $15 the enqueuer's trace
// context.
const insertTaskSQL = `
WITH ins AS (
  INSERT INTO taskport_lease.task (id, kind, handler_version, input, priority, next_run_at,
    max_attempts, backoff_initial, backoff_max, backoff_coefficient, run_seq, traceparent, tracestate)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8 * interval '1 millisecond', $9 * interval '1 millisecond', $10, $13, $14, $15)
  RETURNING next_run_at
)
SELECT pg_notify($11, $12) FROM ins WHERE next_run_at <= now()`

// enqueueManySQL is EnqueueMany in one statement: runstore's batch insert of
// the runs ($1-$9, r), then a task row for each run it inserted, with the
// retry policy of its (kind, version) ($10-$15), and one notification
// ($16, $17) if any is ready. Every task row keeps the enqueuer's trace
// context ($18, $19: the batch is one call, so one trace). It returns the
// ids of the inserted runs, as runstore.InsertManyWith expects; the WHERE
// only makes the notification run.
const enqueueManySQL = `
WITH r AS (` + runstore.InsertRunsReturningSQL + `id, kind, version, input, priority, available_at, seq
), p AS (
  SELECT * FROM unnest($10::text[], $11::int[], $12::int[], $13::bigint[], $14::bigint[], $15::float8[])
    AS p(kind, version, max_attempts, initial, max_interval, coefficient)
), t AS (
  INSERT INTO taskport_lease.task (id, kind, handler_version, input, priority, next_run_at,
    max_attempts, backoff_initial, backoff_max, backoff_coefficient, run_seq, traceparent, tracestate)
  SELECT r.id, r.kind, r.version, r.input, r.priority, r.available_at, p.max_attempts,
    p.initial * interval '1 millisecond', p.max_interval * interval '1 millisecond', p.coefficient, r.seq, $18, $19
  FROM r JOIN p ON p.kind = r.kind AND p.version = r.version
  RETURNING next_run_at
), n AS (
  SELECT pg_notify($16, $17) FROM (SELECT FROM t WHERE next_run_at <= now() LIMIT 1) AS any_ready
)
SELECT id FROM r WHERE (SELECT count(*) FROM n) >= 0`

// enqueueSQL is Enqueue in one statement (one round trip, one commit): the
// taskport.run row (the same insert as runstore.Insert, the idempotency
// authority) and the task row, which keeps the run's seq (the generation of
// its fencing tokens) so that a claim needs no join. On a conflict it returns
// the existing id when visible, else NULL and Enqueue falls back to
// runstore.Insert, which sees rows committed concurrently. $16 and $17 are
// the enqueuer's trace context, which the run's steps continue.
const enqueueSQL = `
WITH r AS (
  INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, business_key, priority, input, available_at)
  VALUES ($1, 'lease', $2, $3, $4, $5, $6, $7, coalesce($8::timestamptz, now()))
  ON CONFLICT (kind, idempotency_key) DO NOTHING
  RETURNING id, available_at, seq
), t AS (
  INSERT INTO taskport_lease.task (id, kind, handler_version, input, priority, next_run_at,
    max_attempts, backoff_initial, backoff_max, backoff_coefficient, run_seq, traceparent, tracestate)
  SELECT id, $2, $3, $7, $6, available_at, $9, $10 * interval '1 millisecond', $11 * interval '1 millisecond', $12, seq,
    $16, $17
  FROM r
  RETURNING next_run_at
), n AS (
  SELECT pg_notify($13, $14) FROM t WHERE next_run_at <= now() AND $15::boolean
)
SELECT coalesce((SELECT id FROM r), (SELECT id FROM taskport.run WHERE kind = $2 AND idempotency_key = $4)),
  (SELECT count(*) FROM t WHERE next_run_at <= now()), (SELECT count(*) FROM n)`

// presentPrioritiesCTE and readyByPriority bound a read of the ready runs
// to them. On next_run_at <= now() alone, the index task_ready (priority,
// next_run_at) is bounded on its second column only, so a read that finds
// fewer ready runs than it wants (a claim for all of an idle worker's free
// slots, a count) reads on through every scheduled run: the whole index at
// a backlog of runs scheduled ahead (issue 14: 3836 pages at a million).
// With priority = ANY (the priorities present), the index scan descends
// once per priority and stops each at its first scheduled entry, still in
// (priority, next_run_at) order, so ORDER BY needs no sort and LIMIT with
// SKIP LOCKED keeps its meaning: rows are locked one at a time as the scan
// returns them, locked ones are skipped, and the scan stops after LIMIT.
// present is a loose index scan of task_ready (the smallest priority, then
// each next one, one descent each), so a read costs about two descents per
// distinct priority of the open runs, whatever their number. It reads the
// statement's snapshot: a run enqueued meanwhile at a new priority waits for
// the next read, as it would with a plain scan.
const (
	presentPrioritiesCTE = `
WITH RECURSIVE present AS (
  SELECT min(priority) AS priority FROM taskport_lease.task WHERE status IN ('pending', 'waiting')
  UNION ALL
  SELECT (SELECT min(priority) FROM taskport_lease.task
          WHERE status IN ('pending', 'waiting') AND priority > present.priority)
  FROM present WHERE present.priority IS NOT NULL
)`
	readyByPriority = `status IN ('pending', 'waiting') AND next_run_at <= now()
    AND priority = ANY (ARRAY(SELECT priority FROM present WHERE priority IS NOT NULL))`
)

// claimPlanSQL precedes claimSQL in its transaction. Without it the planner,
// trusting statistics taken while the table was small or the backlog empty
// (a fresh table is never analyzed in its first minute; a burst outgrows the
// last ANALYZE), picks a bitmap scan of every ready run plus a sort, so each
// claim costs O(backlog): with 500 runs queued, 3-15 ms per claim instead of
// 0.1. Turning off bitmap and sequential scans leaves the ordered index scan
// of task_ready, which stops after LIMIT rows whatever the backlog.
const claimPlanSQL = dbtx.PinIndexScansSQL

// claimSQL takes up to $2 ready runs of the served "<kind>@<version>" pairs
// ($1; a filter, not a join, so that the rows keep the index order) in one
// statement and returns each with its step history. It leaves the
// taskport.run projection alone: a status change there rewrites every index
// of the row, and "running" is transient, so Get and ListRuns read it from
// the task row instead (liveStatusSQL). Its scan of task_ready is bounded
// per priority (readyByPriority).
const claimSQL = presentPrioritiesCTE + `, c AS (
  SELECT id FROM taskport_lease.task
  WHERE ` + readyByPriority + `
    AND kind || '@' || handler_version = ANY($1::text[])
  ORDER BY priority, next_run_at
  LIMIT $2
  FOR UPDATE SKIP LOCKED
), t AS (
  UPDATE taskport_lease.task t
  SET status = 'running', lease_owner = $3, lease_token = gen_random_uuid(),
      lease_until = now() + $4 * interval '1 millisecond', claims = t.claims + 1, updated_at = now()
  FROM c WHERE t.id = c.id
  RETURNING t.id, t.kind, t.handler_version, t.input, t.claims, t.lease_token, t.step_attempts,
    t.cancel_requested_at IS NOT NULL AS canceled, t.created_at, t.run_seq, t.traceparent, t.tracestate
)
SELECT t.id, t.kind, t.handler_version, t.input, t.claims, t.lease_token, t.step_attempts, t.canceled, t.created_at,
  t.run_seq, t.traceparent, t.tracestate,
  coalesce((SELECT json_agg(json_build_object('seq', s.seq, 'name', s.name, 'result', s.result,
      'failed', s.failed, 'at', s.completed_at) ORDER BY s.seq)
    FROM taskport_lease.step_result s WHERE s.task_id = t.id), '[]')
FROM t`

// commitStepSQL records a completed (or finally failed) step, wait, sleep or
// version marker. $6 is failed, $7 attempts, $8 the error message to keep.
const commitStepSQL = `
WITH t AS (
  UPDATE taskport_lease.task
  SET current_step = $3, step_attempts = 0, wait_topic = NULL, wait_until = NULL, progress = NULL,
      last_error = CASE WHEN $6::boolean THEN $8::text ELSE last_error END,
      lease_until = now() + $9 * interval '1 millisecond', updated_at = now()
  WHERE id = $1 AND lease_token = $2 AND status = 'running'
  RETURNING id
), s AS (
  INSERT INTO taskport_lease.step_result (task_id, seq, name, result, failed, attempts)
  SELECT id, $4::int, $3::text, $5::jsonb, $6::boolean, $7::int FROM t
), r AS (
  UPDATE taskport.run SET current_step = $3, attempts = $7,
    last_error = CASE WHEN $6 THEN $8 ELSE last_error END, updated_at = now()
  FROM t WHERE taskport.run.id = t.id
), w AS (
  DELETE FROM taskport.waiter WHERE run_id IN (SELECT id FROM t)
)
SELECT count(*), now() FROM t`

// recordStepSQL is the hot path of commitStepSQL: it only inserts the step
// result, under a share lock on the task row that holds the claim, so that
// no reaper or takeover can move the lease until the commit. It is used when
// the task row has nothing to reset (no failed attempts recorded); the heart
// beat keeps current_step and the lease fresh.
const recordStepSQL = `
WITH t AS (
  SELECT id FROM taskport_lease.task WHERE id = $1 AND lease_token = $2 AND status = 'running' FOR SHARE
), s AS (
  INSERT INTO taskport_lease.step_result (task_id, seq, name, result, attempts)
  SELECT id, $4::int, $3::text, $5::jsonb, $6::int FROM t
  RETURNING 1
)
SELECT count(*), now() FROM s`

// retryStepSQL puts the run back to pending after a failed attempt; the
// next claim replays and runs the step again.
const retryStepSQL = `
WITH t AS (
  UPDATE taskport_lease.task
  SET status = 'pending', next_run_at = now() + $5 * interval '1 millisecond',
      current_step = $3, step_attempts = $4, last_error = $6, progress = NULL,
      lease_owner = NULL, lease_token = NULL, lease_until = NULL, updated_at = now()
  WHERE id = $1 AND lease_token = $2 AND status = 'running'
  RETURNING id
), r AS (
  UPDATE taskport.run SET status = 'pending', current_step = $3, attempts = $4, last_error = $6, updated_at = now()
  FROM t WHERE taskport.run.id = t.id
)
SELECT count(*), now() FROM t`

// finishSQL ends a run: $3 is succeeded, failed or canceled. A failed run
// is a dead letter. When $5 is not NULL it also records the run's last
// step ($5 seq, $6 name, $7 result, $8 attempts), whose commit was held back
// until the handler's next move turned out to be its return.
const finishSQL = `
WITH t AS (
  UPDATE taskport_lease.task
  SET status = $3, last_error = CASE WHEN $4 = '' THEN last_error ELSE $4 END,
      dead_letter_at = CASE WHEN $3 = 'failed' THEN now() END, finished_at = now(),
      wait_topic = NULL, wait_until = NULL, progress = NULL,
      lease_owner = NULL, lease_token = NULL, lease_until = NULL, updated_at = now()
  WHERE id = $1 AND lease_token = $2 AND status = 'running'
  RETURNING id, last_error
), s AS (
  INSERT INTO taskport_lease.step_result (task_id, seq, name, result, attempts)
  SELECT id, $5::int, $6::text, $7::jsonb, $8::int FROM t WHERE $5::int IS NOT NULL
), l AS (
  SELECT s.name, s.attempts FROM taskport_lease.step_result s
  WHERE s.task_id = $1 AND $5::int IS NULL AND EXISTS (SELECT 1 FROM t) ORDER BY s.seq DESC LIMIT 1
), r AS (
  UPDATE taskport.run SET status = $3, last_error = t.last_error, updated_at = now(),
    current_step = coalesce($6::text, (SELECT name FROM l), current_step),
    attempts = coalesce($8::int, (SELECT attempts FROM l), attempts),
    finished_at = coalesce(finished_at, now())
  FROM t WHERE taskport.run.id = t.id
), w AS (
  DELETE FROM taskport.waiter WHERE run_id IN (SELECT id FROM t)
)
SELECT count(*), now() FROM t`

// continueAsNewSQL clears the history and restarts the run with a new input
// under the same id.
const continueAsNewSQL = `
WITH t AS (
  UPDATE taskport_lease.task
  SET status = 'pending', input = $3, next_run_at = now(), current_step = '', step_attempts = 0,
      wait_topic = NULL, wait_until = NULL, progress = NULL,
      lease_owner = NULL, lease_token = NULL, lease_until = NULL, updated_at = now()
  WHERE id = $1 AND lease_token = $2 AND status = 'running'
  RETURNING id
), s AS (
  DELETE FROM taskport_lease.step_result WHERE task_id IN (SELECT id FROM t)
), r AS (
  UPDATE taskport.run SET status = 'pending', current_step = '', attempts = 0, updated_at = now()
  FROM t WHERE taskport.run.id = t.id
)
SELECT count(*), now() FROM t`

// handBackSQL releases a claim without counting an attempt (Stop, or a
// commit whose outcome is unknown).
const handBackSQL = `
WITH t AS (
  UPDATE taskport_lease.task
  SET status = 'pending', next_run_at = now(), lease_owner = NULL, lease_token = NULL, lease_until = NULL,
      updated_at = now()
  WHERE id = $1 AND lease_token = $2 AND status = 'running'
  RETURNING id
), r AS (
  UPDATE taskport.run SET status = 'pending', updated_at = now() FROM t WHERE taskport.run.id = t.id
)
SELECT count(*), now() FROM t`

// heartbeatSQL renews every lease of one worker at once and reports which
// runs were canceled; a run missing from the result lost its lease. It also
// brings the run's view up to the step each run is in and that step's
// attempt (its failed attempts so far, plus the one running).
//
// It never waits for a row lock: a run whose task or projection row is locked
// right now is being committed by its own worker (or canceled), so its renewal
// is skipped this round rather than queued behind the commit. Waiting would
// also deadlock: a group commit locks several runs' rows in one transaction,
// in its own order, while this statement locks the same rows in another
// (Postgres breaks the cycle only after deadlock_timeout, 1 s, stalling both).
// The liveness answer comes from the statement's snapshot, locked or not.
const heartbeatSQL = `
WITH h AS (
  SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[]) AS h(id, token, step, progress)
), live AS (
  SELECT t.id, t.cancel_requested_at IS NOT NULL AS canceled
  FROM taskport_lease.task t JOIN h ON t.id = h.id AND t.lease_token = h.token
  WHERE t.status = 'running'
), l AS (
  SELECT t.id FROM taskport_lease.task t JOIN h ON t.id = h.id AND t.lease_token = h.token
  WHERE t.status = 'running'
  FOR UPDATE OF t SKIP LOCKED
), t AS (
  UPDATE taskport_lease.task t
  SET lease_until = now() + $5 * interval '1 millisecond',
      current_step = CASE WHEN h.step = '' THEN t.current_step ELSE h.step END,
      progress = coalesce(h.progress::jsonb, t.progress), updated_at = now()
  FROM h JOIN l ON l.id = h.id WHERE t.id = h.id
  RETURNING t.id, t.current_step, CASE WHEN h.step = '' THEN NULL ELSE t.step_attempts + 1 END AS attempt
), rl AS (
  SELECT r.id FROM taskport.run r JOIN t ON r.id = t.id
  WHERE r.current_step <> t.current_step OR r.attempts <> coalesce(t.attempt, r.attempts)
  FOR UPDATE OF r SKIP LOCKED
), r AS (
  UPDATE taskport.run SET current_step = t.current_step, attempts = coalesce(t.attempt, taskport.run.attempts)
  FROM t JOIN rl ON rl.id = t.id
  WHERE taskport.run.id = t.id
)
SELECT id, canceled FROM live`

// reapSQL settles expired claims. A canceled run ends canceled (the cancel
// stops it before any later step; no attempt is charged). Otherwise the lost
// attempt counts against the kind's policy: with attempts left the run goes
// back to pending, the n-th lost lease of a step waiting Backoff(n-1) (the
// first none), so a killed worker's run is claimable again at most lease +
// poll interval after its last renewal. A step out of attempts goes back to
// pending at once too: the next claim replays the handler, and its Step
// records the step as failed for good without running it (what a failed last
// attempt records) and returns *port.StepError, so the handler's outcome
// decides the run, as on Temporal. Only when that claim is lost as well (the
// handler itself, not a step, kills its worker) is the run dead.
const reapSQL = `
WITH x AS (
  SELECT id FROM taskport_lease.task
  WHERE status = 'running' AND lease_until < now()
  LIMIT $1
  FOR UPDATE SKIP LOCKED
), t AS (
  UPDATE taskport_lease.task t
  SET status = CASE WHEN t.cancel_requested_at IS NOT NULL THEN 'canceled'
                    WHEN t.step_attempts < t.max_attempts THEN 'pending' ELSE 'dead' END,
      step_attempts = t.step_attempts + CASE WHEN t.cancel_requested_at IS NULL THEN 1 ELSE 0 END,
      next_run_at = now() + CASE WHEN t.step_attempts = 0 OR t.step_attempts + 1 >= t.max_attempts THEN interval '0'
        ELSE least(t.backoff_max, t.backoff_initial * power(t.backoff_coefficient, t.step_attempts - 1)) END,
      last_error = CASE WHEN t.cancel_requested_at IS NOT NULL THEN t.last_error
        ELSE 'lease of worker ' || coalesce(t.lease_owner, '?') || ' expired' END,
      dead_letter_at = CASE WHEN t.cancel_requested_at IS NULL AND t.step_attempts >= t.max_attempts THEN now() END,
      finished_at = CASE WHEN t.cancel_requested_at IS NOT NULL OR t.step_attempts >= t.max_attempts THEN now() END,
      progress = NULL, lease_owner = NULL, lease_token = NULL, lease_until = NULL, updated_at = now()
  FROM x WHERE t.id = x.id
  RETURNING t.id, t.status, t.step_attempts, t.last_error
), r AS (
  UPDATE taskport.run SET status = CASE WHEN t.status = 'dead' THEN 'failed' ELSE t.status END,
    attempts = t.step_attempts, last_error = t.last_error, updated_at = now(),
    finished_at = CASE WHEN t.status IN ('dead', 'canceled') THEN now() END
  FROM t WHERE taskport.run.id = t.id
), w AS (
  DELETE FROM taskport.waiter WHERE run_id IN (SELECT id FROM t WHERE status IN ('dead', 'canceled'))
)
SELECT count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'dead'),
  count(*) FILTER (WHERE status = 'canceled') FROM t`

// liveStatusSQL reads the claim state of runs whose projection says
// pending: they may be running.
const liveStatusSQL = `
SELECT id, current_step FROM taskport_lease.task WHERE id = ANY($1) AND status = 'running'`

// queueDepthSQL counts the ready runs (Metrics.QueueDepth, every poll
// interval): bounded per priority, it reads the ready entries of task_ready,
// not the scheduled ones.
const queueDepthSQL = presentPrioritiesCTE + `
SELECT count(*) FROM taskport_lease.task WHERE ` + readyByPriority

// topicLockSQL serializes a topic's signal senders and waiters, so that a
// signal is either seen by a waiter's check or finds the waiter registered.
const topicLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended($1, 7454))`

// signalSQL stores the signal once per run waiting on the topic, or once
// untargeted when none waits, with the signaller's trace context ($3, $4),
// and wakes the waiters.
const signalSQL = `
WITH w AS (
  SELECT w.run_id FROM taskport.waiter w JOIN taskport_lease.task t ON t.id = w.run_id WHERE w.topic = $1
), ins AS (
  INSERT INTO taskport_lease.task_signal (topic, payload, target, traceparent, tracestate)
  SELECT $1::text, $2::jsonb, run_id, $3::text, $4::text FROM w
  UNION ALL
  SELECT $1::text, $2::jsonb, NULL::uuid, $3::text, $4::text WHERE NOT EXISTS (SELECT 1 FROM w)
), wake AS (
  UPDATE taskport_lease.task t SET next_run_at = now(), updated_at = now()
  FROM w WHERE t.id = w.run_id AND t.status = 'waiting'
)
SELECT count(*) FROM w`

const notifySQL = `SELECT pg_notify($1, $2)`

// lockClaimSQL is the first statement of a wait: it checks the claim and
// reads the wait in progress, if any.
const lockClaimSQL = `
SELECT current_step, wait_topic, wait_until, now()
FROM taskport_lease.task WHERE id = $1 AND lease_token = $2 AND status = 'running'
FOR UPDATE`

// consumeSignalSQL takes the oldest signal on the topic addressed to this
// run or to nobody. A traced signal moves the run onto the signaller's
// trace: what the run does next is what the signal's transaction decided
// (an approval, a completed download). The task row is locked by
// lockClaimSQL in the same transaction.
const consumeSignalSQL = `
WITH s AS (
  UPDATE taskport_lease.task_signal SET consumed_by = $2, consumed_at = now()
  WHERE id = (
    SELECT id FROM taskport_lease.task_signal
    WHERE topic = $1 AND consumed_by IS NULL AND (target IS NULL OR target = $2)
    ORDER BY id LIMIT 1
  )
  RETURNING payload, traceparent, tracestate
), t AS (
  UPDATE taskport_lease.task SET traceparent = s.traceparent, tracestate = s.tracestate
  FROM s WHERE taskport_lease.task.id = $2 AND s.traceparent <> ''
)
SELECT payload, traceparent, tracestate FROM s`

// parkSQL releases the claim and parks the run until $4 (a signal sets
// next_run_at to now).
const parkSQL = `
WITH t AS (
  UPDATE taskport_lease.task
  SET status = 'waiting', next_run_at = $4, wait_until = $4, wait_topic = $5, current_step = $3,
      lease_owner = NULL, lease_token = NULL, lease_until = NULL, updated_at = now()
  WHERE id = $1 AND lease_token = $2 AND status = 'running'
  RETURNING id
)
UPDATE taskport.run SET status = 'waiting', current_step = $3, updated_at = now()
FROM t WHERE taskport.run.id = t.id`

const cancelTaskSQL = `
WITH o AS (
  SELECT id, status AS old FROM taskport_lease.task WHERE id = $1 FOR UPDATE
), t AS (
  UPDATE taskport_lease.task t
  SET cancel_requested_at = coalesce(t.cancel_requested_at, now()),
      status = CASE WHEN o.old IN ('pending', 'waiting') THEN 'canceled' ELSE t.status END,
      finished_at = CASE WHEN o.old IN ('pending', 'waiting') THEN now() ELSE t.finished_at END,
      wait_topic = CASE WHEN o.old IN ('pending', 'waiting') THEN NULL ELSE t.wait_topic END,
      wait_until = CASE WHEN o.old IN ('pending', 'waiting') THEN NULL ELSE t.wait_until END,
      updated_at = now()
  FROM o WHERE t.id = o.id
  RETURNING t.id, o.old, t.status
), r AS (
  UPDATE taskport.run SET status = 'canceled', updated_at = now(), finished_at = coalesce(finished_at, now())
  FROM t WHERE taskport.run.id = t.id AND t.status = 'canceled' AND t.old <> 'canceled'
), w AS (
  DELETE FROM taskport.waiter WHERE run_id IN (SELECT id FROM t WHERE status = 'canceled')
)
SELECT old FROM t`

// pruneRunsSQL is the retention of lease runs (package retention): it
// deletes the runs runstore.PrunableRunsCTE selects with their task rows and
// step results, in one statement so that the three commit together, and
// counts each. (The AFTER DELETE triggers of migration 00004 find nothing
// left to cascade; waiters go by their foreign key.)
const pruneRunsSQL = runstore.PrunableRunsCTE + `, s AS (
  DELETE FROM taskport_lease.step_result WHERE task_id IN (SELECT id FROM r) RETURNING 1
), t AS (
  DELETE FROM taskport_lease.task WHERE id IN (SELECT id FROM r) RETURNING 1
), d AS (
  DELETE FROM taskport.run WHERE id IN (SELECT id FROM r) RETURNING 1
)
SELECT (SELECT count(*) FROM d), (SELECT count(*) FROM t), (SELECT count(*) FROM s)`

// pruneSignalsSQL deletes up to $2 consumed signals consumed more than $1
// ms ago, and up to $2 signals never consumed and sent more than $1 ms ago
// whose target is not an open run: an early signal that no run came to wait
// for within the age expires, and a signal sent to a run that then ended is
// never consumed. A signal to a run still open is kept whatever its age.
// It runs after dbtx.PinIndexScansSQL: unpinned, a planner without statistics sorts
// every old unconsumed signal for the LIMIT, or hashes the whole task table
// for the open-run check, instead of walking task_signal_unconsumed_age in
// order and probing task_pkey per row.
const pruneSignalsSQL = `
WITH c AS (
  SELECT id FROM taskport_lease.task_signal
  WHERE consumed_by IS NOT NULL AND consumed_at < now() - $1 * interval '1 millisecond'
  ORDER BY consumed_at LIMIT $2 FOR UPDATE SKIP LOCKED
), u AS (
  SELECT s.id FROM taskport_lease.task_signal s
  WHERE s.consumed_by IS NULL AND s.created_at < now() - $1 * interval '1 millisecond'
    AND NOT EXISTS (SELECT 1 FROM taskport_lease.task t
                    WHERE t.id = s.target AND t.status IN ('pending', 'running', 'waiting'))
  ORDER BY s.created_at LIMIT $2 FOR UPDATE SKIP LOCKED
), x AS MATERIALIZED (
  SELECT id FROM c UNION ALL SELECT id FROM u
)
DELETE FROM taskport_lease.task_signal WHERE id IN (SELECT id FROM x)`

// signalLagSQL is pruneSignalsSQL's lag in ms, 0 when nothing is prunable.
const signalLagSQL = `
SELECT coalesce(max(extract(epoch FROM now() - at) * 1000 - $1), 0)::bigint FROM (
  SELECT (SELECT min(consumed_at) FROM taskport_lease.task_signal
          WHERE consumed_by IS NOT NULL AND consumed_at < now() - $1 * interval '1 millisecond')
  UNION ALL
  SELECT (SELECT s.created_at FROM taskport_lease.task_signal s
          WHERE s.consumed_by IS NULL AND s.created_at < now() - $1 * interval '1 millisecond'
            AND NOT EXISTS (SELECT 1 FROM taskport_lease.task t
                            WHERE t.id = s.target AND t.status IN ('pending', 'running', 'waiting'))
          ORDER BY s.created_at LIMIT 1)
) x(at)`
