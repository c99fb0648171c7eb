#!/usr/bin/env bash
# The main job end to end on this machine: installs what is missing, builds, starts PostgreSQL
# and Kafka, creates an outbox table, runs the relay, writes sample events in transactions (one
# rolled back), and prints what Kafka received, with keys and headers.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"

"$REPO/scripts/install-deps.sh"
log "building"
[ -f build/CMakeCache.txt ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target outbox-relay -j "$(nproc)" >/dev/null
PG=$("$REPO/scripts/pg-up.sh")
BROKERS=$("$REPO/scripts/kafka-up.sh")
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
log "starting outbox-relay (log: $LOG)"
build/outbox-relay --pg "$PG" --brokers "$BROKERS" --table "public.outbox_$RUN" \
  --slot "$RUN" --publication "$RUN" --topic "demo.$RUN.\${aggregatetype}" \
  --status-interval 1s >"$LOG" 2>&1 &
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
