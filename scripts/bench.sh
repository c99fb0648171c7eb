#!/usr/bin/env bash
# Throughput, CPU, memory and latency of outbox-relay, side by side with PostgreSQL's own decoder
# (pg_logical_slot_get_binary_changes), pg_recvlogical and Debezium, on the same slot contents.
#
#   scripts/bench.sh            full run: W1, W2, W3 x 3 repetitions x 4 consumers, latency run,
#                               micro-benchmark; results in bench/results/ (markdown + JSON)
#   scripts/bench.sh --quick    smoke run for CI (< 1 min): tiny workloads, 1 repetition, no
#                               Debezium, 5 s latency run; results in .local/bench/. Fails when a
#                               consumer fails.
# Options: --reps N, --workloads "W1 W2 W3", --no-debezium, --no-latency, --no-micro.
# Environment: OUTBOX_RELAY_BIN (default: build-bench/outbox-relay, built here in Release),
#              OUTBOX_BENCH_SETTLE (seconds to let the server settle after a load, default 5),
#              OUTBOX_BENCH_RELAY_ARGS (extra relay flags, e.g. "--read-pause 0", for comparisons).
#
# Per repetition: fresh table and publications, one fresh slot per consumer, all created before
# the load; the load (bench/load/schema.sql's bench_load); a probe slot gives the exact end LSN
# (the last commit's end); CHECKPOINT, VACUUM, settle; then each consumer in turn, the order
# rotated across repetitions. The report takes the median of the repetitions (bench/report.py).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"

QUICK=0
REPS=3
WORKLOADS="W1 W2 W3"
DEBEZIUM=1
LATENCY=1
MICRO=1
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    --reps) REPS=$2; shift ;;
    --workloads) WORKLOADS=$2; shift ;;
    --no-debezium) DEBEZIUM=0 ;;
    --no-latency) LATENCY=0 ;;
    --no-micro) MICRO=0 ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
  shift
done

# Workload: transactions, events per transaction, payload bytes.
declare -A WL_TXN=([W1]=200000 [W2]=200 [W3]=50000)
declare -A WL_PER=([W1]=1 [W2]=1000 [W3]=1)
declare -A WL_BYTES=([W1]=200 [W2]=200 [W3]=4096)
LAT_RATE=5000
LAT_SECONDS=60
SETTLE="${OUTBOX_BENCH_SETTLE:-5}"
TIMEOUT=900
if [ "$QUICK" = 1 ]; then
  WL_TXN=([W1]=2000 [W2]=4 [W3]=500)
  WL_PER=([W1]=1 [W2]=500 [W3]=1)
  REPS=1
  DEBEZIUM="${OUTBOX_BENCH_DEBEZIUM:-0}"
  MICRO=0
  LAT_RATE=1000
  LAT_SECONDS=5
  SETTLE="${OUTBOX_BENCH_SETTLE:-1}"
  TIMEOUT=60
fi

RUN_ID="$(date -u +%Y%m%dT%H%M%SZ)"
WORK="$LOCAL_DIR/bench/$RUN_ID"
mkdir -p "$WORK"
RUNS="$WORK/runs.tsv"
printf 'workload\trep\tconsumer\tevents\tpayload_bytes\twall_s\tcpu_s\trss_kb\tconfirm_s\tsteady_s\n' >"$RUNS"
log "work directory $WORK"

# ---- services and binaries ----------------------------------------------------------------
"$REPO/scripts/pg-up.sh" >/dev/null
"$REPO/scripts/kafka-up.sh" >/dev/null
# shellcheck source=/dev/null
source "$ENV_FILE"
PG="$OUTBOX_PG"
BROKERS="$OUTBOX_BROKERS"

BUILD="$REPO/build-bench"
targets=(bench_tool)
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

DBZ_LIBS="$LOCAL_DIR/debezium/libs"
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

# Relays that serve /metrics get a port of their own (the default one may be taken by a relay
# under test); the latency run reads its commit-to-ack histogram from there.
RELAY_METRICS=()
if "$RELAY" --help 2>&1 | grep -q -- '--metrics-addr'; then
  RELAY_METRICS=(--metrics-addr 127.0.0.1:59400)
fi

read -r -a RELAY_ARGS <<<"${OUTBOX_BENCH_RELAY_ARGS:-}"

CONSUMERS=(decoder recvlogical drain relay)
[ "$DEBEZIUM" = 1 ] && CONSUMERS+=(debezium)

# ---- helpers ----------------------------------------------------------------------------------
psql_q() { psql -X -q -At -v ON_ERROR_STOP=1 "$PG" "$@"; }
now_ns() { date +%s%N; }
# cpu_s PID: user+sys seconds of a live process; rss_kb PID: its peak RSS (VmHWM).
cpu_s() { awk -v t="$(getconf CLK_TCK)" '{ printf "%.3f", ($14 + $15) / t }' "/proc/$1/stat"; }
rss_kb() { awk '/^VmHWM:/ { print $2 }' "/proc/$1/status"; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", (b - a) / 1e9 }'; }
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$RUNS"; }

# wait_for_tool PIDFILE-less: waits for background job $1 (the waiter) while process $2 (the
# consumer) lives; fails when the consumer exits first or the waiter fails.
wait_while_alive() {
  local waiter=$1 consumer=$2 what=$3
  while kill -0 "$waiter" 2>/dev/null; do
    if ! kill -0 "$consumer" 2>/dev/null; then
      kill "$waiter" 2>/dev/null || true
      wait "$waiter" 2>/dev/null || true
      return 1
    fi
    sleep 0.02
  done
  wait "$waiter" || { log "$what: waiting for the records failed"; return 1; }
}

stop_pid() {
  local pid=$1 sig=${2:-INT}
  kill -"$sig" "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 200); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    sleep 0.05
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# ---- consumers: each prints nothing, appends one line to $RUNS, returns non-zero on failure --
run_decoder() {
  local wl=$1 rep=$2 slot=$3 n=$4 bytes=$5 d="$WORK/$wl.$rep.decoder"
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
  local consumer=$1 wl=$2 rep=$3 n=$4 bytes=$5 d="$WORK/$2.$3.$1"
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

# wait_confirmed SLOT LSN: returns when the slot's confirmed_flush_lsn reaches LSN (one query
# that polls inside the server, so the measurement adds almost no client work).
wait_confirmed() {
  psql -X -q -At "$PG" -c "SET statement_timeout = '${TIMEOUT}s'" -c "DO \$\$ BEGIN
    WHILE (SELECT coalesce(confirmed_flush_lsn < '$2'::pg_lsn, true) FROM pg_replication_slots
           WHERE slot_name = '$1') LOOP PERFORM pg_sleep(0.01); END LOOP; END \$\$"
}

run_relay() {
  local wl=$1 rep=$2 slot=$3 n=$4 bytes=$5 end=$6 d="$WORK/$wl.$rep.relay"
  local topic="bench.$RUN_ID.$wl.$rep.relay"
  mkdir -p "$d"
  local t0 pid waiter confirmer first last cpu rss tc
  t0=$(now_ns)
  "$RELAY" --pg "$PG" --brokers "$BROKERS" --slot "$slot" --publication bench_pub \
    --table public.bench_outbox --topic "$topic.\${aggregatetype}" --no-create \
    --status-interval 200ms --log-level warn "${RELAY_METRICS[@]}" "${RELAY_ARGS[@]}" >"$d/log" 2>&1 &
  pid=$!
  (wait_confirmed "$slot" "$end" >/dev/null && now_ns >"$d/confirmed") &
  confirmer=$!
  "$TOOL" wait-count --brokers "$BROKERS" --topic "$topic.order" --count "$n" \
    --timeout-s "$TIMEOUT" >"$d/acked" &
  waiter=$!
  if ! wait_while_alive "$waiter" "$pid" relay; then
    kill "$confirmer" 2>/dev/null || true
    stop_pid "$pid"
    log "relay failed; its log:"
    tail -n 20 "$d/log" >&2
    return 1
  fi
  cpu=$(cpu_s "$pid")
  rss=$(rss_kb "$pid")
  read -r first last <"$d/acked"
  if ! wait "$confirmer"; then
    stop_pid "$pid"
    log "relay: the slot was not confirmed up to $end"
    return 1
  fi
  tc=$(cat "$d/confirmed")
  stop_pid "$pid" INT
  record "$wl" "$rep" relay "$n" "$bytes" "$(secs "$t0" "$last")" "$cpu" "$rss" \
    "$(secs "$t0" "$tc")" "$(secs "$first" "$last")"
}

run_debezium() {
  local wl=$1 rep=$2 slot=$3 n=$4 bytes=$5 d="$WORK/$wl.$rep.debezium"
  local topic="bench.$RUN_ID.$wl.$rep.dbz"
  mkdir -p "$d"
  local pghost pgport pgdb pguser
  pghost=$(psql_q -c "SELECT inet_server_addr()")
  pgport=$(psql_q -c "SHOW port")
  pgdb=$(psql_q -c "SELECT current_database()")
  pguser=$(psql_q -c "SELECT current_user")
  sed -e "s|@BROKERS@|$BROKERS|g" -e "s|@OFFSETS@|$d/offsets.dat|g" \
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

drop_bench_slots() {
  psql_q -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
             WHERE slot_name LIKE 'bench\_%' AND NOT active" >/dev/null
}

# ---- the throughput runs ------------------------------------------------------------------
FAILED=0
for wl in $WORKLOADS; do
  ntxn=${WL_TXN[$wl]} per=${WL_PER[$wl]} bytes=${WL_BYTES[$wl]}
  n=$((ntxn * per))
  for rep in $(seq 1 "$REPS"); do
    log "== $wl rep $rep: $ntxn transactions x $per events, $bytes-byte payloads"
    drop_bench_slots
    psql_q -f "$REPO/bench/load/schema.sql" 2>/dev/null >/dev/null
    for c in "${CONSUMERS[@]}" probe; do
      psql_q -c "SELECT pg_create_logical_replication_slot('bench_$c', 'pgoutput')" >/dev/null
    done
    topics="bench.$RUN_ID.$wl.$rep.relay.order"
    [ "$DEBEZIUM" = 1 ] && topics+=",bench.$RUN_ID.$wl.$rep.dbz.order"
    "$TOOL" create-topics --brokers "$BROKERS" --topics "$topics"
    t0=$(now_ns)
    psql_q -c "SET synchronous_commit = off" -c "CALL public.bench_load($ntxn, $per, $bytes)"
    log "loaded $n events in $(secs "$t0" "$(now_ns)") s"
    # The exact end: the last commit's end LSN, as the decoder reports it (and the relay confirms).
    # The load ran with synchronous_commit off: flush its WAL first (decoding stops at the flush).
    psql_q -c "CHECKPOINT"
    end=$(psql_q -c "SELECT max(lsn) FROM pg_logical_slot_get_binary_changes('bench_probe', NULL, NULL,
                       'proto_version', '1', 'publication_names', 'bench_pub')")
    psql_q -c "SELECT pg_drop_replication_slot('bench_probe')" >/dev/null
    [ -n "$end" ] || die "the probe slot decoded nothing: the load did not reach the WAL"
    psql_q -c "CHECKPOINT" -c "VACUUM ANALYZE public.bench_outbox"
    sleep "$SETTLE"
    # Rotate the order of the consumers across repetitions.
    k=$(((rep - 1) % ${#CONSUMERS[@]}))
    order=("${CONSUMERS[@]:k}" "${CONSUMERS[@]:0:k}")
    for c in "${order[@]}"; do
      log "   $c"
      case $c in
        decoder) run_decoder "$wl" "$rep" bench_decoder "$n" "$bytes" || { FAILED=1; log "FAILED: decoder $wl"; } ;;
        recvlogical) run_recvlogical "$wl" "$rep" bench_recvlogical "$n" "$bytes" "$end" || { FAILED=1; log "FAILED: pg_recvlogical $wl"; } ;;
        drain) run_drain "$wl" "$rep" bench_drain "$n" "$bytes" "$end" || { FAILED=1; log "FAILED: drain $wl"; } ;;
        relay) run_relay "$wl" "$rep" bench_relay "$n" "$bytes" "$end" || { FAILED=1; log "FAILED: relay $wl"; } ;;
        debezium) run_debezium "$wl" "$rep" bench_debezium "$n" "$bytes" || { FAILED=1; log "FAILED: debezium $wl"; } ;;
      esac
      sleep 1
    done
  done
done
drop_bench_slots

# ---- latency run: paced inserts while the relay runs ---------------------------------------
LAT="$WORK/latency.txt"
if [ "$LATENCY" = 1 ]; then
  log "== latency: $LAT_RATE events/s for $LAT_SECONDS s"
  # The throughput runs leave hundreds of MB of dirty pages (Kafka's logs, the WAL); written back
  # during the run they stall the broker's appends. Flush them first, then let things settle.
  sync
  sleep "$SETTLE"
  psql_q -f "$REPO/bench/load/schema.sql" 2>/dev/null >/dev/null
  psql_q -c "SELECT pg_create_logical_replication_slot('bench_latency', 'pgoutput')" >/dev/null
  topic="bench.$RUN_ID.latency"
  "$TOOL" create-topics --brokers "$BROKERS" --topics "$topic.order"
  nlat=$((LAT_RATE * LAT_SECONDS))
  d="$WORK/latency"
  mkdir -p "$d"
  metrics_args=("${RELAY_METRICS[@]}")
  "$RELAY" --pg "$PG" --brokers "$BROKERS" --slot bench_latency --publication bench_pub \
    --table public.bench_outbox --topic "$topic.\${aggregatetype}" --no-create \
    --status-interval 200ms --log-level warn "${metrics_args[@]}" "${RELAY_ARGS[@]}" \
    >"$d/log" 2>&1 &
  rpid=$!
  "$TOOL" latency --brokers "$BROKERS" --topic "$topic.order" --count "$nlat" \
    --timeout-s $((LAT_SECONDS + 60)) >"$d/consumer" &
  cpid=$!
  sleep 1
  if ! "$TOOL" load-paced --pg "$PG" --table public.bench_outbox --rate "$LAT_RATE" \
    --seconds "$LAT_SECONDS" >"$d/loader"; then
    FAILED=1
    log "FAILED: paced loader"
  fi
  if ! wait "$cpid"; then
    FAILED=1
    log "FAILED: latency consumer (relay log follows)"
    tail -n 20 "$d/log" >&2
  fi
  if [ ${#metrics_args[@]} -gt 0 ]; then
    curl -s "http://127.0.0.1:59400/metrics" >"$d/metrics" 2>/dev/null || true
  fi
  lat_cpu=$(cpu_s "$rpid" 2>/dev/null || echo "")
  lat_rss=$(rss_kb "$rpid" 2>/dev/null || echo "")
  kill -0 "$rpid" 2>/dev/null || { FAILED=1; log "FAILED: relay died during the latency run"; }
  stop_pid "$rpid" INT
  psql_q -c "SELECT pg_drop_replication_slot('bench_latency')" >/dev/null || true
  read -r lat_n lat_p50 lat_p99 lat_max <"$d/consumer" || true
  read -r _ lat_rate <"$d/loader" || true
  # Kafka alone at the same rate (same producer settings, no PostgreSQL, no relay): the floor.
  ktopic="bench.$RUN_ID.kafka-alone"
  "$TOOL" create-topics --brokers "$BROKERS" --topics "$ktopic"
  if ! "$TOOL" produce-latency --brokers "$BROKERS" --topic "$ktopic" --rate "$LAT_RATE" \
    --seconds "$LAT_SECONDS" >"$d/kafka-alone" 2>"$d/kafka-alone.err"; then
    FAILED=1
    log "FAILED: produce-latency (Kafka alone)"
  fi
  read -r _ k_p50 k_p99 k_max <"$d/kafka-alone" || true
  printf 'rate=%s achieved=%s seconds=%s events=%s p50_ms=%s p99_ms=%s max_ms=%s cpu_s=%s rss_kb=%s kafka_alone_p50_ms=%s kafka_alone_p99_ms=%s kafka_alone_max_ms=%s\n' \
    "$LAT_RATE" "${lat_rate:-}" "$LAT_SECONDS" "${lat_n:-}" "${lat_p50:-}" "${lat_p99:-}" \
    "${lat_max:-}" "$lat_cpu" "$lat_rss" "${k_p50:-}" "${k_p99:-}" "${k_max:-}" >"$LAT"
  [ -f "$d/metrics" ] && cp "$d/metrics" "$WORK/latency.metrics"
  log "latency: $(cat "$LAT")"
fi

# ---- micro-benchmark ---------------------------------------------------------------------------
if [ "$MICRO" = 1 ]; then
  log "== micro-benchmark (decode + map per event)"
  "$BUILD/bench/bench_decode_map" --benchmark_format=json --benchmark_min_time=0.5 \
    >"$WORK/micro.json" 2>"$WORK/micro.err" || { FAILED=1; log "FAILED: bench_decode_map"; }
fi

# ---- report ------------------------------------------------------------------------------------
out_dir="$REPO/bench/results"
[ "$QUICK" = 1 ] && out_dir="$LOCAL_DIR/bench"
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
  --metrics "$WORK/latency.metrics" \
  --versions "$versions" --out-dir "$out_dir" --run-id "$RUN_ID" $([ "$QUICK" = 1 ] && echo --quick)
[ "$FAILED" = 0 ] || die "some consumers failed (see above; work directory $WORK)"
log "done: results in $out_dir"
