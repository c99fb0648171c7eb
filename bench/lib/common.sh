# shellcheck shell=bash
# Helpers of bench/run.sh and bench/lib/consumers.sh. Source it after scripts/lib.sh; do not
# execute it. Uses the driver's globals PG (conninfo), RUNS (the runs table) and TIMEOUT.

psql_q() { psql -X -q -At -v ON_ERROR_STOP=1 "$PG" "$@"; }
now_ns() { date +%s%N; }
# cpu_s PID: user+sys seconds of a live process; rss_kb PID: its peak RSS (VmHWM).
cpu_s() { awk -v t="$(getconf CLK_TCK)" '{ printf "%.3f", ($14 + $15) / t }' "/proc/$1/stat"; }
rss_kb() { awk '/^VmHWM:/ { print $2 }' "/proc/$1/status"; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", (b - a) / 1e9 }'; }
# record WORKLOAD REP CONSUMER EVENTS PAYLOAD_BYTES WALL_S CPU_S RSS_KB CONFIRM_S STEADY_S:
# one line of the runs table that bench/report.py reads.
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$RUNS"; }

# bench_port NAME: the port for a listener the bench starts itself (the relay's /metrics, Kafka
# Connect's REST API): $NAME from the environment when set, else a port the kernel reports free
# on 127.0.0.1 right now. Nothing is hard-coded, so a relay or a Connect worker of someone
# else's test on this machine is never in the way (nor disturbed).
bench_port() {
  local override=${!1:-}
  if [ -n "$override" ]; then
    printf '%s\n' "$override"
    return
  fi
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_while_alive WAITER CONSUMER WHAT: waits for background job WAITER (the record counter)
# while process CONSUMER lives; fails when the consumer exits first or the waiter fails.
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

# stop_pid PID [SIGNAL]: sends SIGNAL (default INT), waits up to 10 s, then SIGKILL.
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

# wait_confirmed SLOT LSN: returns when the slot's confirmed_flush_lsn reaches LSN (one query
# that polls inside the server, so the measurement adds almost no client work).
wait_confirmed() {
  psql -X -q -At "$PG" -c "SET statement_timeout = '${TIMEOUT}s'" -c "DO \$\$ BEGIN
    WHILE (SELECT coalesce(confirmed_flush_lsn < '$2'::pg_lsn, true) FROM pg_replication_slots
           WHERE slot_name = '$1') LOOP PERFORM pg_sleep(0.01); END LOOP; END \$\$"
}

drop_bench_slots() {
  psql_q -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
             WHERE slot_name LIKE 'bench\_%' AND NOT active" >/dev/null
}
