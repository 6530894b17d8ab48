-- One run of a three-step kind, statement by statement as the lease worker
-- commits it: the claim (claimSQL), two steps (recordStepSQL), and the
-- finish with the last step held back (finishSQL). Each statement is a
-- transaction of its own.
WITH c AS (
  SELECT id FROM taskport_lease.task
  WHERE status IN ('pending', 'waiting') AND next_run_at <= now() AND priority = 0
  ORDER BY priority, next_run_at LIMIT 1 FOR UPDATE SKIP LOCKED
)
UPDATE taskport_lease.task t
SET status = 'running', lease_owner = 'w', lease_token = gen_random_uuid(),
    lease_until = now() + interval '30 s', claims = t.claims + 1, updated_at = now()
FROM c WHERE t.id = c.id
RETURNING t.id AS tid, t.lease_token AS tok, t.input AS inp, t.run_seq AS rseq
\gset
WITH t AS (
  SELECT id FROM taskport_lease.task WHERE id = :tid AND lease_token = :tok AND status = 'running' FOR SHARE
), s AS (
  INSERT INTO taskport_lease.step_result (task_id, seq, name, result, attempts)
  SELECT id, 0, 's0', '0'::jsonb, 1 FROM t RETURNING 1
)
SELECT count(*), now() FROM s;
WITH t AS (
  SELECT id FROM taskport_lease.task WHERE id = :tid AND lease_token = :tok AND status = 'running' FOR SHARE
), s AS (
  INSERT INTO taskport_lease.step_result (task_id, seq, name, result, attempts)
  SELECT id, 1, 's1', '1'::jsonb, 1 FROM t RETURNING 1
)
SELECT count(*), now() FROM s;
WITH t AS (
  UPDATE taskport_lease.task
  SET status = 'succeeded', finished_at = now(), wait_topic = NULL, wait_until = NULL, progress = NULL,
      lease_owner = NULL, lease_token = NULL, lease_until = NULL, updated_at = now()
  WHERE id = :tid AND lease_token = :tok AND status = 'running'
  RETURNING id, last_error
), s AS (
  INSERT INTO taskport_lease.step_result (task_id, seq, name, result, attempts)
  SELECT id, 2, 's2', '2'::jsonb, 1 FROM t
), r AS (
  UPDATE taskport.run SET status = 'succeeded', last_error = t.last_error, updated_at = now(),
    current_step = 's2', attempts = 1, finished_at = coalesce(finished_at, now())
  FROM t WHERE taskport.run.id = t.id
), w AS (
  DELETE FROM taskport.waiter WHERE run_id IN (SELECT id FROM t)
)
SELECT count(*), now() FROM t;
