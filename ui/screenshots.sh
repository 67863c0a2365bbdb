#!/usr/bin/env bash
# Screenshots of the four GIMP 3 dialogs for the README: runs the GUI
# gimp-3.0 of the Debian 13 chroot (tests/gimp/chroot.sh) under Xvfb with the
# plug-in in a throw-away profile, opens each filter's dialog on
# tests/data/astronaut.png with a Script-Fu RUN-INTERACTIVE call, waits for the
# preview, and saves the dialog's window as docs/dialog-<filter>.png.
#   ui/screenshots.sh [BUILD]
# Installs Xvfb, xauth, x11-utils and ImageMagick into the chroot when missing.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
chroot_sh=tests/gimp/chroot.sh
[ -x "$build/gimp3/cudafx" ] || { echo "no plug-in at $build/gimp3/cudafx (make plugin)" >&2; exit 1; }
root=$("$chroot_sh" ensure)

"$chroot_sh" run /bin/sh -c 'command -v Xvfb && command -v xauth && command -v xwininfo &&
  command -v import' >/dev/null ||
  "$chroot_sh" run /bin/sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends \
    xvfb xauth x11-utils imagemagick >/dev/null'

work=$(mktemp -d "$root/tmp/cudafx-shots.XXXXXX")
trap 'rm -rf "$work"' EXIT
inside=${work#"$root"}
mkdir -p "$work/profile/plug-ins/cudafx"
cp "$build/gimp3/cudafx" "$work/profile/plug-ins/cudafx/cudafx"
cp tests/data/astronaut.png "$work/"

# Inside the chroot: Xvfb, GIMP with the dialog, then the window by its title.
cat > "$work/shoot.sh" <<'EOF'
#!/bin/sh
# shoot.sh DIR PROCEDURE TITLE OUT
dir=$1 procedure=$2 title=$3 out=$4
export DISPLAY=:77 GIMP3_DIRECTORY=$dir/profile HOME=$dir
Xvfb :77 -screen 0 1600x1200x24 -nolisten tcp >"$dir/xvfb.log" 2>&1 &
xvfb=$!
sleep 2
gimp-3.0 --no-splash --batch-interpreter=plug-in-script-fu-eval -b "(begin
  (define img (car (gimp-file-load RUN-NONINTERACTIVE \"$dir/astronaut.png\")))
  (gimp-display-new img)
  ($procedure #:run-mode RUN-INTERACTIVE #:image img
              #:drawables (car (gimp-image-get-layers img))))" >"$dir/gimp.log" 2>&1 &
gimp=$!
window=
for _ in $(seq 120); do
  window=$(xwininfo -root -tree 2>/dev/null | awk -v t="\"$title\"" 'index($0, t) { print $1; exit }')
  [ -n "$window" ] && break
  sleep 1
done
status=1
if [ -n "$window" ]; then
  sleep 6   # the preview renders after its invalidation timeout
  import -window "$window" "$out" && status=0
else
  echo "no window titled '$title' appeared; GIMP said:" >&2
  tail -n 20 "$dir/gimp.log" >&2
fi
kill $gimp $xvfb 2>/dev/null
wait $gimp $xvfb 2>/dev/null
exit $status
EOF
chmod +x "$work/shoot.sh"

mkdir -p docs
for filter in median:"Median (GPU)" nl-means:"Non-Local Means (GPU)" \
              quantize:"Color Quantize (GPU)" convolve:"Convolution (GPU)"; do
  name=${filter%%:*} title=${filter#*:}
  timeout 180 "$chroot_sh" run "$inside/shoot.sh" "$inside" "plug-in-cudafx-$name" "$title" \
    "$inside/dialog-$name.png"
  cp "$work/dialog-$name.png" "docs/dialog-$name.png"
  echo "docs/dialog-$name.png"
done
