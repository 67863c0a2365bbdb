#!/usr/bin/python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""The noise estimate of automatic nl-means (cudafx_nlmeans_estimate) on
tests/data's photos: Gaussian noise sigma 0, 5, 10, 20, 30 as
nlmeans_quality.py adds it (seed 1000 sigma + photo index, rounded and
clipped to u8) and its camera noise (bench/camera_noise.py, levels 8, 16,
28): sigma found, its error, the model chosen (flat or camera) and the noise
correlation reported. A measurement, not a test.

    /usr/bin/python3 tests/quality/noise_estimate_accuracy.py [--lib build/libcudafx.so]
"""
import argparse
import ctypes as C
import os
import sys

import cv2
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import pycudafx  # noqa: E402
from camera_noise import camera_noisy_copy  # noqa: E402

PHOTOS = ["astronaut", "chelsea", "coffee", "camera"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", help="the engine to measure (default build/libcudafx.so)")
    args = ap.parse_args()
    engine = pycudafx.Engine(args.lib)

    def estimate(a):
        a, img = engine._image(a, False)
        info = pycudafx.NlmeansInfo()
        opts = pycudafx.Options(pycudafx.BACKENDS["cpu"], 0, None, None, None)
        if engine.lib.cudafx_nlmeans_estimate(C.byref(img), C.byref(opts), C.byref(info)):
            raise pycudafx.CudafxError(engine.lib.cudafx_error_message().decode())
        return info

    worst, flat, cases = 0.0, 0, 0
    print("photo      noise      sigma   error  model   corr  channels")
    for i, name in enumerate(PHOTOS):
        clean = cv2.imread(os.path.join(ROOT, "tests", "data", name + ".png"), cv2.IMREAD_UNCHANGED)
        for sigma in (0, 5, 10, 20, 30):
            rng = np.random.default_rng(1000 * sigma + i)
            noisy = np.clip(np.rint(clean + rng.normal(0, sigma, clean.shape)), 0, 255).astype(np.uint8)
            info = estimate(noisy)
            m = info.noise
            err = "     -"
            if sigma:
                e = 100 * (info.sigma / sigma - 1)
                worst, cases, flat = max(worst, abs(e)), cases + 1, flat + (not m.signal_dependent)
                err = f"{e:+5.1f}%"
            print(f"{name:9s}  gauss {sigma:2d}   {info.sigma:6.2f}  {err}  "
                  f"{'camera' if m.signal_dependent else 'flat  '}  {m.correlation:.2f}  {m.channel_corr:.2f}",
                  flush=True)
        for level in (8, 16, 28):
            info = estimate(camera_noisy_copy(clean, level, seed=5000 * level + i))
            m = info.noise
            print(f"{name:9s}  camera {level:2d}  {info.sigma:6.2f}       -  "
                  f"{'camera' if m.signal_dependent else 'flat  '}  {m.correlation:.2f}  {m.channel_corr:.2f}",
                  flush=True)
    print(f"Gaussian sigma 5-30: worst error {worst:.1f}%, flat in {flat} of {cases}")


if __name__ == "__main__":
    main()
