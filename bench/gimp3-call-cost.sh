#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# What one call of a cudafx procedure costs GIMP 3 whatever the image: on a
# 64×64 image (the filter's own work is next to nothing), REPEATS Script-Fu
# calls of plug-in-cudafx-median radius 1 (through the GEGL module: GIMP
# computes the pixels, the plug-in process only drives it) against the same
# operation merged by GIMP directly (gimp-drawable-merge-new-filter, no
# plug-in process). GIMP runs twice with the same profile (the Debian 13
# chroot, CPU): first for the wall times, then under `perf record -e
# task-clock` for the CPU time of each plug-in process and where it goes
# (by shared object); the load average is printed before and after each.
#   bench/gimp3-call-cost.sh [BUILD] [REPEATS]
set -euo pipefail
build=${1:-build} repeats=${2:-15}
cd "$(dirname "$0")/.."
root=$(tests/gimp/chroot.sh ensure)
work=$(mktemp -d "$root/tmp/cudafx-callcost.XXXXXX")
trap 'rm -rf "$work"' EXIT
inside=${work#"$root"}
tests/gimp/chroot.sh profile "$work" "$build"
/usr/bin/python3 -c "import cv2, sys; cv2.imwrite(sys.argv[2], cv2.imread(sys.argv[1])[:64, :64])" \
  tests/data/astronaut.png "$work/64px.png"

calls() { # LABEL SCHEME-CALL: REPEATS calls, each printed as "CALL LABEL ms"
  echo "(let loop ((i 0)) (if (< i $repeats) (begin
     (let* ((t0 (gettimeofday)) (r $2) (t1 (gettimeofday)))
       (display (string-append \"\nCALL $1 \" (number->string
         (+ (* 1000 (- (car t1) (car t0))) (/ (- (cadr t1) (cadr t0)) 1000.0))) \"\n\")))
     (loop (+ i 1)))))"
}
script="(define img (car (gimp-file-load RUN-NONINTERACTIVE \"$inside/64px.png\")))
  (define layer (vector-ref (car (gimp-image-get-layers img)) 0))
  (gimp-image-undo-disable img)
  $(calls procedure "(plug-in-cudafx-median #:run-mode RUN-NONINTERACTIVE #:image img #:drawables (vector layer) #:radius 1)")
  $(calls merge "(gimp-drawable-merge-new-filter layer \"cudafx:median\" 0 LAYER-MODE-REPLACE 1.0 \"radius\" 1)")"
gimp() { # [PREFIX...]: one GIMP session running the calls, its output in $work/gimp.log
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  timeout 900 "$@" tests/gimp/chroot.sh run /usr/bin/env GIMP3_DIRECTORY="$inside/profile" \
    XDG_DATA_HOME="$inside/data" gimp-console-3.0 -i --batch-interpreter=plug-in-script-fu-eval \
    -b "(begin $script)" --quit >"$work/gimp.log" 2>&1 || true
  echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
  grep -q '^CALL' "$work/gimp.log" || { tail -n 20 "$work/gimp.log"; exit 1; }
}
median() { sort -n | awk '{ v[NR] = $1 } END { printf "%.1f", v[int((NR + 1) / 2)] }'; }
report_calls() {
  for label in procedure merge; do
    times=$(awk -v l=$label '$1 == "CALL" && $2 == l { print $3 }' "$work/gimp.log")
    printf "  %-10s wall ms, median of %d: %s   (%s )\n" "$label" "$repeats" \
      "$(echo "$times" | median)" "$(echo "$times" | awk '{ printf " %.0f", $1 }')"
  done
}

# The first session also registers the plug-in (a fresh profile): not timed.
gimp
report_calls
if ! command -v perf >/dev/null; then
  echo "no perf: the plug-in's CPU time is not measured"; exit 0
fi
echo "under perf record (the wall times include its sampling):"
gimp perf record -q -e task-clock -c 250000 -o "$work/perf.data"
report_calls
# Samples of the processes named cudafx: one process per call, in pid order.
perf script -i "$work/perf.data" -F comm,pid,period,ip,dso 2>/dev/null \
  | awk '$1 == "cudafx" { n = split($NF, p, "/"); print $2, $3, p[n] }' | tr -d '()' \
  | awk -v runs="$repeats" '
      { cpu[$1] += $2; by[$1 " " $3] += $2 }
      END {
        n = 0; for (pid in cpu) pids[++n] = pid
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (pids[j] < pids[i]) { t = pids[i]; pids[i] = pids[j]; pids[j] = t }
        for (i = 1; i <= n; i++) { ms[i] = cpu[pids[i]] / 1e6; s = s sprintf(" %.0f", ms[i]) }
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (ms[j] < ms[i]) { t = ms[i]; ms[i] = ms[j]; ms[j] = t }
        printf "  plug-in process CPU ms (perf task-clock), median of %d: %.1f   (%s )\n", n, ms[int((n + 1) / 2)], s
        for (k in by) { split(k, f, " "); obj[f[2]] += by[k] }
        print "  by object, ms per call (0.5 and more):"
        for (o in obj) if (obj[o] / 1e6 / n >= 0.5) printf "    %6.1f %s\n", obj[o] / 1e6 / n, o | "sort -rn"
      }'
