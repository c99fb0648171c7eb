#!/usr/bin/env bash
# Stops the Kafka broker started by scripts/kafka-up.sh: SIGCONT (a test may have stopped
# it), SIGTERM, wait up to ${OUTBOX_KAFKA_STOP_TIMEOUT:-30} s, then SIGKILL.
# Idempotent: succeeds when the broker is not running.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STOP_TIMEOUT="${OUTBOX_KAFKA_STOP_TIMEOUT:-30}"

if ! pid="$(kafka_pid)"; then
  rm -f "$KAFKA_PID_FILE"
  exit 0
fi

gone() { ! kill -0 "$pid" 2>/dev/null || [ "$(ps -o stat= -p "$pid" 2>/dev/null | cut -c1)" = Z ]; }

kill -CONT "$pid" 2>/dev/null || true
kill -TERM "$pid" 2>/dev/null || true
if ! wait_until "$STOP_TIMEOUT" "Kafka (pid $pid) to exit after SIGTERM" gone; then
  log "sending SIGKILL to $pid"
  kill -KILL "$pid" 2>/dev/null || true
  wait_until 10 "Kafka (pid $pid) to exit after SIGKILL" gone || die "pid $pid survived SIGKILL"
fi
rm -f "$KAFKA_PID_FILE"
log "Kafka stopped"
