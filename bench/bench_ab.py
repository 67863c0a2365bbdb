# SPDX-License-Identifier: GPL-3.0-or-later
"""Two or more builds of the engine in one process (before and after a
kernel change, and variants): the convolution, median and nl-means
workloads of bench_gpu.py (the same 12 MP RGB u8 image, custom kernels and
noise; --only picks), and quantize at K 16 and 256 in both colour spaces
with the table's other defaults; report.kernel_ms and the whole call's ms,
the median of --runs calls a build,
the builds taking turns for --rounds rounds so that drift of the GPU clock
hits all alike. Also checks each build's CUDA result against the first
build's CPU backend on the same image (the CPU is the reference: bit for bit for
median, convolution and quantize, within 1 for nl-means), and prints how far each
build's output lies from the first build's. A benchmark, never a test."""
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
    if "convolve" in only:
        for k in (5, 15):
            kern = rng.standard_normal((k, k)) / k
            out.append(("convolve custom %dx%d" % (k, k), "convolve", img, dict(preset=0, kernel=kern, divisor=1.0)))
        out.append(("convolve gaussian sigma=5", "convolve", img, dict(preset=7, sigma=5.0)))
        out.append(("convolve sharpen 5x5", "convolve", img, dict(preset="sharpen-5x5")))
        img_f = img.astype(np.float32) / 255.0
        for k in (5, 15):
            kern = rng.standard_normal((k, k)) / k
            out.append(("convolve f32 custom %dx%d" % (k, k), "convolve", img_f, dict(preset=0, kernel=kern, divisor=1.0)))
    if "nlmeans" in only:
        # bench_gpu.py's noise (sigma 20: automatic mode picks 5x5 Gaussian
        # patches) and a weaker one (sigma 8: 3x3 flat patches), f32, manual
        noise = np.random.default_rng(1).standard_normal(img.shape)
        for sigma in (20, 8):
            noisy = np.clip(img + sigma * noise, 0, 255).astype(np.uint8)
            out.append(("nl-means auto noise %d" % sigma, "nlmeans", noisy, {}))
            if sigma == 20:
                out.append(("nl-means auto noise 20 f32", "nlmeans", noisy.astype(np.float32) / 255.0, {}))
                out.append(("nl-means 7x7 search 21x21", "nlmeans", noisy,
                            dict(automatic=False, h=10.0, patch_radius=3, search_radius=10)))
                out.append(("nl-means 3x3 search 21x21", "nlmeans", noisy,
                            dict(automatic=False, h=10.0, patch_radius=1, search_radius=10)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("builds", nargs="+", help="two or more builds' libcudafx.so (NAME=PATH names one)")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-cpu-check", action="store_true", help="skip the CPU comparison (slow for 15x15)")
    ap.add_argument("--only", default="convolve",
                    help="comma-separated filters: convolve, median, nlmeans, quantize (default: convolve)")
    args = ap.parse_args()
    if len(args.builds) < 2:
        ap.error("two builds at least")
    src = cv2.cvtColor(cv2.imread(os.path.join(pycudafx.ROOT, "tests", "data", "astronaut.png")), cv2.COLOR_BGR2RGB)
    img = np.ascontiguousarray(cv2.resize(src, (4000, 3000), interpolation=cv2.INTER_CUBIC))
    engines = {}
    for i, b in enumerate(args.builds):
        name, _, path = b.rpartition("=") if "=" in b else ("old" if i == 0 else "new" if i == 1 else "b%d" % i, "", b)
        engines[name] = pycudafx.Engine(path)
    names = list(engines)
    print("%-28s %s  %s  %s" % ("workload", " ".join("%10s" % ("%s ms" % n) for n in names),
                                " ".join("%8s" % ("/%s" % n) for n in names[1:]),
                                " ".join("%10s" % ("%s call" % n) for n in names)))
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
            checks.append("iterations " + " ".join("%s %d" % (b, results[b][2].iterations) for b in names))
        if method == "nlmeans":
            info = results[names[0]][2]
            checks.append("P %d S %d" % (info.patch_radius, info.search_radius))
        if not args.no_cpu_check:
            cpu = getattr(engines[names[0]], method)(image, backend="cpu", **kw)[0]
            scale = 255.0 if image.dtype == np.float32 else 1.0
            for b in names:
                diff = np.abs(cpu.astype(np.float64) - outs[b].astype(np.float64))
                d = diff.max() * scale
                checks.append("%s %s" % (b, "equals the CPU" if d == 0 else "CPU max diff %.3g, %.4f%% differ"
                                         % (d, 100.0 * np.count_nonzero(diff) / diff.size)))
        for b in names[1:]:
            diff = np.abs(outs[names[0]].astype(np.float64) - outs[b].astype(np.float64))
            checks.append("%s-%s max %.3g, %.4f%% differ" % (names[0], b, diff.max(),
                                                              100.0 * np.count_nonzero(diff) / diff.size))
        med = {b: statistics.median(times[b]) for b in names}
        print("%-28s %s  %s  %s  %s" % (name, " ".join("%10.4f" % med[b] for b in names),
                                        " ".join("%8.2f" % (med[names[0]] / med[b]) for b in names[1:]),
                                        " ".join("%10.2f" % statistics.median(calls[b]) for b in names),
                                        "; ".join(checks)), flush=True)


if __name__ == "__main__":
    main()
