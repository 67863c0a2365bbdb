#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# GIMP 3 headless (the Debian 13 chroot, CPU) on a 12 MP RGB u8 image made
# from tests/data/astronaut.png: Script-Fu times, with (gettimeofday), the
# procedures plug-in-cudafx-median (radius 1), -convolve (Gaussian σ 5) and
# -nl-means (automatic) through the GEGL module; the same operations merged
# by GIMP directly (gimp-drawable-merge-new-filter: no plug-in process);
# GIMP's own gegl:median-blur and gegl:gaussian-blur merged the same way;
# and gegl:invert-gamma, a point operation that costs next to nothing, for
# what any merge of a 12 MP layer costs in GIMP (reading, converting,
# writing, the undo copy); and the median on a 64×64 image, procedure and
# direct merge, for what a call costs whatever the image (the difference:
# the plug-in process). Then the engine's own time for the same jobs (the
# CLI's --json "ms", CUDAFX_BACKEND=cpu). Prints each call's times, the load
# average before and after, and, last, the medians.
#   bench/gimp3-cpu.sh [BUILD] [REPEATS]
set -euo pipefail
build=${1:-build} repeats=${2:-3}
cd "$(dirname "$0")/.."
root=$(tests/gimp/chroot.sh ensure)
work=$(mktemp -d "$root/tmp/cudafx-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
inside=${work#"$root"}
tests/gimp/chroot.sh profile "$work" "$build"
/usr/bin/python3 -c "import cv2, numpy as np, sys; a = cv2.imread(sys.argv[1]);
cv2.imwrite(sys.argv[2], np.tile(a, (6, 8, 1))[:3000, :4000]); cv2.imwrite(sys.argv[3], a[:64, :64])" \
  tests/data/astronaut.png "$work/12mp.png" "$work/64px.png"

time_call() { # LABEL SCHEME-CALL [FILE]: repeated, each on a fresh copy of FILE (12mp.png)
  local file=$inside/${3:-12mp.png}
  echo "(define (run-$1) $2)
        (gimp-image-delete img)
        (set! img (car (gimp-file-load RUN-NONINTERACTIVE \"$file\")))
        (set! layer (vector-ref (car (gimp-image-get-layers img)) 0))
        (let loop ((i 0)) (if (< i $repeats) (begin
          (gimp-image-undo-disable img)
          (let* ((t0 (gettimeofday)) (r (run-$1)) (t1 (gettimeofday)))
            (display (string-append \"\nTIME $1 \" (number->string
              (+ (* 1000 (- (car t1) (car t0))) (/ (- (cadr t1) (cadr t0)) 1000.0))) \"\n\")))
          (gimp-image-delete img)
          (set! img (car (gimp-file-load RUN-NONINTERACTIVE \"$file\")))
          (set! layer (vector-ref (car (gimp-image-get-layers img)) 0))
          (loop (+ i 1)))))"
}
script="(define img (car (gimp-file-load RUN-NONINTERACTIVE \"$inside/12mp.png\")))
  (define layer (vector-ref (car (gimp-image-get-layers img)) 0))
  $(time_call proc-cudafx-median-r1-64px "(plug-in-cudafx-median #:run-mode RUN-NONINTERACTIVE #:image img #:drawables (vector layer) #:radius 1)" 64px.png)
  $(time_call merge-cudafx-median-r1-64px "(gimp-drawable-merge-new-filter layer \"cudafx:median\" 0 LAYER-MODE-REPLACE 1.0 \"radius\" 1)" 64px.png)
  $(time_call merge-gegl-invert-gamma "(gimp-drawable-merge-new-filter layer \"gegl:invert-gamma\" 0 LAYER-MODE-REPLACE 1.0)")
  $(time_call proc-cudafx-median-r1 "(plug-in-cudafx-median #:run-mode RUN-NONINTERACTIVE #:image img #:drawables (vector layer) #:radius 1)")
  $(time_call merge-cudafx-median-r1 "(gimp-drawable-merge-new-filter layer \"cudafx:median\" 0 LAYER-MODE-REPLACE 1.0 \"radius\" 1)")
  $(time_call merge-gegl-median-blur-r1 "(gimp-drawable-merge-new-filter layer \"gegl:median-blur\" 0 LAYER-MODE-REPLACE 1.0 \"radius\" 1 \"neighborhood\" \"square\")")
  $(time_call proc-cudafx-convolve-gaussian-5 "(plug-in-cudafx-convolve #:run-mode RUN-NONINTERACTIVE #:image img #:drawables (vector layer) #:preset \"gaussian\" #:sigma 5.0)")
  $(time_call merge-cudafx-convolve-gaussian-5 "(gimp-drawable-merge-new-filter layer \"cudafx:convolve\" 0 LAYER-MODE-REPLACE 1.0 \"preset\" \"gaussian\" \"sigma\" 5.0)")
  $(time_call merge-gegl-gaussian-blur-5 "(gimp-drawable-merge-new-filter layer \"gegl:gaussian-blur\" 0 LAYER-MODE-REPLACE 1.0 \"std-dev-x\" 5.0 \"std-dev-y\" 5.0)")
  $(time_call proc-cudafx-nl-means-auto "(plug-in-cudafx-nl-means #:run-mode RUN-NONINTERACTIVE #:image img #:drawables (vector layer))")
  $(time_call merge-cudafx-nl-means-auto "(gimp-drawable-merge-new-filter layer \"cudafx:nl-means\" 0 LAYER-MODE-REPLACE 1.0 \"auto\" TRUE)")"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
timeout 1800 tests/gimp/chroot.sh run /usr/bin/env GIMP3_DIRECTORY="$inside/profile" XDG_DATA_HOME="$inside/data" \
  gimp-console-3.0 -i --batch-interpreter=plug-in-script-fu-eval -b "(begin $script)" --quit \
  >"$work/gimp.log" 2>&1 || true
grep '^TIME' "$work/gimp.log" | tee "$work/times" || { tail -n 20 "$work/gimp.log"; exit 1; }
for job in "median --radius 1" "convolve --preset gaussian --sigma 5" "nl-means"; do
  # shellcheck disable=SC2086
  for i in $(seq "$repeats"); do
    ms=$(CUDAFX_BACKEND=cpu "$build/cudafx" $job --json "$work/12mp.png" "$work/out.png" \
           | sed -n 's/.*"ms": *\([0-9.]*\).*/\1/p')
    echo "TIME engine-${job// /_} $ms" | tee -a "$work/times"
  done
done
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
echo "medians of $repeats, ms:"
# Sorted by call, then time: the middle of each call's list is its median.
sort -k2,2 -k3,3n "$work/times" | awk '{ t[$2] = t[$2] " " $3; n[$2]++ }
  END { for (k in t) { split(t[k], v, " ");
        printf "  %-40s %9.1f   (%s )\n", k, v[int((n[k] + 1) / 2)], t[k] } }' | sort
