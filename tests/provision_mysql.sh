#!/usr/bin/env bash
# Provision MySQL for the tests: Debian stable packages no MySQL, and unstable's MySQL 9.x needs a
# newer C library than stable has, so it lives in a minimal Debian unstable root of its own
# (about 1 GB, a minute or two). The tests run its mysqld through that root's own dynamic loader,
# so the server's data directory, socket and port are ordinary host paths; no chroot at run time.
#
# Usage: provision_mysql.sh            prints the root's path, building it first when missing
# The root is cached per machine in $XASINK_MYSQL_ROOT (default: ~/.cache/xasink/mysql-sid).
# Needs root (or sudo) the first time: debootstrap and apt-get inside the new root.
set -euo pipefail

root="${XASINK_MYSQL_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/xasink/mysql-sid}"
ready="$root/.xasink-ready"
if [ -e "$ready" ]; then
  echo "$root"
  exit 0
fi

sudo=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo="sudo -n"
  else
    echo "provisioning MySQL needs root or password-less sudo (debootstrap)" >&2
    exit 3
  fi
fi

mkdir -p "$(dirname "$root")"
exec 9>"$root.lock"
if ! flock -w 1500 9; then
  echo "another process has been building the MySQL root for 25 minutes; giving up" >&2
  exit 1
fi
if [ -e "$ready" ]; then # another process built it while we waited
  echo "$root"
  exit 0
fi

# The Debian mirror that apt's own sources already name; deb.debian.org otherwise.
mirror="$(grep -hoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' \
  /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
  grep -oE 'https?://[^ ]+' | head -n1 || true)"
mirror="${mirror:-http://deb.debian.org/debian}"
host="$(echo "$mirror" | sed -E 's#^https?://([^/:]+).*#\1#')"
if ! timeout 15 bash -c ": >/dev/tcp/$host/80" 2>/dev/null; then
  echo "cannot reach the Debian mirror $host to build the MySQL root" >&2
  exit 1
fi

if ! command -v debootstrap >/dev/null 2>&1; then
  echo "installing Debian package debootstrap" >&2
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq debootstrap >&2
fi

tmp="$root.tmp"
log="$root.log"
$sudo rm -rf "$tmp"
echo "building a Debian unstable root for MySQL in $root (log: $log)" >&2
# One chain: `set -e` does not hold inside a group whose failure is handled.
{
  $sudo debootstrap --variant=minbase sid "$tmp" "$mirror" &&
    $sudo cp /etc/resolv.conf "$tmp/etc/resolv.conf" &&
    $sudo chroot "$tmp" apt-get -o Acquire::Check-Valid-Until=false update -qq &&
    $sudo chroot "$tmp" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends mysql-server-core mysql-client-core &&
    $sudo chroot "$tmp" apt-get clean &&
    [ -x "$tmp/usr/sbin/mysqld" ]
} >"$log" 2>&1 || {
  echo "building the MySQL root failed; last lines of $log:" >&2
  tail -n 5 "$log" >&2
  exit 1
}
$sudo touch "$tmp/.xasink-ready"
$sudo rm -rf "$root"
$sudo mv "$tmp" "$root"
echo "$root"
