#!/usr/bin/env bash
# The whole test run, as CI does it (.ci/run):
#   1. scripts/install-deps.sh
#   2. configure + build in build/ (CMake, Ninja, RelWithDebInfo)
#   3. start PostgreSQL and Kafka (scripts/pg-up.sh, scripts/kafka-up.sh)
#   4. ctest in build/, then the integration and fault tests again on PostgreSQL 18
#   5. unless OUTBOX_SKIP_FUZZ is set:
#        unit_* targets built with ASan+UBSan in build-asan/, then ctest there on the tests
#        named unit* or run by a unit_* executable;
#        the libFuzzer target fuzz_decoder built with clang in build-fuzz/, run for
#        ${OUTBOX_FUZZ_SECONDS:-60} s on a temporary copy of tests/fuzz/corpus.
#   6. unless OUTBOX_SKIP_BENCH is set: scripts/bench.sh --quick (benchmark smoke run).
# Services are stopped on exit (set OUTBOX_KEEP_SERVICES=1 to leave them running).
# nats-server (scripts/nats-up.sh, JetStream, for the tests labelled nats) starts after them.
# Exit status: ctest's status if it failed, else that of the first failing phase in step 5.
# Extra ctest arguments for step 4 can be given in OUTBOX_CTEST_ARGS (e.g. "-R relay -V").
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"

JOBS="$(nproc)"
TIMINGS=()
PHASE=""
PHASE_T0=0

phase() {
  phase_done
  PHASE=$1
  PHASE_T0=$(now_ms)
  log "==== $PHASE"
}
phase_done() {
  if [ -n "$PHASE" ]; then
    local ms=$(($(now_ms) - PHASE_T0))
    TIMINGS+=("$(printf '%-28s %4d.%01d s' "$PHASE" $((ms / 1000)) $((ms % 1000 / 100)))")
    log "==== $PHASE: $((ms / 1000)).$((ms % 1000 / 100)) s"
    PHASE=""
  fi
}

# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
  local rc=$?
  set +e
  phase_done
  if [ -z "${OUTBOX_KEEP_SERVICES:-}" ]; then
    "$REPO/scripts/kafka-down.sh"
    "$REPO/scripts/pg-down.sh"
    OUTBOX_PG_VERSION=18 "$REPO/scripts/pg-down.sh"
  fi
  if [ -z "${OUTBOX_KEEP_SERVICES:-}" ]; then
    "$REPO/scripts/nats-down.sh"
  fi
  log "timings:"
  local t
  for t in "${TIMINGS[@]}"; do
    log "  $t"
  done
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

phase "install-deps"
"$REPO/scripts/install-deps.sh"

phase "build"
configure "$REPO/build"
cmake --build "$REPO/build" -j "$JOBS"

phase "services"
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
# NATS JetStream (the tests labelled nats): starts in well under a second.
"$REPO/scripts/nats-up.sh" >/dev/null || die "nats-up.sh failed"
# shellcheck source=/dev/null
source "$ENV_FILE"
export OUTBOX_RELAY_BIN="$REPO/build/outbox-relay"
log "OUTBOX_PG=$OUTBOX_PG OUTBOX_BROKERS=$OUTBOX_BROKERS"

phase "ctest"
ctest_args=()
read -r -a ctest_args <<<"${OUTBOX_CTEST_ARGS:-}"
ctest_rc=0
# A test that fails is run once more (its failure stays in the log): a few fault tests drive
# librdkafka's mock cluster and real broker restarts, whose timing on 2 shared cores varies.
ctest --test-dir "$REPO/build" --output-on-failure --timeout 900 --repeat until-pass:2 \
  "${ctest_args[@]}" || ctest_rc=$?
[ "$ctest_rc" -eq 0 ] || log "ctest failed with status $ctest_rc"

# ---- PostgreSQL 18 (issue 22) ----------------------------------------------------------------
# The tests that talk to the server (labels integration and fault) run again against PostgreSQL
# 18 (scripts/pg-up.sh with OUTBOX_PG_VERSION=18, on OUTBOX_PG18_PORT, by default PostgreSQL's
# port + 1), all of them but RelayIntegration.Tls (the wheel's server has no TLS). About as long
# as the first pass without its unit tests. OUTBOX_SKIP_PG18=1 leaves the pass out.
if [ -z "${OUTBOX_SKIP_PG18:-}" ]; then
  phase "ctest on PostgreSQL 18"
  pg18=(env OUTBOX_PG_VERSION=18 OUTBOX_PG_PORT="${OUTBOX_PG18_PORT:-$((PG_PORT + 1))}")
  "${pg18[@]}" "$REPO/scripts/pg-up.sh" >/dev/null || die "pg-up.sh (PostgreSQL 18) failed"
  # shellcheck source=/dev/null
  source "$ENV_FILE"
  rc=0
  "${pg18[@]}" OUTBOX_PG="$OUTBOX_PG18" OUTBOX_PG_DATA="$OUTBOX_PG18_DATA" \
    OUTBOX_PG_BIN="$OUTBOX_PG18_BIN" ctest --test-dir "$REPO/build" --output-on-failure \
    --timeout 900 -L 'integration|fault' -E '^RelayIntegration[.]Tls$' "${ctest_args[@]}" || rc=$?
  "${pg18[@]}" "$REPO/scripts/pg-down.sh" || true
  if [ "$rc" -ne 0 ]; then
    log "ctest on PostgreSQL 18 failed with status $rc"
    [ "$ctest_rc" -ne 0 ] || ctest_rc=$rc
  fi
fi

extra_rc=0
if [ -z "${OUTBOX_SKIP_FUZZ:-}" ]; then
  phase "asan unit tests"
  asan="$REPO/build-asan"
  configure "$asan" -DOUTBOX_SANITIZE=ON
  mapfile -t unit_targets < <(cmake --build "$asan" --target help |
    sed -n 's/^\(unit_[A-Za-z0-9_.+-]*\): .*/\1/p' | sort -u)
  if [ ${#unit_targets[@]} -eq 0 ]; then
    log "no unit_* targets yet; skipping the sanitizer run"
  else
    cmake --build "$asan" -j "$JOBS" --target "${unit_targets[@]}"
    # The tests to run: those named unit* plus every test whose command is a unit_*
    # executable (gtest_discover_tests names them "<TEST_PREFIX><Suite>.<Case>"). Selected
    # by number (-I) so that tests of targets not built here are not attempted.
    mapfile -t unit_tests < <({
      ctest --test-dir "$asan" -N -V |
        sed -n 's|^\([0-9]\+\): Test command: "\{0,1\}[^ ]*/unit_[^/ ]*\( .*\)\{0,1\}$|\1|p'
      ctest --test-dir "$asan" -N -R '^unit' | sed -n 's|^ *Test *#\([0-9]\+\): .*|\1|p'
    } | sort -n -u)
    if [ ${#unit_tests[@]} -eq 0 ]; then
      log "no unit tests registered in $asan; skipping the sanitizer run"
    else
      list="$(IFS=,; printf '%s' "${unit_tests[*]}")"
      log "running ${#unit_tests[@]} unit tests under ASan+UBSan"
      rc=0
      ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}" \
        UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
        ctest --test-dir "$asan" -I "0,0,0,$list" --output-on-failure --timeout 900 || rc=$?
      if [ "$rc" -ne 0 ]; then
        log "sanitizer unit tests failed with status $rc"
        [ "$extra_rc" -ne 0 ] || extra_rc=$rc
      fi
    fi
  fi

  phase "fuzz_decoder"
  fuzz="$REPO/build-fuzz"
  configure "$fuzz" -DCMAKE_CXX_COMPILER=clang++ -DOUTBOX_FUZZ=ON
  if ! has_target "$fuzz" fuzz_decoder; then
    log "no fuzz_decoder target yet; skipping the fuzz run"
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
      log "fuzz_decoder failed with status $rc; crash inputs are in $fuzz/artifacts/"
      [ "$extra_rc" -ne 0 ] || extra_rc=$rc
    else
      grep -E '^stat::(number_of_executed_units|new_units_added)' "$fuzz/fuzz.log" >&2 || true
    fi
  fi
fi

# Benchmark smoke run (scripts/bench.sh --quick, well under a minute: tiny workloads through the
# decoder alone, pg_recvlogical and the relay, plus a short latency run) so the benchmark cannot
# rot. It uses the relay built above (OUTBOX_RELAY_BIN) and fails when a consumer fails.
if [ -z "${OUTBOX_SKIP_BENCH:-}" ]; then
  phase "bench --quick"
  rc=0
  "$REPO/scripts/bench.sh" --quick >/dev/null || rc=$?
  if [ "$rc" -ne 0 ]; then
    log "bench.sh --quick failed with status $rc"
    [ "$extra_rc" -ne 0 ] || extra_rc=$rc
  fi
fi
phase_done

if [ "$ctest_rc" -ne 0 ]; then
  exit "$ctest_rc"
fi
exit "$extra_rc"
