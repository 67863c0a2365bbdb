#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The GEGL benchmark (bench/gegl_bench.c) on the GPU machine, which has no
# GEGL. Everything is built here, so the device's time goes to the
# benchmark alone:
#   bench/gegl-device.sh bundle [BUNDLE]   here: the engine with CUDA for sm_90
#       (the H100), the GEGL module against this machine's GEGL, gegl_bench,
#       and GEGL's libraries and operations bundled with them
#       (/work/shared/tools/gegl-bundle) into BUNDLE (default .bundle/gegl),
#       the module among the bundle's operations
#   bench/gegl-device.sh run [BUNDLE]      there: the benchmark on
#       tests/data/astronaut.png (GEGL_THREADS from the environment)
set -euo pipefail
step=${1:?usage: bench/gegl-device.sh bundle|run [BUNDLE]}
bundle=${2:-.bundle/gegl}
cd "$(dirname "$0")/.."
case $step in
  bundle)
    make --no-print-directory CUDA=1 BUILD=build-gpu -j2 \
      CUDA_ARCHS="-gencode arch=compute_90,code=sm_90" build-gpu/gegl/cudafx-gegl.so build-gpu/gegl_bench
    "${GEGL_BUNDLE:-/work/shared/tools/gegl-bundle}" "$bundle" build-gpu/gegl_bench
    cp build-gpu/gegl/cudafx-gegl.so "$bundle/gegl-0.4/"
    ;;
  run)
    # shellcheck disable=SC2046 # the bundle's variables, word by word
    env $(cat "$bundle/env") "$bundle/bin/gegl_bench" tests/data/astronaut.png
    ;;
  *)
    echo "bench/gegl-device.sh: '$step' is neither bundle nor run" >&2
    exit 2
    ;;
esac
