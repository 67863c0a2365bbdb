#!/usr/bin/python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""NL-means and NL-Bayes on camera-pipeline JPEGs: PSNR of cudafx's
automatic mode of both, and the noise it estimates, beside G'MIC `nlmeans`
at its best strength per image, on tests/data's photos put through bench/camera_pipeline.py (raw
mosaic, Poisson-Gaussian raw noise, two demosaicking methods, a colour
matrix, sRGB, JPEG 85-95). A measurement, not a test: it asserts nothing and
CI does not run it.

    make quality                                   (after make)
    /usr/bin/python3 tests/quality/nlmeans_camera_jpeg.py [--no-gmic] [--lib build/libcudafx.so]

Corpus: 4 photos (astronaut, chelsea, coffee; camera, grey, developed as a
grey scene in colour) x LEVELS raw noise levels x both demosaicking
methods; JPEG quality 85, 90, 95 in turn; seed 7000 level + 10 image +
method. PSNR against the pipeline's output without noise and JPEG.
G'MIC: `gmic in.png nlmeans 4,4,T round cut 0,255 o out.png`, T =
GMIC_K x level; the best per image, '*' when on the grid's edge (results
cached in build/quality-cache, as nlmeans_quality.py's). "clean JPEG" is
the clean reference through the same JPEG quality: what a denoiser that
removed all the noise but none of the compression's loss would reach, a
yardstick for how much of the files' error is JPEG's. `--ceiling` adds
cudafx's nl-means at its best manual strength per image (h in H_GRID, patch
radius 1-3, search radius 10; '*' when on the grid's edge): how far any
choice of strength could take automatic mode on these files.

Grey: each file and its reference made grey (OpenCV's BGR2GRAY, Rec. 601
luma), as a photographer's grey layer of the JPEG is; noise alike in the
three channels becomes a grey image's one channel, with no channel
correlation left to read. Both filters automatic.
"""
import argparse
import os
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pycudafx  # noqa: E402
from camera_pipeline import DEMOSAIC, camera_jpeg, clean_reference  # noqa: E402
from nlmeans_quality import Cache, gmic_best, psnr  # noqa: E402

PHOTOS = ["astronaut", "chelsea", "coffee", "camera"]
LEVELS = [3, 6, 12]  # raw noise: bench/camera_noise.py's camera_model(level) on the mosaic
QUALITIES = [85, 90, 95]
GMIC_K = [0.7, 1.0, 1.4, 2.0, 2.8, 4.0]
H_GRID = [3, 4.5, 6, 8, 11, 15, 20, 28]


def corpus():
    """(name, level, method, quality, clean reference, noisy JPEG) of every case."""
    k = 0
    for level in LEVELS:
        for i, name in enumerate(PHOTOS):
            photo = cv2.imread(os.path.join(ROOT, "tests", "data", name + ".png"), cv2.IMREAD_UNCHANGED)
            for j, method in enumerate(DEMOSAIC):
                quality = QUALITIES[k % len(QUALITIES)]
                k += 1
                noisy = camera_jpeg(photo, level, method, quality, seed=7000 * level + 10 * i + j)
                yield name, level, method, quality, clean_reference(photo, method), noisy


def clean_jpeg(clean, quality):
    """The clean reference through the JPEG the noisy file went through."""
    ok, buf = cv2.imencode(".jpg", clean, [cv2.IMWRITE_JPEG_QUALITY, quality])
    return cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)


def best_manual(engine, noisy, clean):
    """nl-means' best PSNR over H_GRID x patch radius 1-3, its h, and whether h is on the grid's edge."""
    runs = [(psnr(clean, engine.nlmeans(noisy, automatic=False, h=h, patch_radius=r, search_radius=10)[0]), h)
            for h in H_GRID for r in (1, 2, 3)]
    p, h = max(runs)
    return p, h, h in (H_GRID[0], H_GRID[-1])


def model_text(info):
    m = info.noise
    kind = "camera" if m.signal_dependent else "flat"
    return f"{kind} sigma {info.sigma:5.2f} corr {m.correlation:4.2f}{'*' if m.correlated else ' '} " \
           f"ch {m.channel_corr:4.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-gmic", action="store_true", help="skip G'MIC (also when not installed)")
    ap.add_argument("--lib", help="the engine to measure (default build/libcudafx.so)")
    ap.add_argument("--ceiling", action="store_true",
                    help="add nl-means at its best manual strength per image (24 more runs per image)")
    args = ap.parse_args()
    engine = pycudafx.Engine(args.lib)
    use_gmic = not args.no_gmic and shutil.which("gmic") is not None
    if not use_gmic and not args.no_gmic:
        print("G'MIC not found (apt-get install gmic): its column is nan")
    cache, pool = Cache(), ThreadPoolExecutor(2)
    print("camera-pipeline JPEGs: per image the estimate (flat or camera model, sigma, nearest-neighbour "
          "correlation, * when reported correlated, channel correlation) and PSNR (dB)")
    rows, grey_rows = {}, {}
    for name, level, method, quality, clean, noisy in corpus():
        out, _, info = engine.nlmeans(noisy, automatic=True)
        nlb, _, _ = engine.nlbayes(noisy, automatic=True)
        if use_gmic:
            g_p, g_t, _, g_edge = gmic_best(noisy, clean, level, cache, pool, GMIC_K)
        else:
            g_p, g_t, g_edge = float("nan"), 0, False
        c_p, c_h, c_edge = best_manual(engine, noisy, clean) if args.ceiling else (float("nan"), 0, False)
        n_p, o_p, b_p = psnr(clean, noisy), psnr(clean, out), psnr(clean, nlb)
        j_p = psnr(clean, clean_jpeg(clean, quality))
        rows.setdefault(level, []).append((n_p, o_p, g_p, b_p, j_p, c_p))
        grey, grey_clean = cv2.cvtColor(noisy, cv2.COLOR_BGR2GRAY), cv2.cvtColor(clean, cv2.COLOR_BGR2GRAY)
        grey_nlm, _, grey_info = engine.nlmeans(grey, automatic=True)
        grey_nlb, _, _ = engine.nlbayes(grey, automatic=True)
        grey_p = (psnr(grey_clean, grey), psnr(grey_clean, grey_nlm), psnr(grey_clean, grey_nlb))
        grey_rows.setdefault(level, []).append(grey_p)
        ceiling = f"  best h {c_p:5.2f} (h {c_h:g}{'*' if c_edge else ''})" if args.ceiling else ""
        print(f"  {name:9s} level {level:2d} {method:10s} q{quality}: {model_text(info)}  noisy {n_p:5.2f}  "
              f"ours {o_p:5.2f}  nl-bayes {b_p:5.2f}  G'MIC {g_p:5.2f} (T {g_t:g}{'*' if g_edge else ''}){ceiling}",
              flush=True)
        print(f"  {'':9s} grey{'':20s}{model_text(grey_info)}  noisy {grey_p[0]:5.2f}  ours {grey_p[1]:5.2f}  "
              f"nl-bayes {grey_p[2]:5.2f}", flush=True)
    print(f"\ncamera-pipeline JPEGs: mean PSNR (dB) over {len(PHOTOS)} photos x {len(DEMOSAIC)} demosaicking "
          "methods; ours nl-means --auto, nl-bayes automatic, G'MIC nlmeans at its best T per image")
    print("level  noisy   ours  nl-bayes  G'MIC  ours-noisy  G'MIC-noisy  ours-G'MIC  nl-bayes-ours  clean JPEG"
          + ("  best h  best h-G'MIC" if args.ceiling else ""))
    for level in LEVELS:
        n, o, g, b, j, c = np.mean(rows[level], axis=0)
        ceiling = f"  {c:6.2f}  {c - g:+12.2f}" if args.ceiling else ""
        print(f"{level:5d}  {n:5.2f}  {o:5.2f}  {b:8.2f}  {g:5.2f}  {o - n:+10.2f}  {g - n:+11.2f}  {o - g:+10.2f}  "
              f"{b - o:+13.2f}  {j:10.2f}{ceiling}")

    print("\ngrey layers of the same JPEGs: mean PSNR (dB); ours nl-means --auto, nl-bayes automatic")
    print("level  noisy   ours  nl-bayes  ours-noisy  nl-bayes-noisy")
    for level in LEVELS:
        n, o, b = np.mean(grey_rows[level], axis=0)
        print(f"{level:5d}  {n:5.2f}  {o:5.2f}  {b:8.2f}  {o - n:+10.2f}  {b - n:+14.2f}")


if __name__ == "__main__":
    main()
