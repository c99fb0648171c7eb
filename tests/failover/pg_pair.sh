#!/usr/bin/env bash
# A PostgreSQL 18 primary and a streaming standby for the failover test (docs/failover.md), in
# $(pg_root of version 18)/pair, TCP on 127.0.0.1 only, trust auth, superuser postgres, database
# outbox. OUTBOX_PAIR_PG_VERSION=15 (given to every call) makes a PostgreSQL 15 pair instead, in
# $(pg_root of version 15)/pair: no failover slots there (synchronized_standby_slots and
# sync_replication_slots are 17's), so the promoted standby never has the relay's slot:
#   pg_pair.sh up PRIMARY_PORT STANDBY_PORT [unprotected]   fresh pair: the primary with
#       wal_level = logical and synchronized_standby_slots = 'pair_standby' (empty with
#       `unprotected`: the misconfiguration docs/failover.md warns about); the standby from
#       pg_basebackup on that physical slot, with sync_replication_slots = on,
#       hot_standby_feedback = on and dbname in primary_conninfo; returns once the standby streams.
#   pg_pair.sh pause-standby / resume-standby SIGSTOP / SIGCONT to the standby's walreceiver: the
#       primary commits what the standby does not receive (asynchronous replication's window).
#   pg_pair.sh kill-walreceiver               SIGKILL to the paused walreceiver: what it received
#       and had not written is lost (the standby restarts from its disk).
#   pg_pair.sh kill-primary                   SIGKILL to the primary's postmaster and children.
#   pg_pair.sh promote                        pg_ctl promote on the standby, waiting for it.
#   pg_pair.sh down                           stops both (immediate) and removes the pair.
# The binaries are those of scripts/pg-up.sh with OUTBOX_PG_VERSION=18 (installed if needed).
set -euo pipefail
export OUTBOX_PG_VERSION="${OUTBOX_PAIR_PG_VERSION:-18}"
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

"$REPO/scripts/pg-up.sh" --install-only >/dev/null
DIR="$(pg_root)/pair"
PRIMARY="$DIR/primary"
STANDBY="$DIR/standby"

pg_ctl() { as_pg "$PG_BIN/pg_ctl" "$@"; }
psql_at() {
  local port=$1
  shift
  "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres "$@"
}
stop_if_running() {
  if [ -f "$1/postmaster.pid" ] && pg_ctl status -D "$1" >/dev/null 2>&1; then
    pg_ctl stop -D "$1" -m immediate -w -t 30 >/dev/null 2>&1 || true
  fi
}
resume_walreceiver() {
  if [ -f "$DIR/walreceiver.pid" ]; then
    kill -CONT "$(cat "$DIR/walreceiver.pid")" 2>/dev/null || true
  fi
}
standby_ready() {
  "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$(cat "$DIR/standby.port")" -d postgres -U postgres
}
streaming() {
  [ "$(psql_at "$1" -d postgres -tAc "SELECT count(*) FROM pg_stat_replication \
    WHERE application_name = 'pair_standby' AND state = 'streaming'")" = 1 ]
}

case "${1:-}" in
  up)
    [ $# -eq 3 ] || [ $# -eq 4 ] || die "usage: pg_pair.sh up PRIMARY_PORT STANDBY_PORT [unprotected]"
    p=$2
    s=$3
    protect="'pair_standby'"
    [ "${4:-}" = unprotected ] && protect="''"
    # Failover slots' settings, 17 and later only (15 refuses to start on a name it lacks).
    primary_slots="synchronized_standby_slots = $protect"
    standby_slots="synchronized_standby_slots = ''
sync_replication_slots = on"
    if [ "$OUTBOX_PG_VERSION" = 15 ]; then
      primary_slots=""
      standby_slots=""
    fi
    stop_if_running "$STANDBY"
    stop_if_running "$PRIMARY"
    rm -rf "$DIR"
    mkdir -p "$DIR/log"
    is_root && chown postgres:postgres "$DIR" "$DIR/log"
    as_pg "$PG_BIN/initdb" -D "$PRIMARY" -A trust -U postgres -E UTF8 --locale=C.UTF-8 \
      >"$DIR/log/initdb.log" 2>&1 || die "initdb failed: $(tail -n 5 "$DIR/log/initdb.log")"
    as_pg tee -a "$PRIMARY/postgresql.conf" >/dev/null <<CONF
# tests/failover/pg_pair.sh: the primary
port = $p
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
wal_level = logical
max_wal_senders = 10
max_replication_slots = 10
$primary_slots
CONF
    pg_ctl start -w -t 60 -D "$PRIMARY" -l "$DIR/log/primary.log" >/dev/null ||
      die "the primary did not start: $(tail -n 20 "$DIR/log/primary.log")"
    psql_at "$p" -d postgres -c "CREATE DATABASE outbox" \
      -c "SELECT pg_create_physical_replication_slot('pair_standby')" >/dev/null
    as_pg "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p "$p" -U postgres -D "$STANDBY" -X stream \
      -c fast >"$DIR/log/basebackup.log" 2>&1 ||
      die "pg_basebackup failed: $(tail -n 5 "$DIR/log/basebackup.log")"
    # synchronized_standby_slots is emptied on the standby: once promoted it has no standby, and
    # a name of a missing slot would hold its failover slots' decoding back forever.
    as_pg tee -a "$STANDBY/postgresql.conf" >/dev/null <<CONF
# tests/failover/pg_pair.sh: the standby
port = $s
$standby_slots
primary_conninfo = 'host=127.0.0.1 port=$p user=postgres dbname=outbox application_name=pair_standby'
primary_slot_name = 'pair_standby'
hot_standby_feedback = on
hot_standby = on
CONF
    as_pg touch "$STANDBY/standby.signal"
    pg_ctl start -w -t 60 -D "$STANDBY" -l "$DIR/log/standby.log" >/dev/null ||
      die "the standby did not start: $(tail -n 20 "$DIR/log/standby.log")"
    wait_until 60 "the standby streams from the primary" streaming "$p" ||
      die "the standby does not stream: $(tail -n 20 "$DIR/log/standby.log")"
    printf '%s\n' "$s" >"$DIR/standby.port"
    ;;
  pause-standby)
    pid="$(psql_at "$(cat "$DIR/standby.port")" -d postgres -tAc "SELECT pid FROM pg_stat_wal_receiver")"
    [[ "$pid" =~ ^[0-9]+$ ]] || die "the standby has no walreceiver"
    kill -STOP "$pid"
    printf '%s\n' "$pid" >"$DIR/walreceiver.pid"
    ;;
  resume-standby)
    resume_walreceiver
    ;;
  kill-walreceiver)
    # What it had not written yet dies with it, also what sat in its socket's buffer; the
    # standby's postmaster restarts it (crash restart) from what is on disk.
    kill -9 "$(cat "$DIR/walreceiver.pid")"
    ;;
  kill-primary)
    pid="$(head -n 1 "$PRIMARY/postmaster.pid")"
    [[ "$pid" =~ ^[0-9]+$ ]] || die "no postmaster pid in $PRIMARY/postmaster.pid"
    children="$(ps -o pid= --ppid "$pid" || true)"
    kill -9 "$pid"
    for c in $children; do kill -9 "$c" 2>/dev/null || true; done
    log "killed the primary (postmaster $pid and $(echo "$children" | wc -w) children)"
    ;;
  promote)
    resume_walreceiver
    wait_until 60 "the standby accepts connections" standby_ready || die "the standby is not up"
    pg_ctl promote -D "$STANDBY" -w -t 60 >/dev/null || die "pg_ctl promote failed"
    ;;
  down)
    resume_walreceiver
    stop_if_running "$STANDBY"
    stop_if_running "$PRIMARY"
    rm -rf "$DIR"
    ;;
  *)
    die "usage: pg_pair.sh up PRIMARY_PORT STANDBY_PORT [unprotected] | pause-standby | resume-standby | kill-primary | promote | down"
    ;;
esac
