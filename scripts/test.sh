#!/usr/bin/env bash
# The whole test run, as CI does it (.ci/run), or some of its tiers (docs/testing.md):
#
#   scripts/test.sh [TIER...]        (or OUTBOX_TIERS="TIER ...")
#   scripts/test.sh quick            the developer's loop: unit, repo and one end-to-end test
#
# Tiers (all of them when none is named):
#   unit         ctest -L unit, in parallel (-j nproc): no I/O, seconds
#   repo         ctest -L repo: checks on the repository itself (no tracked file over 1 MiB)
#   deploy       ctest -L deploy -LE integration, in parallel: promtool, static checks
#   integration  ctest -L integration on PostgreSQL 15: the real relay against PostgreSQL and Kafka
#   fault        ctest -L fault on PostgreSQL 15: tests that kill, stop and restart the servers
#   pg18         the integration and fault tests again on PostgreSQL 18 (all but
#                RelayIntegration.Tls: the wheel's server has no TLS, and sinks.*, which
#                touches no PostgreSQL), and the nats tests labelled pg18 (the relay's JetStream
#                tests that depend on PostgreSQL's version: tests/nats/relay_nats_pg_test.cpp);
#                OUTBOX_SKIP_PG18 drops it
#   failover     ctest -L failover: a PostgreSQL 18 primary and standby of their own, promoted
#                (a 15 pair for the failover without the slot, to Kafka and to JetStream)
#   nats         ctest -L nats: the JetStream publisher, and the relay publishing to it (--nats)
#   aws          ctest -L aws: the SQS and EventBridge clients against moto's server
#                (scripts/aws-up.sh: one server for the run, not per lane; stopped at the end
#                when this run started it), and the relay publishing to SQS and EventBridge,
#                on the pg15 lanes (their PostgreSQL)
#   package      ctest -L package: the Debian package installed with dpkg (needs root or sudo)
#   asan         the unit tests built with ASan+UBSan in build-asan/ and run there
#   fuzz         the libFuzzer target fuzz_decoder built with clang in build-fuzz/, run for
#                ${OUTBOX_FUZZ_SECONDS:-60} s on a temporary copy of tests/fuzz/corpus
#   bench        scripts/bench.sh --quick (benchmark smoke run)
#
# How it runs (docs/testing.md, "Lanes"): scripts/install-deps.sh (unless OUTBOX_SKIP_DEPS), then
# the build of build/ (CMake, Ninja, RelWithDebInfo, ccache) while the lanes' servers start; then
# unit, repo and deploy; then, at the same time, four streams:
#   pg15   integration, fault, failover, nats and aws on OUTBOX_LANES (default 3) lanes of
#          PostgreSQL 15
#   pg18   integration, fault and the tests labelled pg18 on OUTBOX_LANES lanes of PostgreSQL 18
#   misc   package, then bench on a lane of its own
#   sanitizers  asan then fuzz, at a lower CPU priority (they only compute; the lanes mostly wait)
# A lane is a state folder (.local/lanes/NAME, OUTBOX_STATE_DIR) with its own PostgreSQL, Kafka
# and NATS on ports of its own (the caller's ports + 10 x the lane's number). ctest hands the
# lanes out to the end-to-end tests with resource groups (each asks for `lanes:1`), longest tests
# first (tests/ctest-costs.txt); tests/support/lane.cpp puts the lane's variables into the test's
# environment. No two tests ever share a server at once, as before.
# Knobs: OUTBOX_LANES (lanes per PostgreSQL version), OUTBOX_SKIP_FUZZ drops asan and fuzz,
# OUTBOX_SKIP_BENCH drops bench; OUTBOX_CTEST_ARGS adds arguments to every ctest call (e.g.
# "-R relay -V"); OUTBOX_FAULT_SCALE=0.1 shrinks the fault tests' workloads; OUTBOX_KEEP_SERVICES=1
# leaves the services running on exit (they are stopped otherwise).
# Every test registered with ctest carries exactly one tier label (a test without one fails the
# run). No test is retried: a test that fails once is a failure (a flake is a bug to fix).
# Exit status: that of the first failing tier. Each stream's log is printed when it ends, and the
# time of each phase and lane at the end.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"
RUN_T0=$(now_ms)

ALL_TIERS=(unit repo deploy integration fault pg18 failover nats aws package asan fuzz bench)
quick=false
if [ $# -gt 0 ]; then
  tiers=("$@")
elif [ -n "${OUTBOX_TIERS:-}" ]; then
  read -r -a tiers <<<"$OUTBOX_TIERS"
else
  tiers=()
  for t in "${ALL_TIERS[@]}"; do
    case $t in
      asan | fuzz) [ -n "${OUTBOX_SKIP_FUZZ:-}" ] && continue ;;
      bench) [ -n "${OUTBOX_SKIP_BENCH:-}" ] && continue ;;
      pg18) [ -n "${OUTBOX_SKIP_PG18:-}" ] && continue ;;
    esac
    tiers+=("$t")
  done
fi
declare -A want=()
for t in "${tiers[@]}"; do
  case " quick ${ALL_TIERS[*]} " in
    *" $t "*) want[$t]=1 ;;
    *) die "unknown tier '$t' (tiers: quick ${ALL_TIERS[*]})" ;;
  esac
done
wants() { [ -n "${want[$1]:-}" ]; }
if wants quick; then
  quick=true
  want[unit]=1
  want[repo]=1
fi

JOBS="$(nproc)"
LANES="${OUTBOX_LANES:-3}"
[[ "$LANES" =~ ^[1-9]$ ]] || die "OUTBOX_LANES=$LANES: expected 1 to 9"
BUILD="$REPO/build"
RUN_DIR="$BUILD/test-run"           # this run's lane variables, stream logs and timings
LANES_DIR="$RUN_DIR/lanes"
TIMINGS_DIR="$RUN_DIR/timings"
STATE_ROOT="$SHARED_DIR/lanes"       # the lanes' state folders (servers' data), kept across runs
rm -rf "$RUN_DIR"
mkdir -p "$LANES_DIR" "$TIMINGS_DIR"
export OUTBOX_LANES_DIR="$LANES_DIR"
# The caller's base ports; lane k's are these + 10 k.
BASE_PG_PORT=$PG_PORT
BASE_KAFKA_PORT=$KAFKA_PORT
BASE_KAFKA_CONTROLLER_PORT=$KAFKA_CONTROLLER_PORT
BASE_KAFKA_SASL_PORT=$KAFKA_SASL_PORT
BASE_KAFKA_MTLS_PORT=$KAFKA_MTLS_PORT
BASE_NATS_PORT=$NATS_PORT
BASE_NATS_MONITOR_PORT=$NATS_MONITOR_PORT
FIRST_RC=0
STARTED_LANES=()
AWS_STARTED=""

# ---- timings ----------------------------------------------------------------------------------
# timed NAME CMD...: runs CMD, records "NAME seconds" in this process's timings file.
TIMINGS_FILE="$TIMINGS_DIR/main"
timed() {
  local name=$1 t0 rc=0
  shift
  t0=$(now_ms)
  log "==== $name"
  "$@" || rc=$?
  local ms=$(($(now_ms) - t0))
  printf '%-38s %6d.%01d s%s\n' "$name" $((ms / 1000)) $((ms % 1000 / 100)) \
    "$([ "$rc" -eq 0 ] || echo "  (failed, status $rc)")" >>"$TIMINGS_FILE"
  log "==== $name: $((ms / 1000)).$((ms % 1000 / 100)) s"
  return "$rc"
}
# failed WHAT RC: logs the failure and keeps the first failing status for the exit.
failed() {
  log "$1 failed with status $2"
  [ "$FIRST_RC" -ne 0 ] || FIRST_RC=$2
}

# ---- lanes ------------------------------------------------------------------------------------
# lane_env NAME NUMBER PGVERSION: the variables of lane NAME for scripts (exported in a subshell).
lane_exports() {
  local k=$2
  export OUTBOX_STATE_DIR="$STATE_ROOT/$1"
  export OUTBOX_PG_VERSION=$3
  export OUTBOX_PG_PORT=$((BASE_PG_PORT + 10 * k))
  export OUTBOX_KAFKA_PORT=$((BASE_KAFKA_PORT + 10 * k))
  export OUTBOX_KAFKA_CONTROLLER_PORT=$((BASE_KAFKA_CONTROLLER_PORT + 10 * k))
  export OUTBOX_KAFKA_SASL_PORT=$((BASE_KAFKA_SASL_PORT + 10 * k))
  export OUTBOX_KAFKA_MTLS_PORT=$((BASE_KAFKA_MTLS_PORT + 10 * k))
  export OUTBOX_NATS_PORT=$((BASE_NATS_PORT + 10 * k))
  export OUTBOX_NATS_MONITOR_PORT=$((BASE_NATS_MONITOR_PORT + 10 * k))
  unset OUTBOX_PG18_PORT OUTBOX_PG_FAILOVER_PORT
}
# lane_up NAME NUMBER PGVERSION SERVICE...: starts the lane's servers (SERVICES: words pg, kafka,
# nats) and writes $LANES_DIR/NAME.env, the test's environment in that lane.
lane_up() {
  local name=$1 k=$2 version=$3
  shift 3
  local services="$*"
  (
    lane_exports "$name" "$k" "$version"
    mkdir -p "$OUTBOX_STATE_DIR"
    rm -f "$OUTBOX_STATE_DIR/env"
    local pids=() rc=0 s
    for s in $services; do
      "$REPO/scripts/$s-up.sh" >/dev/null &
      pids+=($!)
    done
    for s in "${pids[@]}"; do wait "$s" || rc=$?; done
    [ "$rc" -eq 0 ] || exit "$rc"
    # shellcheck source=/dev/null
    source "$OUTBOX_STATE_DIR/env"
    if [ "$version" = 18 ]; then
      export OUTBOX_PG="$OUTBOX_PG18" OUTBOX_PG_DATA="$OUTBOX_PG18_DATA" OUTBOX_PG_BIN="$OUTBOX_PG18_BIN"
    fi
    export OUTBOX_RELAY_BIN="$BUILD/outbox-relay"
    env | grep -E '^OUTBOX_' | grep -v -E '^OUTBOX_(LANES_DIR|TIERS|CTEST_ARGS)=' | sort \
      >"$LANES_DIR/$name.env.tmp"
    mv "$LANES_DIR/$name.env.tmp" "$LANES_DIR/$name.env"
  )
}
# lane_vars FILE: exports a lane's variables (NAME=VALUE lines, values unquoted) into this shell.
lane_vars() {
  local line
  while IFS= read -r line; do
    case $line in '' | '#'*) continue ;; esac
    export "${line%%=*}=${line#*=}"
  done <"$1"
}
# lane_down NAME NUMBER PGVERSION
lane_down() {
  (
    lane_exports "$1" "$2" "$3"
    "$REPO/scripts/kafka-down.sh" >/dev/null 2>&1
    "$REPO/scripts/nats-down.sh" >/dev/null 2>&1
    "$REPO/scripts/pg-down.sh" >/dev/null 2>&1
    OUTBOX_PG_VERSION=18 "$REPO/scripts/pg-down.sh" >/dev/null 2>&1
  ) || true
}
# The lanes this run needs: "NAME NUMBER PGVERSION SERVICES".
LANE_SPECS=()
pg15_lanes=()
pg18_lanes=()
k=0
if wants integration || wants fault || wants failover || wants nats || wants aws || $quick; then
  n=$LANES
  $quick && n=1
  # The aws tier's relay tests need the lane's PostgreSQL only (moto is one for the run).
  svc="pg"
  { wants integration || wants fault || wants failover || wants nats || $quick; } &&
    svc="$svc kafka"
  # The failover tier's JetStream test (tests/failover/nats_failover_test.cpp) needs it too.
  { wants nats || wants failover; } && svc="$svc nats"
  for i in $(seq 1 "$n"); do
    k=$((k + 1))
    LANE_SPECS+=("pg15_$i $k 15 $svc")
    pg15_lanes+=("pg15_$i")
  done
fi
if wants pg18; then
  for i in $(seq 1 "$LANES"); do
    k=$((k + 1))
    LANE_SPECS+=("pg18_$i $k 18 pg kafka nats")
    pg18_lanes+=("pg18_$i")
  done
fi
misc_lane=""
if wants bench; then
  k=$((k + 1))
  LANE_SPECS+=("misc $k 15 pg kafka nats")
  misc_lane=misc
fi

# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
  local rc=$?
  set +e
  jobs -p | xargs -r kill 2>/dev/null
  if [ -n "$AWS_STARTED" ] && [ -z "${OUTBOX_KEEP_SERVICES:-}" ]; then
    (unset OUTBOX_STATE_DIR && "$REPO/scripts/aws-down.sh" >/dev/null 2>&1)
  fi
  if [ -z "${OUTBOX_KEEP_SERVICES:-}" ]; then
    local spec
    for spec in "${STARTED_LANES[@]}"; do
      # shellcheck disable=SC2086
      set -- $spec
      lane_down "$1" "$2" "$3"
    done
  fi
  # The costs of this run's tests, for tests/ctest-costs.txt (the lanes' order: longest first).
  # Per test the highest average; names may hold spaces (the last two fields are runs and cost).
  if compgen -G "$RUN_DIR/ctest-*/Testing/Temporary/CTestCostData.txt" >/dev/null; then
    {
      sed -n '1,2p' "$REPO/tests/ctest-costs.txt" 2>/dev/null
      awk '/^---$/ { skip[FILENAME] = 1; next }
        skip[FILENAME] || /^#/ || NF < 3 || $(NF - 1) == 0 { next }
        { name = $0; sub(/ [0-9]+ [0-9.e+-]+$/, "", name)
          if (!(name in best) || $NF + 0 > best[name] + 0) best[name] = $NF }
        END { for (n in best) printf "%s 1 %s\n", n, best[n] }' \
        "$RUN_DIR"/ctest-*/Testing/Temporary/CTestCostData.txt | LC_ALL=C sort
    } >"$RUN_DIR/ctest-costs.txt"
  fi
  # Each lane's busy time: the seconds its test processes ran (tests/support/lane.cpp).
  local times
  for times in "$LANES_DIR"/*.times; do
    [ -f "$times" ] || continue
    awk -v lane="$(basename "$times" .times)" '{ s += $1; n++ }
      END { printf "lane %-33s %6.1f s busy, %d tests\n", lane, s, n }' "$times" >>"$TIMINGS_FILE"
  done
  local ms=$(($(now_ms) - RUN_T0))
  printf '%-38s %6d.%01d s\n' "whole run" $((ms / 1000)) $((ms % 1000 / 100)) >>"$TIMINGS_FILE"
  log "timings (phases, then each stream's tiers):"
  local f
  for f in "$TIMINGS_DIR"/main "$TIMINGS_DIR"/stream-*; do
    [ -f "$f" ] && sed 's/^/  /' "$f" >&2
  done
  [ "$rc" -ne 0 ] || rc=$FIRST_RC
  log "exit status $rc"
  exit "$rc"
}
trap cleanup EXIT

# configure DIR [CMAKE ARGS...]: configures with Ninja (or the generator an existing cache
# already uses) and ccache when it is installed (scripts/install-deps.sh installs it).
configure() {
  local dir=$1
  shift
  local gen=(-G Ninja) launcher=()
  [ -f "$dir/CMakeCache.txt" ] && gen=()
  command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S "$REPO" -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" "$@" >/dev/null
}
# ccache: paths relative to the checkout, so that a fresh clone in another folder hits the cache.
export CCACHE_BASEDIR="$REPO" CCACHE_NOHASHDIR=1

ctest_args=()
read -r -a ctest_args <<<"${OUTBOX_CTEST_ARGS:-}"
TIER_LABELS='^(unit|repo|deploy|integration|fault|failover|nats|aws|package)$'

# ctest_in DIR [CTEST ARGS...]
ctest_in() {
  ctest --test-dir "$1" --output-on-failure --timeout 900 "${@:2}" "${ctest_args[@]}"
}
# stream_testdir NAME: a test directory of its own for a stream (its Testing/ logs and cost data),
# whose tests are those of build/; seeded with the committed costs so the longest tests go first.
stream_testdir() {
  local dir="$RUN_DIR/ctest-$1"
  mkdir -p "$dir/Testing/Temporary"
  printf 'subdirs("%s")\n' "$BUILD" >"$dir/CTestTestfile.cmake"
  [ -f "$REPO/tests/ctest-costs.txt" ] &&
    cp "$REPO/tests/ctest-costs.txt" "$dir/Testing/Temporary/CTestCostData.txt"
  printf '%s\n' "$dir"
}
# resource_spec FILE LANE...: ctest's resource specification with one slot per lane.
resource_spec() {
  local file=$1 sep="" l
  shift
  {
    printf '{"version":{"major":1,"minor":0},"local":[{"lanes":['
    for l in "$@"; do
      printf '%s{"id":"%s","slots":1}' "$sep" "$l"
      sep=","
    done
    printf ']}]}\n'
  } >"$file"
}
# lanes_ctest STREAM LANES... -- CTEST ARGS: the tests, spread over the lanes.
lanes_ctest() {
  local stream=$1 lanes=() dir spec
  shift
  while [ "$1" != -- ]; do
    lanes+=("$1")
    shift
  done
  shift
  dir="$(stream_testdir "$stream")"
  spec="$RUN_DIR/$stream-resources.json"
  resource_spec "$spec" "${lanes[@]}"
  ctest_in "$dir" -j "${#lanes[@]}" --resource-spec-file "$spec" "$@"
}

# ---- install, build, servers ------------------------------------------------------------------
if [ -z "${OUTBOX_SKIP_DEPS:-}" ]; then
  timed install-deps "$REPO/scripts/install-deps.sh" || die "install-deps.sh failed"
fi

# The lanes' servers start while the build runs, each lane's at once. (Not at a lower priority:
# a server keeps its niceness for its life, and the lanes' brokers must not yield to the
# sanitizer build while tests wait on them.)
lanes_pid=""
if [ ${#LANE_SPECS[@]} -gt 0 ]; then
  start_lanes() {
    local pids=() spec rc=0 p
    for spec in "${LANE_SPECS[@]}"; do
      # shellcheck disable=SC2086
      lane_up $spec >"$RUN_DIR/lane-${spec%% *}.log" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    return "$rc"
  }
  STARTED_LANES=("${LANE_SPECS[@]}")
  (timed "services (${#LANE_SPECS[@]} lanes, beside the build)" start_lanes) &
  lanes_pid=$!
fi

build_main() {
  configure "$BUILD" && cmake --build "$BUILD" -j "$JOBS"
}
timed build build_main || die "the build failed"

# Every test belongs to one tier: one without a tier label would never run.
unlabelled="$(ctest --test-dir "$BUILD" -N -LE "$TIER_LABELS" | sed -n 's/^ *Test *#[0-9]*: //p')"
if [ -n "$unlabelled" ]; then
  log "tests without a tier label (set LABELS in their CMakeLists.txt):"
  printf '  %s\n' "$unlabelled" >&2
  failed "tier labels" 1
fi

wants unit && { timed unit ctest_in "$BUILD" -L '^unit$' -j "$JOBS" || failed "ctest tier unit" $?; }
wants repo && { timed repo ctest_in "$BUILD" -L '^repo$' || failed "ctest tier repo" $?; }
wants deploy && { timed deploy ctest_in "$BUILD" -L '^deploy$' -LE '^integration$' -j "$JOBS" ||
  failed "ctest tier deploy" $?; }
# The aws tier: moto's server in the default state folder, shared by the run (its tests make
# queues and buses of their own names); its tests would start it too, here it is timed and stopped
# after. The tests run on the pg15 lanes (run_pg15): the relay's end-to-end ones need a
# PostgreSQL.
aws_tier() {
  local pid_file="$SHARED_DIR/aws/moto_server.pid"
  if ! { [ -f "$pid_file" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null; }; then
    AWS_STARTED=1
  fi
  (unset OUTBOX_STATE_DIR && "$REPO/scripts/aws-up.sh" >/dev/null) || return 1
}
wants aws && { timed "aws: moto" aws_tier || failed "moto for the aws tier" $?; }

if [ -n "$lanes_pid" ]; then
  if ! wait "$lanes_pid"; then
    for f in "$RUN_DIR"/lane-*.log; do
      log "$f:"
      cat "$f" >&2
    done
    die "the lanes' servers did not start"
  fi
fi

# ---- the streams ------------------------------------------------------------------------------
# stream NAME FUNCTION: runs FUNCTION in the background, its output in $RUN_DIR/NAME.log, its tiers'
# times in its own timings file, its status in $RUN_DIR/NAME.rc.
declare -A stream_pids=()
stream() {
  local name=$1 fn=$2
  (
    TIMINGS_FILE="$TIMINGS_DIR/stream-$name"
    FIRST_RC=0
    trap - EXIT
    "$fn"
    echo "$FIRST_RC" >"$RUN_DIR/$name.rc"
  ) >"$RUN_DIR/$name.log" 2>&1 &
  stream_pids[$name]=$!
}

run_pg15() {
  local labels=()
  wants integration && labels+=(integration)
  wants fault && labels+=(fault)
  wants failover && labels+=(failover)
  wants nats && labels+=(nats)
  wants aws && labels+=(aws)
  local re
  re="^($(IFS='|'; echo "${labels[*]}"))\$"
  timed "pg15: ${labels[*]}" lanes_ctest pg15 "${pg15_lanes[@]}" -- -L "$re" ||
    failed "ctest tier pg15 (${labels[*]})" $?
}
run_pg18() {
  # Not RelayIntegration.Tls (the wheel's server has no TLS), nor the sinks.* tests of
  # tests/unit/sinks labelled fault, which touch no PostgreSQL and ran in the pg15 stream. The
  # label pg18 (beside a tier label): a test of another tier that runs on PostgreSQL 18 too (the
  # relay's JetStream tests that depend on PostgreSQL's version).
  timed "pg18: integration fault pg18" lanes_ctest pg18 "${pg18_lanes[@]}" -- \
    -L '^(integration|fault|pg18)$' -E '^(RelayIntegration[.]Tls|sinks[.].*)$' ||
    failed "ctest tier pg18" $?
}
run_misc() {
  if wants package; then
    timed package ctest_in "$BUILD" -L '^package$' || failed "ctest tier package" $?
  fi
  # Benchmark smoke run (scripts/bench.sh --quick: tiny workloads through the decoder alone,
  # pg_recvlogical and the relay, plus a short latency run) on this stream's lane, so the
  # benchmark cannot rot. It fails when a consumer fails.
  if wants bench; then
    bench() {
      (
        lane_vars "$LANES_DIR/$misc_lane.env"
        "$REPO/scripts/bench.sh" --quick >/dev/null
      )
    }
    timed bench bench || failed "bench.sh --quick" $?
  fi
}
run_sanitizers() {
  # Lower priority than the lanes' relays and servers, which measure time.
  renice -n 10 -p "$BASHPID" >/dev/null
  if wants asan; then
    timed asan asan_tier || failed "sanitizer unit tests" $?
  fi
  if wants fuzz; then
    timed fuzz fuzz_tier || failed "fuzz_decoder" $?
  fi
}
asan_tier() {
  local asan="$REPO/build-asan"
  configure "$asan" -DOUTBOX_SANITIZE=ON || return 1
  local unit_targets=()
  mapfile -t unit_targets < <(cmake --build "$asan" --target help |
    sed -n 's/^\(unit_[A-Za-z0-9_.+-]*\): .*/\1/p' | sort -u)
  [ ${#unit_targets[@]} -gt 0 ] || { log "no unit_* targets in $asan"; return 1; }
  # The docs.* tests (label unit) run the generator: built too, so they run under the sanitizers.
  unit_targets+=(outbox-docgen)
  cmake --build "$asan" -j "$JOBS" --target "${unit_targets[@]}" || return 1
  ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}" \
    UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
    ctest --test-dir "$asan" -L '^unit$' -j "$JOBS" --output-on-failure --timeout 900 \
    "${ctest_args[@]}"
}
# The fuzz tier runs or fails: a missing clang or target is a failure, never a skip.
fuzz_tier() {
  local fuzz="$REPO/build-fuzz"
  command -v clang++ >/dev/null 2>&1 || { log "clang++ not found (scripts/install-deps.sh installs clang)"; return 1; }
  configure "$fuzz" -DCMAKE_CXX_COMPILER=clang++ -DOUTBOX_FUZZ=ON || return 1
  cmake --build "$fuzz" -j "$(nproc)" --target fuzz_decoder || return 1
  local fuzz_bin corpus seconds rc=0
  fuzz_bin="$(find "$fuzz" -type f -name fuzz_decoder -perm -u+x | head -n 1)"
  [ -n "$fuzz_bin" ] || { log "fuzz_decoder was built but its binary is not in $fuzz"; return 1; }
  corpus="$(mktemp -d)"
  [ -d "$REPO/tests/fuzz/corpus" ] && cp -a "$REPO/tests/fuzz/corpus/." "$corpus/"
  mkdir -p "$fuzz/artifacts"
  seconds="${OUTBOX_FUZZ_SECONDS:-60}"
  log "fuzzing for ${seconds}s on $(find "$corpus" -type f | wc -l) seed(s); log $fuzz/fuzz.log"
  "$fuzz_bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$fuzz/artifacts/" "$corpus" \
    >"$fuzz/fuzz.log" 2>&1 || rc=$?
  rm -rf "$corpus"
  if [ "$rc" -ne 0 ]; then
    tail -n 60 "$fuzz/fuzz.log" >&2
    log "crash inputs are in $fuzz/artifacts/"
    return "$rc"
  fi
  grep -E '^stat::(number_of_executed_units|new_units_added)' "$fuzz/fuzz.log" >&2
}
run_quick() {
  # One end-to-end run against the real servers: rows committed, delivered in order, confirmed.
  timed "quick: end to end" lanes_ctest quick "${pg15_lanes[@]}" -- \
    -R '^RelayIntegration[.]EndToEnd$' || failed "quick end to end" $?
}

if $quick; then
  stream quick run_quick
else
  { wants integration || wants fault || wants failover || wants nats || wants aws; } &&
    stream pg15 run_pg15
  wants pg18 && stream pg18 run_pg18
  { wants package || wants bench; } && stream misc run_misc
  { wants asan || wants fuzz; } && stream sanitizers run_sanitizers
fi

# Each stream's log as it ends.
streams_t0=$(now_ms)
remaining=("${!stream_pids[@]}")
while [ ${#remaining[@]} -gt 0 ]; do
  done_one=""
  for name in "${remaining[@]}"; do
    if ! kill -0 "${stream_pids[$name]}" 2>/dev/null; then
      wait "${stream_pids[$name]}" || true
      rc="$(cat "$RUN_DIR/$name.rc" 2>/dev/null || echo 1)"
      log "==== stream $name ended after $((($(now_ms) - streams_t0) / 1000)) s, status $rc; its log:"
      cat "$RUN_DIR/$name.log"
      [ "$rc" -eq 0 ] || failed "stream $name" "$rc"
      done_one=$name
      break
    fi
  done
  if [ -n "$done_one" ]; then
    next=()
    for name in "${remaining[@]}"; do [ "$name" = "$done_one" ] || next+=("$name"); done
    remaining=("${next[@]}")
  else
    sleep 1
  fi
done
exit "$FIRST_RC"
