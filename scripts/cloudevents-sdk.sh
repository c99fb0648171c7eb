#!/usr/bin/env bash
# Makes the Python venv with the CloudEvents SDK (PyPI's cloudevents, pinned) that
# tests/integration/cloudevents_test.cpp reads the relay's records with: .local/cloudevents-venv,
# from Debian's python3 and python3-venv (scripts/install-deps.sh). Idempotent: fast when the
# venv already has the pinned version. Prints the venv's python on stdout.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# One at a time: the PostgreSQL 15 and 18 lanes of scripts/test.sh run this fixture at once.
mkdir -p "$SHARED_DIR"
exec 8>"$SHARED_DIR/.cloudevents-venv.lock"
flock 8

VERSION=2.2.0
VENV="$SHARED_DIR/cloudevents-venv"
PYTHON="$VENV/bin/python"

have() {
  "$PYTHON" -c "import importlib.metadata as m, cloudevents.core.bindings.kafka, \
cloudevents.v1.kafka; raise SystemExit(m.version('cloudevents') != '$VERSION')" 2>/dev/null
}

if [ -x "$PYTHON" ] && have; then
  echo "$PYTHON"
  exit 0
fi
rm -rf "$VENV"
log "creating $VENV with cloudevents==$VERSION"
/usr/bin/python3 -m venv "$VENV" || die "python3 -m venv failed (is python3-venv installed?)"
pip_log="$(mktemp)"
trap 'rm -f "$pip_log"' EXIT
if ! "$PYTHON" -m pip install --disable-pip-version-check -q "cloudevents==$VERSION" \
  >"$pip_log" 2>&1; then
  tail -n 20 "$pip_log" >&2
  die "pip install cloudevents==$VERSION failed"
fi
have || die "cloudevents $VERSION does not import from $VENV"
echo "$PYTHON"
