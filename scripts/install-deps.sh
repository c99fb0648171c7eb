#!/usr/bin/env bash
# Installs the Debian 12 packages needed to build and test outbox-relay.
# Idempotent: silent and fast when everything is already installed; runs `apt-get update`
# only when something is missing. Needs root (or sudo) only when it has to install.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

packages=(
  build-essential g++ cmake ninja-build pkg-config ccache
  postgresql-15 postgresql-client-15 libpq-dev openssl
  libboost-dev librdkafka-dev libsimdjson-dev libspdlog-dev libfmt-dev
  protobuf-compiler libprotobuf-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev clang-format
  procps psmisc kafkacat
  nats-server libnats-dev
  dpkg-dev file systemd python3 python3-yaml python3-venv python3-pip prometheus
)
# Java and Maven may come from outside apt (SDKMAN, a tarball, the CI image...).
command -v java >/dev/null 2>&1 || packages+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || packages+=(maven)

installed() {
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]
}

missing=()
for p in "${packages[@]}"; do
  installed "$p" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

log "installing: ${missing[*]}"
sudo=()
if ! is_root; then
  command -v sudo >/dev/null 2>&1 || die "not root and no sudo; cannot install ${missing[*]}"
  sudo=(sudo)
fi

fresh_pg=false
installed postgresql-15 || fresh_pg=true
# Only promtool (tests/deploy) is wanted from the prometheus package, not its server.
fresh_prometheus=false
installed prometheus || fresh_prometheus=true

export DEBIAN_FRONTEND=noninteractive
apt_opts=(-q -y -o Dpkg::Use-Pty=0 -o APT::Install-Recommends=false)
apt_log="$(mktemp)"
trap 'rm -f "$apt_log"' EXIT
if ! "${sudo[@]}" apt-get "${apt_opts[@]}" update >"$apt_log" 2>&1 ||
  ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get "${apt_opts[@]}" install "${missing[@]}" >>"$apt_log" 2>&1; then
  tail -n 40 "$apt_log" >&2
  die "apt-get failed"
fi

# The postgresql-15 package creates and starts a default cluster "main" on port 5432.
# Our scripts use their own cluster and port; stop the default one if we just created it
# so it does not hold memory or the port.
if $fresh_pg && command -v pg_lsclusters >/dev/null 2>&1 &&
  pg_lsclusters -h 2>/dev/null | awk '$1 == 15 && $2 == "main"' | grep -q .; then
  log "stopping and disabling the default PostgreSQL cluster 15/main"
  "${sudo[@]}" pg_ctlcluster 15 main stop >/dev/null 2>&1 || true
  conf=/etc/postgresql/15/main/start.conf
  if [ -f "$conf" ]; then
    echo disabled | "${sudo[@]}" tee "$conf" >/dev/null
  fi
fi

# The prometheus package enables and may start its server (port 9090). Stop and disable it if
# we just installed it; on a machine without systemd (a container) it was never started.
if $fresh_prometheus; then
  if [ -d /run/systemd/system ]; then
    "${sudo[@]}" systemctl disable --now prometheus.service >/dev/null 2>&1 || true
  elif command -v invoke-rc.d >/dev/null 2>&1; then
    "${sudo[@]}" invoke-rc.d prometheus stop >/dev/null 2>&1 || true
  fi
fi

for p in "${missing[@]}"; do
  installed "$p" || die "package $p is still not installed"
done
log "done"
