#!/usr/bin/env bash
# Runs every test suite, each of which ends with "N passed, N failed", and
# prints the total as the last line. Usage: tests/run.sh BUILD_DIR
set -u
build=${1:-build}
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
  [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && { echo "suite $name exited $rc"; total_fail=$((total_fail + 1)); }
}

suite unit "$build/test-unit"
suite unit-asan make --no-print-directory check-asan
if [ -x "$build/cudafx" ]; then
  suite cli tests/unit/cli.sh "$build/cudafx"
else
  echo "== cli: $build/cudafx not built (GEGL missing)"; total_fail=$((total_fail + 1))
fi
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
