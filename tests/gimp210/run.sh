#!/usr/bin/env bash
# Headless GIMP 2.10 tests of the cudafx plug-in: installs BUILD/gimp210/cudafx
# into a throw-away profile (GIMP2_DIRECTORY), runs every case in one
# gimp-console-2.10 session with Script-Fu, then compares what GIMP exported
# with the CLI's output (BUILD/cudafx) for the same parameters. A call the
# engine rejects must fail in GIMP with the engine's message and leave the
# image untouched. Ends with "N passed, N failed".
#   tests/gimp210/run.sh [BUILD]
set -u
build=${1:-build}
cd "$(dirname "$0")/../.."
here=tests/gimp210
py=/usr/bin/python3
cli=$build/cudafx
export CUDAFX_LIB=$build/libcudafx.so
passed=0 failed=0

pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
give_up() { echo "$1"; echo "0 passed, 1 failed"; exit 1; }

command -v gimp-console-2.10 >/dev/null || give_up "no gimp-console-2.10 (apt-get install gimp)"
[ -x "$build/gimp210/cudafx" ] || give_up "no plug-in at $build/gimp210/cudafx (make plugin-210)"
[ -x "$cli" ] && [ -f "$CUDAFX_LIB" ] || give_up "no $cli or $CUDAFX_LIB (make)"

work=$(mktemp -d /tmp/cudafx-gimp210.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
# GIMP saves its data folders on exit and complains when they are missing.
mkdir -p "$work/profile/plug-ins/cudafx" "$work/out" \
         "$work"/profile/{brushes,dynamics,fonts,gradients,palettes,patterns,tool-presets}
cp "$build/gimp210/cudafx" "$work/profile/plug-ins/cudafx/cudafx"

# Script-Fu: (try NAME THUNK) runs THUNK and reports "CASE NAME SUCCEEDED" or
# "CASE NAME FAILED: message" through gimp-message (stderr under
# gimp-console), going on with the next case either way.
program='(define (try name thunk)
  (call/cc (lambda (k)
    (let ((hook *error-hook*))
      (set! *error-hook*
        (lambda (message . rest)
          (set! *error-hook* hook)
          (gimp-message (string-append "CASE " name " FAILED: " message))
          (k #f)))
      (thunk)
      (set! *error-hook* hook)
      (gimp-message (string-append "CASE " name " SUCCEEDED"))))))'
cases=()

# add_case NAME FILE TOLERANCE FILTER name=value...: loads tests/data/FILE,
# evaluates $PRE (with img and layer bound), exports the input as NAME.in.png,
# calls the procedure, exports NAME.png. With $SEL="X Y W H", a rectangle
# selection (set by PRE) whose inside must equal the whole-image result. With
# $LAST, the values are given to a non-interactive run on a copy of the image,
# and the call itself is RUN-WITH-LAST-VALS with the defaults (which it must ignore).
add_case() {
  local name=$1 file=$2 tol=$3 filter=$4 args mode=RUN-NONINTERACTIVE; shift 4
  args=$("$py" "$here/procargs.py" scheme "$filter" "$@") || give_up "bad case $name"
  local in=$PWD/tests/data/$file out=$work/out/$name pre=${PRE:-}
  if [ -n "${LAST:-}" ]; then
    pre+="
  (let ((copy (car (gimp-image-duplicate img))))
    (plug-in-cudafx-$filter RUN-NONINTERACTIVE copy (car (gimp-image-get-active-layer copy)) $args)
    (gimp-image-delete copy))"
    mode=RUN-WITH-LAST-VALS args=$("$py" "$here/procargs.py" scheme "$filter")
  fi
  program+="
(let* ((img (car (gimp-file-load RUN-NONINTERACTIVE \"$in\" \"$in\")))
       (layer (car (gimp-image-get-active-layer img))))
  $pre
  (gimp-file-save RUN-NONINTERACTIVE img layer \"$out.in.png\" \"$out.in.png\")
  (try \"$name\" (lambda () (plug-in-cudafx-$filter $mode img layer $args)))
  (gimp-file-save RUN-NONINTERACTIVE img layer \"$out.png\" \"$out.png\")
  (gimp-image-delete img))"
  cases+=("$name|$tol|${SEL:-}|${ERR:-}|$filter|$*")
}

# check NAME TOLERANCE SEL ERR FILTER ARGS: with ERR, GIMP failed with that
# message and the image is unchanged; else GIMP's export equals the CLI's
# output on GIMP's exported input.
check() {
  local name=$1 tol=$2 sel=$3 err=$4 filter=$5 opts msg diff out=$work/out/$1 log=$work/out/gimp.log
  [ -f "$out.in.png" ] || { fail "$name" "GIMP did not export the input"; return; }
  if [ -n "$err" ]; then
    grep -qF "CASE $name FAILED" "$log" || { fail "$name" "the call succeeded"; return; }
    grep -F "CASE $name FAILED" "$log" | grep -qF -- "$err" \
      || { fail "$name" "'$err' not in: $(grep -F "CASE $name" "$log")"; return; }
    diff=$("$py" tests/gimp/compare.py same "$out.in.png" "$out.png" 0 2>&1) \
      || { fail "$name" "image changed after the error: $diff"; return; }
    pass "$name: fails with \"$err\", image unchanged"
    return
  fi
  mapfile -t opts < <("$py" "$here/procargs.py" cli "$filter" $6)
  msg=$(CUDAFX_BACKEND=cpu "$cli" "$filter" "${opts[@]}" "$out.in.png" "$out.ref.png" 2>&1) \
    || { fail "$name" "the CLI failed: $msg"; return; }
  grep -qF "CASE $name SUCCEEDED" "$log" \
    || { fail "$name" "GIMP failed: $(grep -m1 -F "CASE $name" "$log")"; return; }
  if [ -n "$sel" ]; then
    diff=$("$py" tests/gimp/compare.py inside "$out.in.png" "$out.png" "$out.ref.png" $sel 2>&1) \
      && pass "$name: selection $sel filtered with outside neighbours, the rest untouched" \
      || fail "$name" "$diff"
  else
    diff=$("$py" tests/gimp/compare.py same "$out.ref.png" "$out.png" "$tol" 2>&1) \
      && pass "$name: GIMP equals the CLI (±$tol)" || fail "$name" "$diff"
  fi
}

add_case median-gray camera.png 0 median radius=2 percentile=50 shape=square
add_case median-rgb astronaut.png 0 median radius=1 shape=circle
add_case nl-means astronaut.png 1 nl-means auto=false h=12 patch-radius=1 search-radius=3
add_case quantize astronaut.png 0 quantize colors=8 color-space=oklab dither=none max-iterations=10 seed=1
add_case convolve camera.png 0 convolve preset=custom kernel=0,0.25,0,0.25,0,0.25,0,0.25,0 divisor=1 border=clamp
# Repeat (last values): the values of the previous run, not the call's.
LAST=1 add_case last-values astronaut.png 0 convolve preset=sharpen-5x5 border=mirror offset=10
# A selection: only it changes, and its edge sees the real pixels around it.
SEL="100 120 61 47" PRE="(gimp-image-select-rectangle img CHANNEL-OP-REPLACE 100 120 61 47)" \
  add_case selection astronaut.png 0 median radius=3
# Alpha (part of the layer cleared to transparent black: PNG keeps no colour
# under transparency), 16 bits per channel and 32-bit float (both processed as
# float; exported as 16-bit PNG).
PRE="(gimp-layer-add-alpha layer) (gimp-image-select-rectangle img CHANNEL-OP-REPLACE 0 0 200 100)
     (gimp-context-set-foreground '(0 0 0)) (gimp-drawable-edit-fill layer FILL-FOREGROUND)
     (gimp-drawable-edit-clear layer) (gimp-selection-none img)" \
  add_case alpha astronaut.png 0 median radius=2
PRE="(gimp-image-convert-precision img PRECISION-U16-GAMMA)" add_case 16-bit camera.png 1 median radius=2
PRE="(gimp-image-convert-precision img PRECISION-FLOAT-GAMMA)" add_case float camera.png 1 convolve preset=blur-3x3
# Arguments out of range (GIMP 2.10 does not check them: the plug-in must) and
# a kernel that is not square; an indexed image. Each: an error, image unchanged.
ERR="median: radius 101 is out of range 1..100" add_case range camera.png 0 median radius=101
ERR="median: shape 2 is out of range 0..1" add_case choice camera.png 0 median shape=2
ERR="convolve: kernel has 8 values, not n×n" \
  add_case kernel camera.png 0 convolve preset=custom kernel=1,1,1,1,1,1,1,1
ERR="median: indexed images are not supported" PRE="(gimp-image-convert-indexed img 0 0 8 FALSE FALSE \"\")" \
  add_case indexed camera.png 0 median radius=1

echo "gimp-console-2.10 $(gimp-console-2.10 --version | grep -o '[0-9.]*$'), plug-in $build/gimp210/cudafx, reference $cli"
# A hang stops at the timeout; on a busy shared 2-core machine the whole session took ~200 s.
GIMP2_DIRECTORY=$work/profile timeout 400 gimp-console-2.10 -i -b "(begin $program)" -b '(gimp-quit 0)' \
  >"$work/out/gimp.log" 2>&1 || echo "gimp-console-2.10 exited $? (log: $work/out/gimp.log)"

for c in "${cases[@]}"; do
  IFS='|' read -r name tol sel err filter args <<<"$c"
  check "$name" "$tol" "$sel" "$err" "$filter" "$args"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
