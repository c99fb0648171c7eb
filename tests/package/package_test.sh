#!/usr/bin/env bash
# The Debian package as a user gets it: build it with CPack, install it with dpkg on this
# machine, run the installed binary, check the installed systemd unit with systemd-analyze
# (verify, and the sandbox's exposure with `security --offline`), check that the unit's
# ExecStart with the shipped environment file is accepted by the installed binary's flag parser,
# then purge the package and check that nothing is left. On the way, docker/Dockerfile's runtime
# stage is checked against the package's Depends (the one check of the Dockerfile that runs here).
#
#   package_test.sh BUILD_DIR VERSION CHECK_DEPLOY_PY PYTHON
#
# Needs root (dpkg), or passwordless sudo. Refuses to run when an outbox-relay package (or a
# /usr/bin/outbox-relay) is already installed: it would replace and then remove it.
# The unit is not started: there is no systemd as PID 1 on the CI machines.
set -euo pipefail

build=$1 version=$2 check_deploy=$3 python=$4
pkg=outbox-relay
unit=/lib/systemd/system/outbox-relay.service
envfile=/etc/default/outbox-relay

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
step() { echo "---- $*"; }

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  sudo -n true 2>/dev/null || fail "needs root or passwordless sudo to install the package"
  sudo=(sudo -n)
fi
for tool in cpack dpkg dpkg-deb systemd-analyze; do
  command -v "$tool" >/dev/null || fail "$tool not found (scripts/install-deps.sh installs it)"
done
installed() { [ "$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null)" = installed ]; }
if installed || dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null | grep -q .; then
  fail "package $pkg is already on this machine ($(dpkg-query -W -f='${db:Status-Abbrev} ${Version}' "$pkg")); remove it first (dpkg --purge $pkg)"
fi
[ ! -e /usr/bin/outbox-relay ] || fail "/usr/bin/outbox-relay exists and belongs to no package"

work="$(mktemp -d)"
we_installed=false
cleanup() {
  local rc=$?
  if $we_installed && installed; then
    "${sudo[@]}" dpkg --purge "$pkg" >/dev/null 2>&1 || echo "cleanup: dpkg --purge $pkg failed" >&2
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT

# dpkg takes a lock; another dpkg or apt on the machine makes it fail at once. Retry for 120 s.
dpkg_locked() {
  local deadline=$(($(date +%s) + 120)) out
  while true; do
    if out="$("${sudo[@]}" "$@" 2>&1)"; then
      printf '%s\n' "$out"
      return 0
    fi
    if ! grep -q -i 'lock' <<<"$out" || [ "$(date +%s)" -ge "$deadline" ]; then
      printf '%s\n' "$out" >&2
      return 1
    fi
    sleep 1
  done
}

step "cpack: build the package"
arch="$(dpkg --print-architecture)"
deb="$work/${pkg}_${version}_${arch}.deb"
(cd "$build" && cpack --config CPackConfig.cmake -B "$work" >"$work/cpack.log" 2>&1) ||
  { cat "$work/cpack.log" >&2; fail "cpack failed"; }
[ -f "$deb" ] || { ls -l "$work" >&2; fail "cpack did not write $(basename "$deb")"; }
echo "$(basename "$deb"): $(stat -c %s "$deb") bytes"

step "the package's metadata and contents"
field() { dpkg-deb -f "$deb" "$1"; }
[ "$(field Package)" = "$pkg" ] || fail "Package is '$(field Package)'"
[ "$(field Version)" = "$version" ] || fail "Version is '$(field Version)', expected $version"
[ "$(field Architecture)" = "$arch" ] || fail "Architecture is '$(field Architecture)'"
depends="$(field Depends)"
echo "Depends: $depends"
for lib in libpq5 librdkafka1 libsimdjson14 libc6; do
  grep -q -E "(^|, )$lib( |,|$)" <<<"$depends" || fail "Depends lacks $lib: $depends"
done
contents="$(dpkg-deb -c "$deb")"
for path in ./usr/bin/outbox-relay .$unit .$envfile ./usr/share/doc/outbox_relay/README.md; do
  grep -q -E " $path\$" <<<"$contents" || fail "the package lacks $path"
done
grep -q -E "^-rw------- root/root .* \.$envfile\$" <<<"$contents" ||
  fail "$envfile is not -rw------- root/root in the package: $(grep "$envfile" <<<"$contents")"
dpkg-deb --ctrl-tarfile "$deb" | tar -xOf - ./conffiles | grep -q -x "$envfile" ||
  fail "$envfile is not a conffile"
# The unit's secrets, loaded as systemd credentials: root-only conffiles.
for cred in /etc/outbox-relay/pgpass /etc/outbox-relay/kafka.properties; do
  grep -q -E "^-rw------- root/root .* \.$cred\$" <<<"$contents" ||
    fail "$cred is not -rw------- root/root in the package: $(grep "$cred" <<<"$contents")"
  dpkg-deb --ctrl-tarfile "$deb" | tar -xOf - ./conffiles | grep -q -x "$cred" ||
    fail "$cred is not a conffile"
done

step "docker/Dockerfile's runtime stage installs what the package depends on"
"$python" "$check_deploy" dockerfile --deb "$deb"

step "dpkg -i"
dpkg_locked dpkg -i "$deb" >"$work/dpkg-install.log" || fail "dpkg -i failed"
we_installed=true
installed || fail "dpkg -i succeeded but $pkg is not installed"

step "outbox-relay --version from the installed path"
[ "$(command -v outbox-relay)" = /usr/bin/outbox-relay ] ||
  fail "outbox-relay on PATH is $(command -v outbox-relay), not /usr/bin/outbox-relay"
got="$(/usr/bin/outbox-relay --version)"
[ "$got" = "outbox-relay $version" ] || fail "--version printed '$got', expected 'outbox-relay $version'"
echo "$got"
[ "$(stat -c '%a %U %G' "$envfile")" = "600 root root" ] ||
  fail "$envfile is $(stat -c '%a %U %G' "$envfile") after install, expected 600 root root"

step "systemd-analyze verify $unit"
out="$(systemd-analyze verify "$unit" 2>&1)" || { echo "$out" >&2; fail "systemd-analyze verify failed"; }
# verify exits 0 on some complaints (unknown settings are warnings): none is allowed.
if [ -n "$out" ]; then
  echo "$out" >&2
  fail "systemd-analyze verify printed warnings"
fi

step "systemd-analyze security --offline (exposure of the sandbox, 0 to 10: at most 2.0)"
# --threshold counts tenths (systemd 252): 20 is an exposure of 2.0.
out="$(systemd-analyze security --offline=yes --threshold=20 "$unit" 2>&1)" || {
  echo "$out" >&2
  fail "the unit's exposure is above 2.0 (systemd-analyze security)"
}
grep -E 'Overall exposure level' <<<"$out"

step "ExecStart with the shipped $envfile, through the installed binary's flag parser"
"$python" "$check_deploy" unit --relay /usr/bin/outbox-relay --unit "$unit" --env "$envfile"

step "dpkg --purge"
dpkg_locked dpkg --purge "$pkg" >"$work/dpkg-purge.log" || fail "dpkg --purge failed"
we_installed=false
! installed || fail "$pkg still installed after purge"
for path in /usr/bin/outbox-relay "$unit" "$envfile" /etc/outbox-relay /usr/share/doc/outbox_relay; do
  [ ! -e "$path" ] || fail "$path is left after dpkg --purge"
done
echo "package test passed"
