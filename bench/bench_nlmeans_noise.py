# SPDX-License-Identifier: GPL-3.0-or-later
"""Automatic nl-means and its camera-noise model, a benchmark, never a test:

  speed  what automatic mode's estimate (the noise-model fit, whose
         histograms the backend counts, and with a flat model the one-sigma
         estimate) adds to --auto on the 12-megapixel RGB u8 image of the
         benchmarks, with Gaussian noise (flat model) and with camera noise
         (the run behind the transform): --auto against the same call with
         the sigma and model it found given (nothing left to estimate);
  check  (--check FILE.npz, written by tests/quality/nlmeans_quality.py
         --save-camera) the CUDA backend against the CPU on the quality
         script's camera-noise photos: largest difference and PSNR of each.

    /usr/bin/python3 bench/bench_nlmeans_noise.py [--backends cpu,cuda] [--runs N] [--today LIB]
                                                  [--source astronaut.npy] [--check FILE.npz]
"""
import argparse
import ctypes as C
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pycudafx  # noqa: E402
from camera_noise import camera_noisy_copy  # noqa: E402

ROOT = pycudafx.ROOT


def source(path):
    """astronaut.png (or an .npy of it) as 4000x3000 RGB, cubic when OpenCV
    is there (bench.py's image), else pixel repetition."""
    if path and path.endswith(".npy"):
        rgb = np.load(path)
    else:
        import cv2
        rgb = cv2.cvtColor(cv2.imread(path or os.path.join(ROOT, "tests", "data", "astronaut.png")),
                           cv2.COLOR_BGR2RGB)
    try:
        import cv2
        return cv2.resize(rgb, (4000, 3000), interpolation=cv2.INTER_CUBIC)
    except ImportError:
        big = np.repeat(np.repeat(rgb, 6, axis=0), 8, axis=1)
        return np.ascontiguousarray(big[:3000, :4000])


class NlmeansParams(C.Structure):
    _fields_ = [("automatic", C.c_int), ("h", C.c_double), ("patch_radius", C.c_int),
                ("search_radius", C.c_int), ("sigma", C.c_double), ("noise", pycudafx.NoiseModel)]


def given_ms(engine, noisy, backend, runs, info):
    """Best automatic call (ms) with info's sigma and noise model given: the
    same parameters and run as --auto's, without the estimate."""
    p = NlmeansParams(1, 10.0, 1, 10, info.sigma, info.noise)
    src_a, src = engine._image(noisy, False)
    dst_a = np.empty_like(src_a)
    _, dst = engine._image(dst_a, False)
    report = pycudafx.Report()
    opts = pycudafx.Options(pycudafx.BACKENDS[backend], 0, None, None, C.pointer(report))
    times = []
    for _ in range(runs + 1):  # the first warms
        start = time.perf_counter()
        if engine.lib.cudafx_nlmeans(C.byref(src), C.byref(dst), C.byref(p), C.byref(opts), None):
            raise pycudafx.CudafxError(engine.lib.cudafx_error_message().decode())
        times.append((time.perf_counter() - start) * 1e3)
        if backend == "cuda" and report.backend_used != 2:
            raise pycudafx.CudafxError("ran on the CPU: " + report.fallback.decode())
    return min(times[1:])


def auto_ms(engine, noisy, backend, runs):
    """Best whole --auto call (ms) and its info."""
    engine.nlmeans(noisy, backend=backend)  # warm: CUDA context, page faults
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        _, report, info = engine.nlmeans(noisy, backend=backend)
        times.append((time.perf_counter() - start) * 1e3)
        if backend == "cuda" and report.backend_used != 2:
            raise pycudafx.CudafxError("ran on the CPU: " + report.fallback.decode())
    return min(times), info


def speed(engine, today, backends, runs, src):
    rng = np.random.default_rng(22)
    cases = [("gaussian 20", np.clip(np.rint(src + rng.normal(0, 20, src.shape)), 0, 255).astype(np.uint8)),
             ("camera 16", camera_noisy_copy(src, 16, 16))]
    print(f"12 MP RGB u8, best of {runs}, {os.cpu_count()} threads; given: the same call with the sigma and model"
          " --auto found given; added: (auto - given) / given; today: --auto of the --today engine")
    print("case         backend  model      auto ms  given ms   added  today ms")
    for name, noisy in cases:
        for backend in backends:
            auto, info = auto_ms(engine, noisy, backend, runs)
            old = auto_ms(today, noisy, backend, runs)[0] if today else float("nan")
            given = given_ms(engine, noisy, backend, runs, info)
            model = "camera" if info.noise.signal_dependent else "flat"
            print(f"{name:12s} {backend:7s}  {model:8s} {auto:8.1f} {given:9.1f}  "
                  f"{100 * (auto - given) / given:5.1f}%  {old:8.1f}", flush=True)


def check(engine, path):
    """CUDA against the CPU on the quality script's camera-noise photos."""
    data = np.load(path)
    worst = 0
    print("image                 CPU dB  CUDA dB  max |CUDA - CPU|  model")
    for key in sorted(k for k in data.files if k.startswith("noisy ")):
        noisy, clean = data[key], data["clean " + key[6:].rsplit("-", 1)[0]]
        cpu, _, info = engine.nlmeans(noisy, backend="cpu")
        gpu, report, _ = engine.nlmeans(noisy, backend="cuda")
        if report.backend_used != 2:
            raise pycudafx.CudafxError("ran on the CPU: " + report.fallback.decode())
        d = int(np.max(np.abs(cpu.astype(np.int16) - gpu.astype(np.int16))))
        worst = max(worst, d)

        def psnr(x):
            return 10 * np.log10(255 ** 2 / np.mean((x.astype(np.float64) - clean) ** 2))
        print(f"{key[6:]:20s}  {psnr(cpu):6.2f}  {psnr(gpu):7.2f}  {d:16d}  "
              f"{'camera' if info.noise.signal_dependent else 'flat'}", flush=True)
    print(f"largest difference {worst} ({'within' if worst <= 1 else 'OUTSIDE'} the contract's 1)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", help="engine (default build/libcudafx.so)")
    ap.add_argument("--today", help="an engine to time beside it (e.g. build/quality-baseline/build/libcudafx.so)")
    ap.add_argument("--backends", default="cpu,cuda")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--source", help="astronaut as .png or .npy (RGB)")
    ap.add_argument("--check", help="camera-noise photos (.npz) to compare CUDA with the CPU on")
    ap.add_argument("--no-speed", action="store_true")
    args = ap.parse_args()
    engine = pycudafx.Engine(args.lib)
    if args.check:
        check(engine, args.check)
    if not args.no_speed:
        today = pycudafx.Engine(args.today) if args.today else None
        speed(engine, today, args.backends.split(","), args.runs, source(args.source))


if __name__ == "__main__":
    main()
