#!/usr/bin/env bash
# Stops the nats-server started by scripts/nats-up.sh: SIGCONT (a test may have stopped it),
# SIGTERM, wait up to ${OUTBOX_NATS_STOP_TIMEOUT:-20} s, then SIGKILL. The JetStream state
# under .local/nats/jetstream stays. Idempotent: succeeds when the server is not running.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STOP_TIMEOUT="${OUTBOX_NATS_STOP_TIMEOUT:-20}"

if ! pid="$(nats_pid)"; then
  rm -f "$NATS_PID_FILE"
  exit 0
fi

gone() { ! kill -0 "$pid" 2>/dev/null || [ "$(ps -o stat= -p "$pid" 2>/dev/null | cut -c1)" = Z ]; }

kill -CONT "$pid" 2>/dev/null || true
kill -TERM "$pid" 2>/dev/null || true
if ! wait_until "$STOP_TIMEOUT" "nats-server (pid $pid) to exit after SIGTERM" gone; then
  log "sending SIGKILL to $pid"
  kill -KILL "$pid" 2>/dev/null || true
  wait_until 10 "nats-server (pid $pid) to exit after SIGKILL" gone || die "pid $pid survived SIGKILL"
fi
rm -f "$NATS_PID_FILE"
log "nats-server stopped"
