#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# On the GPU machine (no GEGL there): builds the engine with CUDA for the
# device's architecture, links the GEGL module against the GEGL that
# gegl-bundle brought (headers in BUNDLE/include), installs it among the
# bundle's operations and runs bench/gegl_bench (built and bundled here:
#   make build/gegl_bench && ../shared/tools/gegl-bundle .bundle/gegl build/gegl_bench
#   and the headers copied to .bundle/gegl/include, see docs/BENCHMARKS.md).
#   bench/gegl-device.sh [BUNDLE]      (default .bundle/gegl)
set -euo pipefail
bundle=${1:-.bundle/gegl}
make --no-print-directory CUDA=1 BUILD=build-gpu -j"$(nproc)" \
  CUDA_ARCHS="-gencode arch=compute_90,code=sm_90" build-gpu/libcudafx.a >/dev/null
cudart=$(find /usr/local/cuda/ -name libcudart_static.a | head -n 1)
inc=$bundle/include lib=$bundle/lib
gcc -O3 -march=native -std=gnu11 -fopenmp -fPIC -shared -fvisibility=hidden -Wl,--exclude-libs,ALL \
  -Icore -Iplugin/common -I"$inc/gegl-0.4" -I"$inc/glib-2.0" -I"$inc" -I"$inc/babl-0.1" \
  -I"$inc/json-glib-1.0" plugin/gegl/cudafx-gegl.c plugin/common/procedures.c plugin/common/region.c \
  build-gpu/libcudafx.a "$lib/libgegl-0.4.so.0" "$lib/libgobject-2.0.so.0" "$lib/libglib-2.0.so.0" \
  "$lib/libbabl-0.1.so.0" "$cudart" -ldl -lrt -lpthread -lstdc++ -lm -o "$bundle/gegl-0.4/cudafx-gegl.so"
# shellcheck disable=SC2046 # the bundle's variables, word by word
env $(cat "$bundle/env") "$bundle/bin/gegl_bench" tests/data/astronaut.png
