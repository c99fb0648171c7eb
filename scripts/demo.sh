#!/usr/bin/env bash
# The main job end to end on this machine: installs what is missing, builds, starts PostgreSQL
# and Kafka, creates an outbox table, runs the relay, writes sample events in transactions (one
# rolled back), and prints what Kafka received, with keys and headers.
# OUTBOX_DEMO_SINK=nats: the same story with NATS JetStream instead of Kafka (scripts/nats-up.sh;
# `setup --nats-stream` creates the stream; tools/nats-read prints what the stream stored).
# OUTBOX_DEMO_SINK=sqs: the same story with Amazon SQS, against moto's server (scripts/aws-up.sh,
# its authentication on): a FIFO queue, the relay with --sqs, and the queue read back with an
# independent client (tools/aws-admin/aws_admin.py, boto3): each aggregate's events in order.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"

"$REPO/scripts/install-deps.sh"
log "building"
[ -f build/CMakeCache.txt ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
SINK="${OUTBOX_DEMO_SINK:-kafka}"
case $SINK in
  kafka | nats | sqs) ;;
  *) die "OUTBOX_DEMO_SINK=$SINK: kafka (the default), nats or sqs" ;;
esac
if [ "$SINK" = nats ]; then
  cmake --build build --target outbox-relay outbox-nats-read -j "$(nproc)" >/dev/null
else
  cmake --build build --target outbox-relay -j "$(nproc)" >/dev/null
fi
PG=$("$REPO/scripts/pg-up.sh")
if [ "$SINK" = nats ]; then
  NATS=$("$REPO/scripts/nats-up.sh")
elif [ "$SINK" = sqs ]; then
  "$REPO/scripts/aws-up.sh" >/dev/null
  # shellcheck disable=SC1090
  source "$ENV_FILE"  # OUTBOX_AWS_ENDPOINT, _REGION and the test key of the local moto
  export OUTBOX_AWS_ENDPOINT OUTBOX_AWS_REGION OUTBOX_AWS_ACCESS_KEY_ID OUTBOX_AWS_SECRET_ACCESS_KEY
  AWS_ADMIN=("$SHARED_DIR/aws/venv/bin/python" "$REPO/tools/aws-admin/aws_admin.py")
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
elif [ "$SINK" = sqs ]; then
  QUEUE=$("${AWS_ADMIN[@]}" create-queue "demo-$RUN.fifo" --fifo)
  log "created the FIFO queue $QUEUE"
  log "starting outbox-relay --sqs $QUEUE (log: $LOG)"
  # The credentials as the AWS SDKs find them: here the environment (docs/aws.md).
  AWS_ACCESS_KEY_ID=$OUTBOX_AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY=$OUTBOX_AWS_SECRET_ACCESS_KEY \
    build/outbox-relay --pg "$PG" --sqs "$QUEUE" --aws-endpoint "$OUTBOX_AWS_ENDPOINT" \
    --aws-region "$OUTBOX_AWS_REGION" --table "public.outbox_$RUN" --slot "$RUN" \
    --publication "$RUN" --topic "demo.$RUN.\${aggregatetype}" \
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
SQL
# The server's position before the last transaction: its commit ends past it, and the slot is
# confirmed past it only once the broker acknowledged every event.
BEFORE_LAST=$(psql "$PG" -qXAt -c "SELECT pg_current_wal_lsn()")
psql "$PG" -qX -v ON_ERROR_STOP=1 <<SQL
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

if [ "$SINK" = sqs ]; then
  "${AWS_ADMIN[@]}" wait-count "$QUEUE" 4 --timeout-s 60 >/dev/null || die "events did not arrive; see $LOG"
  echo
  echo "== queue $QUEUE (MessageGroupId = the aggregate: each group in commit order)"
  "${AWS_ADMIN[@]}" read "$QUEUE" 4 --timeout-s 60 | tee "$LOCAL_DIR/demo-sqs.txt"
  # What a consumer of the queue relies on: each aggregate's events in commit order, nothing of
  # the rolled-back transaction.
  grep -qx 'per group: cust-7: CustomerUpgraded; order-1001: OrderCreated OrderPaid OrderShipped' \
    "$LOCAL_DIR/demo-sqs.txt" || die "the queue did not hold each aggregate's events in commit order"
  [ "$("${AWS_ADMIN[@]}" count "$QUEUE")" = 0 ] || die "the queue held more than the 4 committed events"
  echo
  # The slot moves at the relay's next status update once SQS acknowledged everything.
  slot_past_last() {
    [ "$(psql "$PG" -qXAt -c "SELECT confirmed_flush_lsn > '$BEFORE_LAST' FROM pg_replication_slots WHERE slot_name = '$RUN'")" = t ]
  }
  wait_until 30 "the slot confirmed through the last transaction" slot_past_last ||
    die "the slot was not confirmed through the last transaction; see $LOG"
  psql "$PG" -qXAt -c "SELECT 'slot ' || slot_name || ' confirmed_flush_lsn=' || confirmed_flush_lsn || ' (server at ' || pg_current_wal_lsn() || ')' FROM pg_replication_slots WHERE slot_name = '$RUN'"
  echo "(the rolled-back order-666 event never reached SQS; relay log: $LOG)"
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
