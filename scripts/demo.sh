#!/usr/bin/env bash
# The main job end to end on this machine: installs what is missing, builds, starts PostgreSQL
# and Kafka, creates an outbox table, runs the relay, writes sample events in transactions (one
# rolled back), and prints what Kafka received, with keys and headers.
# OUTBOX_DEMO_SINK=nats: the same story with NATS JetStream instead of Kafka (scripts/nats-up.sh;
# `setup --nats-stream` creates the stream; tools/nats-read prints what the stream stored).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"

"$REPO/scripts/install-deps.sh"
log "building"
[ -f build/CMakeCache.txt ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
SINK="${OUTBOX_DEMO_SINK:-kafka}"
case $SINK in
  kafka | nats) ;;
  *) die "OUTBOX_DEMO_SINK=$SINK: kafka (the default) or nats" ;;
esac
if [ "$SINK" = nats ]; then
  cmake --build build --target outbox-relay outbox-nats-read -j "$(nproc)" >/dev/null
else
  cmake --build build --target outbox-relay -j "$(nproc)" >/dev/null
fi
PG=$("$REPO/scripts/pg-up.sh")
if [ "$SINK" = nats ]; then
  NATS=$("$REPO/scripts/nats-up.sh")
else
  BROKERS=$("$REPO/scripts/kafka-up.sh")
fi
RUN="demo$(date +%s)"  # fresh names: a rerun shows only its own events

log "creating table public.outbox_$RUN"
psql "$PG" -qX -v ON_ERROR_STOP=1 <<SQL
CREATE TABLE public.outbox_$RUN (
  id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  aggregatetype text NOT NULL,
  aggregateid   text NOT NULL,
  type          text NOT NULL,
  payload       jsonb,
  created_at    timestamptz NOT NULL DEFAULT now()
);
SQL

LOG="$LOCAL_DIR/demo-relay.log"
if [ "$SINK" = nats ]; then
  STREAM="DEMO_$RUN"
  log "setup: the publication, the slot and the JetStream stream $STREAM"
  build/outbox-relay setup --pg "$PG" --table "public.outbox_$RUN" --slot "$RUN" \
    --publication "$RUN" --nats "$NATS" --nats-stream "$STREAM" \
    --topic "demo.$RUN.\${aggregatetype}" --dlq-topic "demo.$RUN.dlq"
  log "starting outbox-relay --nats $NATS (log: $LOG)"
  build/outbox-relay --pg "$PG" --nats "$NATS" --table "public.outbox_$RUN" \
    --slot "$RUN" --publication "$RUN" --topic "demo.$RUN.\${aggregatetype}" \
    --status-interval 1s >"$LOG" 2>&1 &
else
  log "starting outbox-relay (log: $LOG)"
  build/outbox-relay --pg "$PG" --brokers "$BROKERS" --table "public.outbox_$RUN" \
    --slot "$RUN" --publication "$RUN" --topic "demo.$RUN.\${aggregatetype}" \
    --status-interval 1s >"$LOG" 2>&1 &
fi
RELAY=$!
cleanup() {
  kill -TERM "$RELAY" 2>/dev/null && wait "$RELAY" 2>/dev/null
  psql "$PG" -qX -c "SELECT pg_drop_replication_slot('$RUN')" -c "DROP PUBLICATION IF EXISTS $RUN" \
    -c "DROP TABLE IF EXISTS public.outbox_$RUN" >/dev/null 2>&1 || true
}
trap cleanup EXIT
wait_until 30 "the relay to stream" grep -q "event=streaming" "$LOG" || {
  cat "$LOG"
  die "the relay did not start"
}

log "writing events: 3 committed transactions and 1 rolled back"
psql "$PG" -qX -v ON_ERROR_STOP=1 <<SQL
BEGIN;  -- in a service, the business change goes in the same transaction
INSERT INTO outbox_$RUN (aggregatetype, aggregateid, type, payload)
  VALUES ('Order', 'order-1001', 'OrderCreated', '{"orderId": 1001, "total": 42.50}');
INSERT INTO outbox_$RUN (aggregatetype, aggregateid, type, payload)
  VALUES ('Customer', 'cust-7', 'CustomerUpgraded', '{"customerId": 7, "tier": "gold"}');
COMMIT;
BEGIN;
INSERT INTO outbox_$RUN (aggregatetype, aggregateid, type, payload)
  VALUES ('Order', 'order-1001', 'OrderPaid', '{"orderId": 1001, "method": "card"}');
COMMIT;
BEGIN;
INSERT INTO outbox_$RUN (aggregatetype, aggregateid, type, payload)
  VALUES ('Order', 'order-666', 'OrderCreated', '{"ghost": true}');
ROLLBACK;
INSERT INTO outbox_$RUN (aggregatetype, aggregateid, type, payload)
  VALUES ('Order', 'order-1001', 'OrderShipped', '{"orderId": 1001, "carrier": "DHL"}');
SQL

if [ "$SINK" = nats ]; then
  build/outbox-nats-read --nats "$NATS" --stream "$STREAM" --wait-count 4 --timeout-s 60 \
    >/dev/null || die "events did not arrive; see $LOG"
  echo
  echo "== stream $STREAM (subjects demo.$RUN.>, in the order JetStream stored them)"
  build/outbox-nats-read --nats "$NATS" --stream "$STREAM"
  echo
  psql "$PG" -qXAt -c "SELECT 'slot ' || slot_name || ' confirmed_flush_lsn=' || confirmed_flush_lsn || ' (server at ' || pg_current_wal_lsn() || ')' FROM pg_replication_slots WHERE slot_name = '$RUN'"
  echo "(the rolled-back order-666 event never reached JetStream; relay log: $LOG)"
  exit 0
fi

count_topic() {
  kcat -b "$BROKERS" -C -t "$1" -e -q -f '%o\n' 2>/dev/null | wc -l
}
have_all() {
  [ "$(count_topic "demo.$RUN.Order")" -ge 3 ] && [ "$(count_topic "demo.$RUN.Customer")" -ge 1 ]
}
wait_until 60 "4 events in Kafka" have_all || die "events did not arrive; see $LOG"

for topic in "demo.$RUN.Order" "demo.$RUN.Customer"; do
  echo
  echo "== topic $topic"
  kcat -b "$BROKERS" -C -t "$topic" -e -q \
    -f '  partition=%p offset=%o key=%k\n    headers: %h\n    value:   %s\n'
done
echo
psql "$PG" -qXAt -c "SELECT 'slot ' || slot_name || ' confirmed_flush_lsn=' || confirmed_flush_lsn || ' (server at ' || pg_current_wal_lsn() || ')' FROM pg_replication_slots WHERE slot_name = '$RUN'"
echo "(the rolled-back order-666 event never reached Kafka; relay log: $LOG)"
