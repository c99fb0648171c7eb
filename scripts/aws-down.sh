#!/usr/bin/env bash
# Stops the moto_server started by scripts/aws-up.sh: SIGCONT (a test may have stopped it),
# SIGTERM, wait up to ${OUTBOX_AWS_STOP_TIMEOUT:-20} s, then SIGKILL. moto keeps its state in
# memory: the queues and the test key go with it (aws-up.sh makes a new key). Idempotent:
# succeeds when the server is not running.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PID_FILE="$LOCAL_DIR/aws/moto_server.pid"
STOP_TIMEOUT="${OUTBOX_AWS_STOP_TIMEOUT:-20}"

moto_pid() {
  local pid
  [ -f "$PID_FILE" ] || return 1
  pid="$(cat "$PID_FILE" 2>/dev/null)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'moto_server' || return 1
  printf '%s\n' "$pid"
}

if ! pid="$(moto_pid)"; then
  rm -f "$PID_FILE"
  exit 0
fi

gone() { ! kill -0 "$pid" 2>/dev/null || [ "$(ps -o stat= -p "$pid" 2>/dev/null | cut -c1)" = Z ]; }

kill -CONT "$pid" 2>/dev/null || true
kill -TERM "$pid" 2>/dev/null || true
if ! wait_until "$STOP_TIMEOUT" "moto_server (pid $pid) to exit after SIGTERM" gone; then
  log "sending SIGKILL to $pid"
  kill -KILL "$pid" 2>/dev/null || true
  wait_until 10 "moto_server (pid $pid) to exit after SIGKILL" gone || die "pid $pid survived SIGKILL"
fi
rm -f "$PID_FILE"
log "moto_server stopped"
