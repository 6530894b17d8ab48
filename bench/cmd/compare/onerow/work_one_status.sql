-- work_one.sql with a claim that also sets the run's status to running, as
-- the task row's does today: claimed runs leave run_ready, so the claim
-- skips none, but the update changes an indexed column, so it is never HOT
-- and writes an entry in every index of taskport.run.
WITH c AS (
  SELECT id FROM taskport.run
  WHERE engine = 'lease' AND status IN ('pending', 'waiting') AND next_run_at <= now() AND priority = 0
  ORDER BY priority, next_run_at LIMIT 1 FOR UPDATE SKIP LOCKED
)
UPDATE taskport.run r
SET status = 'running', lease_owner = 'w', lease_token = gen_random_uuid(),
    lease_until = now() + interval '30 s', claims = r.claims + 1
FROM c WHERE r.id = c.id
RETURNING r.id AS tid, r.lease_token AS tok, r.input AS inp, r.seq AS rseq
\gset
WITH t AS (
  SELECT id FROM taskport.run WHERE id = :tid AND lease_token = :tok AND status = 'running' FOR SHARE
), s AS (
  INSERT INTO taskport_lease.step_result (task_id, seq, name, result, attempts)
  SELECT id, 0, 's0', '0'::jsonb, 1 FROM t RETURNING 1
)
SELECT count(*), now() FROM s;
WITH t AS (
  SELECT id FROM taskport.run WHERE id = :tid AND lease_token = :tok AND status = 'running' FOR SHARE
), s AS (
  INSERT INTO taskport_lease.step_result (task_id, seq, name, result, attempts)
  SELECT id, 1, 's1', '1'::jsonb, 1 FROM t RETURNING 1
)
SELECT count(*), now() FROM s;
WITH t AS (
  UPDATE taskport.run
  SET status = 'succeeded', finished_at = now(), updated_at = now(), current_step = 's2', attempts = 1,
      wait_topic = NULL, wait_until = NULL, progress = NULL,
      lease_owner = NULL, lease_token = NULL, lease_until = NULL
  WHERE id = :tid AND lease_token = :tok AND status = 'running'
  RETURNING id
), s AS (
  INSERT INTO taskport_lease.step_result (task_id, seq, name, result, attempts)
  SELECT id, 2, 's2', '2'::jsonb, 1 FROM t
), w AS (
  DELETE FROM taskport.waiter WHERE run_id IN (SELECT id FROM t)
)
SELECT count(*), now() FROM t;
