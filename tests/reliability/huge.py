# SPDX-License-Identifier: GPL-3.0-or-later
"""One filter on one huge image on the CPU, to measure the engine's extra host
memory: a W x H RGBA float image (10000 x 10000 = 100 megapixels, 1.6 GB, by
default) through the engine (build/libcudafx.so) into a second image of the
same size. Prints one JSON line: the filter, its parameters, the seconds, the
resident memory before the images were made, the two images' bytes, the peak
(ru_maxrss, what /usr/bin/time -v reports) and the difference, the engine's
extra memory, which includes numpy's and the interpreter's small change.

Parameters are chosen so a 100 MP float image runs in minutes on two busy
cores (small NL-means search window, few k-means iterations); the memory
bound does not depend on them except where the JSON says so.

Usage: huge.py FILTER [--width W] [--height H] [--threads N] [--hash] [--lib PATH]
       FILTER: median, nl-means, quantize, quantize-dither, convolve, none
       (none: only the images, the baseline of the measurement)."""
import argparse
import hashlib
import json
import os
import resource
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import pycudafx  # noqa: E402

PARAMS = {
    "median": dict(radius=2, percentile=50.0),
    "nl-means": dict(automatic=False, h=10.0, patch_radius=1, search_radius=2),
    "quantize": dict(colors=16, max_iterations=4),
    "quantize-dither": dict(colors=16, max_iterations=4, dither=1),
    "convolve": dict(preset=7, sigma=2.0),
    "none": {},
}


def rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("filter", choices=sorted(PARAMS))
    ap.add_argument("--width", type=int, default=10000)
    ap.add_argument("--height", type=int, default=10000)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--hash", action="store_true", help="also print a SHA-256 of the output")
    ap.add_argument("--lib", help="engine library (default build/libcudafx.so)")
    args = ap.parse_args()

    engine = pycudafx.Engine(args.lib)
    before = rss_bytes()
    src = np.empty((args.height, args.width, 4), dtype=np.float32)
    rng = np.random.default_rng(1)
    block = 256
    for y in range(0, args.height, block):  # noisy gradient, filled in blocks: no big temporaries
        part = src[y:y + block]
        rng.random(part.shape, dtype=np.float32, out=part)
        part *= 0.25
        part[..., 0] += (np.arange(args.width, dtype=np.float32) / args.width * 0.75)[None, :]
        part[..., 3] = 1.0
    image_bytes = src.nbytes

    name = args.filter
    p = PARAMS[name]
    start = time.monotonic()
    out = None
    if name == "median":
        out, _ = engine.median(src, threads=args.threads, has_alpha=True, **p)
    elif name == "nl-means":
        out, _, _ = engine.nlmeans(src, threads=args.threads, has_alpha=True, **p)
    elif name.startswith("quantize"):
        out, _, _ = engine.quantize(src, threads=args.threads, has_alpha=True, **p)
    elif name == "convolve":
        out, _ = engine.convolve(src, threads=args.threads, has_alpha=True, **p)
    else:
        out = np.empty_like(src)
        out[...] = src  # touch every page, as a filter writing dst does
    seconds = time.monotonic() - start

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    result = {
        "filter": name, "params": p, "width": args.width, "height": args.height,
        "seconds": round(seconds, 1), "rss_before_images_mb": round(before / 2**20),
        "images_mb": round(2 * image_bytes / 2**20), "peak_rss_mb": round(peak / 2**20),
        "extra_mb": round((peak - before - 2 * image_bytes) / 2**20),
    }
    if args.hash:
        h = hashlib.sha256()
        for y in range(0, args.height, block):
            h.update(out[y:y + block].tobytes())
        result["sha256"] = h.hexdigest()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
