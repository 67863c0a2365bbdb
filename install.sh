#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# cudafx — one command for a user: installs what is missing (apt on
# Debian/Ubuntu: build tools, GEGL, GIMP and its plug-in development files),
# builds (`make`), installs for this user (`make install`: the plug-in into the
# folder of every GIMP found, the CLI in ~/.local/bin; tools/install-files.sh
# says where), then runs the five procedures through headless GIMP on
# tests/data/astronaut.png and writes out/gimp3-<filter>.png (GIMP 3) and
# out/gimp-<filter>.png (GIMP 2.10).
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
make install
mkdir -p out
in=$PWD/tests/data/astronaut.png
filters="median nl-means nl-bayes quantize convolve"
installed=""

# smoke NAME PREFIX COMMAND...: COMMAND (a headless GIMP) wrote out/PREFIX-<filter>.png
# for every filter, else the install failed (log in out/PREFIX-smoke.log).
smoke() {
  local name=$1 prefix=$2 f; shift 2
  rm -f out/"$prefix"-*.png
  timeout 300 "$@" >"out/$prefix-smoke.log" 2>&1 || true
  for f in $filters; do
    [ -s "out/$prefix-$f.png" ] || { echo "install: $name smoke run failed for $f (see out/$prefix-smoke.log)" >&2; exit 1; }
    echo "install: $f through $name: $PWD/out/$prefix-$f.png"
  done
}

# GIMP 3: the gimp(-console)-3.x binary and any ~/.config/GIMP/3.x folders.
gimp3=$(command -v gimp-console-3.0 gimp-console-3 gimp-3.0 gimp-3 2>/dev/null | head -n 1 || true)
versions=""
if [ -n "$gimp3" ]; then
  versions=$("$gimp3" --version 2>/dev/null | grep -o '3\.[0-9]\+' | head -n 1 || true)
fi
for d in "$config"/3.*/; do
  [ -d "$d" ] || continue
  v=$(basename "$d")
  case " $versions " in *" $v "*) ;; *) versions="$versions $v" ;; esac
done
versions=$(echo $versions)
if [ -z "$versions" ]; then
  echo "install: no GIMP 3 found (no gimp-3.0 or gimp-console-3.0 binary, no $config/3.x folder); continuing with GIMP 2.10"
elif ! pkg-config --exists gimpui-3.0; then
  echo "install: GIMP 3 found ($versions) but not its plug-in development files (gimpui-3.0.pc: libgimp-3.0-dev); skipping the GIMP 3 plug-in" >&2
else
  installed="$installed $versions"
  console=$(command -v gimp-console-3.0 gimp-console-3 2>/dev/null | head -n 1 || true)
  if [ -n "$console" ]; then
    # Script-Fu 3 named arguments: every argument left out takes its default.
    program=""
    for f in $filters; do
      program+="(let* ((img (car (gimp-file-load RUN-NONINTERACTIVE \"$in\")))
                       (layer (vector-ref (car (gimp-image-get-layers img)) 0)))
         (plug-in-cudafx-$f #:run-mode RUN-NONINTERACTIVE #:image img #:drawables (vector layer))
         (gimp-file-save RUN-NONINTERACTIVE img \"$PWD/out/gimp3-$f.png\")
         (gimp-image-delete img))"
    done
    smoke "GIMP $("$console" --version | grep -o '3\.[0-9.]*' | head -n 1)" gimp3 \
      "$console" -i --batch-interpreter=plug-in-script-fu-eval -b "(begin $program)" --quit
  else
    echo "install: no gimp-console-3.x to smoke-run GIMP 3 headless; open GIMP 3 and look in Filters"
  fi
fi

if pkg-config --exists gimp-2.0 && command -v gimp-console-2.10 >/dev/null; then
  make plugin-210
  installed="$installed 2.10"
  # Script-Fu 2.10 takes every argument in order: procargs.py writes them.
  program=""
  for f in $filters; do
    args=$(python3 tests/gimp210/procargs.py scheme "$f")
    program+="(let* ((img (car (gimp-file-load RUN-NONINTERACTIVE \"$in\" \"$in\")))
                     (layer (car (gimp-image-get-active-layer img))))
       (plug-in-cudafx-$f RUN-NONINTERACTIVE img layer $args)
       (gimp-file-save RUN-NONINTERACTIVE img layer \"$PWD/out/gimp-$f.png\" \"$PWD/out/gimp-$f.png\")
       (gimp-image-delete img))"
  done
  smoke "GIMP 2.10" gimp gimp-console-2.10 -i -b "(begin $program)" -b '(gimp-quit 0)'
else
  echo "install: no GIMP 2.10 found (gimp-console-2.10 and libgimp2.0-dev)"
fi
# A Flatpak GIMP (Flathub's org.gimp.GIMP) runs in its own runtime, with
# its own GIMP and GEGL libraries; what was built here links this system's.
# Whether it loads there has not been tested, so nothing goes into the
# Flatpak's folders: say so rather than leave the user to wonder.
if command -v flatpak >/dev/null && flatpak info org.gimp.GIMP >/dev/null 2>&1; then
  flatpak_version=$(flatpak info org.gimp.GIMP 2>/dev/null | awk -F': *' '$1 ~ /Version$/ { print $2; exit }')
  echo "install: Flatpak GIMP found (org.gimp.GIMP ${flatpak_version:-}): nothing installed into it;" \
    "the plug-in and GEGL module built here link this system's GIMP and GEGL, not the Flatpak runtime's" \
    "(README, Troubleshooting: Flatpak GIMP)"
fi
[ -n "$installed" ] || { echo "install: no GIMP to install into" >&2; exit 1; }
echo "install: done (GIMP$installed)"
