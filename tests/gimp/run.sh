#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Headless GIMP 3 tests of the cudafx plug-in: installs BUILD/gimp3/cudafx into
# a throw-away profile inside the Debian 13 chroot (tests/gimp/chroot.sh),
# drives gimp-console (3.0 or 3.2) with Script-Fu, and compares what GIMP exports with
# the engine's output for the same parameters (the CLI BUILD/cudafx when it
# exists, else the engine library through bench/pycudafx.py). A filter the
# engine rejects must fail in GIMP with the engine's message and leave the
# image untouched. One case calls the plug-in from Python-Fu instead; two
# check quantize's palette and indexed-mode arguments. Ends with "N passed, N failed".
#   tests/gimp/run.sh [BUILD]       (CUDAFX_LIB overrides BUILD/libcudafx.so)
set -u
build=${1:-build}
cd "$(dirname "$0")/../.."
here=tests/gimp
py=/usr/bin/python3
export CUDAFX_LIB=${CUDAFX_LIB:-$build/libcudafx.so}
cli=$build/cudafx
[ -x "$cli" ] || cli=
passed=0 failed=0

pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }

[ -x "$build/gimp3/cudafx" ] || { echo "no plug-in at $build/gimp3/cudafx (make plugin)"; echo "0 passed, 1 failed"; exit 1; }
[ -f "$CUDAFX_LIB" ] || { echo "no engine library at $CUDAFX_LIB"; echo "0 passed, 1 failed"; exit 1; }
root=$("$here/chroot.sh" ensure locales) || { echo "0 passed, 1 failed"; exit 1; }
work=$(mktemp -d "$root/tmp/cudafx-gimp.XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
inside=${work#"$root"}
mkdir -p "$work/profile/plug-ins/cudafx" "$work/out"
tools/install-plugin.sh "$build/gimp3/cudafx" "$build/locale" "$work/profile/plug-ins/cudafx"
cp tests/data/camera.png tests/data/astronaut.png "$work/"
echo "chroot $root, engine reference: ${cli:-$CUDAFX_LIB (pycudafx)}"

# gimp NAME SCHEME: runs SCHEME (inside one (begin ...)) in headless GIMP with
# the test profile; the log goes to out/NAME.log. Paths in SCHEME are
# chroot paths: $inside/...
gimp() {
  timeout 120 "$here/chroot.sh" run /usr/bin/env GIMP3_DIRECTORY="$inside/profile" \
    gimp-console -i --batch-interpreter=plug-in-script-fu-eval \
    -b "(begin $2)" --quit >"$work/out/$1.log" 2>&1
}

# Script-Fu: load FILE into img and its first layer into layer.
load() {
  echo "(define img (car (gimp-file-load RUN-NONINTERACTIVE \"$inside/$1\")))
        (define layer (vector-ref (car (gimp-image-get-layers img)) 0))"
}
save() { echo "(gimp-file-save RUN-NONINTERACTIVE img \"$inside/out/$1\")"; }

# gimp_py NAME PYTHON: runs PYTHON through Python-Fu (python-fu-eval) with the
# test profile; the log goes to out/NAME.log.
gimp_py() {
  timeout 120 "$here/chroot.sh" run /usr/bin/env GIMP3_DIRECTORY="$inside/profile" \
    gimp-console -i --batch-interpreter=python-fu-eval -b "$2" --quit >"$work/out/$1.log" 2>&1
}

# Procedure arguments name=value as Script-Fu named arguments: numbers as
# they are, kernel as a float vector, palette=FILE (a palette GIMP ships,
# palettes/FILE.gpl) as that palette resource, anything else as a string (a choice).
palettes=/usr/share/gimp/3.0/palettes
sf_args() {
  local pair name value out=""
  for pair in "$@"; do
    name=${pair%%=*} value=${pair#*=}
    [ "$name" = palette ] && value="palette:$(sed -n 's/^Name: *//p' "$root$palettes/$value.gpl")"
    case $value in
      palette:*) out+=" #:palette (car (gimp-palette-get-by-name \"${value#palette:}\"))" ;;
      *,*) out+=" #:$name (vector ${value//,/ })" ;;
      true|false) out+=" #:$name $([ "$value" = true ] && echo TRUE || echo FALSE)" ;;
      -*[0-9]*|[0-9]*) out+=" #:$name $value" ;;
      *) out+=" #:$name \"$value\"" ;;
    esac
  done
  echo "$out"
}

call() { # FILTER name=value...
  local filter=$1; shift
  echo "(plug-in-cudafx-$filter #:run-mode RUN-NONINTERACTIVE #:image img #:drawables (vector layer)$(sf_args "$@"))"
}

# reference FILTER IN OUT name=value...: the engine's result, or its error
# message on stdout with status 3. With $PALETTE_OUT, the CLI also writes the
# palette there.
reference() {
  local filter=$1 in=$2 out=$3; shift 3
  if [ -n "$cli" ]; then
    local opts=() pair name value
    for pair in "$@"; do
      name=${pair%%=*} value=${pair#*=}
      case $name=$value in
        create-palette=*|convert-indexed=*|remove-unused=*) ;; # the GIMP hosts' own arguments
        palette=*) opts+=(--palette "$root$palettes/$value.gpl") ;;
        *=true) opts+=("--$name") ;;
        *=false) opts+=("--no-$name") ;;
        kernel=*) opts+=(--kernel "$("$py" -c "import sys,math; v=sys.argv[1].split(','); n=math.isqrt(len(v)); print(';'.join(','.join(v[i*n:(i+1)*n]) for i in range(n)))" "$value")") ;;
        *) opts+=("--$name" "$value") ;;
      esac
    done
    [ -z "${PALETTE_OUT:-}" ] || opts+=(--palette-out "$PALETTE_OUT")
    local msg; msg=$(CUDAFX_BACKEND=cpu "$cli" "$filter" "${opts[@]}" "$in" "$out" 2>&1) || { echo "$msg"; return 3; }
  else
    CUDAFX_BACKEND=cpu "$py" "$here/compare.py" reference "$filter" "$in" "$out" "$@"
  fi
}

# run_case NAME FILE FILTER name=value...: one GIMP run that loads FILE,
# evaluates $PRE (preparation: selection, alpha, precision), saves the input
# as NAME.in.png, calls the procedure (catching a failure), saves NAME.png,
# then calls it once more uncaught so that a failure's message reaches the
# log. GIMP echoes a failing batch command, so the success marker is built at
# run time.
run_case() {
  local name=$1 file=$2 filter=$3; shift 3
  local c; c=$(call "$filter" "$@")
  gimp "$name" "$(load "$file") ${PRE:-} $(save "$name.in.png")
    (catch #f $c (display (string-append \"call \" \"SUCCEEDED\"))) $(save "$name.png") $c"
}

# run_py_case NAME FILE FILTER name=value...: run_case through Python-Fu:
# the procedure's config filled by name (numbers as they are, true/false as
# booleans, anything else a choice nick); a status other than success raises.
run_py_case() {
  local name=$1 file=$2 filter=$3 pair sets=""; shift 3
  for pair in "$@"; do
    case ${pair#*=} in
      true|false) sets+="config.set_property('${pair%%=*}', ${pair#*=} == 'true')
" ;;
      -*[0-9]*|[0-9]*) sets+="config.set_property('${pair%%=*}', ${pair#*=})
" ;;
      *) sets+="config.set_property('${pair%%=*}', '${pair#*=}')
" ;;
    esac
  done
  gimp_py "$name" "from gi.repository import Gimp, Gio
def save(name):
    Gimp.file_save(Gimp.RunMode.NONINTERACTIVE, img, Gio.File.new_for_path('$inside/out/' + name), None)
img = Gimp.file_load(Gimp.RunMode.NONINTERACTIVE, Gio.File.new_for_path('$inside/$file'))
save('$name.in.png')
procedure = Gimp.get_pdb().lookup_procedure('plug-in-cudafx-$filter')
config = procedure.create_config()
config.set_property('run-mode', Gimp.RunMode.NONINTERACTIVE)
config.set_property('image', img)
config.set_core_object_array('drawables', img.get_layers()[:1])
$sets
result = procedure.run(config)
if result.index(0) != Gimp.PDBStatusType.SUCCESS:
    raise RuntimeError(f'plug-in-cudafx-$filter returned {result.index(0)}')
print('call ' + 'SUCCEEDED')
save('$name.png')"
}

# expect_error NAME RC MESSAGE: the call failed with MESSAGE in GIMP's output,
# and the image saved after the failure equals the input.
expect_error() {
  local name=$1 rc=$2 message=$3 log=$work/out/$1.log
  if grep -q "call SUCCEEDED" "$log"; then fail "$name" "the call succeeded"; return; fi
  if [ "$rc" -eq 0 ]; then fail "$name" "GIMP exited 0 after the failing call"; return; fi
  if ! grep -qF -- "$message" "$log"; then fail "$name" "'$message' not in GIMP's output: $(grep -m1 -i error "$log")"; return; fi
  [ -f "$work/out/$name.png" ] || { fail "$name" "no image saved after the failure: $(grep -m1 -i error "$log")"; return; }
  local diff; diff=$("$py" "$here/compare.py" same "$work/out/$name.in.png" "$work/out/$name.png" 0 2>&1) \
    || { fail "$name" "image changed after the error: $diff"; return; }
  pass "$name: fails with \"$message\", image unchanged"
}

# filter_test NAME FILE TOLERANCE FILTER name=value...: GIMP's export equals
# the engine's output on the same input (within TOLERANCE; with $SEL="X Y W H"
# a rectangle selection: inside it the whole-image result, outside it the
# input); or, if the engine rejects the call, GIMP fails with the engine's
# message and the image is unchanged. $RUN runs GIMP (default run_case).
filter_test() {
  local name=$1 file=$2 tol=$3 filter=$4; shift 4
  ${RUN:-run_case} "$name" "$file" "$filter" "$@"
  local rc=$? expect ref_rc diff
  [ -f "$work/out/$name.in.png" ] || { fail "$name" "GIMP exited $rc before saving the input: $(grep -m1 -i error "$work/out/$name.log")"; return; }
  expect=$(reference "$filter" "$work/out/$name.in.png" "$work/out/$name.ref.png" "$@")
  ref_rc=$?
  if [ $ref_rc -eq 3 ]; then expect_error "$name" $rc "$expect"; return; fi
  [ $ref_rc -eq 0 ] || { fail "$name" "reference failed: $expect"; return; }
  grep -q "call SUCCEEDED" "$work/out/$name.log" \
    || { fail "$name" "GIMP failed: $(grep -m1 -i error "$work/out/$name.log")"; return; }
  if [ -n "${SEL:-}" ]; then
    diff=$("$py" "$here/compare.py" inside "$work/out/$name.in.png" "$work/out/$name.png" "$work/out/$name.ref.png" $SEL 2>&1) \
      && pass "$name: selection $SEL filtered with outside neighbours, the rest untouched" || fail "$name" "$diff"
  else
    diff=$("$py" "$here/compare.py" same "$work/out/$name.ref.png" "$work/out/$name.png" "$tol" 2>&1) \
      && pass "$name: GIMP equals the engine (±$tol)" || fail "$name" "$diff"
  fi
}

# palette_test NAME FILE name=value...: quantize with create-palette or
# convert-indexed: the pixels equal the CLI's, the palette it returns is
# named "cudafx K colors" (K as found) and holds the colours of the CLI's
# --palette-out file in order (with remove-unused, only the first of each
# colour some pixel of the CLI's output has); with convert-indexed the image
# is indexed with exactly those colours, else still RGB.
palette_test() {
  local name=$1 file=$2 c log expect; shift 2
  local indexed=0 gpl=$work/out/$name.gpl
  case " $* " in *" convert-indexed=true "*) indexed=1 ;; esac
  [ -n "$cli" ] || { fail "$name" "needs the CLI ($build/cudafx) for --palette-out"; return; }
  c=$(call quantize "$@")
  # Markers are built at run time: GIMP echoes a failing command.
  gimp "$name" "$(load "$file") $(save "$name.in.png")
    (define palette (car $c))
    (define (show tag value) (display (string-append \"\n\" tag \"=\")) (display value))
    (show \"NAME\" (car (gimp-resource-get-name palette)))
    (show \"COLORS\" (car (gimp-palette-get-colors palette)))
    (show \"TYPE\" (car (gimp-image-get-base-type img)))
    (if (= (car (gimp-image-get-base-type img)) INDEXED)
      (show \"IMAGE-COLORS\" (car (gimp-palette-get-colors (car (gimp-image-get-palette img))))))
    (display (string-append \"\ncall \" \"SUCCEEDED\n\")) $(save "$name.png")"
  log=$work/out/$name.log
  grep -q "^call SUCCEEDED" "$log" || { fail "$name" "GIMP failed: $(grep -m1 -i error "$log")"; return; }
  expect=$(PALETTE_OUT=$gpl reference quantize "$work/out/$name.in.png" "$work/out/$name.ref.png" "$@") \
    || { fail "$name" "reference failed: $expect"; return; }
  # GIMP palette file: four header lines, then "R G B<TAB>name" per colour.
  local want got k
  want=$(awk 'NR > 4 { print $1, $2, $3 }' "$gpl")
  case " $* " in *" remove-unused=true "*)
    want=$(WANT=$want "$py" -c 'import os, sys
from PIL import Image
used, seen = set(Image.open(sys.argv[1]).convert("RGB").getdata()), set()
for line in os.environ["WANT"].splitlines():
    c = tuple(map(int, line.split()))
    if c in used and c not in seen:
        seen.add(c)
        print(line)' "$work/out/$name.ref.png") ;;
  esac
  k=$(grep -c . <<<"$want")
  colors_of() { sed -n "s/^$1=#(\(.*\))\$/\1/p" "$log" | sed 's/) (/\n/g; s/[()]//g'; }
  got=$(colors_of COLORS)
  grep -qx "NAME=cudafx $k colors\( #[0-9]*\)\?" "$log" \
    || { fail "$name" "palette not named 'cudafx $k colors': $(grep ^NAME= "$log")"; return; }
  [ "$got" = "$want" ] || { fail "$name" "palette colours differ from the CLI's: $(echo $got | head -c 200)"; return; }
  if [ $indexed = 1 ]; then
    grep -qx "TYPE=2" "$log" || { fail "$name" "image not indexed: $(grep ^TYPE= "$log")"; return; }
    [ "$(colors_of IMAGE-COLORS)" = "$want" ] || { fail "$name" "the image's colormap is not the palette"; return; }
  else
    grep -qx "TYPE=0" "$log" || { fail "$name" "image mode changed: $(grep ^TYPE= "$log")"; return; }
  fi
  local diff
  diff=$("$py" "$here/compare.py" same "$work/out/$name.ref.png" "$work/out/$name.png" 0 2>&1) \
    || { fail "$name" "$diff"; return; }
  pass "$name: palette 'cudafx $k colors' equals the CLI's$([ $indexed = 1 ] && echo ", image indexed with it"), pixels equal"
}

error_test() { # NAME FILE MESSAGE FILTER name=value...
  local name=$1 file=$2 message=$3 filter=$4; shift 4
  run_case "$name" "$file" "$filter" "$@"
  expect_error "$name" $? "$message"
}

filter_test median-gray camera.png 0 median radius=2 percentile=50 shape=square
filter_test median-rgb astronaut.png 0 median radius=1 shape=circle
filter_test nl-means astronaut.png 1 nl-means auto=false h=12 patch-radius=1 search-radius=3
filter_test quantize astronaut.png 0 quantize colors=8 color-space=oklab dither=none max-iterations=10 seed=1
# A palette GIMP ships (240 entries, duplicates among them) given to the procedure as a
# resource and to the CLI as its file; positioned and reduced-bleeding dithering.
filter_test quantize-given astronaut.png 0 quantize palette=Ega color-space=rgb dither=ordered
filter_test quantize-given-fs camera.png 0 quantize palette=Grays color-space=oklab dither=floyd-steinberg-reduced-bleeding
filter_test quantize-blue-noise astronaut.png 0 quantize colors=12 dither=blue-noise seed=2
filter_test convolve camera.png 0 convolve preset=custom kernel=0,0.25,0,0.25,0,0.25,0,0.25,0 divisor=1 border=clamp
# A selection: only it changes, and its edge sees the real pixels around it.
SEL="100 120 61 47" PRE="(gimp-image-select-rectangle img CHANNEL-OP-REPLACE 100 120 61 47)" \
  filter_test selection astronaut.png 0 median radius=3
# nl-bayes on crops (its CPU takes seconds a quarter megapixel): manual on
# colour, automatic on grey, and a selection, whose edge sees the real pixels
# around it and whose reference grid is the whole layer's.
nlb_crop="(gimp-image-crop img 160 130 150 100)"
PRE=$nlb_crop filter_test nl-bayes astronaut.png 0 nl-bayes auto=false sigma=15
PRE=$nlb_crop filter_test nl-bayes-auto camera.png 0 nl-bayes flat-area=false
SEL="50 40 41 33" PRE="$nlb_crop (gimp-image-select-rectangle img CHANNEL-OP-REPLACE 50 40 41 33)" \
  filter_test nl-bayes-selection astronaut.png 0 nl-bayes auto=false sigma=15
# Alpha (part of the layer cleared to transparent black: PNG keeps no colour
# under transparency, so the file must hold what GIMP filtered) and 16 bits
# per channel (processed as float).
PRE="(gimp-layer-add-alpha layer) (gimp-image-select-rectangle img CHANNEL-OP-REPLACE 0 0 200 100)
     (gimp-context-set-foreground \"black\") (gimp-drawable-edit-fill layer FILL-FOREGROUND)
     (gimp-drawable-edit-clear layer) (gimp-selection-none img)" \
  filter_test alpha astronaut.png 0 median radius=2
PRE="(gimp-image-convert-precision img PRECISION-U16-NON-LINEAR)" \
  filter_test 16-bit camera.png 1 median radius=2
# 32-bit float (exported as 16-bit PNG; the reference filters that in float too).
PRE="(gimp-image-convert-precision img PRECISION-FLOAT-NON-LINEAR)" \
  filter_test float astronaut.png 1 convolve preset=gaussian sigma=1.5
# Quantize's GIMP-only arguments: a palette resource, and indexed mode with it.
palette_test palette astronaut.png colors=16 seed=3 max-iterations=20 create-palette=true
palette_test to-indexed astronaut.png colors=8 color-space=rgb seed=1 max-iterations=20 convert-indexed=true
# A given palette (240 entries, duplicates among them) with its unused colours removed.
palette_test given-unused astronaut.png palette=Ega color-space=rgb convert-indexed=true remove-unused=true
# A script in Python: the procedure found in the PDB and run from its config.
RUN=run_py_case filter_test python-fu camera.png 0 median radius=2 percentile=25 shape=circle

# Arguments: out of range (Script-Fu or the plug-in rejects it), and a kernel
# that is not square (only the plug-in can tell).
error_test range camera.png "out of range" median radius=101
error_test nl-bayes-range camera.png "out of range" nl-bayes auto=false sigma=0
error_test kernel camera.png "kernel has 8 values" convolve preset=custom kernel=1,1,1,1,1,1,1,1
# Asked to stay live where GEGL has no cudafx module (this profile has
# none): the procedure asks GIMP for the operation, GIMP has none, and the
# error says what is missing.
error_test live-without-module camera.png "live needs the cudafx GEGL module" median radius=1 live=true
# An indexed image: a clear error, the image unchanged.
PRE="(gimp-image-convert-indexed img CONVERT-DITHER-NONE CONVERT-PALETTE-GENERATE 8 FALSE FALSE \"\")" \
  error_test indexed camera.png "indexed images are not supported" median radius=1

# Translations: GIMP started in Spanish, then in Greek (a fresh profile each,
# so the plug-in is queried in that language) shows the median's menu label
# and blurb as the catalogs installed beside the plug-in translate them.
# Debian 13's glibc ignores LANGUAGE under C.UTF-8: the test makes real locales.
translated() { # LANGUAGE MSGID: the catalog's translation, from build/locale
  TEXTDOMAINDIR=$build/locale LANGUAGE=$1 LANG=C.UTF-8 LC_ALL= gettext -d cudafx -- "$2"
}
query='p = Gimp.get_pdb().lookup_procedure("plug-in-cudafx-median")
print("LABEL=" + p.get_menu_label())
print("BLURB=" + p.get_blurb())'
for locale in es_ES el_GR; do
  lang=${locale%_*}
  "$here/chroot.sh" run localedef -i "$locale" -c -f UTF-8 "$locale.UTF-8"
  mkdir -p "$work/profile-$lang/plug-ins"
  cp -R "$work/profile/plug-ins/cudafx" "$work/profile-$lang/plug-ins/"
  timeout 120 "$here/chroot.sh" run /usr/bin/env LANG="$locale.UTF-8" GIMP3_DIRECTORY="$inside/profile-$lang" \
    gimp-console -i --batch-interpreter=python-fu-eval -b "$query" --quit >"$work/out/i18n-$lang.log" 2>&1
  for what in LABEL:"_Median (GPU)..." BLURB:"Median or percentile filter over a square or circular window"; do
    key=${what%%:*} msgid=${what#*:}
    want=$(translated "$lang" "$msgid")
    got=$(sed -n "s/^$key=//p" "$work/out/i18n-$lang.log" | head -n 1)
    if [ "$want" = "$msgid" ]; then
      fail "i18n-$lang" "no $lang translation of \"$msgid\" in $build/locale (make locale)"
    elif [ "$got" = "$want" ]; then
      pass "i18n-$lang: GIMP in $locale shows the ${key,,} \"$got\""
    else
      fail "i18n-$lang" "${key,,} \"$got\", the catalog says \"$want\" (log: out/i18n-$lang.log)"
    fi
  done
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
