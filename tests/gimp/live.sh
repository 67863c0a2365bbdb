#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Headless GIMP 3 tests of the GEGL operations as live filters: the module
# (BUILD/gimp3/cudafx-gegl.so, built in the chroot) installed where GEGL
# looks ($XDG_DATA_HOME/gegl-0.4/plug-ins) of a throw-away profile; GIMP
# knows the five operations, Script-Fu adds each as a live filter
# (gimp-drawable-append-new-filter) that the layer's filter list shows, and
# merging it gives the CLI's pixels (nl-means and nl-bayes ±1); a selection is respected;
# GIMP logs no GLib critical. About 2 minutes here (one GIMP start).
# Ends with "N passed, N failed".
#   tests/gimp/live.sh [BUILD]
set -u
build=${1:-build}
cd "$(dirname "$0")/../.."
here=tests/gimp
py=/usr/bin/python3
cli=$build/cudafx module=$build/gimp3/cudafx-gegl.so
passed=0 failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }

for f in "$cli" "$module" "$build/gimp3/cudafx"; do
  [ -e "$f" ] || { echo "no $f (make plugin all)"; echo "0 passed, 1 failed"; exit 1; }
done
root=$("$here/chroot.sh" ensure) || { echo "0 passed, 1 failed"; exit 1; }
work=$(mktemp -d "$root/tmp/cudafx-live.XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
inside=${work#"$root"}
mkdir -p "$work/out"
"$here/chroot.sh" profile "$work" "$build"
cp tests/data/camera.png tests/data/astronaut.png "$work/"
# nl-bayes on a crop: its CPU takes seconds a quarter megapixel.
"$py" -c "import cv2; cv2.imwrite('$work/nl-bayes.png', cv2.imread('tests/data/astronaut.png')[100:230, 150:310])"

# Each case: NAME FILE TOLERANCE "CLI OPTIONS" OP then the filter's
# arguments as Script-Fu values ("name" value ...).
cases=(
  "median|astronaut.png|0|median --radius 2 --shape circle|cudafx:median|\"radius\" 2 \"shape\" \"circle\""
  "nl-means|astronaut.png|1|nl-means|cudafx:nl-means|\"auto\" TRUE"
  "quantize|astronaut.png|0|quantize --colors 8 --seed 1 --max-iterations 10 --dither floyd-steinberg|cudafx:quantize|\"colors\" 8 \"seed\" 1 \"max-iterations\" 10 \"dither\" \"floyd-steinberg\""
  "nl-bayes|nl-bayes.png|1|nl-bayes|cudafx:nl-bayes|\"auto\" TRUE"
  "convolve|camera.png|0|convolve --kernel '0,-1,0;-1,5,-1;0,-1,0' --divisor 1 --offset 10|cudafx:convolve|\"preset\" \"custom\" \"kernel\" \"0,-1,0;-1,5,-1;0,-1,0\" \"divisor\" 1.0 \"offset\" 10.0"
)
sel="100 120 61 47"

# One GIMP run for all of them: per case, load, add the live filter, print
# the layer's filters' operations, merge, save. Markers are built at run
# time, since GIMP echoes a failing command.
script="(define (show tag value) (display (string-append \"\n\" tag \"=\")) (display value))"
for c in "${cases[@]}"; do
  IFS='|' read -r name file tol opts op args <<<"$c"
  script+="
  (let* ((img (car (gimp-file-load RUN-NONINTERACTIVE \"$inside/$file\")))
         (layer (vector-ref (car (gimp-image-get-layers img)) 0))
         (added (gimp-drawable-append-new-filter layer \"$op\" 0 LAYER-MODE-REPLACE 1.0 $args))
         (ops (map (lambda (f) (car (gimp-drawable-filter-get-operation-name f)))
                   (vector->list (car (gimp-drawable-get-filters layer))))))
    (show \"FILTERS-$name\" ops)
    (gimp-drawable-merge-filters layer)
    (show \"LEFT-$name\" (vector-length (car (gimp-drawable-get-filters layer))))
    (gimp-file-save RUN-NONINTERACTIVE img \"$inside/out/$name.png\"))"
done
read -r x y w h <<<"$sel"
script+="
  (let* ((img (car (gimp-file-load RUN-NONINTERACTIVE \"$inside/astronaut.png\")))
         (layer (vector-ref (car (gimp-image-get-layers img)) 0)))
    (gimp-image-select-rectangle img CHANNEL-OP-REPLACE $x $y $w $h)
    (gimp-drawable-merge-new-filter layer \"cudafx:median\" 0 LAYER-MODE-REPLACE 1.0 \"radius\" 3)
    (gimp-file-save RUN-NONINTERACTIVE img \"$inside/out/selection.png\"))
  (let* ((img (car (gimp-file-load RUN-NONINTERACTIVE \"$inside/astronaut.png\")))
         (layer (vector-ref (car (gimp-image-get-layers img)) 0)))
    (plug-in-cudafx-median #:run-mode RUN-NONINTERACTIVE #:image img #:drawables (vector layer) #:radius 2)
    (show \"PROC-MERGED-LEFT\" (vector-length (car (gimp-drawable-get-filters layer))))
    (gimp-file-save RUN-NONINTERACTIVE img \"$inside/out/procedure.png\")
    (plug-in-cudafx-nl-means #:run-mode RUN-NONINTERACTIVE #:image img #:drawables (vector layer) #:live TRUE)
    (show \"PROC-LIVE\" (map (lambda (f) (car (gimp-drawable-filter-get-operation-name f)))
                             (vector->list (car (gimp-drawable-get-filters layer))))))
  (display (string-append \"\nall \" \"DONE\n\"))"

timeout 300 "$here/chroot.sh" run /usr/bin/env GIMP3_DIRECTORY="$inside/profile" \
  XDG_DATA_HOME="$inside/data" gimp-console -i --batch-interpreter=plug-in-script-fu-eval \
  -b "(begin $script)" --quit >"$work/out/gimp.log" 2>&1
log=$work/out/gimp.log
grep -q "^all DONE" "$log" || fail "gimp" "the Script-Fu run failed: $(grep -m2 -i -A1 error "$log")"

for c in "${cases[@]}"; do
  IFS='|' read -r name file tol opts op args <<<"$c"
  if grep -qx "FILTERS-$name=($op)" "$log"; then
    pass "$name: $op added as a live filter, the layer's filter list shows it"
  else
    fail "$name/live" "filter list: $(grep "^FILTERS-$name=" "$log")"
  fi
  grep -qx "LEFT-$name=0" "$log" || fail "$name/merge" "filters left after merging: $(grep "^LEFT-$name=" "$log")"
  ref=$work/out/$name.ref.png
  msg=$(eval "CUDAFX_BACKEND=cpu \"$cli\" $opts \"$work/$file\" \"$ref\"" 2>&1) \
    || { fail "$name" "CLI failed: $msg"; continue; }
  [ -f "$work/out/$name.png" ] || { fail "$name" "GIMP saved nothing"; continue; }
  msg=$("$py" "$here/compare.py" same "$ref" "$work/out/$name.png" "$tol" 2>&1) \
    && pass "$name: merged, GIMP's pixels equal the CLI's (±$tol)" || fail "$name" "$msg"
done

# GIMP 3.0 copies every property of a filter onto its operation: a property
# it cannot write (nl-means' noise-sigma was read-only) makes GLib log a
# critical in GIMP and in Script-Fu on every use.
crit=$(grep -m 3 -- "-CRITICAL" "$log")
[ -z "$crit" ] && pass "no GLib critical in GIMP's log" || fail "criticals" "$crit"

# The procedure with the module: merged by GIMP, the CLI's pixels; asked to
# stay live, a filter on the layer.
ref=$work/out/procedure.ref.png
if CUDAFX_BACKEND=cpu "$cli" median --radius 2 tests/data/astronaut.png "$ref" 2>/dev/null &&
   [ -f "$work/out/procedure.png" ] && grep -qx "PROC-MERGED-LEFT=0" "$log"; then
  msg=$("$py" "$here/compare.py" same "$ref" "$work/out/procedure.png" 0 2>&1) \
    && pass "plug-in-cudafx-median with the module: merged, the CLI's pixels" || fail "procedure" "$msg"
else
  fail "procedure" "no result or a filter left: $(grep "^PROC-MERGED-LEFT=" "$log")"
fi
grep -qx "PROC-LIVE=(cudafx:nl-means)" "$log" \
  && pass "plug-in-cudafx-nl-means #:live TRUE: a live cudafx:nl-means filter on the layer" \
  || fail "procedure-live" "filters: $(grep "^PROC-LIVE=" "$log")"

# GIMP gives a live filter the selection's bounding box as its whole input
# (its filter region "selection"): inside it the result is the CLI's on that
# rectangle alone, outside it the layer is untouched.
read -r x y w h <<<"$sel"
crop=$work/out/selection.crop.png ref=$work/out/selection.ref.png
if "$py" -c "import cv2, sys; a = cv2.imread(sys.argv[1]); cv2.imwrite(sys.argv[2], a[$y:$y+$h, $x:$x+$w])" \
     tests/data/astronaut.png "$crop" &&
   CUDAFX_BACKEND=cpu "$cli" median --radius 3 "$crop" "$crop" 2>/dev/null &&
   "$py" -c "import cv2, sys; a = cv2.imread(sys.argv[1]); a[$y:$y+$h, $x:$x+$w] = cv2.imread(sys.argv[2]); cv2.imwrite(sys.argv[3], a)" \
     tests/data/astronaut.png "$crop" "$ref" && [ -f "$work/out/selection.png" ]; then
  # shellcheck disable=SC2086
  msg=$("$py" "$here/compare.py" inside tests/data/astronaut.png "$work/out/selection.png" "$ref" $sel 2>&1) \
    && pass "selection $sel: only it changed, filtered as GIMP hands it to a filter" \
    || fail "selection" "$msg"
else
  fail "selection" "no result (GIMP or the CLI failed)"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
