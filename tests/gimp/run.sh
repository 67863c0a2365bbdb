#!/usr/bin/env bash
# Headless GIMP 3 tests of the cudafx plug-in: installs BUILD/gimp3/cudafx into
# a throw-away profile inside the Debian 13 chroot (tests/gimp/chroot.sh),
# drives gimp-console-3.0 with Script-Fu, and compares what GIMP exports with
# the engine's output for the same parameters (the CLI BUILD/cudafx when it
# exists, else the engine library through tools/pycudafx.py). A filter the
# engine rejects must fail in GIMP with the engine's message and leave the
# image untouched. Ends with "N passed, N failed".
#   tests/gimp/run.sh [BUILD]       (CUDAFX_LIB overrides BUILD/libcudafx.so)
set -u
build=${1:-build}
cd "$(dirname "$0")/../.."
here=tests/gimp
py=/usr/bin/python3
export CUDAFX_LIB=${CUDAFX_LIB:-$build/libcudafx.so}
cli=$build/cudafx
[ -x "$cli" ] || cli=
passed=0 failed=0

pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }

[ -x "$build/gimp3/cudafx" ] || { echo "no plug-in at $build/gimp3/cudafx (make plugin)"; echo "0 passed, 1 failed"; exit 1; }
[ -f "$CUDAFX_LIB" ] || { echo "no engine library at $CUDAFX_LIB"; echo "0 passed, 1 failed"; exit 1; }
root=$("$here/chroot.sh" ensure) || { echo "0 passed, 1 failed"; exit 1; }
work=$(mktemp -d "$root/tmp/cudafx-gimp.XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
inside=${work#"$root"}
mkdir -p "$work/profile/plug-ins/cudafx" "$work/out"
cp "$build/gimp3/cudafx" "$work/profile/plug-ins/cudafx/cudafx"
cp tests/data/camera.png tests/data/astronaut.png "$work/"
echo "chroot $root, engine reference: ${cli:-$CUDAFX_LIB (pycudafx)}"

# gimp NAME SCHEME: runs SCHEME (inside one (begin ...)) in headless GIMP with
# the test profile; the log goes to out/NAME.log. Paths in SCHEME are
# chroot paths: $inside/...
gimp() {
  timeout 120 "$here/chroot.sh" run /usr/bin/env GIMP3_DIRECTORY="$inside/profile" \
    gimp-console-3.0 -i --batch-interpreter=plug-in-script-fu-eval \
    -b "(begin $2)" --quit >"$work/out/$1.log" 2>&1
}

# Script-Fu: load FILE into img and its first layer into layer.
load() {
  echo "(define img (car (gimp-file-load RUN-NONINTERACTIVE \"$inside/$1\")))
        (define layer (vector-ref (car (gimp-image-get-layers img)) 0))"
}
save() { echo "(gimp-file-save RUN-NONINTERACTIVE img \"$inside/out/$1\")"; }

# Procedure arguments name=value as Script-Fu named arguments: numbers as
# they are, kernel as a float vector, anything else as a string (a choice).
sf_args() {
  local pair name value out=""
  for pair in "$@"; do
    name=${pair%%=*} value=${pair#*=}
    case $value in
      *,*) out+=" #:$name (vector ${value//,/ })" ;;
      true|false) out+=" #:$name $([ "$value" = true ] && echo TRUE || echo FALSE)" ;;
      -*[0-9]*|[0-9]*) out+=" #:$name $value" ;;
      *) out+=" #:$name \"$value\"" ;;
    esac
  done
  echo "$out"
}

call() { # FILTER name=value...
  local filter=$1; shift
  echo "(plug-in-cudafx-$filter #:run-mode RUN-NONINTERACTIVE #:image img #:drawables (vector layer)$(sf_args "$@"))"
}

# reference FILTER IN OUT name=value...: the engine's result, or its error
# message on stdout with status 3.
reference() {
  local filter=$1 in=$2 out=$3; shift 3
  if [ -n "$cli" ]; then
    local opts=() pair name value
    for pair in "$@"; do
      name=${pair%%=*} value=${pair#*=}
      case $name=$value in
        auto=true) opts+=(--auto) ;;
        auto=false) opts+=(--no-auto) ;;
        kernel=*) opts+=(--kernel "$("$py" -c "import sys,math; v=sys.argv[1].split(','); n=math.isqrt(len(v)); print(';'.join(','.join(v[i*n:(i+1)*n]) for i in range(n)))" "$value")") ;;
        *) opts+=("--$name" "$value") ;;
      esac
    done
    local msg; msg=$(CUDAFX_BACKEND=cpu "$cli" "$filter" "${opts[@]}" "$in" "$out" 2>&1) || { echo "$msg"; return 3; }
  else
    CUDAFX_BACKEND=cpu "$py" "$here/compare.py" reference "$filter" "$in" "$out" "$@"
  fi
}

# Each procedure on a photo: GIMP's export equals the engine's output; or, if
# the engine rejects the call, GIMP reports the engine's message as a
# Script-Fu error and the image is unchanged (saved after catching the error).
filter_test() { # NAME FILTER FILE TOLERANCE name=value...
  local name=$1 filter=$2 file=$3 tol=$4; shift 4
  local expect rc
  expect=$(reference "$filter" "$work/$file" "$work/out/$name.ref.png" "$@")
  rc=$?
  if [ $rc -eq 0 ]; then
    gimp "$name" "$(load "$file") $(call "$filter" "$@") $(save "$name.png")" \
      || { fail "$name" "GIMP exited $? ($(grep -m1 -i error "$work/out/$name.log"))"; return; }
    local diff; diff=$("$py" "$here/compare.py" same "$work/out/$name.ref.png" "$work/out/$name.png" "$tol" 2>&1) \
      && pass "$name: GIMP equals the engine (±$tol)" || fail "$name" "$diff"
  elif [ $rc -eq 3 ]; then
    error_test "$name" "$file" "$expect" "$filter" "$@"
  else
    fail "$name" "reference failed: $expect"
  fi
}

# error_test NAME FILE MESSAGE FILTER name=value...: the call fails, and the
# image saved after the (caught) failure is the input; then the same call
# uncaught ends the batch with a Script-Fu error that carries MESSAGE. (GIMP
# echoes the failing batch command, so the success marker is built at run time.)
error_test() {
  local name=$1 file=$2 message=$3 filter=$4; shift 4
  local c; c=$(call "$filter" "$@")
  gimp "$name" "$(load "$file") ${PRE:-} (catch #f $c (display (string-append \"call \" \"SUCCEEDED\"))) $(save "$name.png") $c"
  local rc=$? log=$work/out/$name.log
  if grep -q "call SUCCEEDED" "$log"; then fail "$name" "the call succeeded"; return; fi
  if [ $rc -eq 0 ]; then fail "$name" "GIMP exited 0 after the failing call"; return; fi
  if ! grep -qF -- "$message" "$log"; then fail "$name" "'$message' not in GIMP's output: $(grep -m1 -i error "$log")"; return; fi
  [ -f "$work/out/$name.png" ] || { fail "$name" "no image saved after the failure: $(grep -m1 -i error "$log")"; return; }
  local diff; diff=$("$py" "$here/compare.py" same "$work/${ORIG:-$file}" "$work/out/$name.png" 0 2>&1) \
    || { fail "$name" "image changed after the error: $diff"; return; }
  pass "$name: fails with \"$message\", image unchanged"
}

filter_test median-gray median camera.png 0 radius=2 percentile=50 shape=square
filter_test median-rgb median astronaut.png 0 radius=1 shape=circle
filter_test nl-means nl-means astronaut.png 1 auto=false h=12 patch-radius=1 search-radius=3
filter_test quantize quantize astronaut.png 0 colors=8 color-space=oklab dither=none max-iterations=10 seed=1
filter_test convolve convolve camera.png 0 preset=custom kernel=0,0.25,0,0.25,0,0.25,0,0.25,0 divisor=1 border=clamp

# Arguments: out of range (Script-Fu or the plug-in rejects it), and a kernel
# that is not square (only the plug-in can tell).
error_test range camera.png "out of range" median radius=101
error_test kernel camera.png "kernel has 8 values" convolve preset=custom kernel=1,1,1,1,1,1,1,1
# An indexed image: a clear error, the image unchanged (compared with the
# indexed image saved before the call).
PRE="(gimp-image-convert-indexed img CONVERT-DITHER-NONE CONVERT-PALETTE-GENERATE 8 FALSE FALSE \"\") $(save indexed.in.png)" \
ORIG=out/indexed.in.png error_test indexed camera.png "indexed" median radius=1

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
