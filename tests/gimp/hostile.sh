#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Headless GIMP 3: every bad value a script can give each live filter, in one
# GIMP run (tests/gimp/live.sh's set-up: the module in a throw-away profile
# of the chroot). For each case Script-Fu adds the filter with the bad value
# and merges it. GIMP must stay up to the end of the script, and no case may
# give the layer back unchanged: a value GIMP or the operation refuses where
# it is entered leaves the filter with its last valid value (the layer is
# filtered), a file or setting only a render can judge gives the error
# pattern (tests/gegl/run.sh), and a call GIMP refuses is an error to the
# script. Each outcome is printed; RELIABILITY.md has the table. Ends with
# "N passed, N failed".
#   tests/gimp/hostile.sh [BUILD]
set -u
build=${1:-build}
cd "$(dirname "$0")/../.."
here=tests/gimp
py=/usr/bin/python3
module=$build/gimp3/cudafx-gegl.so
passed=0 failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }

for f in "$module" "$build/gimp3/cudafx"; do
  [ -e "$f" ] || { echo "no $f (make plugin all)"; echo "0 passed, 1 failed"; exit 1; }
done
root=$("$here/chroot.sh" ensure) || { echo "0 passed, 1 failed"; exit 1; }
work=$(mktemp -d "$root/tmp/cudafx-hostile.XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
inside=${work#"$root"}
mkdir -p "$work/out"
"$here/chroot.sh" profile "$work" "$build"
# The denoisers on a crop: their CPU takes about a second a quarter megapixel.
"$py" -c "import cv2; cv2.imwrite('$work/small.png', cv2.imread('tests/data/astronaut.png')[100:230, 150:310])"
cp tests/data/camera.png "$work/grey.png"
mkfifo "$work/fifo.gpl"
head -c 2000 /dev/urandom >"$work/binary.gpl"
: >"$work/empty.gpl"
# A kernel text that does not parse leaves the last valid kernel: sharpen
# first, so that keeping it shows (the default is the identity).
sharpen="0,-1,0;-1,5,-1;0,-1,0"

# NAME|FILE|OPERATION|the arguments as Script-Fu values
cases=(
  "median radius -5|small.png|cudafx:median|\"radius\" -5"
  "median radius 100000|small.png|cudafx:median|\"radius\" 100000"
  "median percentile 200|small.png|cudafx:median|\"percentile\" 200.0"
  "median shape bogus|small.png|cudafx:median|\"shape\" \"bogus\""
  "median backend bogus|small.png|cudafx:median|\"backend\" \"bogus\""
  "nl-means h -10|small.png|cudafx:nl-means|\"auto\" FALSE \"h\" -10.0"
  "nl-means patch-radius 1000|small.png|cudafx:nl-means|\"auto\" FALSE \"patch-radius\" 1000"
  "nl-means search-radius -1|small.png|cudafx:nl-means|\"auto\" FALSE \"search-radius\" -1"
  "nl-bayes sigma -5|small.png|cudafx:nl-bayes|\"auto\" FALSE \"sigma\" -5.0"
  "nl-bayes sigma 1e9|small.png|cudafx:nl-bayes|\"auto\" FALSE \"sigma\" 1e9"
  "quantize colors 1|small.png|cudafx:quantize|\"colors\" 1"
  "quantize colors 1000|small.png|cudafx:quantize|\"colors\" 1000"
  "quantize seed -1|small.png|cudafx:quantize|\"seed\" -1"
  "quantize max-iterations 0|small.png|cudafx:quantize|\"max-iterations\" 0"
  "quantize palette missing|small.png|cudafx:quantize|\"palette\" \"$inside/missing.gpl\""
  "quantize palette a directory|small.png|cudafx:quantize|\"palette\" \"$inside\""
  "quantize palette a FIFO|small.png|cudafx:quantize|\"palette\" \"$inside/fifo.gpl\""
  "quantize palette /dev/zero|small.png|cudafx:quantize|\"palette\" \"/dev/zero\""
  "quantize palette empty|small.png|cudafx:quantize|\"palette\" \"$inside/empty.gpl\""
  "quantize palette binary|small.png|cudafx:quantize|\"palette\" \"$inside/binary.gpl\""
  "convolve kernel 1,2;3|grey.png|cudafx:convolve|\"preset\" \"custom\" \"kernel\" \"$sharpen\" \"kernel\" \"1,2;3\""
  "convolve kernel 1e309|grey.png|cudafx:convolve|\"preset\" \"custom\" \"kernel\" \"$sharpen\" \"kernel\" \"1e309\""
  "convolve kernel of 1000 values|grey.png|cudafx:convolve|\"preset\" \"custom\" \"kernel\" \"$sharpen\" \"kernel\" (ones 1000)"
  "convolve kernel with preset gaussian|grey.png|cudafx:convolve|\"preset\" \"gaussian\" \"kernel\" \"$sharpen\""
  "convolve divisor 1e-300|grey.png|cudafx:convolve|\"preset\" \"custom\" \"kernel\" \"$sharpen\" \"divisor\" 1e-300"
  "convolve sigma 1000|grey.png|cudafx:convolve|\"preset\" \"gaussian\" \"sigma\" 1000.0"
  "convolve sigma 0|grey.png|cudafx:convolve|\"preset\" \"gaussian\" \"sigma\" 0.0"
  "convolve preset bogus|grey.png|cudafx:convolve|\"preset\" \"bogus\""
)

# One GIMP run: per case, a Script-Fu error is caught (CAUGHT), else the
# merged layer is saved (SAVED). Markers are built at run time, since GIMP
# echoes a failing command.
# (ones N): a kernel text of N values, made in the script (Script-Fu reads
# no string literal that long).
script="(define (show tag) (display (string-append \"\n\" tag \"\n\")))
  (define (ones n) (if (= n 1) \"1\" (string-append \"1,\" (ones (- n 1)))))"
i=0
for c in "${cases[@]}"; do
  IFS='|' read -r name file op args <<<"$c"
  script+="
  (catch (show \"CAUGHT-$i\")
    (let* ((img (car (gimp-file-load RUN-NONINTERACTIVE \"$inside/$file\")))
           (layer (vector-ref (car (gimp-image-get-layers img)) 0)))
      (gimp-drawable-append-new-filter layer \"$op\" 0 LAYER-MODE-REPLACE 1.0 $args)
      (gimp-drawable-merge-filters layer)
      (gimp-file-save RUN-NONINTERACTIVE img \"$inside/out/$i.png\")
      (show \"SAVED-$i\")))"
  i=$((i + 1))
done
script+="
  (display (string-append \"\nall \" \"DONE\n\"))"

timeout 600 "$here/chroot.sh" run /usr/bin/env GIMP3_DIRECTORY="$inside/profile" \
  XDG_DATA_HOME="$inside/data" gimp-console -i --batch-interpreter=plug-in-script-fu-eval \
  -b "(begin $script)" --quit >"$work/out/gimp.log" 2>&1
rc=$?
log=$work/out/gimp.log
if grep -q "^all DONE" "$log" && [ "$rc" -eq 0 ]; then
  pass "GIMP stayed up through ${#cases[@]} bad values and quit normally"
else
  fail "gimp" "exit $rc (124: it hung), the script $(grep -q '^all DONE' "$log" && echo ended || echo 'did not end'): $(grep -v -e '^$' "$log" | tail -n 3)"
fi

# outcome IN OUT: "unchanged", "error pattern" or "filtered".
outcome() {
  "$py" - "$1" "$2" <<'PY'
import sys, cv2, numpy as np
a = cv2.imread(sys.argv[1], cv2.IMREAD_UNCHANGED)
b = cv2.imread(sys.argv[2], cv2.IMREAD_UNCHANGED)
if b is None:
    sys.exit(sys.argv[2] + ': no image')
a = a.reshape(a.shape[0], a.shape[1], -1)[..., :3].astype(float)
b = b.reshape(b.shape[0], b.shape[1], -1).astype(float)
if b.dtype != a.dtype or b.max() > 255:
    b = b / 257 if b.max() > 255 else b
b = b[..., :3] if b.shape[2] >= 3 else b
if a.shape[2] != b.shape[2]:
    a, b = a.mean(axis=2, keepdims=True), b.mean(axis=2, keepdims=True)
y, x = np.mgrid[:b.shape[0], :b.shape[1]]
on = ((x // 16 + y // 16) % 2) == 0
if (b[~on] == 0).all() and (b[on] == b[0, 0]).all() and b[0, 0].max() > 0:
    print("error pattern")
elif a.shape == b.shape and np.abs(a - b).max() < 0.5:
    print("unchanged")
else:
    print("filtered")
PY
}

i=0
for c in "${cases[@]}"; do
  IFS='|' read -r name file op args <<<"$c"
  if grep -qx "CAUGHT-$i" "$log"; then
    pass "$name: refused, an error to the script"
  elif grep -qx "SAVED-$i" "$log"; then
    what=$(outcome "$work/$file" "$work/out/$i.png" 2>&1)
    case $what in
      "error pattern") pass "$name: the error pattern" ;;
      filtered) pass "$name: the value refused where entered, the layer filtered with the last valid one" ;;
      *) fail "$name" "the layer came back $what" ;;
    esac
  elif grep -q "^all DONE" "$log"; then
    fail "$name" "neither saved nor refused"
  fi
  i=$((i + 1))
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
