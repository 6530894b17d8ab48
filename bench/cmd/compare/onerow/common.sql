-- Ids and keys from sequences: ids ascend as UUIDv7s do (runstore makes
-- v7 ids), keys are numbers as in `compare enqueue`.
CREATE SEQUENCE bench_id;
CREATE SEQUENCE bench_key;
CREATE FUNCTION bench_next_id() RETURNS uuid LANGUAGE sql AS
$$ SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(nextval('bench_id')), 12, '0'))::uuid $$;
