#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Runs test suites, each of which ends with "N passed, N failed", and prints
# the total as the last line.
# Usage: tests/run.sh BUILD_DIR          CPU: unit (engine, then the CLI's scheduler), both under ASan+UBSan, median networks, layers, CLI, CLI under LSan,
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
  gpu_tests="median convolve nlmeans nlbayes quantize gpu_"
  suite gpu env CUDAFX_TEST_BACKEND=cuda "$build/test-gpu" $gpu_tests device_memory_over_1000_previews
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  # Each tool on each test is its own process, SANITIZER_JOBS (default: the
  # cores) at a time: a filter's whole suite in one process ran past ten
  # minutes under racecheck and initcheck (nl-means, quantize), one process a
  # test spreads that over the cores. SANITIZER_TIMEOUT (seconds) bounds each
  # process: one killed by it is reported as not finished, a failure. A test
  # that never reaches CUDA (argument checks) passes: --require-cuda-init no.
  # Tests of many cases run as shards, "NAME@I/N" (tests/unit/harness.h).
  # racecheck watches shared memory, which only the kernels use: the
  # filters' tests cover them (the machinery's many stripes take it
  # minutes), nl-means' and quantize's through their gpu_ tests, which run
  # every kernel kind (their oracle tests on the CUDA backend ran past ten
  # minutes under racecheck; the other tools run those too).
  # SANITIZER_TOOLS picks some of the tools (default all four), so that a
  # machine lent for a few minutes at a time can run them in turns.
  tools=${SANITIZER_TOOLS:-racecheck initcheck memcheck synccheck}
  logs=$(mktemp -d)
  for tool in $tools; do
    tests=$gpu_tests; [ "$tool" = racecheck ] && tests="median convolve gpu_nlmeans gpu_quantize"
    for t in $("$build/test-gpu" --list $tests); do echo "$tool $t"; done
  done | SANITIZER="$sanitizer" BUILD="$build" LOGS="$logs" LIMIT="${SANITIZER_TIMEOUT:-0}" \
    xargs -P "${SANITIZER_JOBS:-$(nproc)}" -L 1 bash -c '
      log=$LOGS/$0-${1//[@\/]/_}
      timeout "$LIMIT" "$SANITIZER" --tool "$0" --error-exitcode 9 --require-cuda-init no \
        env CUDAFX_TEST_BACKEND=cuda "$BUILD/test-gpu" "=$1" >"$log.log" 2>&1
      rc=$?; echo $SECONDS >"$log.s"; echo $rc >"$log.rc"'
  replay() { # tool: each test's result and seconds (a failure's whole log), then the count
    local p=0 f=0 rc base
    for rc in "$logs/$1"-*.rc; do
      base=${rc%.rc}
      case $(cat "$rc") in
        0) p=$((p + 1)); echo "$(grep -E '^ok ' "$base.log") ($(cat "$base.s") s)" ;;
        124) f=$((f + 1)); echo "FAIL ${base##*/}: not finished in ${SANITIZER_TIMEOUT}s" ;;
        *) f=$((f + 1)); cat "$base.log"; echo "FAIL ${base##*/} (exit $(cat "$rc"))" ;;
      esac
    done
    echo "$p passed, $f failed"
  }
  for tool in $tools; do
    suite "compute-sanitizer $tool" replay "$tool"
  done
  rm -rf "$logs"
else
  suite unit "$build/test-unit"
  suite cli-unit "$build/test-cli"
  suite unit-asan make --no-print-directory check-asan
  suite cli-unit-asan make --no-print-directory check-asan-cli
  suite median-network "$build/test-median-network"
  suite layers tools/check-layers.sh "$build"
  if [ -x "$build/cudafx" ]; then
    suite cli tests/unit/cli.sh "$build/cudafx"
    suite cli-lsan make --no-print-directory check-lsan
    if command -v "${FUZZ_CC:-clang}" >/dev/null; then
      suite file-fuzzer-replay make --no-print-directory fuzz-files-replay
    else
      echo "== file-fuzzer-replay: skipped (no clang)"
    fi
    suite i18n tests/i18n.sh "$build"
    if [ -x "$build/test-noise-line" ]; then
      suite dialog-noise-line "$build/test-noise-line"
    fi
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
