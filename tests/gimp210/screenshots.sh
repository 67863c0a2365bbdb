#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Screenshots of the five GIMP 2.10 dialogs: runs the host's GUI gimp-2.10
# under Xvfb with BUILD/gimp210/cudafx in a throw-away profile, opens each
# filter's dialog (RUN-INTERACTIVE) on
# a photo from tests/data, waits for the preview, saves the dialog's window
# as docs/screenshots/gimp210-<filter>.png and presses OK. Before each dialog
# a non-interactive run on a copy of the image stores the values the dialog
# then opens with (its last values), so the shots show chosen settings rather
# than only defaults; what OK writes must then equal the CLI's output for
# those values (the interactive path, end to end). Ends with "N passed, N
# failed".
#   tests/gimp210/screenshots.sh [BUILD]
# Needs gimp, xvfb, xdotool and imagemagick (apt-get install).
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
here=tests/gimp210
py=/usr/bin/python3
export CUDAFX_LIB=$build/libcudafx.so CUDAFX_PROC_LIB=$build/libcudafx-procedures.so
out=docs/screenshots
max_bytes=200000

for tool in gimp-2.10 Xvfb xdotool import; do
  command -v "$tool" >/dev/null ||
    { echo "screenshots: no $tool (apt-get install gimp xvfb xdotool imagemagick)" >&2; exit 1; }
done
[ -x "$build/gimp210/cudafx" ] || { echo "screenshots: no $build/gimp210/cudafx (make plugin-210)" >&2; exit 1; }
[ -f "$CUDAFX_LIB" ] || { echo "screenshots: no $CUDAFX_LIB (make)" >&2; exit 1; }

work=$(mktemp -d /tmp/cudafx-shots210.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/profile/plug-ins/cudafx" "$out" \
         "$work"/profile/{brushes,dynamics,fonts,gradients,palettes,patterns,tool-presets}
tools/install-plugin.sh "$build/gimp210/cudafx" "$build/locale" "$work/profile/plug-ins/cudafx"

# A display number nobody uses.
display=
for n in $(seq 70 99); do
  [ -e "/tmp/.X$n-lock" ] || [ -e "/tmp/.X11-unix/X$n" ] || { display=$n; break; }
done
[ -n "$display" ] || { echo "screenshots: no free X display in :70..:99" >&2; exit 1; }
export DISPLAY=:$display
Xvfb "$DISPLAY" -screen 0 1400x1000x24 -nolisten tcp >"$work/xvfb.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do xdpyinfo >/dev/null 2>&1 && break; sleep 0.1; done

# shot FILTER IMAGE TOLERANCE WAIT PREP name=value...: one -b command for GIMP
# that loads tests/data/IMAGE, evaluates PREP (img and layer bound), stores
# the values through a non-interactive run on a copy, exports the input, opens
# the dialog on a display (with the defaults as arguments, which it ignores)
# and exports what OK gave; the shot is taken WAIT seconds after the dialog
# appears, once its preview has rendered.
batch=()
shots=()
shot() {
  local filter=$1 image=$2 tol=$3 wait=$4 prep=$5 last defaults; shift 5
  last=$("$py" "$here/procargs.py" scheme "$filter" "$@")
  defaults=$("$py" "$here/procargs.py" scheme "$filter")
  local in=$PWD/tests/data/$image io=$work/$filter
  batch+=(-b "(let* ((img (car (gimp-file-load RUN-NONINTERACTIVE \"$in\" \"$in\")))
                     (layer (car (gimp-image-get-active-layer img))))
    $prep
    (let* ((copy (car (gimp-image-duplicate img))))
      (plug-in-cudafx-$filter RUN-NONINTERACTIVE copy (car (gimp-image-get-active-layer copy)) $last)
      (gimp-image-delete copy))
    (gimp-file-save RUN-NONINTERACTIVE img layer \"$io.in.png\" \"$io.in.png\")
    (gimp-display-new img)
    (plug-in-cudafx-$filter RUN-INTERACTIVE img layer $defaults)
    (gimp-file-save RUN-NONINTERACTIVE img layer \"$io.out.png\" \"$io.out.png\"))")
  shots+=("$filter|$tol|$wait|$*")
}

shot median coffee.png 0 4 "" radius=4 shape=circle
# Grain to take out: GIMP's RGB noise at 0.12.
shot nl-means astronaut.png 1 4 "(plug-in-rgb-noise RUN-NONINTERACTIVE img layer 1 0 0.12 0.12 0.12 0)" auto=true
# A crop, and time, since nl-bayes' preview takes seconds on the CPU; its
# noise smoothed over neighbouring pixels, as a camera's demosaicking leaves
# it, so that the dialog shows its correlated-noise line.
shot nl-bayes astronaut.png 1 20 "(gimp-image-crop img 200 180 150 90)
    (plug-in-rgb-noise RUN-NONINTERACTIVE img layer 1 0 0.1 0.1 0.1 0)
    (plug-in-gauss RUN-NONINTERACTIVE img layer 3 3 0)" auto=true
shot quantize chelsea.png 0 4 "" colors=8 dither=floyd-steinberg
shot convolve camera.png 0 4 "" preset=sharpen-5x5 border=mirror

GIMP2_DIRECTORY=$work/profile gimp-2.10 --no-splash "${batch[@]}" -b '(gimp-quit 1)' \
  >"$work/gimp.log" 2>&1 &
gimp=$!
pids+=("$gimp")

passed=0 failed=0
for s in "${shots[@]}"; do
  IFS='|' read -r filter _ wait _ <<<"$s"
  # The dialog's title ends in "(GPU)", like the menu label; one is open at a time.
  window=$(timeout 120 xdotool search --sync --onlyvisible --name '\(GPU\)$' | head -n 1) || true
  if [ -z "$window" ]; then
    echo "screenshots: no dialog for $filter appeared; GIMP said:" >&2
    tail -n 20 "$work/gimp.log" >&2
    exit 1
  fi
  # The pointer in a corner, away from the dialog: no hover tooltip in the shot
  # (Xvfb puts it back in the middle whenever its last client left).
  xdotool mousemove 1399 999
  sleep "$wait"   # the preview renders after its invalidation timeout
  png=$out/gimp210-$filter.png
  import -window "$window" -strip "$work/shot.png"
  # Under the size limit without visible loss: a 256-colour palette if needed.
  cp "$work/shot.png" "$png"
  [ "$(stat -c %s "$png")" -le $max_bytes ] || convert "$work/shot.png" -strip -dither None -colors 256 "PNG8:$png"
  size=$(stat -c %s "$png")
  if [ "$size" -le $max_bytes ]; then
    echo "PASS $filter: $png, $(identify -format '%wx%h' "$png"), $size bytes"; passed=$((passed + 1))
  else
    echo "FAIL $filter: $png is $size bytes, over $max_bytes"; failed=$((failed + 1))
  fi
  xdotool windowfocus --sync "$window" key alt+o   # the _OK button's mnemonic
  for _ in $(seq 300); do xdotool search --onlyvisible --name '\(GPU\)$' >/dev/null || break; sleep 0.1; done
done
timeout 60 tail --pid="$gimp" -f /dev/null || echo "screenshots: GIMP did not quit; stopping it" >&2

# What OK wrote equals the CLI's output for the values the dialog opened with.
for s in "${shots[@]}"; do
  IFS='|' read -r filter tol _ args <<<"$s"
  io=$work/$filter
  mapfile -t opts < <("$py" "$here/procargs.py" cli "$filter" $args)
  if [ ! -f "$io.out.png" ]; then
    echo "FAIL $filter: OK did not give a result; GIMP said: $(tail -n 3 "$work/gimp.log")"
  elif ! msg=$(CUDAFX_BACKEND=cpu "$build/cudafx" "$filter" "${opts[@]}" "$io.in.png" "$io.ref.png" 2>&1); then
    echo "FAIL $filter: the CLI failed: $msg"
  elif ! msg=$("$py" tests/gimp/compare.py same "$io.ref.png" "$io.out.png" "$tol" 2>&1); then
    echo "FAIL $filter: OK's result is not the CLI's for the last values: $msg"
  else
    echo "PASS $filter: OK applied the last values ($args), equal to the CLI (±$tol)"
    passed=$((passed + 1)); continue
  fi
  failed=$((failed + 1))
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
