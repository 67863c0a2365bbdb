#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Builds the GIMP 3 plug-in inside the Debian 13 chroot (GIMP 3's libraries
# are newer than the host's) against the engine library built on the host;
# the chroot is the one the GIMP 3 tests run in (tests/gimp/chroot.sh).
#   tools/build-gimp3.sh [--module] OUT ENGINE_LIB "ENGINE_LINK_FLAGS" "INCLUDE_FLAGS" FILE...
#   tools/build-gimp3.sh --dialogs OUT "INCLUDE_FLAGS" FILE...
# The FILEs (the host's sources and headers, .c ones compiled) and the public
# headers of core/ are copied into the chroot, keeping their paths. The
# plug-in links libgimp without its UI, the whole engine, and exports its
# symbols: --dialogs builds the dialogs' module (libgimpui, GTK) that the
# plug-in loads for interactive runs and that takes the engine and the glue
# from it. --module builds the GEGL operations module (a shared object
# against the chroot's GEGL, only GEGL's entry points exported).
set -euo pipefail
pkg=gimp-3.0 link="-Wl,--export-dynamic" whole="-Wl,--whole-archive libcudafx.a -Wl,--no-whole-archive"
case "${1:-}" in
  --module)
    pkg=gegl-0.4 link="-shared -fPIC -fvisibility=hidden -Wl,--exclude-libs,ALL -Wl,-z,defs"
    whole=libcudafx.a
    shift ;;
  --dialogs)
    pkg=gimpui-3.0 link="-shared -fPIC" whole=
    out=$2 includes=$3; shift 3
    set -- "$out" "" "" "$includes" "$@" ;;
esac
out=$1 lib=$2 libs=$3 includes=$4; shift 4
chroot=$(cd "$(dirname "$0")/.." && pwd)/tests/gimp/chroot.sh
root=$("$chroot" ensure)

work=$(mktemp -d "$root/tmp/cudafx-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
tar -cf - core/cudafx.h core/i18n.h "$@" | tar -xf - -C "$work"
sources=()
for f in "$@"; do [[ $f == *.c ]] && sources+=("$f"); done
[ -z "$lib" ] || cp "$lib" "$work/libcudafx.a"
# A CUDA engine links cudart statically: bring the archive along, and use the
# chroot's libstdc++ runtime (it has no C++ development files).
if [[ $libs =~ ([^ ]*/libcudart_static.a) ]]; then
  cp "${BASH_REMATCH[1]}" "$work/"
  libs=${libs/${BASH_REMATCH[1]}/libcudart_static.a}
  libs=${libs/-lstdc++/-l:libstdc++.so.6}
fi
inside=${work#"$root"}

"$chroot" run /bin/sh -c "cd $inside && gcc -O2 -g -std=gnu11 -Wall -Wextra \
  -Wno-unused-parameter -Werror=implicit-function-declaration $includes $link \
  \$(pkg-config --cflags $pkg) ${sources[*]} $whole \$(pkg-config --libs $pkg) $libs -o product"
mkdir -p "$(dirname "$out")"
cp "$work/product" "$out"
echo "built $out (in $root)"
