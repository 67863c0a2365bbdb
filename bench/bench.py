#!/usr/bin/python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""cudafx benchmarks against OpenCV: times each cudafx filter and its peers
in one process, on the same image, with the same thread count, and prints
one table (workload, cudafx ms, peer ms, ratio cudafx/peer, target, OK/MISS)
and a second one checking the results that docs/TESTING.md says must match OpenCV.

Timing: the first call of each side is a warm-up (caches, thread pools, lazy
initialisation) and is not counted; then N timed calls, N chosen from the
warm-up's duration so that each side of a workload takes about --budget
seconds; the median is reported. A call slower than the budget on its own is
run once only, and that single call is the measurement (marked "1*" in the
runs column): a 40 s k-means is not noticeably warmer the second time.

Peers are a registry (PEERS): each peer says which workloads it offers and
how to run them. Only OpenCV exists today; GPU peers (CuPy, PyTorch, NPP) with
--backend cuda slot in as further entries with prepare() uploading the image
and sync() waiting for the device, both outside the timed region.

A benchmark is never a test: nothing here asserts, and a filter that is not
available (the engine returns an error) is reported as n/a.
"""
import argparse
import os
import platform
import statistics
import sys
import time

import cv2
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pycudafx  # noqa: E402

ROOT = pycudafx.ROOT

# Enum values from core/cudafx.h, named here so the calls below read as what they are.
SHAPE_SQUARE = 0
SPACE_RGB = 1
DITHER_NONE = 0
PRESET_CUSTOM, PRESET_GAUSSIAN = 0, 7
BORDER_CLAMP = 0


def custom_kernel_5x5():
    """A fixed, non-separable (full rank) 5x5 kernel summing to 1, so that
    divisor 1 keeps the image's brightness: random-ish but reproducible."""
    k = np.random.RandomState(20260502).uniform(-0.5, 1.0, (5, 5))
    k[2, 2] += 2.0
    k /= k.sum()
    assert np.linalg.matrix_rank(k) == 5
    return k


KERNEL_5X5 = custom_kernel_5x5()


class Workload:
    """One benchmarked operation: how cudafx runs it, its target ratio
    (cudafx time / peer time must be at most this), which image it
    uses ("12mp" or "1mp") and, when docs/TESTING.md promises it, how far the
    cudafx result may differ from the OpenCV one (max |diff| on u8)."""

    def __init__(self, key, label, image, target, cudafx, check_tolerance=None):
        self.key = key
        self.label = label
        self.image = image
        self.target = target
        self.cudafx = cudafx
        self.check_tolerance = check_tolerance


def median_workload(size, target, check):
    radius = size // 2
    return Workload("median-%d" % size, "median %dx%d" % (size, size), "12mp", target,
                    lambda e, img, **o: e.median(img, radius=radius, percentile=50.0,
                                                 shape=SHAPE_SQUARE, **o)[0],
                    0 if check else None)


WORKLOADS = [
    median_workload(3, 1.5, True),
    median_workload(5, 1.5, True),
    median_workload(7, 0.5, False),
    median_workload(15, 0.5, False),
    Workload("convolve-custom-5", "convolve custom 5x5", "12mp", 1.5,
             lambda e, img, **o: e.convolve(img, preset=PRESET_CUSTOM, kernel=KERNEL_5X5,
                                            divisor=1.0, offset=0.0, border=BORDER_CLAMP, **o)[0],
             1),
    Workload("convolve-gaussian-5", "convolve gaussian sigma=5", "12mp", 1.5,
             lambda e, img, **o: e.convolve(img, preset=PRESET_GAUSSIAN, sigma=5.0,
                                            border=BORDER_CLAMP, **o)[0]),
    Workload("nlmeans-7-21", "nl-means h=10 7x7/21x21 (1 MP)", "1mp", 0.7,
             lambda e, img, **o: e.nlmeans(img, automatic=False, h=10.0, patch_radius=3,
                                           search_radius=10, **o)[0]),
    Workload("quantize-16", "quantize K=16 rgb 10 it", "12mp", 0.5,
             lambda e, img, **o: e.quantize(img, colors=16, color_space=SPACE_RGB,
                                            dither=DITHER_NONE, max_iterations=10, seed=0,
                                            **o)[0]),
]


class OpenCVPeer:
    """OpenCV on the CPU (Debian's python3-opencv here, opencv-python on the
    GPU machine), BORDER_REPLICATE to match cudafx's clamp border."""

    name = "opencv"

    def __init__(self, threads):
        cv2.setNumThreads(threads)
        self.calls = {
            "median-3": lambda img: cv2.medianBlur(img, 3),
            "median-5": lambda img: cv2.medianBlur(img, 5),
            "median-7": lambda img: cv2.medianBlur(img, 7),
            "median-15": lambda img: cv2.medianBlur(img, 15),
            "convolve-custom-5": lambda img: cv2.filter2D(img, -1, KERNEL_5X5,
                                                          borderType=cv2.BORDER_REPLICATE),
            "convolve-gaussian-5": lambda img: cv2.GaussianBlur(img, (0, 0), 5,
                                                                borderType=cv2.BORDER_REPLICATE),
            "nlmeans-7-21": lambda img: cv2.fastNlMeansDenoisingColored(img, None, 10, 10, 7, 21),
            # The pixels as float32 rows are made in prepare(), outside the
            # timed region; labels -> image is left out too (a cheap lookup).
            "quantize-16": lambda pts: cv2.kmeans(pts, 16, None,
                                                  (cv2.TERM_CRITERIA_MAX_ITER, 10, 0),
                                                  1, cv2.KMEANS_PP_CENTERS),
        }

    def describe(self):
        return "OpenCV %s, %d threads" % (cv2.__version__, cv2.getNumThreads())

    def offers(self, workload):
        return workload.key in self.calls

    def prepare(self, workload, img):
        if workload.key == "quantize-16":
            return img.reshape(-1, 3).astype(np.float32)
        return img

    def run(self, workload, data):
        return self.calls[workload.key](data)

    def sync(self):
        pass

    def to_host(self, out):
        return out


# Peers by name; the backend decides which run by default. GPU peers (CuPy
# cupyx.scipy.ndimage, PyTorch, NPP) are added here when the GPU bench is written.
PEERS = {"opencv": OpenCVPeer}
DEFAULT_PEERS = {"cpu": ["opencv"], "cuda": ["opencv"]}


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_images(path):
    rgb = cv2.cvtColor(cv2.imread(path, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    big = cv2.resize(rgb, (4000, 3000), interpolation=cv2.INTER_CUBIC)
    # The 1 MP crop for slow peers: from the middle (face and suit, not the flat background).
    crop = np.ascontiguousarray(big[1000:2000, 1500:2500])
    return {"12mp": big, "1mp": crop}


class Measurement:
    def __init__(self, ms=None, runs=0, single=False, error=None, output=None):
        self.ms = ms
        self.runs = runs
        self.single = single
        self.error = error
        self.output = output


def measure(call, budget, max_runs, forced_runs, sync):
    """Warm-up, then the median of N timed calls; an exception on the warm-up
    becomes an n/a measurement with its message."""
    def timed():
        start = time.perf_counter()
        out = call()
        sync()
        return (time.perf_counter() - start) * 1e3, out

    try:
        first_ms, out = timed()
    except Exception as e:  # noqa: BLE001 — any failure of one side is reported, not fatal
        msg = str(e) if isinstance(e, pycudafx.CudafxError) else "%s: %s" % (type(e).__name__, e)
        return Measurement(error=msg.strip().splitlines()[0] if msg.strip() else type(e).__name__)
    if forced_runs:
        runs = forced_runs
    elif first_ms > budget * 1e3:
        return Measurement(first_ms, 1, True, output=out)
    else:
        runs = int(min(max_runs, max(1, budget * 1e3 // max(first_ms, 1e-3))))
    times = []
    for _ in range(runs):
        ms, out = timed()
        times.append(ms)
    return Measurement(statistics.median(times), runs, output=out)


def fmt_ms(m):
    if m.error is not None:
        return "n/a (%s)" % m.error
    return "%.2f" % m.ms if m.ms < 100 else "%.1f" % m.ms


def fmt_runs(m):
    if m.error is not None:
        return "-"
    return "1*" if m.single else str(m.runs)


def print_table(header, rows):
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
    print(line(header))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(line(r))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="threads for cudafx and every CPU peer (default: all cores, %(default)s)")
    ap.add_argument("--backend", choices=["cpu", "cuda"], default="cpu",
                    help="cudafx backend (default cpu)")
    ap.add_argument("--peers", default=None,
                    help="comma-separated peers among %s (default for the backend)"
                    % ",".join(PEERS))
    ap.add_argument("--only", default=None,
                    help="comma-separated substrings: run the workloads whose key contains one")
    ap.add_argument("--budget", type=float, default=4.0,
                    help="seconds of timed calls per side of a workload (default %(default)s)")
    ap.add_argument("--max-runs", type=int, default=15, help="upper bound on timed calls")
    ap.add_argument("--runs", type=int, default=0,
                    help="timed calls after the warm-up, fixed (overrides --budget)")
    ap.add_argument("--image", default=os.path.join(ROOT, "tests", "data", "astronaut.png"))
    ap.add_argument("--lib", default=None, help="path of libcudafx.so (default build/)")
    args = ap.parse_args()

    engine = pycudafx.Engine(args.lib)
    peer_names = args.peers.split(",") if args.peers else DEFAULT_PEERS[args.backend]
    unknown = [p for p in peer_names if p not in PEERS]
    if unknown:
        ap.error("unknown peer %s (known: %s)" % (", ".join(unknown), ", ".join(PEERS)))
    peers = [PEERS[p](args.threads) for p in peer_names]
    workloads = WORKLOADS
    if args.only:
        wanted = args.only.split(",")
        workloads = [w for w in WORKLOADS if any(s in w.key for s in wanted)]

    images = load_images(args.image)
    print("cudafx bench: backend %s, %d threads, %s (%d cores), %s"
          % (args.backend, args.threads, cpu_model(),
             os.cpu_count(), "; ".join(p.describe() for p in peers)))
    print("images: 12 MP = %dx%d RGB u8, 1 MP = %dx%d crop, from %s"
          % (images["12mp"].shape[1], images["12mp"].shape[0], images["1mp"].shape[1],
             images["1mp"].shape[0], os.path.relpath(args.image, ROOT)))
    print("times: median of the timed calls after one warm-up; runs = cudafx/peer calls "
          "timed, 1* = a single call slower than the %.0f s budget, no warm-up" % args.budget)
    print(flush=True)

    rows, checks = [], []
    for w in workloads:
        img = images[w.image]
        mine = measure(lambda: w.cudafx(engine, img, backend=args.backend, threads=args.threads),
                       args.budget, args.max_runs, args.runs, lambda: None)
        for peer in peers:
            if not peer.offers(w):
                continue
            data = peer.prepare(w, img)
            theirs = measure(lambda: peer.run(w, data), args.budget, args.max_runs, args.runs,
                             peer.sync)
            if mine.error is None and theirs.error is None:
                ratio = mine.ms / theirs.ms
                verdict = "OK" if ratio <= w.target else "MISS"
                ratio_s = "%.2f" % ratio
            else:
                ratio_s, verdict = "-", "-"
            rows.append([w.label, peer.name, fmt_ms(mine), fmt_ms(theirs), ratio_s,
                         "<= %.1f" % w.target, verdict,
                         "%s/%s" % (fmt_runs(mine), fmt_runs(theirs))])
            print("  %-32s done" % (w.label + " vs " + peer.name), file=sys.stderr, flush=True)
            if w.check_tolerance is not None and peer.name == "opencv":
                checks.append(check_row(w, mine, theirs, peer))

    print_table(["workload", "peer", "cudafx ms", "peer ms", "ratio", "target", "OK?", "runs"], rows)
    if checks:
        print()
        print_table(["exactness check (bench image)", "max |diff|", "pixels differing",
                     "allowed", "OK?"], checks)


def check_row(w, mine, theirs, peer):
    label = "%s = %s" % (w.label, "cv2 exactly" if w.check_tolerance == 0
                         else "cv2 within +-%d" % w.check_tolerance)
    allowed = "%d" % w.check_tolerance
    if mine.error is not None or theirs.error is not None:
        return [label, "n/a", "n/a", allowed, "-"]
    a = mine.output.astype(np.int16)
    b = peer.to_host(theirs.output).astype(np.int16)
    if a.shape != b.shape:
        return [label, "shape %s vs %s" % (a.shape, b.shape), "-", allowed, "MISS"]
    diff = np.abs(a - b)
    worst = int(diff.max())
    return [label, str(worst), "%d of %d" % (np.count_nonzero(diff), diff.size), allowed,
            "OK" if worst <= w.check_tolerance else "MISS"]


if __name__ == "__main__":
    main()
