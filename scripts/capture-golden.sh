#!/usr/bin/env bash
# Captures golden pgoutput messages (protocol version 1) from a real PostgreSQL server into
# tests/data/pgoutput/. Each row of pg_logical_slot_peek_binary_changes() is exactly one pgoutput
# message; it is stored as one lowercase hex string per file, named NN_<kind>.hex in stream order.
#
# Usage: scripts/capture-golden.sh 'host=127.0.0.1 port=55440 user=postgres dbname=postgres'
# Needs: wal_level=logical, a superuser (replication origins), an EMPTY scratch database (the
# script creates types, tables, a publication, a slot and an origin, and drops them at the end).
# Values that the server chooses (LSNs, xids, relids, timestamps of commits) differ between runs;
# the unit tests check them for consistency, and the literal values we inserted exactly.
set -euo pipefail

conninfo=${1:?usage: $0 CONNINFO [OUTDIR]}
outdir=${2:-"$(cd "$(dirname "$0")/.." && pwd)/tests/data/pgoutput"}
# Text output of timestamps depends on the decoding session's settings: pin them.
export PGOPTIONS="-c timezone=UTC -c datestyle=ISO,MDY"
psql_run() { psql "$conninfo" -X -q -v ON_ERROR_STOP=1 "$@"; }

psql_run -o /dev/null <<'SQL'
CREATE TYPE public.mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE public.outbox(
  id uuid PRIMARY KEY,
  aggregatetype text NOT NULL,
  aggregateid text NOT NULL,
  type text NOT NULL,
  payload jsonb,
  created_at timestamptz DEFAULT now());
-- Out-of-line storage so an UPDATE that leaves aggregateid alone sends it as 'u' (unchanged TOAST).
ALTER TABLE public.outbox ALTER COLUMN aggregateid SET STORAGE EXTERNAL;
-- FULL identity: updates and deletes carry the whole old row ('O').
CREATE TABLE public.audit(id int PRIMARY KEY, mood public.mood, note text);
ALTER TABLE public.audit REPLICA IDENTITY FULL;
CREATE PUBLICATION pub FOR TABLE public.outbox, public.audit
  WITH (publish = 'insert, update, delete, truncate');
SELECT 1 FROM pg_create_logical_replication_slot('golden', 'pgoutput');
SQL

psql_run -o /dev/null <<'SQL'
-- Transaction 1: two outbox rows (unicode payload, NULL payload) and a transactional message.
BEGIN;
INSERT INTO public.outbox VALUES
  ('8d0c0b8e-4a55-4f6e-9d2c-3f1b2a7c9e01', 'order', '42', 'OrderCreated',
   '{"total": 12.5, "customer": "Zoë ✓ 日本"}', '2024-01-02 03:04:05.123456+00');
INSERT INTO public.outbox VALUES
  ('8d0c0b8e-4a55-4f6e-9d2c-3f1b2a7c9e02', 'order', '43', 'OrderCancelled', NULL,
   '2024-01-02 03:04:06+00');
SELECT 1 FROM pg_logical_emit_message(true, 'pfx', 'hello');
COMMIT;
-- Non-transactional message: arrives on its own, outside any Begin/Commit.
SELECT 1 FROM pg_logical_emit_message(false, 'pfx', 'bye');
-- Transaction 2: a long (out-of-line) value, an update leaving it unchanged ('u'), a key change
-- ('K' old key), a delete ('K').
BEGIN;
INSERT INTO public.outbox VALUES
  ('8d0c0b8e-4a55-4f6e-9d2c-3f1b2a7c9e03', 'customer',
   (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 125) AS i), 'CustomerMoved',
   '{"a": [1, 2, 3]}', '2024-01-02 03:04:07+00');
UPDATE public.outbox SET type = 'CustomerMovedAgain'
  WHERE id = '8d0c0b8e-4a55-4f6e-9d2c-3f1b2a7c9e03';
UPDATE public.outbox SET id = '8d0c0b8e-4a55-4f6e-9d2c-3f1b2a7c9e04'
  WHERE id = '8d0c0b8e-4a55-4f6e-9d2c-3f1b2a7c9e02';
DELETE FROM public.outbox WHERE id = '8d0c0b8e-4a55-4f6e-9d2c-3f1b2a7c9e01';
COMMIT;
-- Transaction 3: a user-defined enum column ('Y' before 'R'), REPLICA IDENTITY FULL ('O').
BEGIN;
INSERT INTO public.audit VALUES (1, 'happy', 'first');
UPDATE public.audit SET mood = 'ok', note = NULL WHERE id = 1;
DELETE FROM public.audit WHERE id = 1;
COMMIT;
-- Transaction 4: truncate of two relations with RESTART IDENTITY (options = 2).
TRUNCATE public.outbox, public.audit RESTART IDENTITY;
-- Transaction 5: replayed from a replication origin, so Begin is followed by 'O' Origin.
SELECT 1 FROM pg_replication_origin_create('golden_origin');
SELECT 1 FROM pg_replication_origin_session_setup('golden_origin');
BEGIN;
SELECT 1 FROM pg_replication_origin_xact_setup('0/1234ABCD', '2024-01-01 00:00:00+00');
INSERT INTO public.outbox VALUES
  ('8d0c0b8e-4a55-4f6e-9d2c-3f1b2a7c9e05', 'order', '44', 'OrderReplayed', '{}',
   '2024-01-02 03:04:08+00');
COMMIT;
SELECT 1 FROM pg_replication_origin_session_reset();
SQL

mkdir -p "$outdir"
rm -f "$outdir"/*.hex
# One file per message. Kind names follow the first (type) byte.
psql_run -A -t -F ' ' -c "
  SELECT row_number() OVER (), encode(data, 'hex')
  FROM pg_logical_slot_peek_binary_changes('golden', NULL, NULL, 'proto_version', '1',
       'publication_names', 'pub', 'messages', 'true')" |
while read -r n hex; do
  case ${hex:0:2} in
    42) kind=begin ;; 43) kind=commit ;; 4f) kind=origin ;; 52) kind=relation ;;
    59) kind=type ;; 49) kind=insert ;; 55) kind=update ;; 44) kind=delete ;;
    54) kind=truncate ;; 4d) kind=message ;; *) kind=unknown ;;
  esac
  printf '%s\n' "$hex" >"$outdir/$(printf '%02d' "$n")_${kind}.hex"
done
# Binary mode ('b' column values): the first Insert of the same stream, decoded with binary=true.
psql_run -A -t -c "
  SELECT encode(data, 'hex')
  FROM pg_logical_slot_peek_binary_changes('golden', NULL, NULL, 'proto_version', '1',
       'publication_names', 'pub', 'binary', 'true')
  WHERE get_byte(data, 0) = ascii('I') LIMIT 1" >"$outdir/binary_insert.hex"

psql_run -o /dev/null <<'SQL'
SELECT 1 FROM pg_drop_replication_slot('golden');
SELECT 1 FROM pg_replication_origin_drop('golden_origin');
DROP PUBLICATION pub;
DROP TABLE public.outbox, public.audit;
DROP TYPE public.mood;
SQL
ls "$outdir"
