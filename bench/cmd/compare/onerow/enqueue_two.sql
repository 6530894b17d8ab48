-- 1000 runs in one statement, shaped as leaseadapter's enqueueManySQL: the
-- run rows, then a task row for each run inserted, and one notification.
WITH r AS (
  INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, business_key, priority, input, available_at)
  SELECT bench_next_id(), 'lease', 'noop', 1, nextval('bench_key')::text, '', 0, '{}'::jsonb, now()
  FROM generate_series(1, 1000)
  ON CONFLICT (kind, idempotency_key) DO NOTHING
  RETURNING id, kind, version, input, priority, available_at, seq
), t AS (
  INSERT INTO taskport_lease.task (id, kind, handler_version, input, priority, next_run_at,
    max_attempts, backoff_initial, backoff_max, backoff_coefficient, run_seq, traceparent, tracestate)
  SELECT r.id, r.kind, r.version, r.input, r.priority, r.available_at, 5, interval '1 s', interval '1 min', 2, r.seq, '', ''
  FROM r
  RETURNING next_run_at
), n AS (
  SELECT pg_notify('taskport_lease', '') FROM (SELECT FROM t WHERE next_run_at <= now() LIMIT 1) AS any_ready
)
SELECT id FROM r WHERE (SELECT count(*) FROM n) >= 0;
