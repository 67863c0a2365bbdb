#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Colour quantize mapping to a given palette: a 12-megapixel RGB u8 image
(tests/data/astronaut.png scaled to 4000x3000, as bench_gpu.py) mapped to a
palette of K colours (k-means on a 1 MP copy, computed once) with each dither,
in rgb and oklab. Prints one row per workload: kernel ms (CUDA events, the
mapping's kernels only: a given palette runs no k-means) and whole-call ms,
medians of --runs after a warm-up.

    python3 bench/bench_quantize_map.py --backend cuda --runs 7
    python3 bench/bench_quantize_map.py --backend cpu --runs 3

--check maps each workload once more on the CPU (all cores) and prints whether
the outputs are equal: the CPU's Floyd-Steinberg on 12 MP takes seconds."""
import argparse
import os
import statistics
import sys
import time

import cv2
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pycudafx  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DITHERS = ("none", "ordered", "blue-noise", "floyd-steinberg", "floyd-steinberg-reduced-bleeding")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="cuda", choices=("cpu", "cuda"))
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--colors", default="256,16", help="comma-separated palette sizes")
    ap.add_argument("--spaces", default="rgb,oklab")
    ap.add_argument("--dithers", default=",".join(DITHERS))
    ap.add_argument("--lib", help="the engine library (default build/libcudafx.so)")
    ap.add_argument("--check", action="store_true", help="compare each output with the CPU's (slow)")
    args = ap.parse_args()

    src = cv2.cvtColor(cv2.imread(os.path.join(ROOT, "tests", "data", "astronaut.png")), cv2.COLOR_BGR2RGB)
    img = np.ascontiguousarray(cv2.resize(src, (4000, 3000), interpolation=cv2.INTER_CUBIC))
    small = np.ascontiguousarray(cv2.resize(src, (1155, 866), interpolation=cv2.INTER_AREA))
    eng = pycudafx.Engine(args.lib)
    print("%-44s %10s %10s" % ("workload (4000x3000 RGB u8, %s)" % args.backend, "kernel ms", "whole ms"))
    for k in (int(c) for c in args.colors.split(",")):
        pal = eng.quantize(small, colors=k, color_space="rgb", max_iterations=10, backend="cpu")[2]
        palette = [list(pal.entries[i]) for i in range(pal.colors)]
        for space in args.spaces.split(","):
            for dither in args.dithers.split(","):
                def call():
                    return eng.quantize(img, palette=palette, color_space=space, dither=dither,
                                        backend=args.backend, threads=args.threads)
                out = call()[0]
                kernel, whole = [], []
                for _ in range(args.runs):
                    t = time.perf_counter()
                    report = call()[1]
                    whole.append((time.perf_counter() - t) * 1e3)
                    kernel.append(report.kernel_ms)
                    if report.backend_used != pycudafx.BACKENDS[args.backend]:
                        sys.exit("ran on another backend: " + report.fallback.decode())
                name = "map K=%d %s %s" % (len(palette), space, dither)
                same = ""
                if args.check:
                    ref = eng.quantize(img, palette=palette, color_space=space, dither=dither, backend="cpu",
                                       threads=os.cpu_count())[0]
                    differ = int(np.count_nonzero(np.any(ref != out, axis=-1)))
                    same = "  CPU: same" if differ == 0 else "  CPU: %d pixels DIFFER" % differ
                print("%-44s %10.3f %10.2f%s" % (name, statistics.median(kernel), statistics.median(whole), same),
                      flush=True)


if __name__ == "__main__":
    main()
