# SPDX-License-Identifier: GPL-3.0-or-later
"""Reliability of the CUDA backend, for the GPU machine (no GEGL there: the
engine through ctypes, build/libcudafx.so built with nvcc). `make
reliability-gpu` runs every part; each prints what it measured and ends with
"N passed, N failed".

  faults      CUDAFX_CUDA_FAIL=alloc|launch|stripe0|stripe1 (stripes under a
              CUDAFX_CUDA_MEM_LIMIT cap) on the first call of a fresh process:
              auto falls back to the CPU with output identical to the CPU's and
              says why; forced cuda fails with a message, dst untouched when the
              fault comes before the first stripe is written (a later one leaves
              partial results, as cancel does: hosts discard dst on any error). Then a
              fault in the middle of 20 preview-sized calls: that call falls
              back, the next ones run on the GPU again.
  huge        a W x H RGBA float image (default 10000 x 10000, 1.6 GB) through
              each GPU filter with the device memory capped far below the
              image (CUDAFX_CUDA_MEM_LIMIT=256M, so many stripes): output
              identical to the uncapped GPU run, and to the CPU within the
              tolerances of docs/TESTING.md.
  concurrent  two processes using the GPU at once, each running every GPU
              filter 10 times on a 12-megapixel image and comparing with the
              CPU: both succeed.

Usage: gpu.py faults | huge [--width W --height H] | concurrent"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import pycudafx as P  # noqa: E402

# name, run(engine, src, backend, has_alpha, **kw) -> (out, report), largest difference
# from the CPU on the 0..255 scale (docs/TESTING.md)
FILTERS = {
    "median": (lambda e, s, b, a, **kw: e.median(s, radius=3, backend=b, has_alpha=a, **kw), 1e-5 * 255),
    "convolve": (lambda e, s, b, a, **kw: e.convolve(s, preset=2, backend=b, has_alpha=a, **kw),
                 1e-5 * 255),
    "nl-means": (lambda e, s, b, a, **kw: e.nlmeans(s, automatic=False, h=12, patch_radius=1,
                                                   search_radius=3, backend=b, has_alpha=a, **kw)[:2], 1.0),
    "quantize": (lambda e, s, b, a, **kw: e.quantize(s, colors=16, max_iterations=10, backend=b,
                                                    has_alpha=a, **kw)[:2], 0.0),
}
results = {"passed": 0, "failed": 0}


def verdict(ok, what):
    results["passed" if ok else "failed"] += 1
    print(("ok   " if ok else "FAIL ") + what, flush=True)


def scale(a):
    return 1.0 if a.dtype == np.uint8 else 255.0


def max_diff(a, b):
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) * scale(a)


def test_image(h, w, c, dtype, seed=1):
    rng = np.random.default_rng(seed)
    if dtype == np.uint8:
        return rng.integers(0, 256, (h, w, c), dtype=np.uint8)
    return rng.random((h, w, c), dtype=np.float32)


def forced_cuda_fails(engine, name, src, point):
    """Forced cuda under a fault: an error with a message; dst untouched unless
    the fault came after a stripe was written (stripe1)."""
    dst = np.full_like(src, 77)
    try:
        FILTERS[name][0](engine, src, "cuda", False, out=dst)
        return False, "succeeded"
    except P.CudafxError as e:
        message = str(e)
    return bool(message and (point == "stripe1" or np.all(dst == 77))), message


def faults_child(point, name):
    """Runs in a fresh process with CUDAFX_CUDA_FAIL set: the first call."""
    engine = P.Engine()
    src = test_image(301, 203, 3, np.uint8)
    run, _ = FILTERS[name]
    ref, _ = run(engine, src, "cpu", False)
    out, report = run(engine, src, "auto", False)
    ok = report.backend_used == P.BACKENDS["cpu"] and b"injected" in report.fallback \
        and np.array_equal(out, ref)
    forced_ok, message = forced_cuda_fails(engine, name, src, point)
    print("%s %s %s | %s | %s" % (int(ok), int(forced_ok), report.fallback.decode(), message, name))


def faults():
    for point in ("alloc", "launch", "stripe0", "stripe1"):
        for name in FILTERS:
            env = dict(os.environ, CUDAFX_CUDA_FAIL=point, CUDAFX_CUDA_MEM_LIMIT="256K")
            r = subprocess.run([sys.executable, __file__, "faults-child", point, name], env=env,
                               capture_output=True, text=True)
            line = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr[-300:]
            fell_back, forced = line.split(" ")[:2] if r.returncode == 0 else ("0", "0")
            verdict(fell_back == "1", "%s fault %s on the first call: auto falls back, identical "
                    "to the CPU (%s)" % (name, point, line))
            verdict(forced == "1", "%s fault %s, cuda forced: fails%s"
                    % (name, point, "" if point == "stripe1" else ", dst untouched"))
    # a fault in the middle of a run of preview-sized calls
    engine = P.Engine()
    src = test_image(384, 512, 4, np.uint8, seed=2)
    for name, (run, tol) in FILTERS.items():
        ref, _ = run(engine, src, "cpu", True)
        used = []
        ok = True
        for i in range(20):
            if i == 10:
                os.environ["CUDAFX_CUDA_FAIL"] = "launch"
            out, report = run(engine, src, "auto", True)
            os.environ.pop("CUDAFX_CUDA_FAIL", None)
            used.append("cuda" if report.backend_used == P.BACKENDS["cuda"] else "cpu")
            ok &= max_diff(out, ref) <= (0 if used[-1] == "cpu" else tol)
        verdict(ok and used[10] == "cpu" and used[11:] == ["cuda"] * 9 and used[:10] == ["cuda"] * 10,
                "%s: fault at preview call 10 of 20 falls back there only (%s)" % (name, " ".join(used)))


def huge(width, height, cap):
    engine = P.Engine()
    src = np.empty((height, width, 4), dtype=np.float32)
    rng = np.random.default_rng(1)
    for y in range(0, height, 256):
        rng.random(src[y:y + 256].shape, dtype=np.float32, out=src[y:y + 256])
    print("image %dx%d RGBA float, %.2f GB; device memory cap %s" % (width, height, src.nbytes / 1e9, cap))
    for name, (run, tol) in FILTERS.items():
        try:
            huge_one(engine, src, name, run, tol, cap)
        except P.CudafxError as e:
            verdict(False, "%s: %s" % (name, e))


def huge_one(engine, src, name, run, tol, cap):
    t = time.monotonic()
    ref, _ = run(engine, src, "cpu", True)
    cpu_s = time.monotonic() - t
    os.environ.pop("CUDAFX_CUDA_MEM_LIMIT", None)
    whole, r1 = run(engine, src, "cuda", True)
    os.environ["CUDAFX_CUDA_MEM_LIMIT"] = cap
    try:
        t = time.monotonic()
        capped, r2 = run(engine, src, "cuda", True)
        capped_s = time.monotonic() - t
    finally:
        os.environ.pop("CUDAFX_CUDA_MEM_LIMIT")
    d = max_diff(capped, ref)
    verdict(np.array_equal(capped, whole) and d <= tol,
            "%s: capped at %s identical to uncapped, max diff from CPU %.3g (<= %.3g); CPU %.1f s, "
            "GPU capped %.1f s (kernels %.0f ms, copies %.0f ms)"
            % (name, cap, d, tol, cpu_s, capped_s, r2.kernel_ms, r2.transfer_ms))
    del ref, whole, capped


def concurrent_child():
    engine = P.Engine()
    src = test_image(3000, 4000, 3, np.uint8, seed=3)
    refs = {name: run(engine, src, "cpu", False)[0] for name, (run, _) in FILTERS.items()}
    for _ in range(10):
        for name, (run, tol) in FILTERS.items():
            out, report = run(engine, src, "cuda", False)
            if max_diff(out, refs[name]) > tol:
                print("%s differs from the CPU" % name)
                sys.exit(1)
    print("%d GPU runs within docs/TESTING.md's tolerances of the CPU" % (10 * len(FILTERS)))


def concurrent():
    procs = [subprocess.Popen([sys.executable, __file__, "concurrent-child"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    for i, p in enumerate(procs):
        out, _ = p.communicate()
        verdict(p.returncode == 0, "process %d of 2 at once: %s" % (i + 1, out.strip()[-300:]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", choices=["faults", "huge", "concurrent", "faults-child", "concurrent-child"])
    ap.add_argument("args", nargs="*")
    ap.add_argument("--width", type=int, default=10000)
    ap.add_argument("--height", type=int, default=10000)
    ap.add_argument("--cap", default="256M")
    a = ap.parse_args()
    if a.part == "faults-child":
        return faults_child(*a.args)
    if a.part == "concurrent-child":
        return concurrent_child()
    {"faults": faults, "concurrent": concurrent,
     "huge": lambda: huge(a.width, a.height, a.cap)}[a.part]()
    print("%d passed, %d failed" % (results["passed"], results["failed"]))
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    sys.exit(main() or 0)
