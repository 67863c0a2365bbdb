#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Installs what cudafx needs to build and test on Debian or Ubuntu: a C
# compiler with OpenMP and the address/undefined sanitizers (gcc), a C++17
# compiler (g++: the host check of the GPU median's networks; nvcc's host compiler), make,
# pkg-config, the image libraries' development files (the CLI reads and writes
# PNG, JPEG, TIFF, WebP and PNM through libpng, libjpeg-turbo, libtiff,
# libwebp and libnetpbm, other formats through GEGL), gettext (msgfmt compiles
# the translations) and python3 with Pillow and numpy (the CLI tests check
# JSON and image files, and decode damaged files with Pillow for reference),
# and locales (the sources tests/i18n.sh compiles a German locale from, to check numbers keep the C locale).
# Idempotent and non-interactive: does nothing when everything is there,
# otherwise runs apt-get update and installs only what is missing. The CUDA
# toolkit is optional and not installed here: nvcc on PATH or in
# /usr/local/cuda turns the GPU backend on.
set -eu

packages="gcc g++ libc6-dev make pkg-config libgegl-dev libpng-dev libjpeg62-turbo-dev libtiff-dev libwebp-dev libnetpbm-dev zlib1g-dev gettext python3 python3-pil python3-numpy locales gegl"
needs="a C compiler with OpenMP (gcc), a C++17 compiler (g++), make, pkg-config, GEGL 0.4 development files (gegl-0.4.pc), libpng, libjpeg (libjpeg-turbo), libtiff, libwebp and netpbm development files, gettext, python3 with Pillow and numpy, locales (/usr/share/i18n/locales/de_DE), the gegl command (tests of the GEGL operations)"

have_everything() {
  command -v gcc >/dev/null && command -v g++ >/dev/null && command -v make >/dev/null && command -v python3 >/dev/null &&
    command -v pkg-config >/dev/null && command -v msgfmt >/dev/null &&
    pkg-config --exists gegl-0.4 libpng libjpeg libtiff-4 libwebp libwebpmux libwebpdemux zlib netpbm &&
    "$(command -v /usr/bin/python3 || command -v python3)" -c 'import PIL, numpy' 2>/dev/null &&
    command -v localedef >/dev/null && [ -f /usr/share/i18n/locales/de_DE ] && command -v gegl >/dev/null
}

if have_everything; then
  echo "install-deps: everything is installed ($needs)"
  exit 0
fi

if ! command -v apt-get >/dev/null || ! command -v dpkg-query >/dev/null; then
  echo "install-deps: no apt-get here; please install: $needs" >&2
  exit 1
fi

missing=""
for p in $packages; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then
    sudo="sudo"
  else
    echo "install-deps: not root and no sudo; please install as root:$missing" >&2
    exit 1
  fi
fi

echo "install-deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# shellcheck disable=SC2086
$sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
have_everything || { echo "install-deps: still missing something after apt-get: $needs" >&2; exit 1; }
echo "install-deps: done"
