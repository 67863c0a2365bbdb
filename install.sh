#!/usr/bin/env bash
# cudafx — one command for a user: installs what is missing (apt on
# Debian/Ubuntu: build tools, GEGL, GIMP and its plug-in development files),
# builds, installs the plug-in into the user's folder of every GIMP found
# (3.x: ~/.config/GIMP/3.x/plug-ins/cudafx/, 2.10: ~/.config/GIMP/2.10/plug-ins/cudafx/),
# then runs the four procedures through headless GIMP on tests/data/astronaut.png
# and writes out/gimp-<filter>.png.
set -eu
cd "$(dirname "$0")"
config=${XDG_CONFIG_HOME:-$HOME/.config}/GIMP

bash tools/install-deps.sh
# GIMP and the development files of whichever versions the distribution has.
if command -v apt-get >/dev/null; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  want=""
  for p in gimp libgimp2.0-dev libgimp-3.0-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" && continue
    apt-cache show "$p" >/dev/null 2>&1 && want="$want $p"
  done
  if [ -n "$want" ]; then
    echo "install: installing$want"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $want >/dev/null
  fi
elif ! command -v gimp-console-2.10 >/dev/null && ! command -v gimp-console-3.0 >/dev/null; then
  echo "install: no apt-get; please install GIMP 3 (or 2.10) with its plug-in development files (libgimp-3.0 / libgimp2.0)" >&2
fi

make -j"$(nproc)" all
installed=""
if pkg-config --exists gimp-3.0 && command -v gimp-console-3.0 >/dev/null; then
  echo "install: GIMP 3 native plug-in build is not wired yet (make plugin builds it in a Debian 13 chroot)"
else
  echo "install: no GIMP 3 found (no gimp-console-3.0 with libgimp-3.0-dev); continuing"
fi
if pkg-config --exists gimp-2.0 && command -v gimp-console-2.10 >/dev/null; then
  make plugin-210
  mkdir -p "$config/2.10/plug-ins/cudafx"
  install -m 755 build/gimp210/cudafx "$config/2.10/plug-ins/cudafx/cudafx"
  echo "install: GIMP 2.10 plug-in installed in $config/2.10/plug-ins/cudafx/"
  installed=2.10
else
  echo "install: no GIMP 2.10 found (gimp-console-2.10 and libgimp2.0-dev)"
fi
[ -n "$installed" ] || { echo "install: no GIMP to install into" >&2; exit 1; }

# Smoke run: the four procedures with their defaults through headless GIMP.
mkdir -p out
in=$PWD/tests/data/astronaut.png
program=""
for f in median nl-means quantize convolve; do
  args=$(python3 tests/gimp210/procargs.py scheme "$f")
  program+="(let* ((img (car (gimp-file-load RUN-NONINTERACTIVE \"$in\" \"$in\")))
                   (layer (car (gimp-image-get-active-layer img))))
     (plug-in-cudafx-$f RUN-NONINTERACTIVE img layer $args)
     (gimp-file-save RUN-NONINTERACTIVE img layer \"$PWD/out/gimp-$f.png\" \"$PWD/out/gimp-$f.png\")
     (gimp-image-delete img))"
done
rm -f out/gimp-*.png
timeout 300 gimp-console-2.10 -i -b "(begin $program)" -b '(gimp-quit 0)' >out/gimp-smoke.log 2>&1 || true
for f in median nl-means quantize convolve; do
  [ -s "out/gimp-$f.png" ] || { echo "install: smoke run failed for $f (see out/gimp-smoke.log)" >&2; exit 1; }
  echo "install: $f through GIMP $installed: $PWD/out/gimp-$f.png"
done
