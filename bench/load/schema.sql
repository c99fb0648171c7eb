-- Benchmark outbox table (the relay's and Debezium's default column names) and the loader.
-- psql -v ON_ERROR_STOP=1 -f bench/load/schema.sql; bench/run.sh runs it before each load.
DROP PUBLICATION IF EXISTS bench_pub;
DROP PUBLICATION IF EXISTS bench_pub_dbz;
DROP TABLE IF EXISTS public.bench_outbox;
CREATE TABLE public.bench_outbox (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  aggregatetype text NOT NULL,
  aggregateid text NOT NULL,
  type text NOT NULL,
  payload jsonb NOT NULL
);
-- One publication for the decoder, pg_recvlogical and the relay; Debezium gets its own.
CREATE PUBLICATION bench_pub FOR TABLE public.bench_outbox WITH (publish = 'insert');
CREATE PUBLICATION bench_pub_dbz FOR TABLE public.bench_outbox WITH (publish = 'insert');

-- bench_load(n_txn, per_txn, payload_bytes): n_txn transactions of per_txn inserts each.
-- The payload prints (jsonb text output, what pgoutput sends) as exactly payload_bytes bytes:
-- {"data": "<hex>"}, the hex made of distinct md5s so that large payloads do not compress away
-- (4 KiB ones are TOASTed out of line, as real ones of that size would be).
-- Run it outside a transaction block (CALL commits after each transaction) with
-- synchronous_commit = off for speed; the WAL is flushed before anything is measured.
CREATE OR REPLACE PROCEDURE public.bench_load(n_txn int, per_txn int, payload_bytes int)
LANGUAGE plpgsql AS $$
DECLARE
  hexlen int := payload_bytes - 12;
  chunks int := (payload_bytes - 12 + 31) / 32;
BEGIN
  FOR t IN 0 .. n_txn - 1 LOOP
    INSERT INTO public.bench_outbox (aggregatetype, aggregateid, type, payload)
    SELECT 'order', 'agg-' || ((t::bigint * per_txn + i) % 1000), 'OrderCreated',
           jsonb_build_object('data', left(
             (SELECT string_agg(md5((t::bigint * per_txn + i)::text || ':' || j), '')
                FROM generate_series(1, chunks) AS j), hexlen))
      FROM generate_series(1, per_txn) AS i;
    COMMIT;
  END LOOP;
END $$;

-- bench_load_messages(n_txn, per_txn, payload_bytes): the same workload as bench_load, emitted as
-- transactional logical decoding messages (the JSON envelope of outbox.emit(), prefix 'bench')
-- instead of inserts: the relay's --messages path, with nothing written to a table.
CREATE OR REPLACE PROCEDURE public.bench_load_messages(n_txn int, per_txn int, payload_bytes int)
LANGUAGE plpgsql AS $$
DECLARE
  hexlen int := payload_bytes - 12;
  chunks int := (payload_bytes - 12 + 31) / 32;
BEGIN
  FOR t IN 0 .. n_txn - 1 LOOP
    PERFORM pg_logical_emit_message(true, 'bench', jsonb_build_object(
              'id', gen_random_uuid(), 'aggregatetype', 'order',
              'aggregateid', 'agg-' || ((t::bigint * per_txn + i) % 1000), 'type', 'OrderCreated',
              'payload', jsonb_build_object('data', left(
                (SELECT string_agg(md5((t::bigint * per_txn + i)::text || ':' || j), '')
                   FROM generate_series(1, chunks) AS j), hexlen)),
              'headers', '{}'::jsonb)::text)
      FROM generate_series(1, per_txn) AS i;
    COMMIT;
  END LOOP;
END $$;

-- The relay refuses --messages while PUBLIC may execute pg_logical_emit_message (any login could
-- publish forged events: docs/security.md); the bench emits as a superuser, who always may.
DO $$ DECLARE f regprocedure; BEGIN
  FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
           WHERE p.pronamespace = 'pg_catalog'::regnamespace
             AND p.proname = 'pg_logical_emit_message' LOOP
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
  END LOOP;
END $$;
