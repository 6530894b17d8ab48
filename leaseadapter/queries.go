package leaseadapter

// Every statement of the engine, parameterized. Durations are passed as
// milliseconds (int64) and turned into intervals in SQL.
//
// A lease run is one row of taskport.run (migration 00014): its projection
// and its lease state, which only this engine writes. Statements that a
// worker runs on behalf of a claim carry claimedRun and make every other
// write of the statement depend on that row (data-modifying CTEs reading
// from it), so a stale claim writes nothing; they return the number of run
// rows matched (0 = fenced) and the commit time.

import (
	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/runstore"
)

// notifyChannel carries wake-up hints: "e:<worker id>" (a run was enqueued
// by that process, which woke its own worker already) or an empty payload
// mean "work may be ready"; "c:<run id>" means "this run was canceled".
const notifyChannel = "taskport_lease"

// enqueueSQL is Enqueue in one statement (one round trip, one commit): the
// taskport.run row, which is the idempotency authority and holds the run's
// lease state (migration 00014), with the retry policy of its kind ($9-$12)
// and the enqueuer's trace context ($16, $17), which the run's steps
// continue. On a conflict it returns the existing id when visible, else NULL
// and the caller reads it back in a fresh snapshot (runstore.Insert). $13
// and $14 are the notification, sent when $15 and the run is due now. The
// last column is the engine of the run found on a conflict (NULL when this
// statement inserted: its own row is not in its snapshot), so that a key
// another engine's run holds is refused.
const enqueueSQL = `
WITH r AS (
  INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, business_key, priority, input, available_at,
    next_run_at, max_attempts, backoff_initial, backoff_max, backoff_coefficient, traceparent, tracestate)
  SELECT $1, 'lease', $2, $3, $4, $5, $6, $7, a.at, a.at, $9, $10 * interval '1 millisecond',
    $11 * interval '1 millisecond', $12, $16, $17
  FROM (SELECT coalesce($8::timestamptz, now()) AS at) a
  ON CONFLICT (kind, idempotency_key) DO NOTHING
  RETURNING id, next_run_at
), n AS (
  SELECT pg_notify($13, $14) FROM r WHERE next_run_at <= now() AND $15::boolean
)
SELECT coalesce((SELECT id FROM r), (SELECT id FROM taskport.run WHERE kind = $2 AND idempotency_key = $4)),
  (SELECT count(*) FROM r WHERE next_run_at <= now()), (SELECT count(*) FROM n),
  (SELECT engine FROM taskport.run WHERE kind = $2 AND idempotency_key = $4)`

// enqueueStoredSQL is Retry's new run for a kind this process does not
// register: the failed run's ($2) kind, version, business key, priority,
// input and retry policy, under the key $3 and the retrier's trace context
// ($4, $5), due now, with a notification ($6, $7) when it is inserted. It
// returns the run of the key (NULL when a concurrent insert is not yet
// visible), whether it notified, and the key's engine.
const enqueueStoredSQL = `
WITH f AS (
  SELECT kind, version, business_key, priority, input, max_attempts, backoff_initial, backoff_max, backoff_coefficient
  FROM taskport.run WHERE id = $2
), r AS (
  INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, business_key, priority, input, available_at,
    next_run_at, max_attempts, backoff_initial, backoff_max, backoff_coefficient, traceparent, tracestate)
  SELECT $1, 'lease', f.kind, f.version, $3, f.business_key, f.priority, f.input, now(), now(),
    f.max_attempts, f.backoff_initial, f.backoff_max, f.backoff_coefficient, $4, $5
  FROM f
  ON CONFLICT (kind, idempotency_key) DO NOTHING
  RETURNING id
), n AS (
  SELECT pg_notify($6, $7) FROM r
)
SELECT coalesce((SELECT id FROM r), (SELECT id FROM taskport.run WHERE kind = (SELECT kind FROM f) AND idempotency_key = $3)),
  (SELECT count(*) FROM n),
  (SELECT engine FROM taskport.run WHERE kind = (SELECT kind FROM f) AND idempotency_key = $3)`

// enqueueManySQL is EnqueueMany in one statement: runstore's batch insert of
// the runs ($1-$9), each with the retry policy of its (kind, version)
// ($10-$15) and the enqueuer's trace context ($18, $19: the batch is one
// call, so one trace), then one notification ($16, $17) if any is due now.
// It returns the ids of the inserted runs, as runstore.InsertManyWith
// expects; the WHERE only makes the notification run.
var enqueueManySQL = runstore.InsertRunsWith(`,
    next_run_at, max_attempts, backoff_initial, backoff_max, backoff_coefficient, traceparent, tracestate`, `,
  coalesce(i.available_at, now()), p.max_attempts, p.initial * interval '1 millisecond',
  p.max_interval * interval '1 millisecond', p.coefficient, $18, $19`, `
  JOIN unnest($10::text[], $11::int[], $12::int[], $13::bigint[], $14::bigint[], $15::float8[])
    AS p(kind, version, max_attempts, initial, max_interval, coefficient) ON p.kind = i.kind AND p.version = i.version`,
	func(insert string) string {
		return `
WITH r AS (` + insert + `id, next_run_at
), n AS (
  SELECT pg_notify($16, $17) FROM (SELECT FROM r WHERE next_run_at <= now() LIMIT 1) AS any_ready
)
SELECT id FROM r WHERE (SELECT count(*) FROM n) >= 0`
	})

// presentPrioritiesCTE and readyOfPair bound a read of the ready runs to
// the priorities present and the served (kind, version) pairs. On
// next_run_at <= now() alone, an index ordered by next_run_at after other
// columns is bounded on it only, so a read that finds fewer ready runs than
// it wants (a claim for all of an idle worker's free slots, a count) reads
// on through every scheduled run: the whole index at a backlog of runs
// scheduled ahead (issue 14: 3836 pages at a million). With an equality on
// kind, version and priority, each scan of run_ready_kind (kind, version,
// priority, next_run_at) descends once and stops at its first scheduled
// entry, in next_run_at order, so LIMIT with SKIP LOCKED keeps its meaning:
// rows are locked one at a time as the scan returns them, locked ones are
// skipped, and the scan stops after LIMIT. present is a loose index scan
// of run_ready (the smallest priority, then each next one, one descent
// each), so it costs about two descents per distinct priority of the open
// runs, whatever their number. It reads the statement's snapshot: a run
// enqueued meanwhile at a new priority waits for the next read, as it
// would with a plain scan. Both repeat the indexes' predicate, so that the
// planner can use them; present is written as ORDER BY ... LIMIT 1 rather
// than min(), which a planner without statistics on taskport.run computed
// by reading every entry of run_ready.
const (
	presentPrioritiesCTE = `
WITH RECURSIVE present AS (
  SELECT (SELECT priority FROM taskport.run WHERE engine = 'lease' AND status IN ('pending', 'waiting')
          ORDER BY priority LIMIT 1) AS priority
  UNION ALL
  SELECT (SELECT priority FROM taskport.run
          WHERE engine = 'lease' AND status IN ('pending', 'waiting') AND priority > present.priority
          ORDER BY priority LIMIT 1)
  FROM present WHERE present.priority IS NOT NULL
)`
	// readyOfPair is a ready run of the pair s and the priority p, in
	// run_ready_kind's predicate.
	readyOfPair = `engine = 'lease' AND status IN ('pending', 'waiting') AND next_run_at <= now()
      AND kind = s.kind AND version = s.version AND priority = p.priority`
)

// claimPlanSQL precedes claimSQL in its transaction. Without it the planner,
// trusting statistics taken while the table was small or the backlog empty
// (a fresh table is never analyzed in its first minute; a burst outgrows the
// last ANALYZE), picks a bitmap scan of every ready run plus a sort, so each
// claim costs O(backlog): with 500 runs queued, 3-15 ms per claim instead of
// 0.1; or a walk of run_status_created (every pending run, of both engines)
// plus a sort. Turning off bitmap and sequential scans and sorts leaves the
// ordered index scan of run_ready, which stops after LIMIT rows whatever the
// backlog. The queue depth and the reaper run under the same pin.
//
// It also takes the generic plan of each prepared statement that follows:
// planning a custom plan anew on every claim (Postgres chose one for
// claimSQL on every call) cost about 0.7 ms of backend time per claim of
// about 20 runs, more than half of what executing it took
// (pg_stat_statements in docs/benchmarks.md). A generic plan does not know how many runs the
// claim takes ($2), and with hash and merge joins allowed it joined the
// claimed ids to a full scan of run_pkey to update them (2,936 pages
// beside 100,000 runs, TestClaimReadsFewPagesWhateverTheUnservedBacklog);
// with them off, every join is a nested loop of index probes, which is the
// plan these statements want for the few rows they touch. The generic
// plans are checked by the EXPLAIN tests (pgtest.ExplainGeneric).
const claimPlanSQL = dbtx.PinOrderedScansSQL + `,
  set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true),
  set_config('plan_cache_mode', 'force_generic_plan', true)`

// claimSQL takes up to $2 ready runs of the served (kind, version) pairs
// (the arrays $1 and $5) in one statement, marks them running under a
// fresh lease_token, and returns each with its step history. Each served
// pair and priority present (presentPrioritiesCTE) is one descent of
// run_ready_kind in next_run_at order, locking as it goes (SKIP LOCKED, so
// a run another worker is claiming is passed over, not waited for) and
// stopping after $2 runs; the batch is the first $2 of them in (priority,
// next_run_at) order. The ready runs of pairs this worker does not serve
// are never read (migration 00019). Runs read but not in the batch, at
// most $2 per pair and priority beyond the first, stay locked until the
// claim commits, a moment in which another worker passes them over.
const claimSQL = presentPrioritiesCTE + `, c AS (
  SELECT r.id FROM unnest($1::text[], $5::int[]) AS s(kind, version)
  CROSS JOIN (SELECT priority FROM present WHERE priority IS NOT NULL) AS p
  CROSS JOIN LATERAL (
    SELECT id, priority, next_run_at FROM taskport.run
    WHERE ` + readyOfPair + `
    ORDER BY next_run_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
  ) AS r
  ORDER BY r.priority, r.next_run_at
  LIMIT $2
), t AS (
  UPDATE taskport.run r
  SET status = 'running', lease_owner = $3, lease_token = gen_random_uuid(),
      lease_until = now() + $4 * interval '1 millisecond', claims = r.claims + 1, updated_at = now(),
      execution_at = coalesce(r.execution_at, CASE WHEN r.claims = 0 THEN now() END)
  FROM c WHERE r.id = c.id
  RETURNING r.id, r.kind, r.version, coalesce(r.continued_input, r.input) AS input, r.claims, r.lease_token,
    r.step_attempts, r.cancel_requested_at IS NOT NULL AS canceled, coalesce(r.execution_at, r.created_at) AS began_at,
    r.seq, r.traceparent, r.tracestate, r.last_error <> '' AS error_shown
)
SELECT t.id, t.kind, t.version, t.input, t.claims, t.lease_token, t.step_attempts, t.canceled, t.began_at,
  t.seq, t.traceparent, t.tracestate, t.error_shown,
  coalesce((SELECT json_agg(json_build_object('seq', s.seq, 'name', s.name, 'result', s.result,
      'failed', s.failed, 'at', s.completed_at) ORDER BY s.seq)
    FROM taskport_lease.step_result s WHERE s.run_id = t.id), '[]')
FROM t`

// claimedRun is the condition of every statement a worker runs on behalf
// of a claim, on the run's row: a stale claim matches no row. lease_token
// is set by the claim and cleared by every statement that ends one, so it
// alone says the claim still holds. The condition names no status on
// purpose: then only the primary key can find the row. With one, a planner
// whose statistics sampled no running run (an ANALYZE after an import of
// pending runs) took run_status_created for 'running', whose entries
// include one for every claim since the last vacuum, and read them all on
// every commit (BenchmarkBacklog: three times the pages per run).
const claimedRun = `id = $1 AND lease_token = $2`

// commitStepSQL records a completed (or finally failed) step, wait, sleep or
// version marker. $6 is failed, $7 attempts (0 for a wait or sleep, which is
// no attempt), $8 the run's last error from now on: the final failure's
// message, or "" (a step that succeeded, a wait).
const commitStepSQL = `
WITH t AS (
  UPDATE taskport.run
  SET current_step = $3, attempts = $7, step_attempts = 0, wait_topic = NULL, wait_until = NULL, progress = NULL,
      last_error = $8::text,
      lease_until = now() + $9 * interval '1 millisecond', updated_at = now()
  WHERE ` + claimedRun + `
  RETURNING id
), s AS (
  INSERT INTO taskport_lease.step_result (run_id, seq, name, result, failed, attempts)
  SELECT id, $4::int, $3::text, $5::jsonb, $6::boolean, $7::int FROM t
), w AS (
  DELETE FROM taskport.waiter WHERE run_id IN (SELECT id FROM t)
)
SELECT count(*), now() FROM t`

// recordStepSQL is the hot path of commitStepSQL: it only inserts the step
// result, under a share lock on the run row that holds the claim, so that
// no reaper or takeover can move the lease until the commit. It is used when
// the run has nothing to reset (no failed attempts recorded, no last error
// shown); the heart beat keeps current_step and the lease fresh.
const recordStepSQL = `
WITH t AS (
  SELECT id FROM taskport.run WHERE ` + claimedRun + ` FOR SHARE
), s AS (
  INSERT INTO taskport_lease.step_result (run_id, seq, name, result, attempts)
  SELECT id, $4::int, $3::text, $5::jsonb, $6::int FROM t
  RETURNING 1
)
SELECT count(*), now() FROM s`

// releasedLease is what every statement that ends a claim sets, the
// started-step marker (started_seq, migration 00016) included.
const releasedLease = `lease_owner = NULL, lease_token = NULL, lease_until = NULL, started_seq = NULL, updated_at = now()`

// endedClaim is releasedLease for a claim its worker ended (all but the
// reaper's): the run's count of claims lost before a step started restarts.
const endedClaim = releasedLease + `, unstarted_losses = 0`

// retryStepSQL puts the run back to pending after a failed attempt; the
// next claim replays and runs the step again.
const retryStepSQL = `
WITH t AS (
  UPDATE taskport.run
  SET status = 'pending', next_run_at = now() + $5 * interval '1 millisecond',
      current_step = $3, step_attempts = $4, attempts = $4, last_error = $6, progress = NULL, ` + endedClaim + `
  WHERE ` + claimedRun + `
  RETURNING id
)
SELECT count(*), now() FROM t`

// finishSQL ends the runs of one group commit, one row of its arrays per
// run ($1 id, $2 lease token, $3 status, $4 last error, $5-$8 the held
// step, $9 output) and returns the id of each run it ended under its claim:
// a run missing from the result was fenced. $3 is succeeded, failed or
// canceled. A failed run is a dead letter. When $5 is not NULL it also
// records the run's last step ($5 seq, $6 name, $7 result, $8 attempts),
// whose commit was held back until the handler's next move turned out to
// be its return; otherwise the run's view keeps the last step, wait or
// sleep recorded (last_*; a version marker is none of them) with its
// attempts, or, when the row names a step that is live (its body started
// in this claim after the last recorded one, or it has no result yet, as a
// step whose earlier attempts failed and whose next one a cancel kept from
// starting), that step with the row's attempts. The row lags the last
// recorded step when a step's start marker was still queued as it
// finished. last_error becomes $4: "" for succeeded and canceled, the
// handler's error for failed. A run whose cancel was requested before this
// commit ends canceled whatever the handler returned, as on Temporal, where
// the cancel resolves the step the handler was in: a cancel that Cancel
// acknowledged is never outrun by the step that was running.
//
// One statement for the group's runs, not one per run: each statement
// costs the backend its own executor start-up and plan nodes
// (docs/benchmarks.md measures what this saves). The ids reach the waiter
// table as an array, which a generic plan looks up in waiter_run, and
// whether the row's step has a result is a lateral probe of
// step_result_pkey (a NOT EXISTS became a hashed subplan reading all of
// step_result, in TestPlansStayIndexedAtAMillionRuns).
const finishSQL = `
WITH f AS (
  SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::int[], $6::text[], $7::text[], $8::int[],
    $9::text[]) AS f(id, token, status, err, seq, name, result, attempts, output)
), x AS (
  SELECT f.*, l.seq AS last_seq, l.name AS last_name, l.attempts AS last_attempts,
    r.current_step <> '' AND (r.started_seq > coalesce(l.seq, -1) OR c.run_id IS NULL) AS live
  FROM f JOIN taskport.run r ON r.id = f.id
  LEFT JOIN LATERAL (
    SELECT s.seq, s.name, s.attempts FROM taskport_lease.step_result s
    WHERE s.run_id = f.id AND f.seq IS NULL AND s.name NOT LIKE 'version:%' ORDER BY s.seq DESC LIMIT 1
  ) l ON true
  LEFT JOIN LATERAL (
    SELECT s.run_id FROM taskport_lease.step_result s WHERE s.run_id = r.id AND s.name = r.current_step LIMIT 1
  ) c ON true
), t AS (
  UPDATE taskport.run r
  SET status = CASE WHEN r.cancel_requested_at IS NOT NULL THEN 'canceled' ELSE x.status END,
      last_error = CASE WHEN r.cancel_requested_at IS NOT NULL THEN '' ELSE x.err END,
      dead_letter_at = CASE WHEN x.status = 'failed' AND r.cancel_requested_at IS NULL THEN now() END,
      finished_at = coalesce(r.finished_at, now()),
      output = CASE WHEN x.status = 'succeeded' AND r.cancel_requested_at IS NULL THEN x.output::jsonb END,
      current_step = coalesce(x.name, CASE WHEN x.live THEN r.current_step END, x.last_name, r.current_step),
      attempts = coalesce(x.attempts, CASE WHEN x.live THEN r.attempts END, x.last_attempts, r.attempts),
      wait_topic = NULL, wait_until = NULL, progress = NULL, ` + endedClaim + `
  FROM x WHERE r.id = x.id AND r.lease_token = x.token
  RETURNING r.id
), s AS (
  INSERT INTO taskport_lease.step_result (run_id, seq, name, result, attempts)
  SELECT x.id, x.seq, x.name, x.result::jsonb, x.attempts FROM x JOIN t ON t.id = x.id WHERE x.seq IS NOT NULL
), w AS (
  DELETE FROM taskport.waiter WHERE run_id = ANY(ARRAY(SELECT id FROM t))
)
SELECT id FROM t`

// continueAsNewSQL clears the history and restarts the run with a new input
// under the same id, its execution begun now (execution_at: what Flow.Now
// reads until the new execution's first step). The input it was enqueued
// with stays in input, as on the Temporal engine. The view keeps the step the run was last in and its
// attempts until the new execution begins one, as Temporal's does: the
// spec's CurrentStep is the step the run is in or last was in.
const continueAsNewSQL = `
WITH t AS (
  UPDATE taskport.run
  SET status = 'pending', continued_input = $3, next_run_at = now(), execution_at = now(), step_attempts = 0,
      last_error = '', wait_topic = NULL, wait_until = NULL, progress = NULL, ` + endedClaim + `
  WHERE ` + claimedRun + `
  RETURNING id
), s AS (
  DELETE FROM taskport_lease.step_result WHERE run_id IN (SELECT id FROM t)
)
SELECT count(*), now() FROM t`

// handBackSQL releases a claim without counting an attempt (Stop, or a
// commit whose outcome is unknown).
const handBackSQL = `
WITH t AS (
  UPDATE taskport.run SET status = 'pending', next_run_at = now(), ` + endedClaim + `
  WHERE ` + claimedRun + `
  RETURNING id
)
SELECT count(*), now() FROM t`

// cancelFlagsSQL reads the cancel flags of the runs whose steps are about
// to start ($1), one row per run found (worker.startStep).
const cancelFlagsSQL = `SELECT id, cancel_requested_at IS NOT NULL FROM taskport.run WHERE id = ANY($1::uuid[])`

// stepsStartedSQL is the durable marker that step bodies started under
// their claims ($1 run ids, $2 lease tokens, $3 step seqs, $4 step names):
// each worker sends one with the cancel-flag read before a body starts and
// waits for its group (worker.startStep), and a group commit sends the
// markers it gathered as this one statement, after the reads. For each run
// still under that claim and not asked to cancel (a run the read found
// canceled starts no body and is charged nothing) it brings the run's view to the step (the attempt
// running: its failed attempts so far plus this one; a new step clears the
// last error) and raises started_seq, which decides whether the reaper
// charges an attempt (reapSQL). greatest: two markers of one claim may
// commit out of order in concurrent groups. Like the heartbeat it never
// waits for a row lock: the markers ride with other runs' statements while
// the same run's next statement may commit in another group, and waiting
// could close a cycle of row locks between two groups. A row locked now is
// being written by its own run (the step's result, whose presence makes the
// marker moot), the heartbeat (which writes the marker itself) or a cancel
// or reaper (which end the claim).
const stepsStartedSQL = `
WITH m AS (
  SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::text[]) AS m(id, token, seq, step)
), l AS (
  SELECT r.id FROM taskport.run r JOIN m ON r.id = m.id AND r.lease_token = m.token AND r.cancel_requested_at IS NULL
  FOR UPDATE OF r SKIP LOCKED
)
UPDATE taskport.run r
SET started_seq = greatest(r.started_seq, m.seq), attempts = r.step_attempts + 1,
    last_error = CASE WHEN r.current_step = m.step THEN r.last_error ELSE '' END, current_step = m.step, updated_at = now()
FROM m JOIN l ON l.id = m.id WHERE r.id = m.id`

// heartbeatSQL renews every lease of one worker at once and reports which
// runs were canceled; a run missing from the result lost its lease. For a
// run whose step body is running ($3 its name, $6 its seq; "" and -1 for
// none) it brings the run's view up to that step and its attempt (its failed
// attempts so far, plus the one running), clears the last error when the
// step is a new one, and records the seq as started_seq, as stepsStartedSQL
// does: a marker whose own commit failed is written here. It leaves
// updated_at alone: a renewal changes nothing an operator reads.
//
// It never waits for a row lock: a run whose row is locked right now is
// being committed by its own worker (or canceled), so its renewal is skipped
// this round rather than queued behind the commit. Waiting would also
// deadlock: a group commit locks several runs' rows in one transaction, in
// its own order, while this statement locks the same rows in another
// (Postgres breaks the cycle only after deadlock_timeout, 1 s, stalling both).
// The liveness answer comes from the statement's snapshot, locked or not;
// the third column says whether the lease was renewed (not skipped).
// A claim matches by its lease_token alone, as claimedRun explains.
const heartbeatSQL = `
WITH h AS (
  SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $6::int[]) AS h(id, token, step, progress, started)
), live AS (
  SELECT r.id, r.cancel_requested_at IS NOT NULL AS canceled
  FROM taskport.run r JOIN h ON r.id = h.id AND r.lease_token = h.token
), l AS (
  SELECT r.id FROM taskport.run r JOIN h ON r.id = h.id AND r.lease_token = h.token
  FOR UPDATE OF r SKIP LOCKED
), t AS (
  UPDATE taskport.run r
  SET lease_until = now() + $5 * interval '1 millisecond',
      current_step = CASE WHEN h.step = '' THEN r.current_step ELSE h.step END,
      attempts = CASE WHEN h.step = '' THEN r.attempts ELSE r.step_attempts + 1 END,
      last_error = CASE WHEN h.step = '' OR h.step = r.current_step THEN r.last_error ELSE '' END,
      started_seq = CASE WHEN h.started < 0 THEN r.started_seq ELSE greatest(r.started_seq, h.started) END,
      progress = coalesce(h.progress::jsonb, r.progress)
  FROM h JOIN l ON l.id = h.id WHERE r.id = h.id
)
SELECT id, canceled, id IN (SELECT id FROM l) FROM live`

// reapSQL settles expired claims. A canceled run ends canceled (the cancel
// stops it before any later step; no attempt is charged). A claim under
// which no step body is known to have started (started_seq NULL, or its step
// has a result: the worker died prefetching the run, waiting for a step
// slot, replaying, or between steps) goes back to pending at once, charged
// nothing, and counts in unstarted_losses; from the $2-th such loss in a row
// it is charged as below, so that a step or handler that kills its worker
// before a heartbeat reports the step still runs out of attempts. A charged
// lost attempt counts against the kind's policy: with attempts left the run
// goes back to pending, the n-th lost lease of a step waiting Backoff(n-1)
// (the first none), so a killed worker's run is claimable again at most
// lease + poll interval after its last renewal. A step out of attempts goes
// back to pending at once too: the next claim replays the handler, and its
// Step records the step as failed for good without running it (what a
// failed last attempt records) and returns *port.StepError, so the handler's
// outcome decides the run, as on Temporal. Only when that claim is charged
// as well (the handler itself, not a step, kills its worker) is the run
// failed: a dead letter, last_error naming the lost lease. It runs under
// claimPlanSQL and takes the oldest expired leases first, from run_leased:
// without the pin, statistics whose sample held no running run made
// run_status_created (all running runs of both engines) look cheaper. The
// ended runs' ids reach the waiter table as an array, as in finishSQL: as
// a subquery, a custom plan on a never-analyzed waiter table hashed them
// and read the whole table (TestPlansStayIndexedAtAMillionRuns, once
// engine migration 00003 widened the table's rows).
const reapSQL = `
WITH x AS (
  SELECT id FROM taskport.run
  WHERE engine = 'lease' AND status = 'running' AND lease_until < now()
  ORDER BY lease_until
  LIMIT $1
  FOR UPDATE SKIP LOCKED
), y AS (
  SELECT r.id, r.cancel_requested_at IS NOT NULL AS canceled,
    r.cancel_requested_at IS NULL AND (r.unstarted_losses + 1 >= $2 OR (r.started_seq IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM taskport_lease.step_result s WHERE s.run_id = r.id AND s.seq >= r.started_seq))) AS charged
  FROM taskport.run r JOIN x ON r.id = x.id
), t AS (
  UPDATE taskport.run r
  SET status = CASE WHEN y.canceled THEN 'canceled'
                    WHEN NOT y.charged OR r.step_attempts < r.max_attempts THEN 'pending' ELSE 'failed' END,
      step_attempts = r.step_attempts + CASE WHEN y.charged THEN 1 ELSE 0 END,
      attempts = CASE WHEN y.charged THEN r.step_attempts + 1 ELSE r.attempts END,
      next_run_at = now() + CASE WHEN NOT y.charged OR r.step_attempts = 0 OR r.step_attempts + 1 >= r.max_attempts
        THEN interval '0'
        ELSE least(r.backoff_max, r.backoff_initial * power(r.backoff_coefficient, r.step_attempts - 1)) END,
      last_error = CASE WHEN y.canceled THEN ''
        WHEN y.charged THEN 'lease of worker ' || coalesce(r.lease_owner, '?') || ' expired' ELSE r.last_error END,
      dead_letter_at = CASE WHEN y.charged AND r.step_attempts >= r.max_attempts THEN now() END,
      finished_at = CASE WHEN y.canceled OR (y.charged AND r.step_attempts >= r.max_attempts) THEN now() END,
      unstarted_losses = r.unstarted_losses + CASE WHEN y.canceled OR y.charged THEN 0 ELSE 1 END,
      progress = NULL, ` + releasedLease + `
  FROM y WHERE r.id = y.id
  RETURNING r.id, r.status
), w AS (
  DELETE FROM taskport.waiter WHERE run_id = ANY(ARRAY(SELECT id FROM t WHERE status IN ('failed', 'canceled')))
)
SELECT count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'failed'),
  count(*) FILTER (WHERE status = 'canceled') FROM t`

// unstartedLossesCharged is reapSQL's $2: the lost claims in a row without
// a started step reported from which the reaper charges anyway.
const unstartedLossesCharged = 3

// queueDepthSQL counts the ready runs of the served pairs ($1, $2), as
// claimSQL reads them (Metrics.QueueDepth, every poll interval), under
// claimPlanSQL: it reads the ready entries of run_ready_kind of those
// pairs, neither the scheduled ones nor those of a pair nobody here serves:
// one count per pair and priority, an aggregate the planner cannot turn
// into a join that reads a pair's runs of every priority, due or not.
const queueDepthSQL = presentPrioritiesCTE + `
SELECT coalesce(sum(r.n), 0)::int FROM unnest($1::text[], $2::int[]) AS s(kind, version)
CROSS JOIN (SELECT priority FROM present WHERE priority IS NOT NULL) AS p
CROSS JOIN LATERAL (SELECT count(*) AS n FROM taskport.run WHERE ` + readyOfPair + `) AS r`

// topicLockSQL serializes a topic's signal senders and waiters, so that a
// signal is either seen by a waiter's check or finds the waiter registered.
const topicLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended($1, 7454))`

// signalSQL stores the signal once per lease run waiting on the topic, or
// once untargeted when none waits, with the signaller's trace context ($3,
// $4), and wakes the waiters. (Temporal runs register in taskport.waiter
// too; their engine signals them.)
const signalSQL = `
WITH w AS (
  SELECT w.run_id FROM taskport.waiter w JOIN taskport.run r ON r.id = w.run_id AND r.engine = 'lease'
  WHERE w.topic = $1
), ins AS (
  INSERT INTO taskport_lease.task_signal (topic, payload, target, traceparent, tracestate)
  SELECT $1::text, $2::jsonb, run_id, $3::text, $4::text FROM w
  UNION ALL
  SELECT $1::text, $2::jsonb, NULL::uuid, $3::text, $4::text WHERE NOT EXISTS (SELECT 1 FROM w)
), wake AS (
  UPDATE taskport.run r SET next_run_at = now()
  FROM w WHERE r.id = w.run_id AND r.status = 'waiting'
)
SELECT count(*) FROM w`

const notifySQL = `SELECT pg_notify($1, $2)`

// lockClaimSQL is the first statement of a wait: it checks the claim, reads
// the wait in progress, if any, and whether the run's cancel was requested.
// Its row lock holds a later cancel request back until the wait commits, so
// a wait that finds no request parks a run that Cancel then finds waiting.
const lockClaimSQL = `
SELECT current_step, wait_topic, wait_until, now(), cancel_requested_at IS NOT NULL
FROM taskport.run WHERE ` + claimedRun + `
FOR UPDATE`

// consumeSignalSQL takes the oldest signal on the topic addressed to this
// run or to nobody. A traced signal moves the run onto the signaller's
// trace: what the run does next is what the signal's transaction decided
// (an approval, a completed download). The run row is locked by
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
  UPDATE taskport.run SET traceparent = s.traceparent, tracestate = s.tracestate
  FROM s WHERE taskport.run.id = $2 AND s.traceparent <> ''
)
SELECT payload, traceparent, tracestate FROM s`

// parkSQL releases the claim and parks the run until $4 (a signal sets
// next_run_at to now). A wait or sleep is no attempt and has no error of its
// own: attempts 0, last_error "".
const parkSQL = `
UPDATE taskport.run
SET status = 'waiting', next_run_at = $4, wait_until = $4, wait_topic = $5, current_step = $3, attempts = 0,
    last_error = '', ` + endedClaim + `
WHERE ` + claimedRun

// settleCancelSQL settles a cancel on the lease engine's side, after
// runstore.RequestCancel flagged the run: a pending or waiting run ends
// canceled at once; a running one is left to its worker, which the caller
// notifies. It returns the status the run had.
const settleCancelSQL = `
WITH o AS (
  SELECT id, status AS old FROM taskport.run WHERE id = $1 AND engine = 'lease' FOR UPDATE
), t AS (
  UPDATE taskport.run r
  SET cancel_requested_at = coalesce(r.cancel_requested_at, now()),
      status = CASE WHEN o.old IN ('pending', 'waiting') THEN 'canceled' ELSE r.status END,
      finished_at = CASE WHEN o.old IN ('pending', 'waiting') THEN now() ELSE r.finished_at END,
      last_error = CASE WHEN o.old IN ('pending', 'waiting') THEN '' ELSE r.last_error END,
      wait_topic = CASE WHEN o.old IN ('pending', 'waiting') THEN NULL ELSE r.wait_topic END,
      wait_until = CASE WHEN o.old IN ('pending', 'waiting') THEN NULL ELSE r.wait_until END,
      updated_at = CASE WHEN o.old IN ('pending', 'waiting') THEN now() ELSE r.updated_at END
  FROM o WHERE r.id = o.id
  RETURNING r.id, o.old, r.status
), w AS (
  DELETE FROM taskport.waiter WHERE run_id IN (SELECT id FROM t WHERE status = 'canceled')
)
SELECT old FROM t`

// pruneRunsSQL is the retention of lease runs (package retention): it
// deletes the runs runstore.PrunableRunsCTE selects with their step
// results, in one statement so that both commit together, and counts each.
// (The AFTER DELETE trigger of migrations 00004 and 00014 finds nothing
// left to cascade; waiters go by their foreign key.)
const pruneRunsSQL = runstore.PrunableRunsCTE + `, s AS (
  DELETE FROM taskport_lease.step_result WHERE run_id IN (SELECT id FROM r) RETURNING 1
), d AS (
  DELETE FROM taskport.run WHERE id IN (SELECT id FROM r) RETURNING 1
)
SELECT (SELECT count(*) FROM d), (SELECT count(*) FROM s)`

// openTarget is true when a signal's target is a run still open: its
// signal is kept whatever its age.
const openTarget = `EXISTS (SELECT 1 FROM taskport.run r
                    WHERE r.id = s.target AND r.status IN ('pending', 'running', 'waiting'))`

// pruneSignalsSQL deletes up to $2 consumed signals consumed more than $1
// ms ago, and up to $2 signals never consumed and sent more than $1 ms ago
// whose target is not an open run: an early signal that no run came to wait
// for within the age expires, and a signal sent to a run that then ended is
// never consumed. It runs after dbtx.PinIndexScansSQL: unpinned, a planner
// without statistics sorts every old unconsumed signal for the LIMIT, or
// hashes the whole run table for the open-run check, instead of walking
// task_signal_unconsumed_age in order and probing run_pkey per row.
// signalLagSQL is its lag in ms, 0 when nothing is prunable.
var pruneSignalsSQL, signalLagSQL = runstore.SignalRetentionSQL("taskport_lease.task_signal", "NOT "+openTarget)
