#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Runs test suites, each of which ends with "N passed, N failed", and prints
# the total as the last line.
# Usage: tests/run.sh BUILD_DIR          CPU: unit, unit under ASan+UBSan, median networks, CLI, CLI under LSan,
#                                        the image-file fuzzer's corpus replayed (with clang), translations
#        tests/run.sh BUILD_DIR gpu      CUDA: GPU tests, compute-sanitizer
set -u
build=${1:-build}
mode=${2:-cpu}
cd "$(dirname "$0")/.."
total_pass=0 total_fail=0

suite() { # name command...
  local name=$1; shift
  echo "== $name"
  local log; log=$(mktemp)
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local line; line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
  rm -f "$log"
  if [ -z "$line" ]; then
    echo "suite $name ended without a summary (exit $rc)"
    total_fail=$((total_fail + 1)); return
  fi
  local p f; p=${line%% passed*}; f=${line#*, }; f=${f%% failed*}
  total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then echo "suite $name exited $rc"; total_fail=$((total_fail + 1)); fi
}

if [ "$mode" = gpu ]; then
  # Filters with a CUDA path, their accuracy tests against the CUDA backend.
  gpu_tests="median convolve nlmeans quantize gpu_"
  suite gpu env CUDAFX_TEST_BACKEND=cuda "$build/test-gpu" $gpu_tests device_memory_over_1000_previews
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  # Each tool on each filter's tests is its own process, all started at
  # once: one after another they take over ten minutes (racecheck most),
  # side by side they share the machine's cores and the GPU.
  logs=$(mktemp -d)
  for tool in memcheck initcheck synccheck racecheck; do
    # racecheck watches shared memory, which only the kernels use: the
    # filters' tests cover them (the machinery's many stripes take it minutes).
    tests=$gpu_tests; [ "$tool" = racecheck ] && tests=${gpu_tests% gpu_}
    for t in $tests; do
      ( "$sanitizer" --tool "$tool" --error-exitcode 9 \
          env CUDAFX_TEST_BACKEND=cuda "$build/test-gpu" "$t" >"$logs/$tool-$t.log" 2>&1
        echo $? >"$logs/$tool-$t.rc" ) &
    done
  done
  wait
  replay() { cat "$1.log"; return "$(cat "$1.rc")"; }
  for tool in memcheck initcheck synccheck racecheck; do
    tests=$gpu_tests; [ "$tool" = racecheck ] && tests=${gpu_tests% gpu_}
    for t in $tests; do suite "compute-sanitizer $tool $t" replay "$logs/$tool-$t"; done
  done
  rm -rf "$logs"
else
  suite unit "$build/test-unit"
  suite unit-asan make --no-print-directory check-asan
  suite median-network "$build/test-median-network"
  if [ -x "$build/cudafx" ]; then
    suite cli tests/unit/cli.sh "$build/cudafx"
    suite cli-lsan make --no-print-directory check-lsan
    if command -v "${FUZZ_CC:-clang}" >/dev/null; then
      suite file-fuzzer-replay make --no-print-directory fuzz-files-replay
    else
      echo "== file-fuzzer-replay: skipped (no clang)"
    fi
    suite i18n tests/i18n.sh "$build"
    # The GEGL operations through the gegl command (Debian's package gegl).
    if [ -f "$build/gegl/cudafx-gegl.so" ]; then
      suite gegl tests/gegl/run.sh "$build"
    fi
  else
    echo "== cli: $build/cudafx not built (GEGL missing)"; total_fail=$((total_fail + 1))
  fi
fi
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
