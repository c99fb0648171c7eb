# shellcheck shell=bash
# The consumers of bench/run.sh, one function each. Source it after bench/lib/common.sh; do not
# execute it.
#
# Throughput: run_<consumer> WORKLOAD REP SLOT EVENTS PAYLOAD_BYTES END_LSN, consumer one of
# decoder, recvlogical, drain, relay, relay_eos (--delivery exactly-once), relay_msg (--messages,
# on a load of logical decoding messages instead of inserts), relay_tls (the relay
# through the broker's SASL_SSL listener, PLAIN over TLS), relay_nats (the relay publishing to
# NATS JetStream with --nats), relay_sqs and relay_eventbridge (the relay publishing to an SQS
# FIFO queue and an EventBridge bus of moto's server, on W1M), debezium. Each reads its slot up to END_LSN (or until
# EVENTS records are in Kafka), appends one line to $RUNS (record), prints nothing and returns
# non-zero on failure. Its files go to $WORK/WORKLOAD.REP.CONSUMER/.
# Latency: run_latency RATE SECONDS OUT (the relay under paced inserts; one key=value line in OUT).
#
# Globals from the driver: WORK, RUN_ID, PG, BROKERS, RELAY, RELAY_ARGS and RELAY_TABLES (arrays),
# RELAY_HAS_METRICS, TOOL, TIMEOUT, DBZ_LIBS, REPO; for relay_tls SASL_BROKERS and
# SASL_CONFIG (a --kafka-config file); for relay_nats NATS (the server's URL) and NATS_READ
# (build-bench/outbox-nats-read); for relay_sqs and relay_eventbridge OUTBOX_AWS_ENDPOINT,
# OUTBOX_AWS_REGION and AWS_ADMIN (tools/aws-admin/aws_admin.py with moto's python), the
# credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.

# start_relay DIR SLOT TOPIC: starts the relay in the background with the command line of every
# relay run of the bench (built here only, so the throughput and the latency runs cannot drift
# apart): slot SLOT of publication bench_pub, records to TOPIC.<aggregatetype>, confirmations
# every 200 ms (so the confirmation time can be seen), $OUTBOX_BENCH_RELAY_ARGS last. Log in
# DIR/log, the command line in DIR/cmdline. Sets RELAY_PID and RELAY_METRICS_URL (empty when
# the relay has no /metrics). With BROKERS and a KAFKA_CONFIG file: those instead of $BROKERS.
start_relay() {
  local d=$1 slot=$2 topic=$3 brokers=${4:-$BROKERS} kafka_config=${5:-}
  # The progress record in a store of the run's own: each repetition makes its slots anew,
  # which a record of an earlier one would rightly take for a lost place (exit 4).
  local sink=(--brokers "$brokers" --checkpoint-topic "outbox-relay.progress.$topic")
  [ -n "${RELAY_NATS:-}" ] && sink=(--nats "$RELAY_NATS" --nats-progress-bucket "${topic//./_}")
  [ -n "${RELAY_SQS:-}" ] && sink=(--sqs "$RELAY_SQS" --aws-endpoint "$OUTBOX_AWS_ENDPOINT"
    --aws-region "$OUTBOX_AWS_REGION")
  [ -n "${RELAY_EVENTBRIDGE:-}" ] && sink=(--eventbridge "$RELAY_EVENTBRIDGE"
    --aws-endpoint "$OUTBOX_AWS_ENDPOINT" --aws-region "$OUTBOX_AWS_REGION")
  local argv=("$RELAY" --pg "$PG" "${sink[@]}" --slot "$slot" --publication bench_pub
    "${RELAY_TABLES[@]}" --topic "$topic.\${aggregatetype}" --no-create
    --status-interval 200ms --log-level warn)
  RELAY_METRICS_URL=""
  if [ "$RELAY_HAS_METRICS" = 1 ]; then
    # A port of its own: the default one may be taken by a relay under test.
    local port
    port=$(bench_port OUTBOX_BENCH_METRICS_PORT)
    argv+=(--metrics-addr "127.0.0.1:$port")
    RELAY_METRICS_URL="http://127.0.0.1:$port/metrics"
  fi
  [ -n "$kafka_config" ] && argv+=(--kafka-config "$kafka_config")
  argv+=("${RELAY_ARGS[@]}" "${RELAY_EXTRA[@]}")
  printf '%q ' "${argv[@]}" >"$d/cmdline"
  "${argv[@]}" >"$d/log" 2>&1 &
  RELAY_PID=$!
}

# PostgreSQL's decoder alone, in the server: the physical limit.
run_decoder() {
  local wl=$1 rep=$2 slot=$3 n=$4 bytes=$5
  local d="$WORK/$wl.$rep.decoder"
  mkdir -p "$d"
  # \setenv interpolates psql variables (\! does not): the backend's pid reaches the shell.
  psql -X -q -At -v ON_ERROR_STOP=1 "$PG" >"$d/out" 2>"$d/err" <<SQL || { cat "$d/err" >&2; return 1; }
SELECT pg_backend_pid() AS bpid \gset
\setenv BPID :bpid
\! awk '{ print \$14 + \$15 }' /proc/\$BPID/stat > $d/cpu0; date +%s%N > $d/t0
SELECT count(*) FROM pg_logical_slot_get_binary_changes('$slot', NULL, NULL, 'proto_version', '1', 'publication_names', 'bench_pub');
\! date +%s%N > $d/t1; awk '{ print \$14 + \$15 }' /proc/\$BPID/stat > $d/cpu1; awk '/^VmHWM:/ { print \$2 }' /proc/\$BPID/status > $d/rss
SQL
  local msgs cpu
  msgs="$(cat "$d/out")"
  # Begin + Insert(s) + Commit per transaction, plus the Relation message(s).
  [ "$msgs" -ge "$n" ] || { log "decoder returned $msgs messages for $n events"; return 1; }
  cpu="$(awk -v t="$(getconf CLK_TCK)" -v a="$(cat "$d/cpu0")" -v b="$(cat "$d/cpu1")" 'BEGIN { printf "%.3f", (b - a) / t }')"
  record "$wl" "$rep" decoder "$n" "$bytes" "$(secs "$(cat "$d/t0")" "$(cat "$d/t1")")" "$cpu" "$(cat "$d/rss")" "" ""
}

# run_timed CONSUMER WL REP N BYTES CMD...: runs a client that exits at the end LSN, records its
# wall time, CPU (user+sys) and peak RSS; its output goes to the consumer's directory.
run_timed() {
  local consumer=$1 wl=$2 rep=$3 n=$4 bytes=$5
  local d="$WORK/$wl.$rep.$consumer"
  shift 5
  mkdir -p "$d"
  local t0 t1 u s m
  t0=$(now_ns)
  if ! timeout "$TIMEOUT" /usr/bin/time -f '%U %S %M' -o "$d/time" "$@" >"$d/out" 2>"$d/err"; then
    cat "$d/err" >&2
    return 1
  fi
  t1=$(now_ns)
  read -r u s m <"$d/time"
  record "$wl" "$rep" "$consumer" "$n" "$bytes" "$(secs "$t0" "$t1")" "$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.3f", u + s }')" "$m" "" ""
}

run_recvlogical() {
  local wl=$1 rep=$2 slot=$3 n=$4 bytes=$5 end=$6
  # -F 0: no fsync of the output (it is /dev/null); --endpos: exit at the last commit's end.
  run_timed recvlogical "$wl" "$rep" "$n" "$bytes" \
    pg_recvlogical -d "$PG" --slot="$slot" --start --no-loop -F 0 -E "$end" \
    -o proto_version=1 -o publication_names=bench_pub -f /dev/null
}

# The walsender's ceiling: a client that reads like the relay and discards everything.
run_drain() {
  local wl=$1 rep=$2 slot=$3 n=$4 bytes=$5 end=$6
  run_timed drain "$wl" "$rep" "$n" "$bytes" "$TOOL" drain --pg "$PG" --slot "$slot" \
    --publication bench_pub --end-lsn "$end" --timeout-s "$TIMEOUT"
}

# relay_topic CONSUMER WL REP: the topic prefix of a relay run. Through SASL_SSL the relay's
# principal may write outbox.event.* only (the test broker's ACLs).
relay_topic() {
  if [ "$1" = relay_tls ]; then
    printf 'outbox.event.bench.%s.%s.%s.%s\n' "$RUN_ID" "$2" "$3" "$1"
  else
    printf 'bench.%s.%s.%s.%s\n' "$RUN_ID" "$2" "$3" "$1"
  fi
}

# run_relay WL REP SLOT N BYTES END [CONSUMER BROKERS KAFKA_CONFIG]: the relay, by default on
# the PLAINTEXT listener; its records are counted there in any case.
run_relay() {
  local wl=$1 rep=$2 slot=$3 n=$4 bytes=$5 end=$6 consumer=${7:-relay}
  local d="$WORK/$wl.$rep.$consumer" topic
  topic=$(relay_topic "$consumer" "$wl" "$rep")
  mkdir -p "$d"
  local t0 pid waiter confirmer first last cpu rss tc
  t0=$(now_ns)
  start_relay "$d" "$slot" "$topic" "${8:-$BROKERS}" "${9:-}"
  pid=$RELAY_PID
  (wait_confirmed "$slot" "$end" >/dev/null && now_ns >"$d/confirmed") &
  confirmer=$!
  local committed=()
  # Transactions: high watermarks also count commit markers; read the committed records.
  [ "$consumer" = relay_eos ] && committed=(--committed 1)
  if [ "$consumer" = relay_nats ]; then
    # The stream's storage times of its first and last messages once it holds them all.
    "$NATS_READ" --nats "$NATS" --stream "$(nats_stream "$wl" "$rep")" --wait-count "$n" \
      --timeout-s "$TIMEOUT" >"$d/acked" 2>"$d/acked.err" &
  elif [ "$consumer" = relay_sqs ]; then
    # The times the queue was first seen holding a message and holding them all (polled).
    "${AWS_ADMIN[@]}" wait-count "$SQS_QUEUE" "$n" --timeout-s "$TIMEOUT" --times \
      >"$d/acked" 2>"$d/acked.err" &
  elif [ "$consumer" = relay_eventbridge ]; then
    # A bus cannot be read back: done when the slot is confirmed through the end (the relay
    # confirms only what EventBridge acknowledged); no first-to-last time.
    (wait_confirmed "$slot" "$end" >/dev/null && t=$(now_ns) && echo "- $t" >"$d/acked") &
  else
    "$TOOL" wait-count --brokers "$BROKERS" --topic "$topic.order" --count "$n" \
      --timeout-s "$TIMEOUT" "${committed[@]}" >"$d/acked" &
  fi
  waiter=$!
  if ! wait_while_alive "$waiter" "$pid" relay; then
    kill "$confirmer" 2>/dev/null || true
    stop_pid "$pid"
    log "$consumer failed; its log:"
    tail -n 20 "$d/log" >&2
    return 1
  fi
  cpu=$(cpu_s "$pid")
  rss=$(rss_kb "$pid")
  read -r first last <"$d/acked"
  if ! wait "$confirmer"; then
    stop_pid "$pid"
    log "$consumer: the slot was not confirmed up to $end"
    return 1
  fi
  tc=$(cat "$d/confirmed")
  stop_pid "$pid" INT
  local steady=""
  [ "$first" = - ] || steady=$(secs "$first" "$last")
  record "$wl" "$rep" "$consumer" "$n" "$bytes" "$(secs "$t0" "$last")" "$cpu" "$rss" \
    "$(secs "$t0" "$tc")" "$steady"
}

# The relay with --delivery exactly-once: counted when committed (wait-count reads
# read_committed), so the figure includes the transactions' cost.
run_relay_eos() {
  RELAY_EXTRA=(--delivery exactly-once --transactional-id "bench.$RUN_ID.$1.$2")
  local rc=0
  run_relay "$1" "$2" "$3" "$4" "$5" "$6" relay_eos || rc=$?
  RELAY_EXTRA=()
  return "$rc"
}

# The relay with --messages bench on a load of logical decoding messages (bench_load_messages):
# the table-less outbox, the same events.
run_relay_msg() {
  RELAY_EXTRA=(--messages bench)
  local rc=0
  run_relay "$1" "$2" "$3" "$4" "$5" "$6" relay_msg || rc=$?
  RELAY_EXTRA=()
  return "$rc"
}

# nats_stream WL REP: the JetStream stream of a relay_nats run.
nats_stream() { printf 'BENCH_%s_%s_%s\n' "$RUN_ID" "$1" "$2"; }

# create_nats_stream WL REP: the stream of the repetition's relay_nats run (the relay's own
# setup --nats-stream; the last repetition's is deleted first, to keep the server's store small),
# capturing relay_topic's subjects.
create_nats_stream() {
  local wl=$1 rep=$2 d="$WORK/$1.$2.relay_nats"
  mkdir -p "$d"
  [ -n "${NATS_LAST_STREAM:-}" ] &&
    { "$NATS_READ" --nats "$NATS" --stream "$NATS_LAST_STREAM" --delete 1 >/dev/null 2>&1 || true; }
  NATS_LAST_STREAM=$(nats_stream "$wl" "$rep")
  "$RELAY" setup --pg "$PG" --slot bench_relay_nats --publication bench_pub \
    --table public.bench_outbox --nats "$NATS" --nats-stream "$NATS_LAST_STREAM" \
    --topic "$(relay_topic relay_nats "$wl" "$rep").\${aggregatetype}" >"$d/setup" 2>&1 ||
    { cat "$d/setup" >&2; return 1; }
}

# The relay publishing to NATS JetStream (--nats) instead of Kafka, the same slot contents:
# counted when the stream holds every event.
run_relay_nats() {
  RELAY_NATS=$NATS
  local rc=0
  run_relay "$1" "$2" "$3" "$4" "$5" "$6" relay_nats || rc=$?
  RELAY_NATS=""
  return "$rc"
}

# aws_name WL REP: the SQS queue (.fifo added) and EventBridge bus of a W1M repetition.
aws_name() { printf 'bench-%s-%s-%s\n' "$RUN_ID" "$1" "$2"; }

# delete_aws_targets: deletes the last repetition's queue and bus (moto keeps everything in
# memory, and its FIFO deduplication scans a queue's messages at each send).
delete_aws_targets() {
  [ -n "${SQS_QUEUE:-}" ] && { "${AWS_ADMIN[@]}" delete-queue "$SQS_QUEUE" >/dev/null 2>&1 || true; }
  [ -n "${EB_BUS:-}" ] && { "${AWS_ADMIN[@]}" delete-bus "$EB_BUS" >/dev/null 2>&1 || true; }
  SQS_QUEUE=""
  EB_BUS=""
}

# create_sqs_queue WL REP: the FIFO queue of the repetition's relay_sqs run (sets SQS_QUEUE).
create_sqs_queue() {
  [ -n "${SQS_QUEUE:-}" ] && { "${AWS_ADMIN[@]}" delete-queue "$SQS_QUEUE" >/dev/null 2>&1 || true; }
  SQS_QUEUE=$("${AWS_ADMIN[@]}" create-queue "$(aws_name "$1" "$2").fifo" --fifo)
}

# create_eventbridge_bus WL REP: the bus (no rule) of the repetition's relay_eventbridge run.
create_eventbridge_bus() {
  [ -n "${EB_BUS:-}" ] && { "${AWS_ADMIN[@]}" delete-bus "$EB_BUS" >/dev/null 2>&1 || true; }
  EB_BUS=$(aws_name "$1" "$2")
  "${AWS_ADMIN[@]}" create-bus "$EB_BUS" >/dev/null
}

# The relay publishing to an SQS FIFO queue of moto's server (--sqs): counted when the queue
# holds every event. moto serves a few SendMessageBatch calls per second: the figure is moto's.
run_relay_sqs() {
  RELAY_SQS=$SQS_QUEUE
  local rc=0
  run_relay "$1" "$2" "$3" "$4" "$5" "$6" relay_sqs || rc=$?
  RELAY_SQS=""
  return "$rc"
}

# The relay publishing to an EventBridge bus of moto's server (--eventbridge), a bus with no rule
# (moto takes the entries and routes them nowhere): counted when the slot is confirmed.
run_relay_eventbridge() {
  RELAY_EVENTBRIDGE=$EB_BUS
  local rc=0
  run_relay "$1" "$2" "$3" "$4" "$5" "$6" relay_eventbridge || rc=$?
  RELAY_EVENTBRIDGE=""
  return "$rc"
}

# The relay through the broker's SASL_SSL listener, PLAIN over TLS (what security costs).
run_relay_tls() {
  run_relay "$1" "$2" "$3" "$4" "$5" "$6" relay_tls "$SASL_BROKERS" "$SASL_CONFIG"
}

# Debezium's PostgreSQL connector and outbox event router on Kafka Connect standalone.
run_debezium() {
  local wl=$1 rep=$2 slot=$3 n=$4 bytes=$5
  local d="$WORK/$wl.$rep.debezium" topic="bench.$RUN_ID.$wl.$rep.dbz"
  mkdir -p "$d"
  local pghost pgport pgdb pguser rest_port
  pghost=$(psql_q -c "SELECT inet_server_addr()")
  pgport=$(psql_q -c "SHOW port")
  pgdb=$(psql_q -c "SELECT current_database()")
  pguser=$(psql_q -c "SELECT current_user")
  rest_port=$(bench_port OUTBOX_BENCH_CONNECT_PORT)
  sed -e "s|@BROKERS@|$BROKERS|g" -e "s|@OFFSETS@|$d/offsets.dat|g" \
    -e "s|@REST_PORT@|$rest_port|g" \
    "$REPO/bench/debezium/connect-standalone.properties" >"$d/worker.properties"
  sed -e "s|@PGHOST@|$pghost|g" -e "s|@PGPORT@|$pgport|g" -e "s|@PGDB@|$pgdb|g" \
    -e "s|@PGUSER@|$pguser|g" -e "s|@SLOT@|$slot|g" -e "s|@TOPIC@|$topic|g" \
    -e "s|@NAME@|bench-$wl-$rep|g" \
    "$REPO/bench/debezium/postgres-outbox.properties" >"$d/connector.properties"
  local t0 pid waiter first last cpu rss
  t0=$(now_ns)
  # The heap of Kafka's own connect-standalone.sh (-Xms256M -Xmx2G).
  java -Xms256m -Xmx2g -XX:+UseG1GC \
    -Dlog4j2.configurationFile="$REPO/bench/debezium/connect-log4j2.properties" \
    -cp "$DBZ_LIBS/*" org.apache.kafka.connect.cli.ConnectStandalone \
    "$d/worker.properties" "$d/connector.properties" >"$d/log" 2>&1 &
  pid=$!
  "$TOOL" wait-count --brokers "$BROKERS" --topic "$topic.order" --count "$n" \
    --timeout-s "$TIMEOUT" >"$d/acked" &
  waiter=$!
  if ! wait_while_alive "$waiter" "$pid" debezium; then
    stop_pid "$pid" TERM
    log "debezium failed; its log:"
    grep -E 'ERROR|Exception' "$d/log" | head -n 20 >&2
    return 1
  fi
  cpu=$(cpu_s "$pid")
  rss=$(rss_kb "$pid")
  read -r first last <"$d/acked"
  stop_pid "$pid" TERM
  record "$wl" "$rep" debezium "$n" "$bytes" "$(secs "$t0" "$last")" "$cpu" "$rss" "" \
    "$(secs "$first" "$last")"
}

# run_latency RATE SECONDS OUT [MODE]: paced one-event transactions (bench_tool load-paced) while
# the relay runs, commit time to consumption (bench_tool latency, read_committed), then Kafka alone
# at the same rate (bench_tool produce-latency, no PostgreSQL, no relay: the floor). MODE is
# at-least-once (default) or exactly-once (--delivery exactly-once: commit to visible to a
# read_committed consumer; no Kafka-alone run). Writes one key=value line to OUT and the relay's
# /metrics to $WORK/latency[.MODE].metrics; files in $WORK/latency[.MODE]/. Returns non-zero when
# a part failed (what it measured is still written).
run_latency() {
  local rate=$1 seconds=$2 out=$3 mode=${4:-at-least-once}
  local sfx="" slot=bench_latency
  [ "$mode" = exactly-once ] && { sfx=".eos"; slot=bench_latency_eos; }
  local d="$WORK/latency$sfx" topic="bench.$RUN_ID.latency$sfx" ktopic="bench.$RUN_ID.kafka-alone"
  local nlat=$((rate * seconds)) failed=0
  local rpid cpid lat_cpu lat_rss lat_n lat_p50 lat_p99 lat_max lat_rate k_p50 k_p99 k_max
  mkdir -p "$d"
  psql_q -f "$REPO/bench/load/schema.sql" 2>/dev/null >/dev/null || { log "latency: schema failed"; return 1; }
  psql_q -c "SELECT pg_create_logical_replication_slot('$slot', 'pgoutput')" >/dev/null ||
    { log "latency: could not create the slot"; return 1; }
  "$TOOL" create-topics --brokers "$BROKERS" --topics "$topic.order" || return 1
  [ "$mode" = exactly-once ] && RELAY_EXTRA=(--delivery exactly-once --transactional-id "bench.$RUN_ID.latency")
  start_relay "$d" "$slot" "$topic"
  RELAY_EXTRA=()
  rpid=$RELAY_PID
  "$TOOL" latency --brokers "$BROKERS" --topic "$topic.order" --count "$nlat" \
    --timeout-s $((seconds + 60)) >"$d/consumer" &
  cpid=$!
  sleep 1
  if ! "$TOOL" load-paced --pg "$PG" --table public.bench_outbox --rate "$rate" \
    --seconds "$seconds" >"$d/loader"; then
    failed=1
    log "FAILED: paced loader"
  fi
  if ! wait "$cpid"; then
    failed=1
    log "FAILED: latency consumer (relay log follows)"
    tail -n 20 "$d/log" >&2
  fi
  if [ -n "$RELAY_METRICS_URL" ]; then
    curl -s "$RELAY_METRICS_URL" >"$d/metrics" 2>/dev/null || true
  fi
  lat_cpu=$(cpu_s "$rpid" 2>/dev/null || echo "")
  lat_rss=$(rss_kb "$rpid" 2>/dev/null || echo "")
  kill -0 "$rpid" 2>/dev/null || { failed=1; log "FAILED: relay died during the latency run"; }
  stop_pid "$rpid" INT
  psql_q -c "SELECT pg_drop_replication_slot('$slot')" >/dev/null || true
  read -r lat_n lat_p50 lat_p99 lat_max <"$d/consumer" || true
  read -r _ lat_rate <"$d/loader" || true
  if [ "$mode" = at-least-once ]; then
    "$TOOL" create-topics --brokers "$BROKERS" --topics "$ktopic" || failed=1
    if ! "$TOOL" produce-latency --brokers "$BROKERS" --topic "$ktopic" --rate "$rate" \
      --seconds "$seconds" >"$d/kafka-alone" 2>"$d/kafka-alone.err"; then
      failed=1
      log "FAILED: produce-latency (Kafka alone)"
    fi
    read -r _ k_p50 k_p99 k_max <"$d/kafka-alone" || true
  fi
  printf 'mode=%s rate=%s achieved=%s seconds=%s events=%s p50_ms=%s p99_ms=%s max_ms=%s cpu_s=%s rss_kb=%s kafka_alone_p50_ms=%s kafka_alone_p99_ms=%s kafka_alone_max_ms=%s\n' \
    "$mode" "$rate" "${lat_rate:-}" "$seconds" "${lat_n:-}" "${lat_p50:-}" "${lat_p99:-}" \
    "${lat_max:-}" "$lat_cpu" "$lat_rss" "${k_p50:-}" "${k_p99:-}" "${k_max:-}" >"$out"
  [ -f "$d/metrics" ] && cp "$d/metrics" "$WORK/latency$sfx.metrics"
  log "latency ($mode): $(cat "$out")"
  [ "$failed" = 0 ]
}
