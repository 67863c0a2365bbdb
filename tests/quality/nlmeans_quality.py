#!/usr/bin/python3
"""NL-means quality: PSNR of cudafx's automatic mode against OpenCV's
fastNlMeansDenoisingColored (fastNlMeansDenoising for grey) with the best h
of a grid, on test images with added Gaussian noise. A measurement, not a test.

    /usr/bin/python3 tests/quality/nlmeans_quality.py   (after make)
"""
import os
import sys

import cv2
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import pycudafx  # noqa: E402

COLOUR = ["astronaut", "chelsea", "coffee"]
GREY = ["camera"]
SIGMAS = [10, 20, 30]
H_GRID = range(3, 31)


def psnr(ref, img):
    mse = np.mean((ref.astype(np.float64) - img.astype(np.float64)) ** 2)
    return 10 * np.log10(255.0 ** 2 / mse)


def noisy_copy(img, sigma, seed):
    rng = np.random.default_rng(seed)
    return np.clip(np.rint(img + rng.normal(0, sigma, img.shape)), 0, 255).astype(np.uint8)


def opencv_best(noisy, clean, colour):
    best = -1.0, 0
    for h in H_GRID:
        if colour:
            out = cv2.fastNlMeansDenoisingColored(noisy, None, h, h, 7, 21)
        else:
            out = cv2.fastNlMeansDenoising(noisy, None, h, 7, 21)
        best = max(best, (psnr(clean, out), h))
    return best


def main():
    engine = pycudafx.Engine()
    cv2.setNumThreads(os.cpu_count() or 1)
    rows = []
    for names, colour in ((COLOUR, True), (GREY, False)):
        for sigma in SIGMAS:
            acc = []
            for i, name in enumerate(names):
                path = os.path.join(ROOT, "tests", "data", name + ".png")
                clean = cv2.imread(path, cv2.IMREAD_COLOR if colour else cv2.IMREAD_GRAYSCALE)
                noisy = noisy_copy(clean, sigma, seed=1000 * sigma + i)
                ours, _, info = engine.nlmeans(noisy, automatic=True)
                cv_psnr, cv_h = opencv_best(noisy, clean, colour)
                acc.append((psnr(clean, noisy), psnr(clean, ours), cv_psnr))
                print(f"  {name:10s} sigma {sigma:2d}: est {info.sigma:5.2f} h {info.h:5.2f} "
                      f"P {info.patch_radius} S {info.search_radius}  ours {acc[-1][1]:.2f} dB, "
                      f"OpenCV {cv_psnr:.2f} dB at h {cv_h}", flush=True)
            rows.append(("colour" if colour else "grey", sigma, *np.mean(acc, axis=0)))
    print("\nset     sigma  noisy   ours    OpenCV best  (mean PSNR, dB)")
    for kind, sigma, n, o, c in rows:
        print(f"{kind:7s} {sigma:5d}  {n:6.2f}  {o:6.2f}  {c:6.2f}  {'ok' if o >= c else 'BELOW'}")


if __name__ == "__main__":
    main()
