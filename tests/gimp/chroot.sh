#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Creates (or reuses) a Debian chroot with GIMP 3 and its development files,
# kept outside the clone between runs, and runs commands in it. The mirror
# comes from the host's apt configuration at run time. CUDAFX_GIMP3_VERSION
# picks the GIMP: 3.0 (default; Debian 13 "trixie") or 3.2 (Debian "forky",
# testing), each in a chroot of its own.
#
#   tests/gimp/chroot.sh ensure [PKG...] create or reuse; prints the directory.
#                                        PKGs (e.g. Xvfb for the screenshots) are
#                                        installed on top when missing, so callers
#                                        with extra needs do not rebuild the chroot.
#   tests/gimp/chroot.sh run CMD [ARG]   run CMD inside (clean environment, /proc mounted)
#   tests/gimp/chroot.sh profile WORK BUILD
#                                        a throw-away GIMP 3 profile in WORK (a folder
#                                        under the chroot's /tmp): BUILD's plug-in in
#                                        WORK/profile/plug-ins/cudafx, its GEGL module in
#                                        WORK/data/gegl-0.4/plug-ins; GIMP then runs with
#                                        GIMP3_DIRECTORY=WORK/profile XDG_DATA_HOME=WORK/data
#
# CUDAFX_GIMP3_CHROOT overrides the directory (default /var/cache/cudafx-gimp3-chroot
# for 3.0, /var/cache/cudafx-gimp32-chroot for 3.2).
# Needs root (debootstrap, chroot, mount).
set -euo pipefail

die() { echo "chroot.sh: $*" >&2; exit 1; }

# Debian 12's debootstrap has no script for forky; sid's makes it (testing
# and unstable share their layout). The testing snapshot a mirror serves can
# be past its Release file's Valid-Until, which apt then refuses.
case ${CUDAFX_GIMP3_VERSION:-3.0} in
  3.0) suite=trixie script= no_valid_until=0 default_root=/var/cache/cudafx-gimp3-chroot ;;
  3.2) suite=forky script=/usr/share/debootstrap/scripts/sid no_valid_until=1
       default_root=/var/cache/cudafx-gimp32-chroot ;;
  *) die "CUDAFX_GIMP3_VERSION must be 3.0 or 3.2, not ${CUDAFX_GIMP3_VERSION}" ;;
esac
root=${CUDAFX_GIMP3_CHROOT:-$default_root}
packages="gimp libgimp-3.0-dev gcc make pkg-config"
# Bump when the package list or the setup below changes: a stale chroot is rebuilt.
stamp="cudafx-gimp3 v1 $suite: $packages"

host_mirror() {
  # First URIs: of a stanza that is not the security archive.
  local f=/etc/apt/sources.list.d/debian.sources uri
  if [ -r "$f" ]; then
    uri=$(awk '/^URIs:/ && $2 !~ /security/ { print $2; exit }' "$f")
  fi
  if [ -z "${uri:-}" ] && [ -r /etc/apt/sources.list ]; then
    uri=$(awk '$1 == "deb" && $2 !~ /security/ { print $2; exit }' /etc/apt/sources.list)
  fi
  [ -n "${uri:-}" ] || die "no Debian mirror found in the host's apt configuration"
  echo "$uri"
}

in_chroot() { # dir command...
  local dir=$1; shift
  chroot "$dir" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
    HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}

create() {
  [ "$(id -u)" -eq 0 ] || die "must run as root to create $root"
  command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null \
    || die "debootstrap is missing and could not be installed"
  local mirror tmp
  mirror=$(host_mirror)
  tmp="$root.tmp"
  rm -rf "$tmp"
  echo "chroot.sh: creating $root ($suite) from $mirror (a few minutes, once)" >&2
  debootstrap --variant=minbase "$suite" "$tmp" "$mirror" $script >"$tmp.log" 2>&1 \
    || { tail -n 20 "$tmp.log" >&2; die "debootstrap failed (log: $tmp.log)"; }
  printf '#!/bin/sh\nexit 101\n' > "$tmp/usr/sbin/policy-rc.d"
  chmod +x "$tmp/usr/sbin/policy-rc.d"
  echo force-unsafe-io > "$tmp/etc/dpkg/dpkg.cfg.d/force-unsafe-io"
  [ "$no_valid_until" -eq 0 ] ||
    echo 'Acquire::Check-Valid-Until "false";' > "$tmp/etc/apt/apt.conf.d/99cudafx-no-valid-until"
  mount -t proc proc "$tmp/proc"
  if ! { in_chroot "$tmp" apt-get update -qq &&
         in_chroot "$tmp" apt-get install -y -qq --no-install-recommends $packages; } >>"$tmp.log" 2>&1; then
    umount "$tmp/proc"; tail -n 20 "$tmp.log" >&2; die "package install failed (log: $tmp.log)"
  fi
  umount "$tmp/proc"
  in_chroot "$tmp" apt-get clean
  echo "$stamp" > "$tmp/.cudafx-stamp"
  rm -rf "$root" "$tmp.log"
  mv "$tmp" "$root"
}

# Installs the packages of "$@" that the chroot lacks.
add_packages() {
  local missing=() p
  for p in "$@"; do
    in_chroot "$root" dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'ok installed' \
      || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  [ "$(id -u)" -eq 0 ] || die "must run as root to install ${missing[*]} into $root"
  echo "chroot.sh: installing ${missing[*]} into $root" >&2
  local mounted=0 ok=1
  mountpoint -q "$root/proc" || { mount -t proc proc "$root/proc"; mounted=1; }
  { in_chroot "$root" apt-get update -qq &&
    in_chroot "$root" apt-get install -y -qq --no-install-recommends "${missing[@]}" &&
    in_chroot "$root" apt-get clean; } >"$root.extra.log" 2>&1 || ok=0
  [ $mounted -eq 0 ] || umount "$root/proc"
  [ $ok -eq 1 ] || { tail -n 20 "$root.extra.log" >&2
                     die "installing ${missing[*]} failed (log: $root.extra.log)"; }
  rm -f "$root.extra.log"
}

ensure() {
  mkdir -p "$(dirname "$root")"
  # One creator at a time; others wait and then reuse.
  exec 9>"$root.lock"
  flock 9
  if [ "$(cat "$root/.cudafx-stamp" 2>/dev/null)" != "$stamp" ]; then
    create
  fi
  add_packages "$@"
  flock -u 9
}

run() {
  [ -f "$root/.cudafx-stamp" ] || die "no chroot at $root: run '$0 ensure' first"
  mountpoint -q "$root/proc" || { mount -t proc proc "$root/proc"; trap 'umount "$root/proc"' EXIT; }
  in_chroot "$root" "$@"
}

profile() { # WORK BUILD
  local work=$1 build=$2
  mkdir -p "$work/profile/plug-ins/cudafx" "$work/data/gegl-0.4/plug-ins"
  cp "$build/gimp3/cudafx-gegl.so" "$work/data/gegl-0.4/plug-ins/"
  "$(dirname "$0")/../../tools/install-plugin.sh" "$build/gimp3/cudafx" "$build/locale" \
    "$work/profile/plug-ins/cudafx"
}

case "${1:-}" in
  ensure) shift; ensure "$@"; echo "$root" ;;
  run) shift; run "$@" ;;
  profile) shift; profile "$@" ;;
  *) echo "usage: $0 ensure [PACKAGE...] | run COMMAND [ARG...]" >&2; exit 2 ;;
esac
