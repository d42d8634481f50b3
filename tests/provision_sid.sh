#!/usr/bin/env bash
# Provision a server that Debian stable lacks, in a minimal Debian unstable root of its own:
# stable packages no MySQL (unstable's MySQL 9.x needs a newer C library than stable has), and
# stable's MariaDB is older than the 11.8 LTS. Each kind gets its own root (about 1 GB, a minute
# or two), since MariaDB's packages replace MySQL's mysqld. The tests run the root's server
# through that root's own dynamic loader, so the server's data directory, socket and port are
# ordinary host paths; no chroot at run time.
#
# Usage: provision_sid.sh [mysql|mariadb11]
#   prints the root's path, building it first when missing (default kind: mysql).
# The root is cached per machine in $XASINK_MYSQL_ROOT (default: ~/.cache/xasink/mysql-sid) or
# $XASINK_MARIADB11_ROOT (default: ~/.cache/xasink/mariadb-sid).
# Needs root (or sudo) the first time: debootstrap and apt-get inside the new root.
set -euo pipefail

kind="${1:-mysql}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/xasink"
case "$kind" in
mysql)
  name="MySQL"
  root="${XASINK_MYSQL_ROOT:-$cache/mysql-sid}"
  packages=(mysql-server-core mysql-client-core)
  server=usr/sbin/mysqld
  ;;
mariadb11)
  name="MariaDB 11.8"
  root="${XASINK_MARIADB11_ROOT:-$cache/mariadb-sid}"
  packages=(mariadb-server-core mariadb-client-core)
  server=usr/sbin/mariadbd
  ;;
*)
  echo "unknown server kind '$kind' (expected mysql or mariadb11)" >&2
  exit 2
  ;;
esac

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
    echo "provisioning $name needs root or password-less sudo (debootstrap)" >&2
    exit 3
  fi
fi

mkdir -p "$(dirname "$root")"
exec 9>"$root.lock"
if ! flock -w 1500 9; then
  echo "another process has been building the $name root for 25 minutes; giving up" >&2
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
  echo "cannot reach the Debian mirror $host to build the $name root" >&2
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
echo "building a Debian unstable root for $name in $root (log: $log)" >&2
# One chain: `set -e` does not hold inside a group whose failure is handled.
{
  $sudo debootstrap --variant=minbase sid "$tmp" "$mirror" &&
    $sudo cp /etc/resolv.conf "$tmp/etc/resolv.conf" &&
    $sudo chroot "$tmp" apt-get -o Acquire::Check-Valid-Until=false update -qq &&
    $sudo chroot "$tmp" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends "${packages[@]}" &&
    $sudo chroot "$tmp" apt-get clean &&
    [ -x "$tmp/$server" ]
} >"$log" 2>&1 || {
  echo "building the $name root failed; last lines of $log:" >&2
  tail -n 5 "$log" >&2
  exit 1
}
$sudo touch "$tmp/.xasink-ready"
$sudo rm -rf "$root"
$sudo mv "$tmp" "$root"
echo "$root"
