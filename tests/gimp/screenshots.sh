#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Screenshots of the five GIMP 3 dialogs: runs the GUI gimp-3.0 of the Debian
# 13 chroot (tests/gimp/chroot.sh) under Xvfb with the plug-in in a throw-away
# profile. One GIMP session opens each filter's dialog in turn (Script-Fu,
# RUN-INTERACTIVE) on a photo from tests/data, waits until the preview has
# stopped changing, saves the dialog's window and cancels it.
#
#   tests/gimp/screenshots.sh BUILD OUTDIR          OUTDIR/gimp3-<filter>.png
#   tests/gimp/screenshots.sh --both BUILD OUTDIR   also OUTDIR/gimp3-<filter>-off.png, the
#                                           same dialog with its Preview toggle off,
#                                           and the photo as gimp3-<filter>-input.png
#                                           (tests/gimp/check-dialogs.py compares them)
#   tests/gimp/screenshots.sh --lang es_ES BUILD OUTDIR
#                                           the Non-Local Means dialog with GIMP in that
#                                           locale: OUTDIR/gimp3-nl-means-es.png
#
# Packages Xvfb, xdotool, x11-utils and ImageMagick are added to the chroot by
# chroot.sh when missing.
set -euo pipefail
both=0 locale=
[ "${1:-}" = --both ] && { both=1; shift; }
[ "${1:-}" = --lang ] && { locale=$2; shift 2; }
build=${1:?usage: tests/gimp/screenshots.sh [--both] BUILD OUTDIR}
outdir=${2:?usage: tests/gimp/screenshots.sh [--both] BUILD OUTDIR}
cd "$(dirname "$0")/../.."
chroot_sh=tests/gimp/chroot.sh
[ -x "$build/gimp3/cudafx" ] || { echo "no plug-in at $build/gimp3/cudafx (make plugin)" >&2; exit 1; }
root=$("$chroot_sh" ensure xvfb xauth x11-utils xdotool imagemagick locales)

work=$(mktemp -d "$root/tmp/cudafx-shots.XXXXXX")
trap 'rm -rf "$work"' EXIT
inside=${work#"$root"}
mkdir -p "$work/profile/plug-ins/cudafx" "$work/shots"
tools/install-plugin.sh "$build/gimp3/cudafx" "$build/locale" "$work/profile/plug-ins/cudafx"
cp tests/data/astronaut.png tests/data/coffee.png "$work/"

# filter : dialog title : photo the dialog opens on (noisy ones made inside
# the chroot) : keys typed before the shot (xdotool names; tests/gimp/check-dialogs.py
# knows what they set) : seconds to wait at least (default 3). Convolution: Alt+T
# (Preset), five up from Gaussian is Sharpen 5x5, a kernel the grid shows.
# Non-Local Bayes: a crop, and time, since its preview takes seconds on the CPU,
# during which the dialog does not redraw (a capture would settle on the photo);
# its noise smoothed over neighbouring pixels, as a camera's demosaicking
# leaves it, so that the dialog shows its correlated-noise line.
dialogs=(
  "median:Median (GPU):astronaut-impulse.png:"
  "nl-means:Non-Local Means (GPU):astronaut-gaussian.png:"
  "nl-bayes:Non-Local Bayes (GPU):astronaut-smoothed-crop.png::20"
  "quantize:Color Quantize (GPU):coffee.png:"
  "convolve:Convolution (GPU):astronaut.png:alt+t Up Up Up Up Up"
)
if [ -n "$locale" ]; then
  # The dialog's title is its translated menu label without "_" and "...".
  title=$(TEXTDOMAINDIR=$build/locale LANGUAGE=${locale%_*} LANG=C.UTF-8 LC_ALL= \
          gettext -d cudafx -- "_Non-Local Means (GPU)...")
  title=${title//_/} title=${title%...}
  dialogs=("nl-means:$title:astronaut-gaussian.png:")
  "$chroot_sh" run localedef -i "$locale" -c -f UTF-8 "$locale.UTF-8"
fi

cat > "$work/shoot.sh" <<'EOF'
#!/bin/bash
# shoot.sh DIR BOTH LOCALE FILTER:TITLE:PHOTO...   (runs inside the chroot)
set -u
dir=$1 both=$2 locale=$3; shift 3
suffix=
[ -z "$locale" ] || { export LANG=$locale.UTF-8; suffix=-${locale%_*}; }
cd "$dir"
# Noisy copies of the photo show what median and the denoisers remove (fixed seeds).
magick astronaut.png -seed 1 -attenuate 0.3 +noise Impulse astronaut-impulse.png
magick astronaut.png -seed 1 -attenuate 1.2 +noise Gaussian astronaut-gaussian.png
magick astronaut.png -seed 2 -attenuate 2 +noise Gaussian -blur 0x0.8 -crop 200x180+150+90 +repage \
  astronaut-smoothed-crop.png

export GIMP3_DIRECTORY=$dir/profile HOME=$dir
# -displayfd picks a free display: the chroot shares abstract sockets with the host.
Xvfb -displayfd 5 -screen 0 1400x1000x24 -nolisten tcp 5>"$dir/display" >"$dir/xvfb.log" 2>&1 &
xvfb=$!
for _ in $(seq 50); do [ -s "$dir/display" ] && break; sleep 0.2; done
export DISPLAY=:$(cat "$dir/display")

# One batch: each dialog on its own image; a cancelled dialog is an error to
# Script-Fu, caught so that the next one opens.
batch="(begin"
for d in "$@"; do
  IFS=: read -r filter title photo keys least <<<"$d"
  batch="$batch
  (let* ((img (car (gimp-file-load RUN-NONINTERACTIVE \"$dir/$photo\"))))
    (gimp-display-new img)
    (catch #f (plug-in-cudafx-$filter #:run-mode RUN-INTERACTIVE #:image img
                                      #:drawables (car (gimp-image-get-layers img)))))"
done
batch="$batch)"
gimp --no-splash --batch-interpreter=plug-in-script-fu-eval -b "$batch" --quit \
  >"$dir/gimp.log" 2>&1 &
gimp=$!

# A window of the dialog's title can exist before it is mapped (seen with
# GIMP 3.2), and focusing a window that is not viewable is an X error
# (BadMatch): only a viewable one counts.
find_window() { # title -> X window id of a viewable top-level window with exactly that name
  local id
  for id in $(xwininfo -root -children 2>/dev/null | awk -v t="\"$1\":" 'index($0, t) { print $1 }'); do
    xwininfo -id "$id" 2>/dev/null | grep -q "Map State: IsViewable" && { echo "$id"; return; }
  done
}

# Keys go to the focused window: unfocused, the dialog never gets the Escape
# that closes it, and GIMP's batch never opens the next. Focusing fails while
# the window is not viewable, so it is tried again for a while.
focus_window() { # window
  for _ in $(seq 20); do
    timeout 5 xdotool windowfocus --sync "$1" 2>/dev/null && return 0
    sleep 0.5
  done
  return 1
}

# Captures the window until two captures a second apart are equal (the preview
# renders after an idle timeout), at least LEAST s (3), at most 90 s.
capture_settled() { # window out [least]
  local last= now i
  for i in $(seq 90); do
    sleep 1
    xdotool windowraise "$1" 2>/dev/null
    import -window "$1" "$2.tmp.png" 2>/dev/null || continue
    now=$(magick "$2.tmp.png" rgb:- | md5sum)
    [ "$i" -ge "${3:-3}" ] && [ "$now" = "$last" ] && { mv "$2.tmp.png" "$2"; return 0; }
    last=$now
  done
  return 1
}

status=0
for d in "$@"; do
  IFS=: read -r filter title photo keys least <<<"$d"
  window=
  for _ in $(seq 240); do
    window=$(find_window "$title")
    [ -n "$window" ] && break
    kill -0 $gimp 2>/dev/null || break
    sleep 1
  done
  if [ -z "$window" ]; then
    echo "no window titled '$title' appeared; GIMP said:" >&2
    tail -n 20 "$dir/gimp.log" >&2
    status=1; break
  fi
  if ! focus_window "$window"; then
    echo "$title: the dialog could not be focused" >&2
    status=1; break
  fi
  [ -z "$keys" ] || xdotool key --clearmodifiers --delay 150 $keys
  shot=shots/gimp3-$filter$suffix.png
  if ! capture_settled "$window" "$shot" "${least:-3}"; then
    echo "$title: the dialog never stopped changing" >&2; status=1
  elif [ "$both" = 0 ]; then
    # For the README: 256 colours keep a dialog well under 200 KB.
    magick "$shot" -strip -dither FloydSteinberg -colors 256 "PNG8:$shot"
  fi
  if [ "$both" = 1 ]; then
    cp "$photo" "shots/gimp3-$filter-input.png"
    # Alt+P: the preview's own toggle (no argument label uses P).
    xdotool key --clearmodifiers alt+p
    capture_settled "$window" "shots/gimp3-$filter-off.png" || status=1
    # GIMP remembers the toggle for every procedure of the plug-in: back on.
    xdotool key --clearmodifiers alt+p
  fi
  xdotool key --clearmodifiers Escape
  for _ in $(seq 30); do [ -z "$(find_window "$title")" ] && break; sleep 1; done
done
if [ $status -eq 0 ]; then
  timeout 60 tail --pid=$gimp -f /dev/null
fi
kill $gimp $xvfb 2>/dev/null
wait $gimp $xvfb 2>/dev/null
grep -i -E "mnemonic|critical|warning" "$dir/gimp.log" | grep -v -E "gimp_flush|test-sphere" >&2
exit $status
EOF
chmod +x "$work/shoot.sh"

timeout 600 "$chroot_sh" run "$inside/shoot.sh" "$inside" "$both" "$locale" "${dialogs[@]}"
mkdir -p "$outdir"
for f in "$work"/shots/*.png; do
  cp "$f" "$outdir/"
  echo "$outdir/$(basename "$f")"
done
