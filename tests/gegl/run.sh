#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The GEGL operations (BUILD/gegl/cudafx-gegl.so) through the `gegl` command
# on the host: each equals the CLI on the same input and settings (median,
# convolution, quantize and nl-bayes exactly, nl-means within ±1), and however GEGL
# splits the work — small chunks, several threads, small tiles, a
# sub-rectangle asked for through gegl:crop, a zoomed-out level of detail —
# the pixels equal the whole-image run (at a level, the run on that level's
# pixels); nl-means tells GIMP's filter dialog the σ it found the way GIMP
# listens (tests/gegl/sigma_notify.c). A few minutes here (each gegl start
# loads all of GEGL's operations): `make check-gegl`, and within `make
# check`. Ends with "N passed, N failed".
#   tests/gegl/run.sh [BUILD]
set -u
build=${1:-build}
cd "$(dirname "$0")/../.."
py=/usr/bin/python3
compare=tests/gimp/compare.py
passed=0 failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }

module=$build/gegl/cudafx-gegl.so cli=$build/cudafx
for f in "$module" "$cli"; do
  [ -e "$f" ] || { echo "no $f (make)"; echo "0 passed, 1 failed"; exit 1; }
done
command -v gegl >/dev/null || { echo "no gegl command (Debian: apt-get install gegl)"; echo "0 passed, 1 failed"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# GEGL_PATH replaces GEGL's own folder: keep it, so gegl:load and the savers load.
export GEGL_PATH="$(cd "$(dirname "$module")" && pwd):$(pkg-config --variable=pluginsdir gegl-0.4)"
export CUDAFX_BACKEND=cpu

ops=$(gegl --list-all 2>/dev/null)
for op in median nl-means quantize convolve nl-bayes; do
  grep -qx "cudafx:$op" <<<"$ops" && pass "gegl lists cudafx:$op" || fail "list-$op" "gegl --list-all lacks cudafx:$op"
done

# gegl_run OUT IN [ENV=VALUE...] [-s SCALE] -- OP PROP=VALUE...: the gegl
# command, its messages in OUT.log.
gegl_run() {
  local out=$1 in=$2; shift 2
  local envs=() opts=()
  while [ "$1" != -- ]; do
    if [ "$1" = -s ]; then opts+=(-s "$2"); shift 2; else envs+=("$1"); shift; fi
  done
  shift
  env "${envs[@]}" gegl "${opts[@]}" "$in" -o "$out" ${1:+--} "$@" >"$out.log" 2>&1 && [ -s "$out" ] \
    || { echo "gegl failed: $(grep -v -e leaked -e cache_queue "$out.log" | head -n 3)"; return 1; }
  if grep -q "cudafx:" "$out.log"; then echo "the operation warned: $(grep -m1 cudafx: "$out.log")"; return 1; fi
}

# case NAME FILE TOLERANCE "CLI OPTIONS" OP PROP=VALUE...: the operation (FILE in
# tests/data, or a path)
# equals the CLI, then each way of splitting the work equals that result.
case_() {
  local name=$1 file=$2 tol=$3 cli_opts=$4; shift 4
  [[ $file == */* ]] || file=tests/data/$file
  local ref=$work/$name.ref.png whole=$work/$name.png msg
  # shellcheck disable=SC2086 # the options are words
  msg=$(eval "\"$cli\" ${cli_opts} \"$file\" \"$ref\"" 2>&1) || { fail "$name" "CLI failed: $msg"; return; }
  msg=$(gegl_run "$whole" "$file" GEGL_THREADS=1 -- "$@") || { fail "$name" "$msg"; return; }
  msg=$("$py" "$compare" same "$ref" "$whole" "$tol" 2>&1) \
    && pass "$name: gegl $* equals the CLI (±$tol)" || { fail "$name" "$msg"; return; }

  # Many small chunks on several threads; then only a rectangle asked for
  # (gegl:crop), on small tiles; $CORNER adds the bottom-right corner.
  local out=$work/$name.split.png
  msg=$(gegl_run "$out" "$file" GEGL_CHUNK_SIZE=1024 GEGL_THREADS=4 -- "$@") \
    && msg=$("$py" "$compare" same "$whole" "$out" 0 2>&1) \
    && pass "$name, chunks of 1024 pixels on 4 threads: equals the whole-image run" \
    || fail "$name/chunks" "$msg"
  local rect x y w h
  for rect in "${RECT:-37 53 201 150}" ${CORNER:+"$CORNER"}; do
    read -r x y w h <<<"$rect"
    out=$work/$name.crop.png
    msg=$(gegl_run "$out" "$file" GEGL_TILE_SIZE=32x32 GEGL_CHUNK_SIZE=2048 -- "$@" \
            gegl:crop x=$x y=$y width=$w height=$h) \
      && msg=$("$py" "$compare" same "$whole" "$out" 0 $rect 2>&1) \
      && pass "$name, only $rect asked for, 32x32 tiles: equals that part of the whole-image run" \
      || fail "$name/crop $rect" "$msg"
  done
}

sharpen='0,-1,0;-1,5,-1;0,-1,0'
CORNER="400 300 112 212" case_ median-rgb astronaut.png 0 "median --radius 2" cudafx:median radius=2
case_ median-grey-circle camera.png 0 "median --radius 3 --shape circle --percentile 25" \
  cudafx:median radius=3 shape=circle percentile=25
case_ convolve-custom camera.png 0 "convolve --kernel '$sharpen' --divisor 1 --offset 10" \
  cudafx:convolve preset=custom "kernel=$sharpen" divisor=1 offset=10
case_ convolve-gaussian astronaut.png 0 "convolve --preset gaussian --sigma 3 --border mirror" \
  cudafx:convolve preset=gaussian sigma=3 border=mirror
case_ convolve-wrap camera.png 0 "convolve --preset sobel-vertical --border wrap" \
  cudafx:convolve preset=sobel-vertical border=wrap
case_ quantize-fs astronaut.png 0 "quantize --colors 8 --seed 1 --max-iterations 10 --dither floyd-steinberg" \
  cudafx:quantize colors=8 seed=1 max-iterations=10 dither=floyd-steinberg
# A given palette file, ordered dithering (per pixel: any split of the work gives the same).
printf 'GIMP Palette\nName: four\n#\n200  30  40\n 20 120 200\n250 220 180\n 30  30  30\n' >"$work/four.gpl"
case_ quantize-given astronaut.png 0 "quantize --palette '$work/four.gpl' --dither ordered" \
  cudafx:quantize "palette=$work/four.gpl" dither=ordered
case_ nl-means-auto astronaut.png 1 "nl-means" cudafx:nl-means
# Camera noise (bench/camera_noise.py, level 16): the noise model found on
# the whole input reaches every chunk, as the run's σ does.
"$py" -c "import sys; sys.path.insert(0, 'bench'); import numpy as np; from PIL import Image
from camera_noise import camera_noisy_copy
a = np.asarray(Image.open('tests/data/chelsea.png').convert('RGB'))
Image.fromarray(camera_noisy_copy(a, 16, 1)).save('$work/camera-noise.png')"
case_ nl-means-auto-camera-noise "$work/camera-noise.png" 1 "nl-means" cudafx:nl-means
case_ nl-means-manual camera.png 1 "nl-means --h 12 --patch-radius 2 --search-radius 4" \
  cudafx:nl-means auto=false h=12 patch-radius=2 search-radius=4
# nl-bayes on small crops (its CPU takes seconds a quarter megapixel), with
# Gaussian noise: its halo follows the noise found, its reference grid is the
# whole input's, so chunks and crops equal the whole run.
"$py" -c "import cv2, numpy as np
a = cv2.imread('tests/data/astronaut.png').astype(float)[60:260, 120:300]
a += np.random.default_rng(3).normal(0, 15, a.shape)
cv2.imwrite('$work/nlb-rgb.png', np.clip(np.rint(a), 0, 255).astype(np.uint8))
g = cv2.imread('tests/data/camera.png', cv2.IMREAD_GRAYSCALE).astype(float)[200:330, 150:310]
g += np.random.default_rng(4).normal(0, 20, g.shape)
cv2.imwrite('$work/nlb-grey.png', np.clip(np.rint(g), 0, 255).astype(np.uint8))"
RECT="37 53 101 90" CORNER="120 150 60 50" case_ nl-bayes-auto "$work/nlb-rgb.png" 0 "nl-bayes" cudafx:nl-bayes
RECT="29 41 97 70" case_ nl-bayes-manual-grey "$work/nlb-grey.png" 0 "nl-bayes --sigma 20 --no-flat-area" \
  cudafx:nl-bayes auto=false sigma=20 flat-area=false

# Levels of detail: a zoomed-out view (gegl -s 1/2^L with mipmap rendering)
# runs the operation at level L on the input scaled to that level, with its
# window radii scaled by 2^-L and rounded down (a Gaussian's σ scaled, capped
# so that its kernel fits the level-0 halo at that scale). Each case equals
# the CLI with those settings on the scaled input that gegl gives with no
# operation, whether the level's work comes in one piece or in chunks on
# threads, and (INVERT) behind gegl:invert-gamma, which computes only that
# level, so the operation must read the level and not the full-size pixels.
#   lod_case NAME FILE LEVEL TOLERANCE "CLI OPTIONS AT THE LEVEL" OP PROP=VALUE...
lod_case() {
  local name=$1 file=$2 level=$3 tol=$4 cli_opts=$5; shift 5
  [[ $file == */* ]] || file=tests/data/$file
  local scale=$(awk "BEGIN { print 1 / 2 ^ $level }") msg src pre=() out ref
  for src in plain ${INVERT:+invert}; do
    [ "$src" = invert ] && pre=(gegl:invert-gamma)
    local small=$work/$name.$src.small.png
    msg=$(gegl_run "$small" "$file" GEGL_MIPMAP_RENDERING=1 -s "$scale" -- "${pre[@]}") \
      && msg=$(like "$file" "$small" 2>&1) || { fail "$name/lod" "$msg"; return; }
    ref=$work/$name.$src.lod-ref.png out=$work/$name.$src.lod.png
    # shellcheck disable=SC2086 # the options are words
    msg=$(eval "\"$cli\" ${cli_opts} \"$small\" \"$ref\"" 2>&1) || { fail "$name/lod" "CLI failed: $msg"; return; }
    msg=$(gegl_run "$out" "$file" GEGL_MIPMAP_RENDERING=1 GEGL_THREADS=1 -s "$scale" -- "${pre[@]}" "$@") \
      && msg=$(like "$file" "$out" 2>&1) && msg=$("$py" "$compare" same "$ref" "$out" "$tol" 2>&1) \
      && pass "$name${pre:+ behind ${pre[*]}}, level $level: equals \`cudafx $cli_opts\` on the input at that level (±$tol)" \
      || { fail "$name/lod $src" "$msg"; continue; }
    [ "$src" = plain ] || continue
    msg=$(gegl_run "$work/$name.lod-split.png" "$file" GEGL_MIPMAP_RENDERING=1 GEGL_CHUNK_SIZE=1024 \
            GEGL_THREADS=4 -s "$scale" -- "$@") \
      && msg=$(like "$file" "$work/$name.lod-split.png" 2>&1) \
      && msg=$("$py" "$compare" same "$out" "$work/$name.lod-split.png" 0 2>&1) \
      && pass "$name, level $level in chunks of 1024 pixels on 4 threads: equals that level's whole run" \
      || fail "$name/lod chunks" "$msg"
  done
}

# gegl saves 16-bit RGBA; the CLI must read what the operation reads, the
# input's channels and depth, and the results compare so: like ORIGINAL FILE
# rewrites FILE with ORIGINAL's channels and depth.
like() {
  "$py" - "$@" <<'PY'
import sys, cv2, numpy as np
orig, path = cv2.imread(sys.argv[1], cv2.IMREAD_UNCHANGED), sys.argv[2]
a = cv2.imread(path, cv2.IMREAD_UNCHANGED)
if orig.dtype == np.uint8 and a.dtype == np.uint16:
    if (a % 257).any():
        sys.exit(path + ": not 8-bit values")
    a = (a // 257).astype(np.uint8)
channels = 1 if orig.ndim == 2 else orig.shape[2]
a = a[..., 0] if channels == 1 else a[..., :channels]
cv2.imwrite(path, a)
PY
}

INVERT=1 lod_case median-lod camera.png 1 0 "median --radius 1" cudafx:median radius=2
lod_case median-lod2 astronaut.png 2 0 "median --radius 1 --shape circle" cudafx:median radius=5 shape=circle
lod_case median-lod-none camera.png 1 0 "convolve --kernel 1" cudafx:median radius=1
lod_case nl-means-auto-lod astronaut.png 1 1 "nl-means" cudafx:nl-means
lod_case nl-means-manual-lod camera.png 1 1 "nl-means --h 12 --patch-radius 1 --search-radius 2" \
  cudafx:nl-means auto=false h=12 patch-radius=2 search-radius=4
lod_case nl-bayes-auto-lod "$work/nlb-rgb.png" 1 0 "nl-bayes" cudafx:nl-bayes
lod_case nl-bayes-manual-lod "$work/nlb-grey.png" 1 0 "nl-bayes --sigma 10" cudafx:nl-bayes auto=false sigma=20
lod_case quantize-lod astronaut.png 1 0 "quantize --colors 8 --seed 1 --max-iterations 10" \
  cudafx:quantize colors=8 seed=1 max-iterations=10
INVERT=1 lod_case convolve-gaussian-lod astronaut.png 1 0 "convolve --preset gaussian --sigma 1 --border mirror" \
  cudafx:convolve preset=gaussian sigma=2 border=mirror
lod_case convolve-gaussian-capped-lod camera.png 1 0 "convolve --preset gaussian --sigma 1.3333333333333333" \
  cudafx:convolve preset=gaussian sigma=3
lod_case convolve-custom-lod camera.png 1 0 "convolve --kernel '$sharpen' --divisor 1 --offset 10" \
  cudafx:convolve preset=custom "kernel=$sharpen" divisor=1 offset=10

# nl-means' σ as GIMP's filter dialog receives it (tests/gegl/sigma_notify.c):
# notified on the node from the main loop, once, with the CLI's σ, on a
# photo with Gaussian noise of σ 12.
"$py" -c "import cv2, numpy as np
a = cv2.imread('tests/data/astronaut.png').astype(float)
a += np.random.default_rng(1).normal(0, 12, a.shape)
cv2.imwrite('$work/gaussian.png', np.clip(np.rint(a), 0, 255).astype(np.uint8))"
sigma=$("$cli" nl-means --json "$work/gaussian.png" "$work/gaussian.out.png" 2>/dev/null \
        | "$py" -c 'import json, sys; print(json.load(sys.stdin)["sigma"])')
out=$(GEGL_THREADS=1 "$build/test-gegl-sigma" "$work/gaussian.png" "$sigma" 2>&1); rc=$?
while read -r verdict what; do
  case $verdict in
    PASS) pass "nl-means σ: $what" ;;
    FAIL) fail "nl-means σ" "$what" ;;
  esac
done <<<"$out"
[ "$rc" -eq 0 ] || grep -q '^FAIL' <<<"$out" \
  || fail "nl-means σ" "test-gegl-sigma exited $rc: $(tail -n 2 <<<"$out")"

# Hostile and careless use: a setting or input the operation cannot work
# with never gives its input back unchanged. What only a render finds fills
# the output with the error pattern (16-pixel magenta and black cells, on a
# grey image two greys) and warns with the reason.
# Each run is bounded by timeout: a hang fails it.
#   is_error_pattern FILE: every pixel is its cell's colour of the pattern.
is_error_pattern() {
  "$py" - "$1" <<'PY'
import sys, cv2, numpy as np
a = cv2.imread(sys.argv[1], cv2.IMREAD_UNCHANGED)
if a is None:
    sys.exit(sys.argv[1] + ': no image')
a = a.reshape(a.shape[0], a.shape[1], -1)[..., :3].astype(float)
y, x = np.mgrid[:a.shape[0], :a.shape[1]]
on = ((x // 16 + y // 16) % 2) == 0
if not ((a[~on] == 0).all() and (a[on] == a[0, 0]).all() and a[0, 0].max() > 0):
    sys.exit(sys.argv[1] + ': not the error pattern (values %s)' % np.unique(a.reshape(-1, a.shape[2]), axis=0)[:4].tolist())
PY
}
# error_case NAME "WARNING" [IN] -- OPS...: gegl ends (exit 0) within the
# timeout, warns WARNING (GLib writes × as ? in the C locale: none in
# WARNING), and its output is the error pattern.
error_case() {
  local name=$1 warning=$2 in=(); shift 2
  [ "$1" != -- ] && { in=("$1"); shift; }
  shift
  local out=$work/err-${name//[^a-zA-Z0-9]/_}.png msg
  timeout 20 gegl "${in[@]}" -o "$out" -- "$@" >"$out.log" 2>&1; local rc=$?
  if [ "$rc" -ne 0 ]; then
    fail "$name" "gegl exited $rc (124: it hung): $(grep -v -e leaked -e cache_queue "$out.log" | head -n 2)"
  elif ! grep -qF -- "$warning" "$out.log"; then
    fail "$name" "no warning \"$warning\": $(grep -v -e leaked -e cache_queue "$out.log" | head -n 2)"
  elif ! msg=$(is_error_pattern "$out" 2>&1); then
    fail "$name" "$msg"
  else
    pass "$name: the error pattern, warning \"$warning\""
  fi
}
grey=tests/data/camera.png colour=tests/data/chelsea.png
# Unbounded or absurd inputs of the filters that read all of it: refused at once.
for op in cudafx:quantize cudafx:nl-means "cudafx:convolve border=wrap"; do
  # shellcheck disable=SC2086 # the operation's words
  error_case "${op%% *} unbounded" "the input has no bounds" -- gegl:checkerboard $op gegl:crop width=64 height=64
done
error_case "quantize 100000x100000" "the input is 100000" -- gegl:checkerboard \
  gegl:crop width=100000 height=100000 cudafx:quantize gegl:crop width=64 height=64
# A filter that reads only its window takes an unbounded input.
out=$work/median-unbounded.png
if timeout 20 gegl -o "$out" -- gegl:checkerboard cudafx:median radius=1 gegl:crop width=64 height=64 >"$out.log" 2>&1 &&
   ! grep -q cudafx: "$out.log" && ! is_error_pattern "$out" >/dev/null 2>&1; then
  pass "median on an unbounded input: filtered, no warning"
else
  fail "median unbounded" "$(grep -v -e leaked -e cache_queue "$out.log" | head -n 2)"
fi
# Palette files.
mkfifo "$work/fifo.gpl"
: >"$work/empty.gpl"
printf 'GIMP Palette\n# none\n' >"$work/none.gpl"
{ echo "GIMP Palette"; for i in $(seq 0 256); do echo "$((i % 256)) 0 0"; done; } >"$work/257.gpl"
printf 'GIMP Palette\n1 2 300\n' >"$work/range.gpl"
head -c 2000 /dev/urandom >"$work/binary.gpl"
error_case "palette a FIFO" "fifo.gpl: not a regular file" "$colour" -- cudafx:quantize "palette=$work/fifo.gpl"
error_case "palette /dev/zero" "/dev/zero: not a regular file" "$colour" -- cudafx:quantize palette=/dev/zero
error_case "palette a directory" "is a directory" "$colour" -- cudafx:quantize "palette=$work"
error_case "palette missing" "cannot open the palette" "$colour" -- cudafx:quantize "palette=$work/missing.gpl"
error_case "palette empty" "empty file" "$colour" -- cudafx:quantize "palette=$work/empty.gpl"
error_case "palette of no colours" "has no colors" "$colour" -- cudafx:quantize "palette=$work/none.gpl"
error_case "palette of 257 colours" "more than 256 entries" "$colour" -- cudafx:quantize "palette=$work/257.gpl"
error_case "palette value 300" "out of range 0..255" "$colour" -- cudafx:quantize "palette=$work/range.gpl"
error_case "palette binary" "not a GIMP palette" "$colour" -- cudafx:quantize "palette=$work/binary.gpl"
error_case "colour palette on grey" "is not grey" "$grey" -- cudafx:quantize "palette=$work/four.gpl"
# Settings only the engine can judge together.
error_case "divisor 1e-300" "divisor 1e-300 is too small" "$grey" -- cudafx:convolve preset=custom kernel=1 divisor=1e-300
error_case "kernel with preset gaussian" "a kernel is given with preset gaussian" "$grey" -- \
  cudafx:convolve preset=gaussian "kernel=$sharpen"
# backend=cuda (the setting wins over CUDAFX_BACKEND) where there is no device.
if "$cli" info | grep -q '^CUDA devices: none'; then
  error_case "backend=cuda without a device" "backend cuda" "$grey" -- cudafx:median backend=cuda
else
  pass "backend=cuda without a device: not tried (this machine has one)"
fi
# A kernel text that does not parse: the error pattern, with the parser's
# reason (never the last valid kernel: given once, as GIMP and scripts give
# it, that would be the default identity).
error_case "kernel=1,2;3" "kernel must be square: row 2 has 1 values, row 1 has 2" "$grey" -- \
  cudafx:convolve preset=custom "kernel=$sharpen" "kernel=1,2;3"
for kernel in 1e309 1e-320 "$(seq -s, 1000 | sed 's/,$//')"; do
  error_case "kernel=${kernel:0:12}..." "cudafx:convolve: kernel" "$grey" -- cudafx:convolve preset=custom "kernel=$kernel"
done
# A Gaussian σ up to the table's 50: filtered as the CLI filters it.
out=$work/sigma20.png
if timeout 60 gegl "$grey" -o "$out" -- cudafx:convolve preset=gaussian sigma=20 >"$out.log" 2>&1 &&
   ! grep -q cudafx: "$out.log" && "$cli" convolve --preset gaussian --sigma 20 "$grey" "$work/sigma20.ref.png" &&
   "$py" "$compare" same "$work/sigma20.ref.png" "$out" 0 >/dev/null 2>&1; then
  pass "Gaussian σ 20 (the range is 0.1..50 in every host): equals the CLI"
else
  fail "sigma 20" "$(grep -v -e leaked -e cache_queue "$out.log" | head -n 2)"
fi
# Out of memory (address space capped): the whole-input filters refuse at
# once, a window filter still filters its small region.
for op in cudafx:quantize cudafx:nl-means; do
  ( ulimit -v 1000000
    error_case "${op#cudafx:}, memory short" "not enough memory for the whole 20000" -- \
      gegl:color value=red gegl:crop width=20000 height=20000 "gegl:convert-format" "format=R'G'B' u8" \
      "$op" gegl:crop width=64 height=64 ) | tee "$work/memory.log"
  grep -q '^PASS' "$work/memory.log" && passed=$((passed + 1)) || failed=$((failed + 1))
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
