#!/usr/bin/env bash
# Starts a single nats-server (Debian's nats-server 2.9) with JetStream enabled and prints its
# URL on stdout. Already running: just prints the URL.
#   state:   $REPO/.local/nats/{nats.conf,jetstream/,nats-server.log,nats-server.pid}
#   ports:   ${OUTBOX_NATS_PORT:-24232} (clients, 127.0.0.1 only, no auth, no TLS),
#            ${OUTBOX_NATS_MONITOR_PORT:-28232} (HTTP monitoring: /healthz, /jsz, /varz)
# JetStream keeps its streams in .local/nats/jetstream across restarts (file storage).
# Writes OUTBOX_NATS (the URL), OUTBOX_NATS_PID_FILE and OUTBOX_NATS_MONITOR to
# $REPO/.local/env.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NATS_BIN="${OUTBOX_NATS_SERVER:-$(command -v nats-server || true)}"
[ -x "$NATS_BIN" ] || NATS_BIN=/usr/sbin/nats-server
[ -x "$NATS_BIN" ] || die "nats-server not found; run scripts/install-deps.sh"

CONF="$NATS_DIR/nats.conf"
# nats-server keeps its streams in jetstream/ under store_dir.
STORE="$NATS_DIR"
SERVER_LOG="$NATS_DIR/nats-server.log"
READY_TIMEOUT=30

mkdir -p "$NATS_DIR" "$STORE"

write_env() {
  env_set OUTBOX_NATS "$NATS_URL"
  env_set OUTBOX_NATS_PID_FILE "$NATS_PID_FILE"
  env_set OUTBOX_NATS_MONITOR "http://$NATS_HOST:$NATS_MONITOR_PORT"
}

ready() { port_open "$NATS_HOST" "$NATS_PORT" && grep -q 'Server is ready' "$SERVER_LOG" 2>/dev/null; }

# Fast path: a live server from an earlier run.
if pid="$(nats_pid)" && ready; then
  write_env
  printf '%s\n' "$NATS_URL"
  exit 0
fi

# Regenerated on every start so that OUTBOX_NATS_PORT (and edits here) take effect.
# max_payload stays at the server's default (1 MiB): the tests rely on it.
cat >"$CONF" <<CONF
# Written by scripts/nats-up.sh; overwritten on every start.
server_name: outbox-relay-test
listen: $NATS_HOST:$NATS_PORT
http: $NATS_HOST:$NATS_MONITOR_PORT
jetstream {
  store_dir: "$STORE"
  max_memory_store: 64MB
  max_file_store: 2GB
}
CONF

if ! pid="$(nats_pid)"; then
  for port in "$NATS_PORT" "$NATS_MONITOR_PORT"; do
    if port_open "$NATS_HOST" "$port"; then
      die "port $port is already in use by another process"
    fi
  done
  [ -f "$SERVER_LOG" ] && mv -f "$SERVER_LOG" "$SERVER_LOG.prev"
  log "starting nats-server $("$NATS_BIN" --version | sed 's/^nats-server: //') on $NATS_URL (log: $SERVER_LOG)"
  # setsid: own session, so a Ctrl-C or a test harness killing our process group does not
  # take the server down with it. -P writes the pid file once the server runs.
  nohup setsid "$NATS_BIN" -c "$CONF" -P "$NATS_PID_FILE" </dev/null >"$SERVER_LOG" 2>&1 &
  started=$!
  if ! wait_until 10 "nats-server to write $NATS_PID_FILE" nats_pid; then
    kill "$started" 2>/dev/null || true
    tail -n 30 "$SERVER_LOG" >&2 || true
    die "nats-server did not start"
  fi
  pid="$(nats_pid)"
fi

start=$(now_ms)
if ! wait_until "$READY_TIMEOUT" "nats-server on $NATS_URL" ready; then
  tail -n 30 "$SERVER_LOG" >&2 || true
  die "nats-server (pid $pid) not ready after ${READY_TIMEOUT}s"
fi
grep -q 'Starting JetStream' "$SERVER_LOG" || die "nats-server runs without JetStream ($SERVER_LOG)"
log "nats-server ready in $(($(now_ms) - start)) ms"

write_env
printf '%s\n' "$NATS_URL"
