#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The layers of docs/ARCHITECTURE.md, checked: hosts (cli/, plugin/) -> ui/
# -> engine (core/) -> backends, with no arrow back.
#  - core/ includes nothing from cuda/, ui/, a host, nor GLib, GEGL, GIMP or GTK;
#  - cuda/ reaches (through every include, transitively) core/'s plan
#    headers and services.h, never engine.h or cpu.h; and its objects call,
#    of core/, only what core/services.o defines;
#  - ui/ and the hosts include, of core/, cudafx.h and i18n.h alone; ui/
#    includes nothing from plugin/;
#  - the hosts' and ui/'s objects call, of the engine, only functions
#    core/cudafx.h declares (sources that this machine cannot compile, such
#    as GIMP 3's without libgimp-3.0-dev, get the include checks alone).
# Usage: tools/check-layers.sh [BUILD_DIR]   (the objects of `make`; ends
# with "N passed, N failed")
set -u
build=${1:-build}
cd "$(dirname "$0")/.."
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "PASS $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The quoted includes of FILE, each resolved to a path from the root: beside
# FILE first, then in the -I folders the Makefile gives that part.
includes_of() {
  local file=$1 dir name
  dir=$(dirname "$file")
  sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file" |
    while read -r name; do
      for d in "$dir" core ui/common ui/gimp3 ui/gimp210 plugin/gimp3 plugin/gimp210; do
        if [ -f "$d/$name" ]; then realpath --relative-to=. "$d/$name"; break; fi
      done
    done
}

# Every file FILE reaches through quoted includes, itself excluded.
reach() {
  local seen=" " todo=("$1") f g
  while [ ${#todo[@]} -gt 0 ]; do
    f=${todo[0]}; todo=("${todo[@]:1}")
    for g in $(includes_of "$f"); do
      case $seen in *" $g "*) continue ;; esac
      seen="$seen$g "; todo+=("$g"); echo "$g"
    done
  done
}

# core/: nothing above it.
found=$(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]([.]{2}/(cuda|cli|plugin|ui)/|glib|gegl|gtk|libgimp|gio|babl)' core/*.c core/*.h)
if [ -z "$found" ]; then ok "core/ includes nothing from cuda/, ui/, the hosts or their toolkits"
else bad "core/ includes what lies above it: $found"; fi

# cuda/: the plan headers and services.h, transitively; the engine's own
# headers (engine.h: validation, the row loop; cpu.h: the CPU table) never.
found=
for f in cuda/*.cu cuda/*.cuh cuda/*.h; do
  for g in $(reach "$f"); do
    case $g in
      core/engine.h|core/cpu.h) found="$found $f->$g" ;;
      core/*|cuda/*) ;;
      *) found="$found $f->$g" ;;
    esac
  done
done
if [ -z "$found" ]; then ok "cuda/ reaches only core/'s plan headers and services.h"
else bad "cuda/ reaches engine headers:$found"; fi

# The C names an object file leaves undefined, and those it defines.
undefined() { nm -u --format=posix "$@" 2>/dev/null | awk '{print $1}' | grep -E '^cudafx_' | sort -u; }
defined() { nm --defined-only --format=posix "$@" 2>/dev/null | awk '$2 ~ /^[TDRB]$/ {print $1}' | grep -E '^cudafx_' | sort -u; }

cuda_objs=$(ls "$build"/cuda/*.o 2>/dev/null)
if [ -n "$cuda_objs" ] && [ -f "$build/core/services.o" ]; then
  calls=$(comm -23 <(undefined $cuda_objs) <(defined $cuda_objs))
  outside=$(comm -23 <(echo "$calls" | sed '/^$/d') <(defined "$build/core/services.o"))
  if [ -z "$outside" ]; then ok "cuda/ calls of core/ are all services.o's ($(echo $calls))"
  else bad "cuda/ calls the engine outside services.h: $(echo $outside)"; fi
else
  echo "== cuda/'s symbols: skipped (no $build/cuda/*.o: a build without nvcc)"
fi

# ui/ and the hosts: core/cudafx.h and core/i18n.h only; ui/ nothing of plugin/.
found=
for f in cli/*.c cli/*.h plugin/*/*.c plugin/*/*.h ui/*/*.c ui/*/*.h bench/*.c; do
  [ -f "$f" ] || continue
  for g in $(includes_of "$f"); do
    case $g in core/cudafx.h|core/i18n.h) ;; core/*) found="$found $f->$g" ;; esac
  done
done
if [ -z "$found" ]; then ok "ui/ and the hosts include only core/cudafx.h and core/i18n.h of the engine"
else bad "ui/ or a host includes an engine header:$found"; fi

found=
for f in ui/*/*.c ui/*/*.h; do
  for g in $(reach "$f"); do case $g in plugin/*) found="$found $f->$g" ;; esac; done
  found="$found$(grep -nE '#[[:space:]]*include[[:space:]]*"[^"]*plugin/' "$f" | sed "s|^| $f:|")"
done
if [ -z "$found" ]; then ok "ui/ includes nothing from plugin/"
else bad "ui/ includes plugin/:$found"; fi

# The hosts' engine calls: declared in core/cudafx.h. Public names are the
# functions cudafx.h declares (a name followed by its parameter list) and
# its extern tables.
{ grep -oE '\bcudafx_[a-z0-9_]+[[:space:]]*\(' core/cudafx.h | sed 's/[[:space:]]*($//'
  sed -n 's/^extern .*\b\(cudafx_[a-z0-9_]*\)[[:space:]]*[[;].*/\1/p' core/cudafx.h; } | sort -u >"$tmp/public"
defined "$build"/core/*.o >"$tmp/engine"
check_host() { # name objects...: their calls of the engine's own names
  local name=$1; shift
  local calls outside
  calls=$(comm -23 <(undefined "$@") <(defined "$@"))
  outside=$(comm -12 <(echo "$calls" | sed '/^$/d') "$tmp/engine" | comm -23 - "$tmp/public")
  if [ -z "$outside" ]; then ok "$name calls only the engine's public API"
  else bad "$name calls engine internals: $(echo $outside)"; fi
}
cli_objs=$(ls "$build"/cli/*.o 2>/dev/null)
if [ -n "$cli_objs" ]; then check_host cli $cli_objs; else echo "== cli's symbols: skipped (no $build/cli/*.o)"; fi

# ui/ and the GEGL and GIMP 2.10 hosts are built without objects of their
# own: compiled here for their symbols where their libraries are.
compile() { # out pkgs includes sources...
  local out=$1 pkgs=$2 inc=$3; shift 3
  mkdir -p "$tmp/$out"
  pkg-config --exists $pkgs 2>/dev/null || return 1
  for s in "$@"; do
    gcc -std=gnu11 -O0 -w -DGLIB_DISABLE_DEPRECATION_WARNINGS $inc $(pkg-config --cflags $pkgs) \
      -c "$s" -o "$tmp/$out/$(basename "$s" .c).o" || return 1
  done
}
if compile gegl gegl-0.4 "-Icore -Iui/common" plugin/gegl/*.c ui/common/*.c; then
  check_host "plugin/gegl and ui/common" "$tmp"/gegl/*.o
else
  echo "== plugin/gegl's symbols: skipped (no GEGL development files)"
fi
if compile gimp210 gimpui-2.0 "-Icore -Iui/common -Iui/gimp210 -Iplugin/gimp210" \
     plugin/gimp210/*.c ui/gimp210/*.c ui/common/*.c; then
  check_host "plugin/gimp210 and ui/gimp210" "$tmp"/gimp210/*.o
else
  echo "== plugin/gimp210's symbols: skipped (no libgimp2.0-dev)"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
