#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The live filters in GIMP 3's user interface: the GUI gimp-3.0 of the
# Debian 13 chroot under Xvfb, the plug-in and the GEGL module in a
# throw-away profile. GIMP 3.0 has no undo procedure for scripts, so undo
# is tested as a user does it: plug-in-cudafx-median merges cudafx:median
# (Script-Fu, non-interactive), the layer is saved, Ctrl+Z is typed into
# the image window and the image exported again through File ▸ Export As;
# the merged file must differ from the photo and the undone one equal it.
# Then the operation's own menu entry (found through GIMP's action search)
# opens GIMP's filter dialog with the on-canvas preview, split view on:
# a screenshot of the screen; OK keeps it as a live filter on the layer, and
# a second screenshot shows the layer's effects (the list the Layers dock's
# fx mark opens). Then, that filter undone, Non-Local Means (GPU)'s dialog
# in automatic mode shows the noise σ it found (a third screenshot), and
# that σ, as GIMP saves the dialog's settings on OK after Reset, must be
# the CLI's for the layer; from that dialog on GIMP logs no GLib critical.
# About 3 minutes here. Ends with "N passed, N failed".
#
#   tests/gimp/live-gui.sh BUILD [OUTDIR]   screenshots into OUTDIR/gimp3-live-split.png,
#                                           OUTDIR/gimp3-live-effects.png and
#                                           OUTDIR/gimp3-live-nl-means.png
set -u
build=${1:?usage: tests/gimp/live-gui.sh BUILD [OUTDIR]}
outdir=${2:-}
cd "$(dirname "$0")/../.."
chroot_sh=tests/gimp/chroot.sh
py=/usr/bin/python3
for f in "$build/gimp3/cudafx" "$build/gimp3/cudafx-gegl.so"; do
  [ -e "$f" ] || { echo "no $f (make plugin)"; echo "0 passed, 1 failed"; exit 1; }
done
root=$("$chroot_sh" ensure xvfb xauth x11-utils xdotool imagemagick) \
  || { echo "0 passed, 1 failed"; exit 1; }
work=$(mktemp -d "$root/tmp/cudafx-live-gui.XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
inside=${work#"$root"}
mkdir -p "$work/shots"
"$chroot_sh" profile "$work" "$build"
cp tests/data/astronaut.png "$work/"

cat > "$work/drive.sh" <<'EOF'
#!/bin/bash
# drive.sh DIR   (runs inside the chroot)
set -u
dir=$1
cd "$dir"
log() { echo "drive: $*" >>"$dir/drive.log"; }
magick astronaut.png -seed 1 -attenuate 0.3 +noise Impulse noisy.png
export GIMP3_DIRECTORY=$dir/profile HOME=$dir XDG_DATA_HOME=$dir/data
# No welcome dialog over the image window.
echo '(show-welcome-dialog no)' >>"$dir/profile/gimprc"
Xvfb -displayfd 5 -screen 0 1400x1000x24 -nolisten tcp 5>"$dir/display" >"$dir/xvfb.log" 2>&1 &
xvfb=$!
for _ in $(seq 50); do [ -s "$dir/display" ] && break; sleep 0.2; done
export DISPLAY=:$(cat "$dir/display")

batch="(let* ((img (car (gimp-file-load RUN-NONINTERACTIVE \"$dir/noisy.png\")))
              (layer (vector-ref (car (gimp-image-get-layers img)) 0)))
         (gimp-display-new img)
         (plug-in-cudafx-median #:run-mode RUN-NONINTERACTIVE #:image img
                                #:drawables (vector layer) #:radius 3)
         (gimp-file-save RUN-NONINTERACTIVE img \"$dir/merged.png\"))"
gimp --no-splash --batch-interpreter=plug-in-script-fu-eval -b "$batch" >"$dir/gimp.log" 2>&1 &
gimp=$!

wait_for() { # seconds command...: until the command succeeds
  local n=$1; shift
  for _ in $(seq "$n"); do "$@" && return 0; kill -0 $gimp 2>/dev/null || return 1; sleep 1; done
  return 1
}
# GIMP names an image window "[name] (imported)-1.0 (...) – GIMP".
window() { xdotool search --onlyvisible --name "$1" 2>/dev/null | head -n 1; }
has_window() { [ -n "$(window "$1")" ]; }
# focus NAME-REGEX: waits for that window (up to 120 s: this machine is
# shared), raises it and gives it the keyboard (Xvfb has no window manager).
focus() {
  local w=
  wait_for 120 has_window "$1" || { log "no window '$1'"; return 1; }
  w=$(window "$1")
  xdotool windowraise "$w"
  xdotool windowfocus --sync "$w"
  sleep 1
}
# The screen, cut to GIMP's window (or to WIDTHxHEIGHT from the top left);
# 256 colours keep it small for the README.
shot() {
  import -window root "$dir/shots/$1"
  magick "$dir/shots/$1" -crop "${2:-985x665}+0+0" +repage -strip -dither FloydSteinberg -colors 256 \
    "PNG8:$dir/shots/$1"
}

status=0
if ! wait_for 300 test -s "$dir/merged.png" || ! wait_for 60 has_window ' – GIMP$'; then
  log "GIMP did not merge the filter or show the image"; status=1
else
  sleep 5
  # A first start may greet with a dialog whatever gimprc says.
  if has_window 'Welcome to GIMP'; then
    focus 'Welcome to GIMP' && xdotool key --clearmodifiers Escape
  fi
  focus ' – GIMP$' && xdotool key --clearmodifiers ctrl+z
  sleep 3
  # File ▸ Export As: the file chooser, the name typed in full, then PNG's options (Export).
  focus ' – GIMP$' && xdotool key --clearmodifiers shift+ctrl+e
  if focus '^Export Image$'; then
    xdotool key --clearmodifiers ctrl+a
    xdotool type --delay 20 "$dir/undone.png"
    xdotool key --clearmodifiers Return
    if focus 'Export Image as PNG'; then
      xdotool key --clearmodifiers Return
    fi
    wait_for 120 test -s "$dir/undone.png" || { log "no undone.png"; status=1; }
  else
    status=1
  fi
  # The operation's menu entry through the action search ("/"): GIMP's
  # filter dialog for cudafx:median, its preview on the canvas.
  focus ' – GIMP$' && xdotool key --clearmodifiers slash
  if focus '^Search Actions$'; then
    xdotool type --delay 40 "Median (GPU)"
    sleep 3
    xdotool key --clearmodifiers Return
  fi
  # The dialog is titled "Median (GPU) (cudafx:median)"; GIMP places it the
  # same way each time on this screen, so its Split view toggle and OK are
  # clicked where they are in the dialog, then the layer's fx mark in the
  # Layers dock, which opens the list of the layer's effects.
  if focus 'cudafx:median\)$'; then
    w=$(window 'cudafx:median\)$')
    sleep 5
    xdotool mousemove --window "$w" 268 225 click 1
    sleep 10
    shot gimp3-live-split.png
    xdotool mousemove --window "$w" 320 260 click 1
    sleep 10
    xdotool mousemove 828 523 click 1
    sleep 5
    shot gimp3-live-effects.png
    xdotool key --clearmodifiers Escape
  else
    shot gimp3-live-failed.png
  fi
  # Non-Local Means (GPU) the same way on the photo alone (Ctrl+Z takes
  # the median filter off), the view at 1:1: once the preview is drawn,
  # the dialog shows the noise σ that automatic mode found. Reset (Alt+R)
  # sets the dialog's σ to 0 too, and the operation answers with the σ
  # found; OK (Alt+O) keeps the filter, and GIMP writes the dialog's
  # settings, σ included, to the profile's filters/ folder.
  focus ' – GIMP$' && xdotool key --clearmodifiers ctrl+z
  sleep 3
  focus ' – GIMP$' && xdotool key --clearmodifiers 1
  sleep 2
  focus ' – GIMP$' && xdotool key --clearmodifiers slash
  if focus '^Search Actions$'; then
    xdotool type --delay 40 "Non-Local Means (GPU)"
    sleep 3
    xdotool key --clearmodifiers Return
  fi
  wc -l <"$dir/gimp.log" >"$dir/nl-means.mark"
  if focus 'cudafx:nl-means\)$'; then
    # No tooltip over it; the shot reaches down to the dialog's buttons.
    xdotool mousemove 1390 990
    sleep 20
    X=0 Y=0 WIDTH=0 HEIGHT=0
    eval "$(xdotool getwindowgeometry --shell "$(window 'cudafx:nl-means\)$')")"
    shot gimp3-live-nl-means.png "$((X + WIDTH > 985 ? X + WIDTH : 985))x$((Y + HEIGHT > 665 ? Y + HEIGHT : 665))"
    focus 'cudafx:nl-means\)$' && xdotool key --clearmodifiers alt+r
    sleep 5
    focus 'cudafx:nl-means\)$' && xdotool key --clearmodifiers alt+o
    wait_for 60 sh -c 'ls profile/filters/*nl-means* >/dev/null 2>&1' \
      || log "no nl-means settings written"
  else
    shot gimp3-live-nl-means-failed.png
  fi
fi
xdotool search --name . getwindowname %@ 2>/dev/null | sort -u >"$dir/windows.txt"
kill $gimp 2>/dev/null
sleep 2
kill -9 $gimp 2>/dev/null
kill $xvfb 2>/dev/null
wait 2>/dev/null
exit $status
EOF
chmod +x "$work/drive.sh"

passed=0 failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }

timeout 600 "$chroot_sh" run "$inside/drive.sh" "$inside" \
  || fail "gui" "the GIMP session failed: $(cat "$work/drive.log" 2>/dev/null; tail -n 5 "$work/gimp.log")"
noisy=$work/noisy.png merged=$work/merged.png undone=$work/undone.png
if [ -s "$merged" ] && [ -s "$undone" ]; then
  if "$py" tests/gimp/compare.py same "$noisy" "$merged" 0 >/dev/null 2>&1; then
    fail "undo" "the merged median left the layer as it was"
  else
    msg=$("$py" tests/gimp/compare.py same "$noisy" "$undone" 0 2>&1) \
      && pass "plug-in-cudafx-median merged cudafx:median; Ctrl+Z restored the layer exactly" \
      || fail "undo" "after Ctrl+Z: $msg"
  fi
else
  fail "undo" "no merged or undone export"
fi
# The σ the nl-means dialog showed (its settings as GIMP wrote them on OK)
# is the CLI's for the same layer at full size.
settings=$(ls "$work"/profile/filters/*nl-means* 2>/dev/null | head -n 1)
shown=$(sed -n 's/.*(noise-sigma \([0-9.e+-]*\)).*/\1/p' "$settings" 2>/dev/null | head -n 1)
found=$("$build/cudafx" nl-means --json "$noisy" "$work/nl-means.png" 2>/dev/null \
        | "$py" -c 'import json, sys; print(json.load(sys.stdin)["sigma"])')
if [ -z "$shown" ]; then
  fail "nl-means σ" "no noise-sigma in GIMP's nl-means settings (${settings:-none written})"
elif "$py" -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(not (b > 0 and abs(a - b) <= 1e-5 * b))" \
       "$shown" "$found"; then
  pass "the nl-means dialog showed noise σ $shown, the CLI's ($found)"
else
  fail "nl-means σ" "the dialog had noise-sigma $shown, the CLI finds $found"
fi
# From the nl-means dialog on (GIMP's export dialog logs criticals of its own).
crit=$(tail -n "+$(( $(cat "$work/nl-means.mark" 2>/dev/null || echo 0) + 1 ))" "$work/gimp.log" \
       | grep -m 3 -- "-CRITICAL")
[ -z "$crit" ] && pass "no GLib critical in GIMP's log from the nl-means dialog on" \
  || fail "criticals" "$crit"
for s in gimp3-live-split.png gimp3-live-effects.png gimp3-live-nl-means.png; do
  if [ -s "$work/shots/$s" ]; then
    pass "screenshot $s"
    [ -z "$outdir" ] || { mkdir -p "$outdir"; cp "$work/shots/$s" "$outdir/"; }
  else
    fail "screenshot $s" "not taken (windows: $(tr '\n' ';' <"$work/windows.txt" 2>/dev/null))"
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
