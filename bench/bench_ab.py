# SPDX-License-Identifier: GPL-3.0-or-later
"""Two builds of the engine in one process (before and after a kernel
change): the convolution and median workloads of bench_gpu.py (the same
12 MP RGB u8 image and custom kernels; --only picks), and quantize at K 16
and 256 in both colour spaces with the table's other defaults;
report.kernel_ms and the whole call's ms, the
median of --runs calls a build, the builds taking turns for --rounds rounds
so that drift of the GPU clock hits both alike. Also checks each build's
CUDA result against its own CPU backend on the same image (the CPU is the
reference: bit for bit), and prints how far the two builds' outputs lie
apart. A benchmark, never a test."""
import argparse
import os
import statistics
import sys

import cv2
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pycudafx  # noqa: E402
from bench_gpu import cudafx_times  # noqa: E402


def workloads(img, only):
    """(name, engine method, image, {arguments}) in bench_gpu.py's order and
    with its kernels, for the filters in only."""
    rng = np.random.default_rng(1)
    out = []
    for k in (3, 5, 7, 15) if "median" in only else ():
        out.append(("median %dx%d" % (k, k), "median", img, dict(radius=k // 2)))
    for k in (16, 256) if "quantize" in only else ():
        for space in ("oklab", "rgb"):
            out.append(("quantize K=%d %s" % (k, space), "quantize", img, dict(colors=k, color_space=space)))
    if "convolve" not in only:
        return out
    for k in (5, 15):
        kern = rng.standard_normal((k, k)) / k
        out.append(("convolve custom %dx%d" % (k, k), "convolve", img, dict(preset=0, kernel=kern, divisor=1.0)))
    out.append(("convolve gaussian sigma=5", "convolve", img, dict(preset=7, sigma=5.0)))
    out.append(("convolve sharpen 5x5", "convolve", img, dict(preset="sharpen-5x5")))
    img_f = img.astype(np.float32) / 255.0
    for k in (5, 15):
        kern = rng.standard_normal((k, k)) / k
        out.append(("convolve f32 custom %dx%d" % (k, k), "convolve", img_f, dict(preset=0, kernel=kern, divisor=1.0)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("old", help="the first build's libcudafx.so")
    ap.add_argument("new", help="the second build's libcudafx.so")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-cpu-check", action="store_true", help="skip the CPU comparison (slow for 15x15)")
    ap.add_argument("--only", default="convolve",
                    help="comma-separated filters: convolve, median, quantize (default: convolve)")
    args = ap.parse_args()
    src = cv2.cvtColor(cv2.imread(os.path.join(pycudafx.ROOT, "tests", "data", "astronaut.png")), cv2.COLOR_BGR2RGB)
    img = np.ascontiguousarray(cv2.resize(src, (4000, 3000), interpolation=cv2.INTER_CUBIC))
    engines = {"old": pycudafx.Engine(args.old), "new": pycudafx.Engine(args.new)}
    print("%-28s %10s %10s %8s %10s %10s  %s" % ("workload", "old ms", "new ms", "old/new", "old call", "new call",
                                                 "checks"))
    for name, method, image, kw in workloads(img, set(args.only.split(","))):
        times = {b: [] for b in engines}
        calls = {b: [] for b in engines}
        for _ in range(args.rounds):
            for b, eng in engines.items():
                kernel, call = cudafx_times(lambda eng=eng: getattr(eng, method)(image, backend="cuda", **kw), args.runs)
                times[b].append(kernel)
                calls[b].append(call)
        checks = []
        results = {b: getattr(eng, method)(image, backend="cuda", **kw) for b, eng in engines.items()}
        outs = {b: r[0] for b, r in results.items()}
        if method == "quantize":
            checks.append("iterations old %d new %d" % tuple(results[b][2].iterations for b in engines))
        if not args.no_cpu_check:
            for b, eng in engines.items():
                cpu = getattr(eng, method)(image, backend="cpu", **kw)[0]
                checks.append("%s %s the CPU" % (b, "equals" if np.array_equal(cpu, outs[b]) else "DIFFERS FROM"))
        diff = np.abs(outs["old"].astype(np.float64) - outs["new"].astype(np.float64))
        checks.append("old-new max %.3g, %.4f%% differ" % (diff.max(), 100.0 * np.count_nonzero(diff) / diff.size))
        old, new = statistics.median(times["old"]), statistics.median(times["new"])
        print("%-28s %10.4f %10.4f %8.2f %10.2f %10.2f  %s" % (name, old, new, old / new, statistics.median(calls["old"]),
                                                            statistics.median(calls["new"]), "; ".join(checks)),
              flush=True)


if __name__ == "__main__":
    main()
