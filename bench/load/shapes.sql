-- The W1 shapes of bench/run.sh, after schema.sql: psql -v shape=bytea|tables -f shapes.sql.
--   bytea:  the payload column is bytea; bench_load writes payload_bytes pseudo-random bytes (md5
--           digests, NUL and invalid UTF-8 included), which pgoutput sends as hex text.
--   tables: three more outbox tables in bench_pub; bench_load spreads the transactions over the
--           four, round robin (one slot, one walsender, --table four times).
\set ON_ERROR_STOP 1
SELECT :'shape' = 'bytea' AS is_bytea, :'shape' = 'tables' AS is_tables \gset

\if :is_bytea
ALTER TABLE public.bench_outbox ALTER COLUMN payload TYPE bytea USING NULL;
CREATE OR REPLACE PROCEDURE public.bench_load(n_txn int, per_txn int, payload_bytes int)
LANGUAGE plpgsql AS $$
DECLARE
  chunks int := (payload_bytes + 15) / 16;
BEGIN
  FOR t IN 0 .. n_txn - 1 LOOP
    INSERT INTO public.bench_outbox (aggregatetype, aggregateid, type, payload)
    SELECT 'order', 'agg-' || ((t::bigint * per_txn + i) % 1000), 'OrderCreated',
           substring((SELECT string_agg(decode(md5((t::bigint * per_txn + i)::text || ':' || j), 'hex'), ''::bytea)
                        FROM generate_series(1, chunks) AS j) FROM 1 FOR payload_bytes)
      FROM generate_series(1, per_txn) AS i;
    COMMIT;
  END LOOP;
END $$;
\endif

\if :is_tables
DROP TABLE IF EXISTS public.bench_outbox_2, public.bench_outbox_3, public.bench_outbox_4;
CREATE TABLE public.bench_outbox_2 (LIKE public.bench_outbox INCLUDING ALL);
CREATE TABLE public.bench_outbox_3 (LIKE public.bench_outbox INCLUDING ALL);
CREATE TABLE public.bench_outbox_4 (LIKE public.bench_outbox INCLUDING ALL);
ALTER PUBLICATION bench_pub ADD TABLE public.bench_outbox_2, public.bench_outbox_3, public.bench_outbox_4;
CREATE OR REPLACE PROCEDURE public.bench_load(n_txn int, per_txn int, payload_bytes int)
LANGUAGE plpgsql AS $$
DECLARE
  hexlen int := payload_bytes - 12;
  chunks int := (payload_bytes - 12 + 31) / 32;
  tbl text;
BEGIN
  FOR t IN 0 .. n_txn - 1 LOOP
    tbl := CASE t % 4 WHEN 0 THEN 'bench_outbox' ELSE 'bench_outbox_' || (t % 4 + 1) END;
    EXECUTE format($q$
      INSERT INTO public.%I (aggregatetype, aggregateid, type, payload)
      SELECT 'order', 'agg-' || (($1::bigint * $2 + i) %% 1000), 'OrderCreated',
             jsonb_build_object('data', left(
               (SELECT string_agg(md5(($1::bigint * $2 + i)::text || ':' || j), '')
                  FROM generate_series(1, $3) AS j), $4))
        FROM generate_series(1, $2) AS i$q$, tbl)
      USING t, per_txn, chunks, hexlen;
    COMMIT;
  END LOOP;
END $$;
\endif
