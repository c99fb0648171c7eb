#!/usr/bin/env bash
# The whole test run, as CI does it (.ci/run), or some of its tiers (docs/testing.md):
#
#   scripts/test.sh [TIER...]        (or OUTBOX_TIERS="TIER ...")
#
# Tiers, in the order they run (all of them when none is named):
#   unit         ctest -L unit, in parallel (-j nproc): no I/O, seconds
#   repo         ctest -L repo: checks on the repository itself (no tracked file over 1 MiB)
#   deploy       ctest -L deploy -LE integration, in parallel: promtool, static checks
#   integration  ctest -L integration, one at a time: the real relay against PostgreSQL and Kafka
#   fault        ctest -L fault, one at a time: tests that kill, stop and restart the servers
#   failover     ctest -L failover: a PostgreSQL 18 primary and standby of their own, promoted
#   nats         ctest -L nats: the JetStream publisher, and the relay publishing to it (--nats),
#                against nats-server (scripts/nats-up.sh) and PostgreSQL
#   pg18         the integration and fault tests again on PostgreSQL 18 (OUTBOX_PG_VERSION=18
#                scripts/pg-up.sh on OUTBOX_PG18_PORT, default PostgreSQL's port + 1), all but
#                RelayIntegration.Tls (the wheel's server has no TLS); OUTBOX_SKIP_PG18 drops it
#   package      ctest -L package: the Debian package installed with dpkg (needs root or sudo)
#   asan         the unit tests built with ASan+UBSan in build-asan/ and run there (-j nproc)
#   fuzz         the libFuzzer target fuzz_decoder built with clang in build-fuzz/, run for
#                ${OUTBOX_FUZZ_SECONDS:-60} s on a temporary copy of tests/fuzz/corpus
#   bench        scripts/bench.sh --quick (benchmark smoke run)
# Before them: scripts/install-deps.sh (unless OUTBOX_SKIP_DEPS is set), configure + build in
# build/ (CMake, Ninja, RelWithDebInfo); PostgreSQL and Kafka are started (scripts/pg-up.sh,
# scripts/kafka-up.sh) only when a tier needs them (integration, fault, bench).
# Knobs: OUTBOX_SKIP_FUZZ drops asan and fuzz, OUTBOX_SKIP_BENCH drops bench from the default
# list; OUTBOX_CTEST_ARGS adds arguments to every ctest call (e.g. "-R relay -V");
# OUTBOX_FAULT_SCALE=0.1 shrinks the fault tests' workloads; OUTBOX_KEEP_SERVICES=1 leaves the
# services running on exit (they are stopped otherwise).
# Every test registered with ctest carries exactly one tier label (a test without one fails the
# run). No test is retried: a test that fails once is a failure (a flake is a bug to fix).
# Exit status: that of the first failing tier. The time of each phase is printed at the end.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"

ALL_TIERS=(unit repo deploy integration fault failover nats pg18 package asan fuzz bench)
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
  case " ${ALL_TIERS[*]} " in
    *" $t "*) want[$t]=1 ;;
    *) die "unknown tier '$t' (tiers: ${ALL_TIERS[*]})" ;;
  esac
done
wants() { [ -n "${want[$1]:-}" ]; }

JOBS="$(nproc)"
TIMINGS=()
PHASE=""
PHASE_T0=0
STARTED_SERVICES=""
STARTED_NATS=""
STARTED_PG=""
FIRST_RC=0

phase() {
  phase_done
  PHASE=$1
  PHASE_T0=$(now_ms)
  log "==== $PHASE"
}
phase_done() {
  if [ -n "$PHASE" ]; then
    local ms=$(($(now_ms) - PHASE_T0))
    TIMINGS+=("$(printf '%-20s %5d.%01d s' "$PHASE" $((ms / 1000)) $((ms % 1000 / 100)))")
    log "==== $PHASE: $((ms / 1000)).$((ms % 1000 / 100)) s"
    PHASE=""
  fi
}
# failed WHAT RC: logs the failure and keeps the first failing status for the exit.
failed() {
  log "$1 failed with status $2"
  [ "$FIRST_RC" -ne 0 ] || FIRST_RC=$2
}

# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
  local rc=$?
  set +e
  phase_done
  if [ -n "$STARTED_SERVICES" ] && [ -z "${OUTBOX_KEEP_SERVICES:-}" ]; then
    "$REPO/scripts/kafka-down.sh"
    "$REPO/scripts/pg-down.sh"
  fi
  if [ -n "$STARTED_PG" ] && [ -z "${OUTBOX_KEEP_SERVICES:-}" ]; then
    "$REPO/scripts/pg-down.sh"
  fi
  if [ -n "$STARTED_NATS" ] && [ -z "${OUTBOX_KEEP_SERVICES:-}" ]; then
    "$REPO/scripts/nats-down.sh"
  fi
  log "timings:"
  local t
  for t in "${TIMINGS[@]}"; do
    log "  $t"
  done
  [ "$rc" -ne 0 ] || rc=$FIRST_RC
  log "exit status $rc"
  exit "$rc"
}
trap cleanup EXIT

# configure DIR [CMAKE ARGS...]: configures with Ninja (or the generator an existing cache
# already uses).
configure() {
  local dir=$1
  shift
  local gen=(-G Ninja)
  [ -f "$dir/CMakeCache.txt" ] && gen=()
  cmake -S "$REPO" -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
}

# has_target DIR NAME: true when the build system in DIR knows the target NAME.
has_target() {
  cmake --build "$1" --target help 2>/dev/null | grep -q -E "^$2(:| )"
}

ctest_args=()
read -r -a ctest_args <<<"${OUTBOX_CTEST_ARGS:-}"
TIER_LABELS='^(unit|repo|deploy|integration|fault|failover|nats|package)$'

# ctest_tier NAME [CTEST ARGS...]: one ctest tier in build/, its failure recorded.
ctest_tier() {
  local name=$1
  shift
  phase "$name"
  local rc=0
  ctest --test-dir "$REPO/build" --output-on-failure --timeout 900 "$@" "${ctest_args[@]}" ||
    rc=$?
  [ "$rc" -eq 0 ] || failed "ctest tier $name" "$rc"
}

if [ -z "${OUTBOX_SKIP_DEPS:-}" ]; then
  phase "install-deps"
  "$REPO/scripts/install-deps.sh"
fi

phase "build"
configure "$REPO/build"
cmake --build "$REPO/build" -j "$JOBS"

# Every test belongs to one tier: one without a tier label would never run.
unlabelled="$(ctest --test-dir "$REPO/build" -N -LE "$TIER_LABELS" | sed -n 's/^ *Test *#[0-9]*: //p')"
if [ -n "$unlabelled" ]; then
  log "tests without a tier label (set LABELS in their CMakeLists.txt):"
  printf '  %s\n' "$unlabelled" >&2
  failed "tier labels" 1
fi

if wants integration || wants fault || wants failover || wants pg18 || wants bench; then
  phase "services"
  STARTED_SERVICES=1
  # Start both at once; each is idempotent and writes its own lines of .local/env.
  "$REPO/scripts/pg-up.sh" >/dev/null &
  pg_job=$!
  "$REPO/scripts/kafka-up.sh" >/dev/null &
  kafka_job=$!
  pg_rc=0
  kafka_rc=0
  wait "$pg_job" || pg_rc=$?
  wait "$kafka_job" || kafka_rc=$?
  [ "$pg_rc" -eq 0 ] || die "pg-up.sh failed ($pg_rc)"
  [ "$kafka_rc" -eq 0 ] || die "kafka-up.sh failed ($kafka_rc)"
  # shellcheck source=/dev/null
  source "$ENV_FILE"
  export OUTBOX_RELAY_BIN="$REPO/build/outbox-relay"
  log "OUTBOX_PG=$OUTBOX_PG OUTBOX_BROKERS=$OUTBOX_BROKERS"
fi
if wants nats; then
  # NATS JetStream (the tests labelled nats): starts in well under a second.
  STARTED_NATS=1
  "$REPO/scripts/nats-up.sh" >/dev/null || die "nats-up.sh failed"
  # The relay's tests (nats.NatsRelay.*) need PostgreSQL, not Kafka.
  if [ -z "$STARTED_SERVICES" ]; then
    STARTED_PG=1
    "$REPO/scripts/pg-up.sh" >/dev/null || die "pg-up.sh failed"
  fi
  # shellcheck source=/dev/null
  source "$ENV_FILE"
  export OUTBOX_RELAY_BIN="$REPO/build/outbox-relay"
fi

# The unit, repo and static deploy tests share no server: they run in parallel. Integration
# tests share one PostgreSQL (its WAL senders, replication slots, roles) and one broker, and
# several measure time (idle relays, deadlines): they run one at a time, as the fault tests,
# which stop and restart the servers, must.
wants unit && ctest_tier unit -L '^unit$' -j "$JOBS"
wants repo && ctest_tier repo -L '^repo$'
wants deploy && ctest_tier deploy -L '^deploy$' -LE '^integration$' -j "$JOBS"
wants integration && ctest_tier integration -L '^integration$'
wants fault && ctest_tier fault -L '^fault$'
wants failover && ctest_tier failover -L '^failover$'
wants nats && ctest_tier nats -L '^nats$'
if wants pg18; then
  pg18=(env OUTBOX_PG_VERSION=18 OUTBOX_PG_PORT="${OUTBOX_PG18_PORT:-$((PG_PORT + 1))}")
  "${pg18[@]}" "$REPO/scripts/pg-up.sh" >/dev/null || die "pg-up.sh (PostgreSQL 18) failed"
  # shellcheck source=/dev/null
  source "$ENV_FILE"
  pg15=("$OUTBOX_PG" "$OUTBOX_PG_DATA" "$OUTBOX_PG_BIN")
  # The caller's OUTBOX_PG_VERSION and OUTBOX_PG_PORT, restored afterwards (unset only if they were
  # unset: the bench tier's pg-up.sh must find PostgreSQL 15 on the caller's port).
  pg15_env=("${OUTBOX_PG_VERSION-}" "${OUTBOX_PG_VERSION+set}" "${OUTBOX_PG_PORT-}" "${OUTBOX_PG_PORT+set}")
  export OUTBOX_PG="$OUTBOX_PG18" OUTBOX_PG_DATA="$OUTBOX_PG18_DATA" OUTBOX_PG_BIN="$OUTBOX_PG18_BIN"
  export OUTBOX_PG_VERSION=18 OUTBOX_PG_PORT="${OUTBOX_PG18_PORT:-$((PG_PORT + 1))}"
  ctest_tier pg18 -L '^(integration|fault)$' -E '^RelayIntegration[.]Tls$'
  export OUTBOX_PG="${pg15[0]}" OUTBOX_PG_DATA="${pg15[1]}" OUTBOX_PG_BIN="${pg15[2]}"
  if [ -n "${pg15_env[1]}" ]; then export OUTBOX_PG_VERSION="${pg15_env[0]}"; else unset OUTBOX_PG_VERSION; fi
  if [ -n "${pg15_env[3]}" ]; then export OUTBOX_PG_PORT="${pg15_env[2]}"; else unset OUTBOX_PG_PORT; fi
  "${pg18[@]}" "$REPO/scripts/pg-down.sh" || true
fi
wants package && ctest_tier package -L '^package$'

if wants asan; then
  phase "asan"
  asan="$REPO/build-asan"
  configure "$asan" -DOUTBOX_SANITIZE=ON
  mapfile -t unit_targets < <(cmake --build "$asan" --target help |
    sed -n 's/^\(unit_[A-Za-z0-9_.+-]*\): .*/\1/p' | sort -u)
  # The docs.* tests (label unit) run the generator: built too, so they run under the sanitizers.
  # (Not looked up with has_target: Ninja's help does not list a top-level executable.)
  unit_targets+=(outbox-docgen)
  if [ ${#unit_targets[@]} -eq 0 ]; then
    log "no unit_* targets; skipping the sanitizer run"
  else
    cmake --build "$asan" -j "$JOBS" --target "${unit_targets[@]}"
    rc=0
    ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}" \
      UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
      ctest --test-dir "$asan" -L '^unit$' -j "$JOBS" --output-on-failure --timeout 900 \
      "${ctest_args[@]}" || rc=$?
    [ "$rc" -eq 0 ] || failed "sanitizer unit tests" "$rc"
  fi
fi

if wants fuzz; then
  phase "fuzz"
  fuzz="$REPO/build-fuzz"
  configure "$fuzz" -DCMAKE_CXX_COMPILER=clang++ -DOUTBOX_FUZZ=ON
  if ! has_target "$fuzz" fuzz_decoder; then
    log "no fuzz_decoder target; skipping the fuzz run"
  else
    cmake --build "$fuzz" -j "$JOBS" --target fuzz_decoder
    fuzz_bin="$(find "$fuzz" -type f -name fuzz_decoder -perm -u+x | head -n 1)"
    [ -n "$fuzz_bin" ] || die "fuzz_decoder was built but its binary is not in $fuzz"
    corpus="$(mktemp -d)"
    if [ -d "$REPO/tests/fuzz/corpus" ]; then
      cp -a "$REPO/tests/fuzz/corpus/." "$corpus/"
    fi
    mkdir -p "$fuzz/artifacts"
    seconds="${OUTBOX_FUZZ_SECONDS:-60}"
    log "fuzzing for ${seconds}s on $(find "$corpus" -type f | wc -l) seed(s); log $fuzz/fuzz.log"
    rc=0
    "$fuzz_bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$fuzz/artifacts/" "$corpus" \
      >"$fuzz/fuzz.log" 2>&1 || rc=$?
    rm -rf "$corpus"
    if [ "$rc" -ne 0 ]; then
      tail -n 60 "$fuzz/fuzz.log" >&2
      log "crash inputs are in $fuzz/artifacts/"
      failed "fuzz_decoder" "$rc"
    else
      grep -E '^stat::(number_of_executed_units|new_units_added)' "$fuzz/fuzz.log" >&2 || true
    fi
  fi
fi

# Benchmark smoke run (scripts/bench.sh --quick, well under a minute: tiny workloads through the
# decoder alone, pg_recvlogical and the relay, plus a short latency run) so the benchmark cannot
# rot. It uses the relay built above (OUTBOX_RELAY_BIN) and fails when a consumer fails.
if wants bench; then
  phase "bench"
  rc=0
  "$REPO/scripts/bench.sh" --quick >/dev/null || rc=$?
  [ "$rc" -eq 0 ] || failed "bench.sh --quick" "$rc"
fi
phase_done
exit "$FIRST_RC"
