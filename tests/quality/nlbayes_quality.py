#!/usr/bin/python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""NL-Bayes quality: PSNR of cudafx nl-bayes, with the true sigma and in
automatic mode, beside automatic nl-means, G'MIC `nlmeans` and OpenCV at
their best strength per image, and the published NL-Bayes (the authors' IPOL
program, given the true sigma) on exactly these noisy images. A measurement,
not a test: it asserts nothing and CI does not run it.

    make quality                                   (after make)
    /usr/bin/python3 tests/quality/nlbayes_quality.py [--no-gmic] [--only gaussian|camera] [--lib L]

The noisy images are nlmeans_quality.py's: Gaussian noise sigma 10, 20, 30
on the 8-bit sRGB values (seed 1000 sigma + image index), and its camera
(Poisson-Gaussian, linear light) noise at levels 8, 16, 28 (seed 5000 level
+ image index). The peers' grids, their cache and G'MIC's command are
nlmeans_quality.py's too. "IPOL" is the mean over the three colour photos of
the authors' NL-Bayes from shared/data/denoise-anchors.md (given the true
sigma, default parameters). Times: the engine call per image, wall clock,
on this machine's backend (nl-bayes on the CPU unless a GPU is used).
"""
import argparse
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nlmeans_quality as nq  # noqa: E402

# shared/data/denoise-anchors.md: mean PSNR of the IPOL NL-Bayes program on
# the three colour photos with exactly nq.noisy_copy's noise.
IPOL_NLBAYES = {10: 36.31, 20: 32.49, 30: 29.99}


def timed(fn, *args, **kw):
    start = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - start


def model_text(info):
    m = info.noise
    if not m.signal_dependent:
        return f"flat sigma {info.sigma:5.2f}"
    return f"camera {m.sigma_dark:4.1f} dark .. {m.sigma_light:4.1f} light"


def gaussian(engine, use_gmic):
    cache = nq.Cache()
    pool = ThreadPoolExecutor(2)
    rows = []
    for names, colour in ((nq.COLOUR, True), (nq.GREY, False)):
        for sigma in nq.SIGMAS:
            acc = []
            for i, name in enumerate(names):
                clean = nq.load(name, colour)
                noisy = nq.noisy_copy(clean, sigma, seed=1000 * sigma + i)
                (given, _, _), given_s = timed(engine.nlbayes, noisy, automatic=False, sigma=sigma)
                (auto, _, info), auto_s = timed(engine.nlbayes, noisy, automatic=True)
                nlm, _, _ = engine.nlmeans(noisy, automatic=True)
                cv_p, cv_h, _, cv_edge = nq.opencv_best(noisy, clean, sigma, colour, cache)
                if use_gmic:
                    g_p, g_t, _, g_edge = nq.gmic_best(noisy, clean, sigma, cache, pool)
                else:
                    g_p, g_t, g_edge = float("nan"), 0, False
                acc.append((nq.psnr(clean, noisy), nq.psnr(clean, given), nq.psnr(clean, auto),
                            nq.psnr(clean, nlm), g_p, cv_p, given_s, auto_s))
                print(f"  {name:9s} sigma {sigma:2d}: {model_text(info)}  given {acc[-1][1]:.2f}  "
                      f"auto {acc[-1][2]:.2f}  nl-means {acc[-1][3]:.2f}  "
                      f"G'MIC {g_p:.2f} (T {g_t:g}{'*' if g_edge else ''})  "
                      f"OpenCV {cv_p:.2f} (h {cv_h:g}{'*' if cv_edge else ''})  "
                      f"{given_s * 1e3:.0f} / {auto_s * 1e3:.0f} ms", flush=True)
            rows.append(("colour" if colour else "grey", sigma, *np.mean(acc, axis=0)))
    print("\nGaussian noise: mean PSNR (dB); nl-bayes given the true sigma and automatic, nl-means "
          "automatic, G'MIC and OpenCV at their best per image, IPOL NL-Bayes (colour only)")
    print("set     sigma  noisy  given   auto  nl-means  G'MIC  OpenCV   IPOL  given-IPOL  "
          "auto-IPOL  auto-nl-means  given ms  auto ms")
    for kind, sigma, n, gv, au, nm, g, c, gs, as_ in rows:
        ipol = IPOL_NLBAYES[sigma] if kind == "colour" else float("nan")
        print(f"{kind:7s} {sigma:5d}  {n:5.2f}  {gv:5.2f}  {au:5.2f}  {nm:8.2f}  {g:5.2f}  {c:6.2f}  "
              f"{ipol:5.2f}  {gv - ipol:+10.2f}  {au - ipol:+9.2f}  {au - nm:+13.2f}  {gs * 1e3:8.0f}  "
              f"{as_ * 1e3:7.0f}")


def camera(engine, use_gmic):
    cache = nq.Cache()
    pool = ThreadPoolExecutor(2)
    rows = []
    images = [(n, True) for n in nq.COLOUR] + [(n, False) for n in nq.GREY]
    for level in nq.CAMERA_LEVELS:
        acc = []
        for i, (name, colour) in enumerate(images):
            clean = nq.load(name, colour)
            noisy = nq.camera_noisy_copy(clean, level, seed=5000 * level + i)
            (auto, _, info), auto_s = timed(engine.nlbayes, noisy, automatic=True)
            nlm, _, _ = engine.nlmeans(noisy, automatic=True)
            if use_gmic:
                g_p, g_t, _, g_edge = nq.gmic_best(noisy, clean, level, cache, pool, nq.GMIC_K_CAMERA)
            else:
                g_p, g_t, g_edge = float("nan"), 0, False
            acc.append((nq.psnr(clean, noisy), nq.psnr(clean, auto), nq.psnr(clean, nlm), g_p, auto_s))
            print(f"  {name:9s} level {level:2d}: {model_text(info)}  auto {acc[-1][1]:.2f}  "
                  f"nl-means {acc[-1][2]:.2f}  G'MIC {g_p:.2f} (T {g_t:g}{'*' if g_edge else ''})  "
                  f"{auto_s * 1e3:.0f} ms", flush=True)
        rows.append((level, *np.mean(acc, axis=0)))
    print(f"\ncamera noise: mean PSNR (dB) over {len(images)} photos ({len(nq.COLOUR)} colour, "
          f"{len(nq.GREY)} grey); nl-bayes and nl-means automatic, G'MIC nlmeans at its best T per image")
    print("level  noisy   auto  nl-means  G'MIC  auto-nl-means  auto-G'MIC  auto ms")
    for level, n, au, nm, g, as_ in rows:
        print(f"{level:5d}  {n:5.2f}  {au:5.2f}  {nm:8.2f}  {g:5.2f}  {au - nm:+13.2f}  {au - g:+10.2f}  "
              f"{as_ * 1e3:7.0f}")
    mean = np.mean([r[2] - r[3] for r in rows])
    print(f"mean over the levels of auto - nl-means: {mean:+.2f} dB")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-gmic", action="store_true", help="skip G'MIC (also when not installed)")
    ap.add_argument("--lib", help="the engine to measure (default build/libcudafx.so)")
    ap.add_argument("--only", choices=("gaussian", "camera"), help="one kind of noise")
    args = ap.parse_args()
    engine = nq.pycudafx.Engine(args.lib)
    cv2.setNumThreads(os.cpu_count() or 1)
    use_gmic = not args.no_gmic and shutil.which("gmic") is not None
    if not use_gmic and not args.no_gmic:
        print("G'MIC not found (apt-get install gmic): its column is nan")
    if args.only != "camera":
        gaussian(engine, use_gmic)
    if args.only != "gaussian":
        camera(engine, use_gmic)


if __name__ == "__main__":
    main()
