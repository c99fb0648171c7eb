#!/usr/bin/env bash
# Stops the throwaway PostgreSQL cluster started by scripts/pg-up.sh (pg_ctl stop -m fast).
# Idempotent: succeeds when the cluster is not running or was never created.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DATA="$(pg_root)/data"
if [ ! -f "$DATA/PG_VERSION" ]; then
  exit 0
fi
if ! as_pg "$PG_BIN/pg_ctl" status -D "$DATA" >/dev/null 2>&1; then
  exit 0
fi
# A test may have left the postmaster stopped (SIGSTOP); it cannot shut down like that.
if [ -f "$DATA/postmaster.pid" ]; then
  pid="$(head -n 1 "$DATA/postmaster.pid" 2>/dev/null || true)"
  if [[ "$pid" =~ ^[0-9]+$ ]]; then
    kill -CONT "$pid" 2>/dev/null || true
  fi
fi
if ! as_pg "$PG_BIN/pg_ctl" stop -D "$DATA" -m fast -w -t 60 >/dev/null 2>&1; then
  log "fast shutdown timed out; trying immediate"
  as_pg "$PG_BIN/pg_ctl" stop -D "$DATA" -m immediate -w -t 30 >/dev/null 2>&1 ||
    die "could not stop PostgreSQL (data dir $DATA)"
fi
log "PostgreSQL stopped"
