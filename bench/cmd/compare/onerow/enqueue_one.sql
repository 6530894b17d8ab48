-- The same 1000 runs as enqueue_two.sql, the lease state in the run row.
WITH r AS (
  INSERT INTO taskport.run (id, engine, kind, version, idempotency_key, business_key, priority, input, available_at,
    next_run_at, max_attempts, backoff_initial, backoff_max, backoff_coefficient, traceparent, tracestate)
  SELECT bench_next_id(), 'lease', 'noop', 1, nextval('bench_key')::text, '', 0, '{}'::jsonb, now(),
    now(), 5, interval '1 s', interval '1 min', 2, '', ''
  FROM generate_series(1, 1000)
  ON CONFLICT (kind, idempotency_key) DO NOTHING
  RETURNING id, next_run_at
), n AS (
  SELECT pg_notify('taskport_lease', '') FROM (SELECT FROM r WHERE next_run_at <= now() LIMIT 1) AS any_ready
)
SELECT id FROM r WHERE (SELECT count(*) FROM n) >= 0;
