#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The cudafx CLI built with AddressSanitizer, UBSan and LeakSanitizer
# (`make check-lsan` builds build-asan/cudafx) on every filter, on small
# images of each kind the CLI reads (8-bit grey, 8-bit RGBA, 16-bit RGB, which
# runs as f32), on its two error paths (usage, unreadable input), and on a
# batch (--output-dir: the pipeline's threads) with a damaged file among good
# ones. A run passes when it exits as expected, writes its output, and the
# sanitizers report nothing: no memory error, no undefined behaviour, no leak
# other than what GEGL keeps from gegl_init (tests/sanitize/lsan.supp). Valgrind cannot
# run the CLI here: GEGL loads libhwy, whose start-up code valgrind 3.19 does
# not decode. Runs in parallel, two at a time; ends with "N passed, N failed".
# Usage: tests/sanitize/cli.sh BUILD-ASAN/cudafx
set -u
cli=${1:?usage: tests/sanitize/cli.sh BUILD-ASAN/cudafx}
cli=$(cd "$(dirname "$cli")" && pwd)/$(basename "$cli")
cd "$(dirname "$0")/../.."
py=/usr/bin/python3
[ -x "$py" ] || py=python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Accurate stacks (slow unwinding) so the suppressions match only GEGL's own.
export ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0:halt_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/tests/sanitize/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export OMP_WAIT_POLICY=passive

# Small deterministic inputs: grey PGM, 16-bit RGB PPM, RGBA PNG (40x32).
"$py" - "$tmp" <<'EOF'
import random, struct, sys, zlib
d, w, h = sys.argv[1], 40, 32
r = random.Random(9)
open(d + '/grey.pgm', 'wb').write(b'P5\n%d %d\n255\n' % (w, h) + bytes(r.randrange(256) for _ in range(w * h)))
open(d + '/rgb16.ppm', 'wb').write(b'P6\n%d %d\n65535\n' % (w, h) +
                                   b''.join(struct.pack('>H', r.randrange(65536)) for _ in range(w * h * 3)))
def chunk(kind, body):
    return struct.pack('>I', len(body)) + kind + body + struct.pack('>I', zlib.crc32(kind + body) & 0xffffffff)
rows = b''.join(b'\0' + bytes(r.randrange(256) for _ in range(w * 4)) for _ in range(h))
open(d + '/rgba.png', 'wb').write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 6, 0, 0, 0)) +
                                  chunk(b'IDAT', zlib.compress(rows)) + chunk(b'IEND', b''))
EOF

# name | expected exit status | output file that must exist ("-": none) | arguments
cases="median-rgb16|0|median.png|median --radius 2 --percentile 30 --shape circle $tmp/rgb16.ppm $tmp/median.png
nl-means-grey|0|nl-means.png|nl-means --json $tmp/grey.pgm $tmp/nl-means.png
quantize-rgba|0|quantize.gpl|quantize --colors 5 --dither floyd-steinberg --palette-out $tmp/quantize.gpl $tmp/rgba.png $tmp/quantize.png
convolve-rgba|0|convolve.tif|convolve --kernel 1,2,1;0,5,0;-1,-2,-1 --border mirror $tmp/rgba.png $tmp/convolve.tif
convolve-rgb16|0|gaussian.png|convolve --preset gaussian --sigma 1.5 --threads 2 $tmp/rgb16.ppm $tmp/gaussian.png
usage-error|2|-|median --radius 0 $tmp/grey.pgm $tmp/never.png
unreadable-input|1|-|median $tmp/grey.pgm.missing $tmp/never.png
not-an-image|1|-|convolve $tmp/lsan.supp.png $tmp/never.png
batch-one-damaged|1|batch/rgba.png|quantize --json --output-dir $tmp/batch $tmp/grey.pgm $tmp/lsan.supp.png $tmp/rgba.png $tmp/rgb16.ppm"
printf 'not an image\n' >"$tmp/lsan.supp.png"
mkdir -p "$tmp/batch"

run_case() { # name "arguments" (split on spaces; none contains a space)
  # shellcheck disable=SC2086
  "$cli" $2 >"$tmp/$1.log" 2>&1
  echo $? >"$tmp/$1.rc"
}

while IFS='|' read -r name want out args; do
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
  run_case "$name" "$args" &
done <<<"$cases"
wait

pass=0 fail=0
while IFS='|' read -r name want out args; do
  rc=$(cat "$tmp/$name.rc")
  problem=
  if [ "$rc" != "$want" ]; then
    problem="exited $rc, expected $want"
  elif [ "$out" != - ] && [ ! -s "$tmp/$out" ]; then
    problem="wrote no $out"
  fi
  if grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$tmp/$name.log"; then
    problem="${problem:+$problem; }sanitizer report"
  fi
  if [ -n "$problem" ]; then
    fail=$((fail + 1))
    echo "FAIL $name: cudafx $args: $problem"
    grep -A12 -E 'ERROR: |runtime error:' "$tmp/$name.log" | head -n 40
  else
    pass=$((pass + 1))
    echo "ok   $name"
  fi
done <<<"$cases"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
