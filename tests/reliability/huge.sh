#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Each filter on a 100-megapixel RGBA float image (1.6 GB) on the CPU, one
# process per filter under /usr/bin/time -v: prints huge.py's JSON line (with
# the engine's extra memory beyond the source and destination images) and
# time's peak resident set size, then fails if any filter's extra memory
# exceeds LIMIT_MB (the bound: quantize's Oklab cache, at most 192 MiB, plus
# per-thread row buffers). Needs build/libcudafx.so (make all), about 4 GB
# of memory and, on two busy cores, about 3 minutes.
# Usage: tests/reliability/huge.sh [WIDTH HEIGHT [LIMIT_MB]]  (default 10000 10000 256)
set -u
cd "$(dirname "$0")/../.."
width=${1:-10000} height=${2:-10000} limit=${3:-256}
py=/usr/bin/python3
[ -x "$py" ] || py=python3
export OMP_WAIT_POLICY=passive
failed=0 results=$(mktemp)
trap 'rm -f "$results"' EXIT
for filter in none median nl-means quantize quantize-dither convolve; do
  log=$(mktemp)
  /usr/bin/time -v "$py" tests/reliability/huge.py "$filter" --width "$width" --height "$height" \
    2>"$log" | tee -a "$results"
  rc=${PIPESTATUS[0]}
  peak=$(sed -n 's/^\s*Maximum resident set size (kbytes): //p' "$log")
  echo "   time -v: exit $rc, maximum resident set size $((${peak:-0} / 1024)) MB"
  if [ "$rc" -ne 0 ]; then
    cat "$log"
    failed=1
  fi
  rm -f "$log"
done
"$py" - "$results" "$limit" <<'EOF2' || failed=1
import json, sys
limit = int(sys.argv[2])
runs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
bad = [j for j in runs if j['extra_mb'] > limit]
for j in bad:
    print('over the bound of %d MB: %s uses %d MB' % (limit, j['filter'], j['extra_mb']))
print('largest extra memory: %d MB (bound %d MB)' % (max(j['extra_mb'] for j in runs), limit))
sys.exit(1 if bad or not runs else 0)
EOF2
exit "$failed"
