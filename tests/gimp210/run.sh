#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
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
export CUDAFX_LIB=$build/libcudafx.so CUDAFX_PROC_LIB=$build/libcudafx-procedures.so
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
tools/install-plugin.sh "$build/gimp210/cudafx" "$build/locale" "$work/profile/plug-ins/cudafx"

# Script-Fu: (try NAME THUNK) runs THUNK and reports "CASE NAME SUCCEEDED" or
# "CASE NAME FAILED: message" through gimp-message (stderr under
# gimp-console), going on with the next case either way.
helpers='(define (try name thunk)
  (call/cc (lambda (k)
    (let ((hook *error-hook*))
      (set! *error-hook*
        (lambda (message . rest)
          (set! *error-hook* hook)
          (gimp-message (string-append "CASE " name " FAILED: " message))
          (k #f)))
      (thunk)
      (set! *error-hook* hook)
      (gimp-message (string-append "CASE " name " SUCCEEDED"))))))
(define (save-drawable img drawable path)
  (cond ((= (car (gimp-item-is-channel drawable)) TRUE)
         ; a channel or mask: exported as the grey image of its pixels
         ; (through a named buffer: GIMP may rename it, so use the name it gives)
         (let* ((buffer (car (gimp-edit-named-copy drawable "cudafx-test")))
                (copy (car (gimp-edit-named-paste-as-new-image buffer))))
           (gimp-file-save RUN-NONINTERACTIVE copy (car (gimp-image-get-active-layer copy)) path path)
           (gimp-image-delete copy)
           (gimp-buffer-delete buffer)))
        ((= (car (gimp-item-is-group drawable)) TRUE) ; its first layer
         (save-drawable img (vector-ref (cadr (gimp-item-get-children drawable)) 0) path))
        (else (gimp-file-save RUN-NONINTERACTIVE img drawable path path))))
(define (color-text r g b)
  (string-append (number->string r) " " (number->string g) " " (number->string b) ";"))
(define (palette-text palette)
  (let loop ((i 0) (text ""))
    (if (< i (car (gimp-palette-get-info palette)))
      (loop (+ i 1) (string-append text (apply color-text (car (gimp-palette-entry-get-color palette i)))))
      text)))
(define (colormap-text img)
  (let ((bytes (cadr (gimp-image-get-colormap img))))
    (let loop ((i 0) (text ""))
      (if (< i (vector-length bytes))
        (loop (+ i 3) (string-append text (color-text (vector-ref bytes i) (vector-ref bytes (+ i 1))
                                                      (vector-ref bytes (+ i 2)))))
        text))))
(define (report name tag text) (gimp-message (string-append "CASE " name " " tag "=" text)))'
program=$helpers
cases=()

# add_case NAME FILE TOLERANCE FILTER name=value...: loads tests/data/FILE,
# evaluates $PRE (with img and layer bound), exports the input as NAME.in.png,
# calls the procedure, exports NAME.png. With $SEL="X Y W H", a rectangle
# selection (set by PRE) whose inside must equal the whole-image result. With
# $DRAWABLE (a name PRE defines), that drawable is filtered and exported.
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
  (save-drawable img ${DRAWABLE:-layer} \"$out.in.png\")
  (try \"$name\" (lambda () (let ((palette (car (plug-in-cudafx-$filter $mode img ${DRAWABLE:-layer} $args))))
    ${POST:-})))
  (save-drawable img ${DRAWABLE:-layer} \"$out.png\")
  (gimp-image-delete img))"
  cases+=("$name|$tol|${SEL:-}|${ERR:-}|$filter|$*")
}

# add_palette_case NAME FILE name=value...: quantize with create-palette or
# convert-indexed; GIMP reports the palette it returned, its colours, the
# image's mode and (indexed) colormap for check_palette.
add_palette_case() {
  local name=$1
  POST="(report \"$name\" \"NAME\" palette)
        (report \"$name\" \"COLORS\" (palette-text palette))
        (report \"$name\" \"TYPE\" (number->string (car (gimp-image-base-type img))))
        (if (= (car (gimp-image-base-type img)) INDEXED)
          (report \"$name\" \"IMAGE-COLORS\" (colormap-text img)))" \
    add_case "$1" "$2" 0 quantize "${@:3}"
  palette_cases+=("$1")
}
palette_cases=()

# check_palette NAME ARGS: the palette quantize returned is named "cudafx K
# colors" (K as found) and holds the colours of the CLI's --palette-out file
# in order; with convert-indexed the image is indexed with exactly those
# colours, else still RGB. (Pixels: check.)
check_palette() {
  local name=$1 log=$work/out/gimp.log out=$work/out/$1 opts msg want k
  mapfile -t opts < <("$py" "$here/procargs.py" cli quantize $2)
  msg=$(CUDAFX_BACKEND=cpu "$cli" quantize "${opts[@]}" --palette-out "$out.gpl" "$out.in.png" "$out.gpl.png" 2>&1) \
    || { fail "$name palette" "the CLI failed: $msg"; return; }
  # GIMP palette file: four header lines, then "R G B<TAB>name" per colour.
  want=$(awk 'NR > 4 { printf "%d %d %d;", $1, $2, $3 }' "$out.gpl")
  k=$(grep -o ";" <<<"$want" | wc -l)
  reported() { sed -n "s/.*CASE $name $1=//p" "$log" | head -n 1; }
  [[ $(reported NAME) =~ ^cudafx\ $k\ colors( \#[0-9]+)?$ ]] \
    || { fail "$name palette" "not named 'cudafx $k colors': '$(reported NAME)'"; return; }
  [ "$(reported COLORS)" = "$want" ] \
    || { fail "$name palette" "colours differ from the CLI's: $(reported COLORS | head -c 200)"; return; }
  if [[ " $2 " = *" convert-indexed=true "* ]]; then
    [ "$(reported TYPE)" = 2 ] || { fail "$name palette" "image not indexed: TYPE=$(reported TYPE)"; return; }
    [ "$(reported IMAGE-COLORS)" = "$want" ] || { fail "$name palette" "the image's colormap is not the palette"; return; }
    pass "$name palette: 'cudafx $k colors' equals the CLI's, image indexed with it"
  else
    [ "$(reported TYPE)" = 0 ] || { fail "$name palette" "image mode changed: TYPE=$(reported TYPE)"; return; }
    pass "$name palette: 'cudafx $k colors' equals the CLI's, image still RGB"
  fi
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
# A palette GIMP ships (240 entries, duplicates among them) by name, the CLI given its file.
add_case quantize-given astronaut.png 0 quantize palette=Ega color-space=rgb dither=blue-noise
add_case quantize-given-fs camera.png 0 quantize palette=Grays dither=floyd-steinberg-reduced-bleeding
add_case convolve camera.png 0 convolve preset=custom kernel=0,0.25,0,0.25,0,0.25,0,0.25,0 divisor=1 border=clamp
# nl-bayes on crops (its CPU takes seconds a quarter megapixel): manual on
# colour, automatic on grey, and a selection, whose edge sees the real pixels
# around it and whose reference grid is the whole layer's.
nlb_crop="(gimp-image-crop img 160 130 150 100)"
PRE=$nlb_crop add_case nl-bayes astronaut.png 0 nl-bayes auto=false sigma=15
PRE=$nlb_crop add_case nl-bayes-auto camera.png 0 nl-bayes flat-area=false
SEL="50 40 41 33" PRE="$nlb_crop (gimp-image-select-rectangle img CHANNEL-OP-REPLACE 50 40 41 33)" \
  add_case nl-bayes-selection astronaut.png 0 nl-bayes auto=false sigma=15
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
# Quantize's GIMP-only arguments: a palette, and indexed mode with it.
add_palette_case palette astronaut.png colors=16 seed=3 max-iterations=20 create-palette=true
add_palette_case to-indexed astronaut.png colors=8 color-space=rgb seed=1 max-iterations=20 convert-indexed=true
# Arguments out of range (GIMP 2.10 does not check them: the plug-in must) and
# a kernel that is not square; an indexed image. Each: an error, image unchanged.
ERR="median: radius 101 is out of range 1..100" add_case range camera.png 0 median radius=101
ERR="median: shape 2 is out of range 0..1" add_case choice camera.png 0 median shape=2
ERR="nl-bayes: sigma 0 is out of range 0.1..100" add_case nl-bayes-range camera.png 0 nl-bayes auto=false sigma=0
# A negative seed is reported as given (it was 4294967295, the field's wrap).
ERR="quantize: seed -1 is out of range 0..2147483647" add_case seed camera.png 0 quantize seed=-1
# A Gaussian σ up to the table's 50 runs (it was refused above 5 for its 31×31 grid).
add_case sigma-20 camera.png 0 convolve preset=gaussian sigma=20
ERR="convolve: kernel has 8 values, not n×n" \
  add_case kernel camera.png 0 convolve preset=custom kernel=1,1,1,1,1,1,1,1
ERR="median: indexed images are not supported" PRE="(gimp-image-convert-indexed img 0 0 8 FALSE FALSE \"\")" \
  add_case indexed camera.png 0 median radius=1
# Drawables other than a plain layer: a channel and a layer mask are filtered
# like grey layers; a layer group (no pixels of its own) is refused, the layer
# inside it untouched. GIMP 2.10 stores masks linear ("Y u8"), and cudafx
# filters in the perceptual encoding (Y') like everything else, so the mask
# case uses the median, which commutes with that conversion (measured: equal).
DRAWABLE=chan PRE="(define chan (car (gimp-channel-new-from-component img CHANNEL-GREEN \"green\")))
     (gimp-image-insert-channel img chan 0 0)" add_case channel astronaut.png 0 median radius=2
DRAWABLE=mask PRE="(define mask (car (gimp-layer-create-mask layer ADD-MASK-COPY)))
     (gimp-layer-add-mask layer mask)" add_case layer-mask astronaut.png 0 median radius=2
ERR="median: a layer group has no pixels of its own" DRAWABLE=group \
  PRE="(define group (car (gimp-layer-group-new img))) (gimp-image-insert-layer img group 0 0)
       (gimp-image-reorder-item img layer group 0)" add_case layer-group astronaut.png 0 median radius=1

echo "gimp-console-2.10 $(gimp-console-2.10 --version | grep -o '[0-9.]*$'), plug-in $build/gimp210/cudafx, reference $cli"
# A hang stops at the timeout; on a busy shared 2-core machine the whole session took ~200 s.
GIMP2_DIRECTORY=$work/profile timeout 600 gimp-console-2.10 -i -b "(begin $program)" -b '(gimp-quit 0)' \
  >"$work/out/gimp.log" 2>&1 || echo "gimp-console-2.10 exited $? (log: $work/out/gimp.log)"

for c in "${cases[@]}"; do
  IFS='|' read -r name tol sel err filter args <<<"$c"
  check "$name" "$tol" "$sel" "$err" "$filter" "$args"
  [[ " ${palette_cases[*]} " != *" $name "* ]] || check_palette "$name" "$args"
done

# A plug-in killed (SIGKILL) in the middle of a long NL-means: the call fails,
# the image is unchanged, and the same GIMP session then filters it fine.
# Its own session: the first plug-in process after the input is exported is
# the NL-means run, killed by its process id once it has run for a second.
kill_dir=$work/kill plugin_path=$work/profile/plug-ins/cudafx/cudafx
mkdir -p "$kill_dir"
kill_program="$helpers
(let* ((img (car (gimp-file-load RUN-NONINTERACTIVE \"$PWD/tests/data/astronaut.png\" \"astronaut\")))
       (layer (car (gimp-image-get-active-layer img))))
  (gimp-image-scale img 1024 1024)
  (gimp-file-save RUN-NONINTERACTIVE img layer \"$kill_dir/in.png\" \"$kill_dir/in.png\")
  (try \"killed\" (lambda () (plug-in-cudafx-nl-means RUN-NONINTERACTIVE img layer FALSE 10 5 20 1)))
  (gimp-file-save RUN-NONINTERACTIVE img layer \"$kill_dir/after-kill.png\" \"$kill_dir/after-kill.png\")
  (try \"next-call\" (lambda () (plug-in-cudafx-median RUN-NONINTERACTIVE img layer 2 50 0 1)))
  (gimp-file-save RUN-NONINTERACTIVE img layer \"$kill_dir/next.png\" \"$kill_dir/next.png\"))"
(
  for _ in $(seq 600); do [ -s "$kill_dir/in.png" ] && break; sleep 0.5; done
  for _ in $(seq 600); do
    pid=$(pgrep -o -f "^$plugin_path") && break
    sleep 0.1
  done
  sleep 1
  [ -n "${pid:-}" ] && kill -KILL "$pid" && echo "$pid" >"$kill_dir/killed-pid"
) &
killer=$!
GIMP2_DIRECTORY=$work/profile timeout 300 gimp-console-2.10 -i -b "(begin $kill_program)" -b '(gimp-quit 0)' \
  >"$kill_dir/gimp.log" 2>&1 || echo "gimp-console-2.10 exited $? (log: $kill_dir/gimp.log)"
wait "$killer"
if [ ! -s "$kill_dir/killed-pid" ]; then
  fail kill-9 "no plug-in process to kill"
elif ! grep -q "CASE killed FAILED" "$kill_dir/gimp.log"; then
  fail kill-9 "the killed call did not fail: $(grep -m1 'CASE killed' "$kill_dir/gimp.log")"
elif ! diff=$("$py" tests/gimp/compare.py same "$kill_dir/in.png" "$kill_dir/after-kill.png" 0 2>&1); then
  fail kill-9 "image changed by the killed call: $diff"
else
  pass "kill-9: plug-in killed during NL-means, the call failed, image unchanged"
fi
msg=$(CUDAFX_BACKEND=cpu "$cli" median --radius 2 "$kill_dir/in.png" "$kill_dir/next.ref.png" 2>&1) ||
  fail after-kill "the CLI failed: $msg"
if ! grep -q "CASE next-call SUCCEEDED" "$kill_dir/gimp.log"; then
  fail after-kill "the next call failed: $(grep -m1 'CASE next-call' "$kill_dir/gimp.log")"
elif diff=$("$py" tests/gimp/compare.py same "$kill_dir/next.ref.png" "$kill_dir/next.png" 0 2>&1); then
  pass "after-kill: the same GIMP session then filters the image like the CLI"
else
  fail after-kill "$diff"
fi
# Translations: GIMP started in Spanish, then in Greek. GIMP 2.10 translates a
# plug-in's menu labels itself, from the domain the plug-in registers: the
# profile's pluginrc must name cudafx's locale folder, whose catalog has the
# label in that language; and the plug-in's own messages come back translated
# (an indexed image refused).
translated() { # LANGUAGE MSGID: the catalog's translation, from build/locale
  TEXTDOMAINDIR=$build/locale LANGUAGE=$1 LANG=C.UTF-8 LC_ALL= gettext -d cudafx -- "$2"
}
for lang in es el; do
  profile=$work/profile-$lang
  mkdir -p "$profile/plug-ins"
  cp -R "$work/profile/plug-ins/cudafx" "$profile/plug-ins/"
  i18n_program="$helpers
(let* ((img (car (gimp-file-load RUN-NONINTERACTIVE \"$PWD/tests/data/camera.png\" \"camera\")))
       (layer (car (gimp-image-get-active-layer img))))
  (gimp-image-convert-indexed img 0 0 8 FALSE FALSE \"\")
  (try \"indexed\" (lambda () (plug-in-cudafx-median RUN-NONINTERACTIVE img layer 1 50 0 1))))"
  LANGUAGE=$lang LANG=C.UTF-8 LC_ALL= GIMP2_DIRECTORY=$profile timeout 300 gimp-console-2.10 -i \
    -b "(begin $i18n_program)" -b '(gimp-quit 0)' >"$work/out/i18n-$lang.log" 2>&1
  label=$(translated "$lang" "_Median (GPU)...")
  folder=$(sed -n 's|.*(locale-def "cudafx" "${gimp_dir}\(.*\)").*|\1|p' "$profile/pluginrc")
  if [ "$label" = "_Median (GPU)..." ]; then
    fail "i18n-$lang" "no $lang catalog in $build/locale (make locale)"
  elif [ -z "$folder" ]; then
    fail "i18n-$lang" "the plug-in registered no translation domain (pluginrc has no locale-def \"cudafx\")"
  elif [ "$(TEXTDOMAINDIR=$profile$folder LANGUAGE=$lang LANG=C.UTF-8 LC_ALL= gettext -d cudafx -- "_Median (GPU)...")" != "$label" ]; then
    fail "i18n-$lang" "the locale folder GIMP was given ($folder) does not translate the menu label"
  else
    pass "i18n-$lang: GIMP has cudafx's domain at $folder, menu label \"$label\""
  fi
  msgid="%s: indexed images are not supported; convert the image to RGB or grayscale first (Image ▸ Mode)"
  want=$(printf "$(translated "$lang" "$msgid")" median)
  if grep 'CASE indexed FAILED' "$work/out/i18n-$lang.log" | grep -qF -- "$want"; then
    pass "i18n-$lang: the plug-in's error comes back as \"$want\""
  else
    fail "i18n-$lang" "wanted \"$want\", got: $(grep -m1 'CASE indexed' "$work/out/i18n-$lang.log")"
  fi
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
