-- outbox.emit(): publish an outbox event without an outbox table (README, "Table-less outbox").
-- It emits the event's JSON envelope as a transactional logical decoding message with the prefix
-- 'outbox', in the caller's transaction: the event reaches Kafka if and only if the transaction
-- commits, in commit order, relayed by `outbox-relay --messages outbox`. Returns the event id.
--
--   BEGIN;
--   UPDATE orders SET status = 'paid' WHERE id = 42;
--   SELECT outbox.emit('order', '42', 'OrderPaid', '{"id": 42, "status": "paid"}');
--   COMMIT;
--
-- `outbox-relay setup --messages PREFIX` installs the same function with its PREFIX; to install it
-- by hand with another prefix, replace 'outbox' in pg_logical_emit_message(true, 'outbox', ...).
CREATE SCHEMA IF NOT EXISTS outbox;

CREATE OR REPLACE FUNCTION outbox.emit(aggregate_type text, aggregate_id text, type text,
    payload jsonb, headers jsonb DEFAULT '{}', id uuid DEFAULT gen_random_uuid())
RETURNS uuid LANGUAGE sql VOLATILE AS $emit$
  -- Header values are sent as text, whatever their JSON type.
  SELECT pg_catalog.pg_logical_emit_message(true, 'outbox', pg_catalog.jsonb_build_object(
    'id', $6, 'aggregatetype', $1, 'aggregateid', $2, 'type', $3, 'payload', $4,
    'headers', COALESCE((SELECT pg_catalog.jsonb_object_agg(h.key, h.value)
                         FROM pg_catalog.jsonb_each_text($5) h), '{}'))::text);
  SELECT $6;
$emit$;
