#!/usr/bin/env bash
# Throughput, CPU, memory and latency of outbox-relay, side by side with PostgreSQL's own decoder
# (pg_logical_slot_get_binary_changes), pg_recvlogical, a walsender ceiling (bench_tool drain)
# and Debezium, on the same slot contents. scripts/bench.sh runs this script.
#
#   bench/run.sh            full run: W1, W2, W3 x 3 repetitions x 8 consumers (the relay on
#                           PLAINTEXT, with --delivery exactly-once, through SASL_SSL, and
#                           to NATS JetStream with --nats: relay_nats, when nats-server is
#                           installed; scripts/nats-up.sh starts it, and the bench stops it
#                           again if it was not running), and W1M: the relay to Kafka, to an
#                           SQS FIFO queue (relay_sqs) and to an EventBridge bus
#                           (relay_eventbridge) on 1,000 events, against moto's server
#                           (scripts/aws-up.sh, started when not running and stopped again):
#                           moto is the bound there, not the relay,
#                           latency run,
#                           micro-benchmark; results in bench/results/ (markdown + JSON)
#   bench/run.sh --quick    smoke run for CI (< 1 min): tiny workloads, 1 repetition, no
#                           Debezium, 5 s latency run; results in .local/bench/. Fails when a
#                           consumer fails.
# Options: --reps N, --workloads "W1 W2 W3 W1B W1T W1M", --no-debezium, --no-latency, --no-micro,
#          --no-messages (no relay_msg row: the same workload emitted as logical decoding
#          messages, relayed with --messages, on a load of its own after the others).
#          W1B and W1T are W1 with a bytea payload and over four outbox tables (relay only).
#          W1M is W1's shape, small (1,000 events; 200 with --quick), for the AWS sinks on moto
#          (no W1M when the relay has no --sqs or moto cannot start).
# Environment: OUTBOX_RELAY_BIN (default: build-bench/outbox-relay, built here in Release),
#              OUTBOX_BENCH_SETTLE (seconds to let the server settle after a load, default 5),
#              OUTBOX_BENCH_RELAY_ARGS (extra relay flags, e.g. "--read-pause 0", for comparisons),
#              OUTBOX_BENCH_DEBEZIUM=1 (Debezium in a --quick run too).
# Ports: PostgreSQL and Kafka are the ones scripts/pg-up.sh and scripts/kafka-up.sh start (or
#        find running) for this checkout, OUTBOX_PG_PORT, OUTBOX_KAFKA_PORT and
#        OUTBOX_KAFKA_CONTROLLER_PORT (defaults 25432, 29092, 29093 in scripts/lib.sh); the
#        relay's /metrics and Kafka Connect's REST API get a free port per run, or
#        OUTBOX_BENCH_METRICS_PORT and OUTBOX_BENCH_CONNECT_PORT when set.
#
# Per repetition: fresh table and publications, one fresh slot per consumer, all created before
# the load; the load (bench/load/schema.sql's bench_load); a probe slot gives the exact end LSN
# (the last commit's end); CHECKPOINT, VACUUM, settle; then each consumer in turn (one function
# each in bench/lib/consumers.sh), the order rotated across repetitions. The report takes the
# median of the repetitions (bench/report.py).
set -euo pipefail
BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=scripts/lib.sh
source "$BENCH_DIR/../scripts/lib.sh"
# shellcheck source=bench/lib/common.sh
source "$BENCH_DIR/lib/common.sh"
# shellcheck source=bench/lib/consumers.sh
source "$BENCH_DIR/lib/consumers.sh"
SCRIPT_NAME=bench
cd "$REPO"

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }

QUICK=0
REPS=3
WORKLOADS="W1 W2 W3 W1B W1T W1M"
DEBEZIUM=1
LATENCY=1
MICRO=1
MESSAGES=1
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    --reps) REPS=$2; shift ;;
    --workloads) WORKLOADS=$2; shift ;;
    --no-debezium) DEBEZIUM=0 ;;
    --no-latency) LATENCY=0 ;;
    --no-micro) MICRO=0 ;;
    --no-messages) MESSAGES=0 ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
  shift
done

# Workload: transactions, events per transaction, payload bytes.
declare -A WL_TXN=([W1]=200000 [W2]=200 [W3]=50000 [W1B]=200000 [W1T]=200000 [W1M]=1000)
declare -A WL_PER=([W1]=1 [W2]=1000 [W3]=1 [W1B]=1 [W1T]=1 [W1M]=1)
declare -A WL_BYTES=([W1]=200 [W2]=200 [W3]=4096 [W1B]=200 [W1T]=200 [W1M]=200)
# The shapes beside W1 (same transactions, same sizes): W1B a bytea payload (random bytes, NUL
# included; pgoutput sends them as hex text, the relay decodes), W1T the events spread over four
# outbox tables (one publication, one slot, --table four times). The relay and the references
# only: Debezium and the relay's other modes run on W1-W3.
# W1M: W1's transactions, few of them, for the sinks whose test server (moto) takes tens of
# events per second (SQS) to a few thousand (EventBridge): the relay to Kafka, SQS and
# EventBridge on the same slot contents.
declare -A WL_SHAPE=([W1]=default [W2]=default [W3]=default [W1B]=bytea [W1T]=tables [W1M]=aws)
LAT_RATE=5000
LAT_SECONDS=60
SETTLE="${OUTBOX_BENCH_SETTLE:-5}"
TIMEOUT=900
if [ "$QUICK" = 1 ]; then
  WL_TXN=([W1]=2000 [W2]=4 [W3]=500 [W1B]=2000 [W1T]=2000 [W1M]=200)
  WL_PER=([W1]=1 [W2]=500 [W3]=1 [W1B]=1 [W1T]=1 [W1M]=1)
  REPS=1
  DEBEZIUM="${OUTBOX_BENCH_DEBEZIUM:-0}"
  MICRO=0
  LAT_RATE=1000
  LAT_SECONDS=5
  SETTLE="${OUTBOX_BENCH_SETTLE:-1}"
  TIMEOUT=60
fi
for wl in $WORKLOADS; do
  [ -n "${WL_TXN[$wl]:-}" ] || die "unknown workload $wl (W1, W2, W3, W1B, W1T or W1M)"
done

RUN_ID="$(date -u +%Y%m%dT%H%M%SZ)"
WORK="$LOCAL_DIR/bench/$RUN_ID"
mkdir -p "$WORK"
RUNS="$WORK/runs.tsv"
printf 'workload\trep\tconsumer\tevents\tpayload_bytes\twall_s\tcpu_s\trss_kb\tconfirm_s\tsteady_s\n' >"$RUNS"
log "work directory $WORK"

# ---- services and binaries ----------------------------------------------------------------
# Both scripts print the address they serve on (and only start what is not running yet).
PG="$("$REPO/scripts/pg-up.sh")"
BROKERS="$("$REPO/scripts/kafka-up.sh")"
log "PostgreSQL: $PG; Kafka: $BROKERS"

BUILD="$REPO/build-bench"
targets=(bench_tool outbox-nats-read)
[ "$MICRO" = 1 ] && targets+=(bench_decode_map)
[ -z "${OUTBOX_RELAY_BIN:-}" ] && targets+=(outbox-relay)
gen=(-G Ninja)
[ -f "$BUILD/CMakeCache.txt" ] && gen=()
cmake -S "$REPO" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DOUTBOX_BENCH=ON >"$WORK/cmake.log" 2>&1 ||
  { tail -n 30 "$WORK/cmake.log" >&2; die "cmake configure failed"; }
cmake --build "$BUILD" -j "$(nproc)" --target "${targets[@]}" >>"$WORK/cmake.log" 2>&1 ||
  { tail -n 30 "$WORK/cmake.log" >&2; die "build failed"; }
RELAY="${OUTBOX_RELAY_BIN:-$BUILD/outbox-relay}"
TOOL="$BUILD/bench/bench_tool"
[ -x "$RELAY" ] || die "no relay binary at $RELAY"

DBZ_LIBS="$SHARED_DIR/debezium/libs"
if [ "$DEBEZIUM" = 1 ] && [ ! -f "$DBZ_LIBS/.complete" ]; then
  log "fetching Kafka Connect and Debezium from Maven Central (bench/debezium/pom.xml)"
  rm -rf "$DBZ_LIBS" "$DBZ_LIBS.tmp"
  mkdir -p "$(dirname "$DBZ_LIBS")"
  if mvn -q -B -f "$REPO/bench/debezium/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$DBZ_LIBS.tmp" -DincludeScope=runtime >"$WORK/mvn.log" 2>&1; then
    mv "$DBZ_LIBS.tmp" "$DBZ_LIBS" && touch "$DBZ_LIBS/.complete"
  else
    tail -n 20 "$WORK/mvn.log" >&2
    log "WARNING: could not fetch Debezium; running without it"
    DEBEZIUM=0
  fi
fi

# Older relays have no /metrics; the latency run reads the commit-to-ack histogram from there.
RELAY_HAS_METRICS=0
if "$RELAY" --help 2>&1 | grep -q -- '--metrics-addr'; then
  RELAY_HAS_METRICS=1
fi
read -r -a RELAY_ARGS <<<"${OUTBOX_BENCH_RELAY_ARGS:-}"

CONSUMERS=(decoder recvlogical drain relay)
# The relay through SASL_SSL (PLAIN over TLS) beside plaintext: what security costs. The
# broker's listener, CA and credentials come from .local/env (scripts/kafka-up.sh).
# shellcheck disable=SC1090
source "$ENV_FILE"
# (The help text in a variable first: grep -q stops reading at the match, and under pipefail the
# relay's SIGPIPE would fail the test.)
relay_help="$("$RELAY" --help 2>&1 || true)"
if [ -n "${OUTBOX_KAFKA_SASL_BROKERS:-}" ] && grep -q -- '--kafka-config' <<<"$relay_help"; then
  SASL_BROKERS=$OUTBOX_KAFKA_SASL_BROKERS
  SASL_CONFIG="$WORK/relay_tls.properties"
  (
    umask 077
    printf '%s\n' security.protocol=SASL_SSL sasl.mechanism=PLAIN \
      "sasl.username=$OUTBOX_KAFKA_SASL_USER" "sasl.password=$OUTBOX_KAFKA_SASL_PASSWORD" \
      "ssl.ca.location=$OUTBOX_KAFKA_CA" >"$SASL_CONFIG"
  )
  CONSUMERS+=(relay_tls)
else
  log "no SASL_SSL listener in .local/env or a relay without --kafka-config: no relay_tls row"
fi
# Exactly-once beside at-least-once, when the relay has it.
RELAY_EXTRA=()
RELAY_TABLES=(--table public.bench_outbox)
if grep -q -- '--delivery' <<<"$relay_help"; then
  CONSUMERS+=(relay_eos)
else
  log "a relay without --delivery: no relay_eos row"
fi
# The relay to NATS JetStream (--nats) beside Kafka, on the same slot contents, when the relay
# has --nats and nats-server is installed (scripts/nats-up.sh starts it; stopped at the end if
# it was not running before).
NATS_READ="$BUILD/outbox-nats-read"
BENCH_STARTED_NATS=0
if ! grep -q -- '--nats' <<<"$relay_help"; then
  log "a relay without --nats: no relay_nats row"
elif ! command -v nats-server >/dev/null && [ ! -x /usr/sbin/nats-server ] &&
  [ -z "${OUTBOX_NATS_SERVER:-}" ]; then
  log "no nats-server installed (scripts/install-deps.sh): no relay_nats row"
else
  nats_pid >/dev/null || BENCH_STARTED_NATS=1
  NATS="$("$REPO/scripts/nats-up.sh")"
  log "NATS JetStream: $NATS"
  CONSUMERS+=(relay_nats)
fi
stop_bench_nats() {
  [ -n "${NATS_LAST_STREAM:-}" ] &&
    { "$NATS_READ" --nats "$NATS" --stream "$NATS_LAST_STREAM" --delete 1 >/dev/null 2>&1 || true; }
  if [ "$BENCH_STARTED_NATS" = 1 ]; then
    "$REPO/scripts/nats-down.sh" >/dev/null 2>&1 || true
  fi
}
# The relay to Amazon SQS (--sqs, a FIFO queue) and EventBridge (--eventbridge, a bus with no
# rule) on W1M, against moto's server: the one of the default state folder, shared with the aws
# tier's tests (scripts/aws-up.sh, as tests/aws/moto.hpp starts it); started here when not
# running, and stopped again at the end. Queues and buses are made per repetition by
# tools/aws-admin/aws_admin.py (boto3 from moto's venv), which also counts the queue's messages.
AWS_CONSUMERS=()
BENCH_STARTED_AWS=0
AWS_ADMIN=("$SHARED_DIR/aws/venv/bin/python" "$REPO/tools/aws-admin/aws_admin.py")
if [[ " $WORKLOADS " != *" W1M "* ]]; then
  :
elif ! grep -q -- '--sqs' <<<"$relay_help"; then
  log "a relay without --sqs: no W1M (relay_sqs, relay_eventbridge)"
else
  aws_pid_file="$SHARED_DIR/aws/moto_server.pid"
  { [ -f "$aws_pid_file" ] && kill -0 "$(cat "$aws_pid_file")" 2>/dev/null; } || BENCH_STARTED_AWS=1
  if (unset OUTBOX_STATE_DIR && flock -o -w 300 "$SHARED_DIR/.aws-up.lock" \
    "$REPO/scripts/aws-up.sh" >"$WORK/aws-up.log" 2>&1); then
    # The endpoint and the test key of the default state folder's env file (not the lane's).
    read -r OUTBOX_AWS_ENDPOINT OUTBOX_AWS_REGION OUTBOX_AWS_ACCESS_KEY_ID \
      OUTBOX_AWS_SECRET_ACCESS_KEY < <(bash -c 'source "$1"; printf "%s %s %s %s\n" \
        "$OUTBOX_AWS_ENDPOINT" "$OUTBOX_AWS_REGION" "$OUTBOX_AWS_ACCESS_KEY_ID" \
        "$OUTBOX_AWS_SECRET_ACCESS_KEY"' _ "$SHARED_DIR/env")
    export OUTBOX_AWS_ENDPOINT OUTBOX_AWS_REGION OUTBOX_AWS_ACCESS_KEY_ID OUTBOX_AWS_SECRET_ACCESS_KEY
    # The relays' credentials: the environment (docs/aws.md); no other source is asked.
    export AWS_ACCESS_KEY_ID=$OUTBOX_AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY=$OUTBOX_AWS_SECRET_ACCESS_KEY
    unset AWS_SESSION_TOKEN AWS_PROFILE
    log "moto (SQS, EventBridge): $OUTBOX_AWS_ENDPOINT"
    AWS_CONSUMERS+=(relay_sqs)
    grep -q -- '--eventbridge' <<<"$relay_help" && AWS_CONSUMERS+=(relay_eventbridge)
  else
    tail -n 20 "$WORK/aws-up.log" >&2
    log "moto's server did not start (scripts/aws-up.sh): no W1M (relay_sqs, relay_eventbridge)"
  fi
fi
if [ "${#AWS_CONSUMERS[@]}" = 0 ]; then
  WORKLOADS=$(tr ' ' '\n' <<<"$WORKLOADS" | grep -vx W1M | tr '\n' ' ')
fi
stop_bench_aws() {
  delete_aws_targets
  if [ "$BENCH_STARTED_AWS" = 1 ]; then
    (unset OUTBOX_STATE_DIR && "$REPO/scripts/aws-down.sh" >/dev/null 2>&1) || true
  fi
}
trap 'stop_bench_nats; stop_bench_aws' EXIT
[ "$DEBEZIUM" = 1 ] && CONSUMERS+=(debezium)
if [ "$MESSAGES" = 1 ] && ! grep -q -- '--messages' <<<"$relay_help"; then
  log "a relay without --messages: no relay_msg row"
  MESSAGES=0
fi

# prepare_rep WL REP NTXN PER BYTES: fresh table, publications, slots and topics, then the load;
# sets END to the last commit's end LSN.
prepare_rep() {
  local wl=$1 rep=$2 ntxn=$3 per=$4 bytes=$5
  local c topics t0 shape=${WL_SHAPE[$1]}
  drop_bench_slots
  psql_q -f "$REPO/bench/load/schema.sql" 2>/dev/null >/dev/null
  case $shape in
    default | aws) ;;
    *) psql_q -v shape="$shape" -f "$REPO/bench/load/shapes.sql" >/dev/null ;;
  esac
  # The slots of the workload's consumers (wl_consumers, set by the loop below).
  for c in "${wl_consumers[@]}" probe; do
    psql_q -c "SELECT pg_create_logical_replication_slot('bench_$c', 'pgoutput')" >/dev/null
  done
  topics="bench.$RUN_ID.$wl.$rep.relay.order"
  for c in "${wl_consumers[@]}"; do
    [ "$c" = relay_tls ] && topics+=",$(relay_topic relay_tls "$wl" "$rep").order"
    [ "$c" = relay_eos ] && topics+=",$(relay_topic relay_eos "$wl" "$rep").order"
    [ "$c" = relay_nats ] && create_nats_stream "$wl" "$rep"
    [ "$c" = relay_sqs ] && create_sqs_queue "$wl" "$rep"
    [ "$c" = relay_eventbridge ] && create_eventbridge_bus "$wl" "$rep"
  done
  [[ " ${wl_consumers[*]} " == *" debezium "* ]] && topics+=",bench.$RUN_ID.$wl.$rep.dbz.order"
  "$TOOL" create-topics --brokers "$BROKERS" --topics "$topics"
  t0=$(now_ns)
  psql_q -c "SET synchronous_commit = off" -c "CALL public.bench_load($ntxn, $per, $bytes)"
  log "loaded $((ntxn * per)) events in $(secs "$t0" "$(now_ns)") s"
  # The exact end: the last commit's end LSN, as the decoder reports it (and the relay confirms).
  # The load ran with synchronous_commit off: flush its WAL first (decoding stops at the flush).
  psql_q -c "CHECKPOINT"
  END=$(psql_q -c "SELECT max(lsn) FROM pg_logical_slot_get_binary_changes('bench_probe', NULL, NULL,
                     'proto_version', '1', 'publication_names', 'bench_pub')")
  psql_q -c "SELECT pg_drop_replication_slot('bench_probe')" >/dev/null
  [ -n "$END" ] || die "the probe slot decoded nothing: the load did not reach the WAL"
  psql_q -c "CHECKPOINT" -c "VACUUM ANALYZE"
}

# prepare_msg_rep WL REP NTXN PER BYTES: the same workload as logical decoding messages
# (bench_load_messages), on a slot of its own; sets END.
prepare_msg_rep() {
  local wl=$1 rep=$2 ntxn=$3 per=$4 bytes=$5 t0
  drop_bench_slots
  psql_q -f "$REPO/bench/load/schema.sql" 2>/dev/null >/dev/null
  for c in relay_msg probe; do
    psql_q -c "SELECT pg_create_logical_replication_slot('bench_$c', 'pgoutput')" >/dev/null
  done
  "$TOOL" create-topics --brokers "$BROKERS" --topics "$(relay_topic relay_msg "$wl" "$rep").order"
  t0=$(now_ns)
  psql_q -c "SET synchronous_commit = off" -c "CALL public.bench_load_messages($ntxn, $per, $bytes)"
  log "emitted $((ntxn * per)) messages in $(secs "$t0" "$(now_ns)") s"
  psql_q -c "CHECKPOINT"
  END=$(psql_q -c "SELECT max(lsn) FROM pg_logical_slot_get_binary_changes('bench_probe', NULL, NULL,
                     'proto_version', '1', 'publication_names', 'bench_pub', 'messages', 'true')")
  psql_q -c "SELECT pg_drop_replication_slot('bench_probe')" >/dev/null
  [ -n "$END" ] || die "the probe slot decoded nothing: the messages did not reach the WAL"
  psql_q -c "CHECKPOINT"
}

# ---- the throughput runs ------------------------------------------------------------------
FAILED=0
for wl in $WORKLOADS; do
  ntxn=${WL_TXN[$wl]} per=${WL_PER[$wl]} bytes=${WL_BYTES[$wl]}
  n=$((ntxn * per))
  RELAY_TABLES=(--table public.bench_outbox)
  wl_consumers=("${CONSUMERS[@]}")
  if [ "${WL_SHAPE[$wl]}" = aws ]; then
    wl_consumers=(relay "${AWS_CONSUMERS[@]}")
  elif [ "${WL_SHAPE[$wl]}" != default ]; then
    wl_consumers=(decoder recvlogical drain relay)
    [ "${WL_SHAPE[$wl]}" = tables ] && RELAY_TABLES+=(--table public.bench_outbox_2
      --table public.bench_outbox_3 --table public.bench_outbox_4)
  fi
  for rep in $(seq 1 "$REPS"); do
    log "== $wl rep $rep: $ntxn transactions x $per events, $bytes-byte payloads"
    prepare_rep "$wl" "$rep" "$ntxn" "$per" "$bytes"
    sleep "$SETTLE"
    # Rotate the order of the consumers across repetitions.
    k=$(((rep - 1) % ${#wl_consumers[@]}))
    order=("${wl_consumers[@]:k}" "${wl_consumers[@]:0:k}")
    for c in "${order[@]}"; do
      log "   $c"
      "run_$c" "$wl" "$rep" "bench_$c" "$n" "$bytes" "$END" || { FAILED=1; log "FAILED: $c $wl"; }
      sleep 1
    done
    if [ "$MESSAGES" = 1 ] && [ "${WL_SHAPE[$wl]}" = default ]; then
      log "   relay_msg (the same workload as logical decoding messages)"
      prepare_msg_rep "$wl" "$rep" "$ntxn" "$per" "$bytes"
      sleep "$SETTLE"
      run_relay_msg "$wl" "$rep" bench_relay_msg "$n" "$bytes" "$END" ||
        { FAILED=1; log "FAILED: relay_msg $wl"; }
    fi
  done
done
drop_bench_slots

# ---- latency run: paced inserts while the relay runs ---------------------------------------
LAT="$WORK/latency.txt"
LAT_EOS="$WORK/latency.eos.txt"
if [ "$LATENCY" = 1 ]; then
  log "== latency: $LAT_RATE events/s for $LAT_SECONDS s"
  # The throughput runs leave hundreds of MB of dirty pages (Kafka's logs, the WAL); written back
  # during the run they stall the broker's appends. Flush them first, then let things settle.
  sync
  sleep "$SETTLE"
  RELAY_TABLES=(--table public.bench_outbox)
  run_latency "$LAT_RATE" "$LAT_SECONDS" "$LAT" || FAILED=1
  if [[ " ${CONSUMERS[*]} " == *" relay_eos "* ]]; then
    sync
    sleep "$SETTLE"
    run_latency "$LAT_RATE" "$LAT_SECONDS" "$LAT_EOS" exactly-once || FAILED=1
  fi
fi

# ---- micro-benchmark ---------------------------------------------------------------------------
if [ "$MICRO" = 1 ]; then
  log "== micro-benchmark (decode + map per event)"
  "$BUILD/bench/bench_decode_map" --benchmark_format=json --benchmark_min_time=0.5 \
    >"$WORK/micro.json" 2>"$WORK/micro.err" || { FAILED=1; log "FAILED: bench_decode_map"; }
fi

# ---- report ------------------------------------------------------------------------------------
out_dir="$REPO/bench/results"
quick_flag=()
if [ "$QUICK" = 1 ]; then
  out_dir="$LOCAL_DIR/bench"
  quick_flag=(--quick)
fi
versions="$WORK/versions.txt"
{
  echo "relay=$("$RELAY" --version 2>&1 | head -n 1)"
  echo "postgresql=$(psql_q -c 'SHOW server_version')"
  echo "pg_recvlogical=$(pg_recvlogical --version)"
  echo "kafka=$(find "$KAFKA_LIBS" -maxdepth 1 -name 'kafka_2.13-*.jar' -printf '%f\n' | sed 's/kafka_2.13-\(.*\)\.jar/\1/')"
  echo "librdkafka=$(pkg-config --modversion rdkafka)"
  [ "$DEBEZIUM" = 1 ] && echo "debezium=$(find "$DBZ_LIBS" -name 'debezium-connector-postgres-*.jar' -printf '%f\n' | sed 's/debezium-connector-postgres-\(.*\)\.jar/\1/')"
  [ "$DEBEZIUM" = 1 ] && echo "kafka_connect=$(find "$DBZ_LIBS" -name 'connect-runtime-*.jar' -printf '%f\n' | sed 's/connect-runtime-\(.*\)\.jar/\1/')"
  echo "java=$(java -version 2>&1 | head -n 1)"
  echo "cpu=$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)"
  echo "cores=$(nproc)"
  echo "kernel=$(uname -r)"
} >"$versions"
python3 "$REPO/bench/report.py" --runs "$RUNS" --latency "$LAT" --micro "$WORK/micro.json" \
  --metrics "$WORK/latency.metrics" --latency-eos "$LAT_EOS" --metrics-eos "$WORK/latency.eos.metrics" \
  --versions "$versions" --out-dir "$out_dir" --run-id "$RUN_ID" "${quick_flag[@]}"
if [ "$QUICK" = 0 ]; then
  # The performance page lists every committed run: regenerate it with the new one (commit both).
  python3 "$REPO/bench/report.py" --docs "$REPO/docs/performance.md" --results "$out_dir"
fi
[ "$FAILED" = 0 ] || die "some consumers failed (see above; work directory $WORK)"
log "done: results in $out_dir"
