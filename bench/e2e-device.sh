#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The CLI end to end and on several GPUs, on the GPU machine, in one run: the CUDA machinery's tests
# (exactness of the pipelined stripes and of every device), the whole call
# against a bare pinned round trip (bench-call, on every device), then
# bench_e2e.py (single files, the 64-photo batch on one GPU and on all).
# The machine has no GEGL: the CLI, its benchmarks' build (cudafx-bench, for
# the codecs alone), test-gpu and bench-call are built and bundled here (sm_90
# is enough for an H100):
#   make CUDA=1 BUILD=build-gpu CUDA_ARCHS="-gencode arch=compute_90,code=sm_90" \
#     build-gpu/cudafx build-gpu/cudafx-bench build-gpu/test-gpu build-gpu/bench-call
#   /work/shared/tools/gegl-bundle .bundle/e2e build-gpu/cudafx build-gpu/cudafx-bench \
#     build-gpu/test-gpu build-gpu/bench-call
# then there: bench/e2e-device.sh [BUNDLE] [BENCH_E2E ARGS...]   (images in $WORK, default /tmp/e2e)
set -uo pipefail
bundle=${1:-.bundle/e2e}
shift || true
# shellcheck disable=SC2046 # the bundle's variables, word by word, made absolute
env=$(sed "s#=\([^ ]*\)#=$PWD/\1#g" "$bundle/env")
devices=$(nvidia-smi -L | grep -c '^GPU ')
echo "== $(nvidia-smi -L | head -n 1), $devices GPUs, $(nproc) cores"
echo "== tests (CUDAFX_TEST_BACKEND=cuda)"
# shellcheck disable=SC2086
env $env CUDAFX_TEST_BACKEND=cuda timeout 60 "$bundle/bin/test-gpu" gpu_ median convolve nlmeans quantize 2>&1 |
  grep -E '^(FAIL|not ok)|^  |passed, [0-9]+ failed'
echo "== whole call against a bare pinned round trip"
# shellcheck disable=SC2086
for d in $(seq 1 "$devices"); do
  env $env "$bundle/bin/bench-call" --device "$d" --runs $([ "$d" = 1 ] && echo 15 || echo 5)
done
echo "== bench_e2e.py"
work=${WORK:-/tmp/e2e}
python3 -u bench/bench_e2e.py --cli "$bundle/bin/cudafx" --env "$env" --work "$work" "$@"
echo "== what CUDA costs one file: median r1 --backend cuda, one GPU visible, then all (wall s)"
TIMEFORMAT=%R
for visible in 0 "$(seq -s, 0 $((devices - 1)))"; do
  for backend in cpu cuda cuda cuda; do
    echo -n "CUDA_VISIBLE_DEVICES=$visible --backend $backend: "
    # shellcheck disable=SC2086
    { time env $env CUDA_VISIBLE_DEVICES="$visible" "$bundle/bin/cudafx" median --radius 1 --backend $backend \
        "$work/in/photo000.jpg" "$work/one.jpg"; } 2>&1
  done
done
