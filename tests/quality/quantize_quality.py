#!/usr/bin/python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Quality of the k-means quantizer against OpenCV's cv2.kmeans.

For each test photo and K in 8, 16, 64: PSNR (dB) of our RGB quantization
(no dither, default max-iterations, seed 0) and of cv2.kmeans (k-means++
centres, 3 attempts, 20 iterations; image rebuilt from its centres, rounded
to 8 bits) against the original. Prints a table and the mean per K; exits 1
when our mean is below OpenCV's for some K.

Usage: /usr/bin/python3 tests/quality/quantize_quality.py   (after make)
"""
import os
import sys

import cv2
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import pycudafx  # noqa: E402

PHOTOS = ["astronaut", "chelsea", "coffee"]
COLORS = [8, 16, 64]
RGB = 1


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def opencv_quantize(img, k):
    data = img.reshape(-1, 3).astype(np.float32)
    criteria = (cv2.TERM_CRITERIA_MAX_ITER, 20, 0)
    _, labels, centres = cv2.kmeans(data, k, None, criteria, 3, cv2.KMEANS_PP_CENTERS)
    centres = np.clip(np.rint(centres), 0, 255).astype(np.uint8)
    return centres[labels.ravel()].reshape(img.shape)


def main():
    cv2.setRNGSeed(0)
    engine = pycudafx.Engine()
    max_iterations = int(engine.default("quantize", "max-iterations"))
    means = {k: [0.0, 0.0] for k in COLORS}
    print("%-10s %4s %10s %10s %7s %5s" % ("photo", "K", "ours dB", "opencv dB", "diff", "iter"))
    for name in PHOTOS:
        bgr = cv2.imread(os.path.join(ROOT, "tests", "data", name + ".png"), cv2.IMREAD_COLOR)
        img = np.ascontiguousarray(bgr[:, :, ::-1])
        for k in COLORS:
            ours, _, palette = engine.quantize(img, colors=k, color_space=RGB, dither=0,
                                               max_iterations=max_iterations, seed=0)
            theirs = opencv_quantize(img, k)
            a, b = psnr(img, ours), psnr(img, theirs)
            means[k][0] += a / len(PHOTOS)
            means[k][1] += b / len(PHOTOS)
            print("%-10s %4d %10.2f %10.2f %+7.3f %5d" % (name, k, a, b, a - b, palette.iterations))
    failed = False
    for k in COLORS:
        a, b = means[k]
        ok = a >= b
        failed |= not ok
        print("%-10s %4d %10.2f %10.2f %+7.3f %s" % ("mean", k, a, b, a - b, "ok" if ok else "BELOW OPENCV"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
