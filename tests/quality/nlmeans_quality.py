#!/usr/bin/python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""NL-means quality: PSNR of cudafx's automatic mode
against the best settings of G'MIC `nlmeans` and OpenCV
`fastNlMeansDenoisingColored` (`fastNlMeansDenoising` for grey), and against
`--auto` as it was before the camera-noise model ("today"), on the test photos with two
kinds of noise, plus the speed of --auto against OpenCV on a 1-megapixel
photo. A measurement, not a test: it asserts nothing and CI does not run it.

    make quality                                   (after make)
    /usr/bin/python3 tests/quality/nlmeans_quality.py [--no-gmic] [--only gaussian|camera]
                                                      [--crop docs/x.png]

Gaussian noise: sigma 10, 20, 30 added to the 8-bit sRGB values, seed
1000 sigma + image index, rounded and clipped to u8.
Camera noise (bench/camera_noise.py): Poisson-Gaussian noise in
linear light, variance a x + b (shot noise plus read noise), encoded back
to 8-bit sRGB; seed 5000 level + image index. Three levels: the sRGB sigma
at mid grey (128) is 8, 16, 28 units, nine tenths of the linear variance
there shot noise (a), one tenth read noise (b): the shadows carry much more
noise in sRGB units than the highlights, as a camera's do.
Peers get their best strength per image from a grid (s = sigma, or the
mid-grey sigma for camera noise):
  G'MIC  `gmic in.png nlmeans 4,4,T round cut 0,255 o out.png`,
         T = 0.4, 0.5, ... 0.9 s (camera noise: 0.6 ... 1.3 s; one process
         per run, 2 at a time);
  OpenCV h = 0.5, 0.6, ... 1.3 s (h = hColor), 7x7 patches, 21x21 search
         (Gaussian noise only).
"Today" is the engine of commit BASELINE_REV below (the last before the
camera-noise model), built once with CUDA=0 into build/quality-baseline.
A best value on the edge of its grid is marked with '*'. Peer results are
cached in build/quality-cache (keyed by the noisy image's bytes and the
setting), so re-running after a change to cudafx recomputes only cudafx.
The photos are tests/data's copies of shared/data's (the script runs without
../shared).
"""
import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import pycudafx  # noqa: E402
from camera_noise import camera_model, camera_noisy_copy, srgb_to_linear  # noqa: E402

BASELINE_REV = "3997a5d"
BASELINE_DIR = os.path.join(ROOT, "build", "quality-baseline")
COLOUR = ["astronaut", "chelsea", "coffee"]
GREY = ["camera"]
SIGMAS = [10, 20, 30]
CAMERA_LEVELS = [8, 16, 28]  # sRGB sigma at mid grey (bench/camera_noise.py)
GMIC_K = [0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
GMIC_K_CAMERA = [0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3]  # its best T is larger: the shadows
OPENCV_K = [0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3]
CACHE = os.path.join(ROOT, "build", "quality-cache")


def psnr(ref, img):
    mse = np.mean((ref.astype(np.float64) - img.astype(np.float64)) ** 2)
    return 10 * np.log10(255.0 ** 2 / mse)


def noisy_copy(img, sigma, seed):
    rng = np.random.default_rng(seed)
    return np.clip(np.rint(img + rng.normal(0, sigma, img.shape)), 0, 255).astype(np.uint8)


def engine_at(rev, where, what):
    """The engine of git revision rev, built once (CPU only) into where, with
    that revision's own binding (its structs may differ from today's)."""
    lib = os.path.join(where, "build", "libcudafx.so")
    binding = os.path.join(where, "bench", "pycudafx.py")
    if not os.path.exists(lib) or not os.path.exists(binding):
        print(f"building {what} ({rev}) in {where} ...", flush=True)
        os.makedirs(where, exist_ok=True)
        archive = subprocess.run(["git", "-C", ROOT, "archive", rev, "core", "Makefile",
                                  "bench/pycudafx.py"], check=True, stdout=subprocess.PIPE).stdout
        subprocess.run(["tar", "-x", "-C", where], input=archive, check=True)
        subprocess.run(["make", "-s", "-j2", "CUDA=0", "build/libcudafx.so"], cwd=where, check=True)
    spec = importlib.util.spec_from_file_location("pycudafx_" + rev, binding)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Engine(lib)


def baseline_engine():
    """The engine of BASELINE_REV."""
    return engine_at(BASELINE_REV, BASELINE_DIR, "today's engine")


class Cache:
    """(PSNR, seconds) of a peer's run, by noisy image and setting."""

    def __init__(self):
        self.path = os.path.join(CACHE, "nlmeans-peers.json")
        try:
            with open(self.path) as f:
                self.data = json.load(f)
        except (OSError, ValueError):
            self.data = {}

    @staticmethod
    def key(noisy, what):
        return hashlib.sha1(noisy.tobytes()).hexdigest()[:16] + " " + what

    def get(self, noisy, what):
        return self.data.get(self.key(noisy, what))

    def put(self, noisy, what, value):
        self.data[self.key(noisy, what)] = value
        os.makedirs(CACHE, exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f)
        os.replace(tmp, self.path)


def gmic_run(noisy, clean, t, tmp):
    """PSNR and wall time of one G'MIC run (process start included)."""
    src = os.path.join(tmp, "in-%g.png" % t)
    dst = os.path.join(tmp, "out-%g.png" % t)
    cv2.imwrite(src, noisy)
    start = time.perf_counter()
    subprocess.run(["gmic", "-v", "-1", src, "nlmeans", "4,4,%g" % t, "round", "cut", "0,255",
                    "o", dst], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    out = cv2.imread(dst, cv2.IMREAD_UNCHANGED)
    return psnr(clean, out), seconds


def gmic_best(noisy, clean, sigma, cache, pool, grid=GMIC_K):
    """Best (PSNR, T, seconds, on the grid's edge) over the T grid."""
    ts = [round(k * sigma, 2) for k in grid]
    todo = [t for t in ts if cache.get(noisy, "gmic %g" % t) is None]
    if todo:
        with tempfile.TemporaryDirectory() as tmp:
            for t, r in zip(todo, pool.map(lambda t: gmic_run(noisy, clean, t, tmp), todo)):
                cache.put(noisy, "gmic %g" % t, r)
    runs = [(cache.get(noisy, "gmic %g" % t), t) for t in ts]
    (p, s), t = max(runs, key=lambda r: r[0][0])
    return p, t, s, t in (ts[0], ts[-1])


def opencv_run(noisy, h, colour):
    start = time.perf_counter()
    if colour:
        out = cv2.fastNlMeansDenoisingColored(noisy, None, h, h, 7, 21)
    else:
        out = cv2.fastNlMeansDenoising(noisy, None, h, 7, 21)
    return out, time.perf_counter() - start


def opencv_best(noisy, clean, sigma, colour, cache):
    hs = [round(k * sigma, 1) for k in OPENCV_K]
    for h in hs:
        if cache.get(noisy, "opencv %g" % h) is None:
            out, seconds = opencv_run(noisy, h, colour)
            cache.put(noisy, "opencv %g" % h, (psnr(clean, out), seconds))
    runs = [(cache.get(noisy, "opencv %g" % h), h) for h in hs]
    (p, s), h = max(runs, key=lambda r: r[0][0])
    return p, h, s, h in (hs[0], hs[-1])


def load(name, colour):
    path = os.path.join(ROOT, "tests", "data", name + ".png")
    return cv2.imread(path, cv2.IMREAD_COLOR if colour else cv2.IMREAD_GRAYSCALE)


def auto_run(engine, noisy):
    start = time.perf_counter()
    out, _, info = engine.nlmeans(noisy, automatic=True)
    return out, info, time.perf_counter() - start


def quality(engine, today, use_gmic):
    """Gaussian noise: ours, today's, G'MIC and OpenCV."""
    cache = Cache()
    rows = []
    pool = ThreadPoolExecutor(2)
    for names, colour in ((COLOUR, True), (GREY, False)):
        for sigma in SIGMAS:
            acc = []
            for i, name in enumerate(names):
                clean = load(name, colour)
                noisy = noisy_copy(clean, sigma, seed=1000 * sigma + i)
                ours, info, ours_s = auto_run(engine, noisy)
                old, _, _ = auto_run(today, noisy)
                cv_p, cv_h, cv_s, cv_edge = opencv_best(noisy, clean, sigma, colour, cache)
                if use_gmic:
                    g_p, g_t, g_s, g_edge = gmic_best(noisy, clean, sigma, cache, pool)
                else:
                    g_p, g_t, g_s, g_edge = float("nan"), 0, float("nan"), False
                acc.append((psnr(clean, noisy), psnr(clean, ours), psnr(clean, old), g_p, cv_p,
                            ours_s, g_s, cv_s))
                print(f"  {name:9s} sigma {sigma:2d}: est {info.sigma:5.2f} h {info.h:5.2f} "
                      f"P {info.patch_radius} S {info.search_radius} {model_text(info)}  "
                      f"ours {acc[-1][1]:.2f}  today {acc[-1][2]:.2f}  "
                      f"G'MIC {g_p:.2f} (T {g_t:g}{'*' if g_edge else ''})  "
                      f"OpenCV {cv_p:.2f} (h {cv_h:g}{'*' if cv_edge else ''})", flush=True)
            rows.append(("colour" if colour else "grey", sigma, *np.mean(acc, axis=0)))
    print("\nGaussian noise: mean PSNR (dB) at each method's setting: ours and today's --auto, "
          "G'MIC and OpenCV best per image;"
          "\ntimes per image: ours (engine call), G'MIC (one run with process start), OpenCV (one run)")
    print("set     sigma  noisy   ours  today  G'MIC  OpenCV  ours-today  ours-G'MIC   ours ms  "
          "G'MIC ms  OpenCV ms")
    for kind, sigma, n, o, t, g, c, os_, gs, cs in rows:
        print(f"{kind:7s} {sigma:5d}  {n:5.2f}  {o:5.2f}  {t:5.2f}  {g:5.2f}  {c:6.2f}  {o - t:+10.2f}"
              f"  {o - g:+10.2f}   {os_ * 1e3:7.0f}  {gs * 1e3:8.0f}  {cs * 1e3:9.0f}")


def model_text(info):
    """The noise model --auto fitted, in words."""
    m = info.noise
    if not m.signal_dependent:
        return "flat"
    return f"NLF sigma {m.sigma_dark:4.1f} dark .. {m.sigma_light:4.1f} light"


def camera_quality(engine, today, use_gmic):
    """Camera (Poisson-Gaussian) noise: ours, today's and G'MIC."""
    cache = Cache()
    pool = ThreadPoolExecutor(2)
    rows = []
    images = [(n, True) for n in COLOUR] + [(n, False) for n in GREY]
    for level in CAMERA_LEVELS:
        a, b = camera_model(level)
        acc = []
        for i, (name, colour) in enumerate(images):
            clean = load(name, colour)
            noisy = camera_noisy_copy(clean, level, seed=5000 * level + i)
            ours, info, ours_s = auto_run(engine, noisy)
            old, old_info, old_s = auto_run(today, noisy)
            if use_gmic:
                g_p, g_t, g_s, g_edge = gmic_best(noisy, clean, level, cache, pool, GMIC_K_CAMERA)
            else:
                g_p, g_t, g_s, g_edge = float("nan"), 0, float("nan"), False
            acc.append((psnr(clean, noisy), psnr(clean, ours), psnr(clean, old), g_p, ours_s,
                        old_s))
            print(f"  {name:9s} level {level:2d}: {model_text(info)}, h {info.h:5.2f} "
                  f"P {info.patch_radius} S {info.search_radius}  ours {acc[-1][1]:.2f}  "
                  f"today {acc[-1][2]:.2f} (sigma {old_info.sigma:5.2f})  "
                  f"G'MIC {g_p:.2f} (T {g_t:g}{'*' if g_edge else ''})", flush=True)
        rows.append((level, a, b, *np.mean(acc, axis=0)))
    print("\ncamera noise (Poisson-Gaussian in linear light, variance a x + b, x in 0..1): "
          f"mean PSNR (dB) over {len(images)} photos ({len(COLOUR)} colour, {len(GREY)} grey);"
          "\nours and today's --auto, G'MIC nlmeans at its best T per image")
    print("level  a         b          noisy   ours  today  G'MIC  ours-today  ours-G'MIC  "
          "ours ms  today ms")
    for level, a, b, n, o, t, g, os_, ts in rows:
        print(f"{level:5d}  {a:.3e} {b:.3e}  {n:5.2f}  {o:5.2f}  {t:5.2f}  {g:5.2f}  {o - t:+10.2f}"
              f"  {o - g:+10.2f}  {os_ * 1e3:7.0f}  {ts * 1e3:8.0f}")


def speed(engine, repeats):
    """--auto on the bench's 1 MP crop (bench/bench.py) with noise, against
    OpenCV fastNlMeansDenoisingColored(h=10, 7, 21), best of `repeats`."""
    rgb = cv2.cvtColor(cv2.imread(os.path.join(ROOT, "tests", "data", "astronaut.png")),
                       cv2.COLOR_BGR2RGB)
    crop = cv2.resize(rgb, (4000, 3000), interpolation=cv2.INTER_CUBIC)[1000:2000, 1500:2500]
    print(f"\nspeed, 1000x1000 RGB u8, {os.cpu_count()} threads, best of {repeats} "
          "(OpenCV fastNlMeansDenoisingColored h=10, 7, 21)")
    print("sigma  est    h    P  S   ours ms  OpenCV ms  ratio")
    for sigma in SIGMAS:
        noisy = np.ascontiguousarray(noisy_copy(crop, sigma, seed=7 + sigma))
        ours, cv = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            _, _, info = engine.nlmeans(noisy, automatic=True)
            ours.append(time.perf_counter() - start)
            cv.append(opencv_run(noisy, 10, True)[1])
        print(f"{sigma:5d}  {info.sigma:5.2f} {info.h:5.2f}  {info.patch_radius}  "
              f"{info.search_radius:2d}  {min(ours) * 1e3:7.0f}  {min(cv) * 1e3:9.0f}  "
              f"{min(ours) / min(cv):5.2f}", flush=True)


def save_crop(engine, path):
    """Clean | noisy sigma 30 | --auto on two 128x128 crops of astronaut
    (flat background and the shuttle's edges; the face and helmet), one row
    each."""
    clean = cv2.imread(os.path.join(ROOT, "tests", "data", "astronaut.png"))
    noisy = noisy_copy(clean, 30, seed=30000)
    ours, _, _ = engine.nlmeans(noisy, automatic=True)
    n, gap = 128, 4
    rows = []
    for y, x in ((30, 320), (80, 170)):
        panels = [im[y:y + n, x:x + n] for im in (clean, noisy, ours)]
        white = np.full((n, gap, 3), 255, np.uint8)
        rows.append(np.hstack([panels[0], white, panels[1], white, panels[2]]))
    white = np.full((gap, rows[0].shape[1], 3), 255, np.uint8)
    cv2.imwrite(path, np.vstack([rows[0], white, rows[1]]))
    print(f"wrote {path}: clean | sigma 30 | --auto")


def nlmeans_numpy(img, info, var=None):
    """Pixel-wise NL-means in numpy (core/nlmeans.c's formula and automatic
    parameters from info: patch weights, centre weight, d^2 - 2 sigma^2 over
    h^2), for the comparison of --local-h. var: per-pixel noise variance
    (0..255 scale); then a pixel pair's weight uses the mean of its two
    variances v: exp(-max(d^2 - 2 v, 0) / (k^2 v)), k = h / sigma."""
    x = img.astype(np.float64).reshape(img.shape[0], img.shape[1], -1)
    H, W, n = x.shape
    P, S = info.patch_radius, info.search_radius
    g = np.array([np.exp(-(j - P) ** 2 / (2 * info.patch_sigma ** 2)) if info.patch_sigma > 0 else 1.0
                  for j in range(2 * P + 1)])
    R = P + S
    xp = np.pad(x, ((R, R), (R, R), (0, 0)), mode="edge")
    vp = np.pad(var, ((R, R), (R, R)), mode="edge") if var is not None else None
    k2 = (info.h / info.sigma) ** 2
    acc, wsum, wmax = np.zeros_like(x), np.zeros((H, W)), np.zeros((H, W))
    hh, ww = H + 2 * P, W + 2 * P
    base = xp[S:S + hh, S:S + ww]
    for dy in range(-S, S + 1):
        for dx in range(-S, S + 1):
            if dy == 0 and dx == 0:
                continue
            other = xp[S + dy:S + dy + hh, S + dx:S + dx + ww]
            e = ((base - other) ** 2).sum(axis=2)
            h1 = sum(g[j] * e[:, j:j + W] for j in range(2 * P + 1))
            d = sum(g[i] * h1[i:i + H] for i in range(2 * P + 1)) / (n * g.sum() ** 2)
            if vp is None:
                w = np.exp(-np.maximum(d - 2 * info.sigma ** 2, 0) / (k2 * info.sigma ** 2))
            else:
                v = 0.5 * (vp[R:R + H, R:R + W] + vp[R + dy:R + dy + H, R + dx:R + dx + W])
                w = np.exp(-np.maximum(d - 2 * v, 0) / (k2 * v))
            acc += w[..., None] * xp[R + dy:R + dy + H, R + dx:R + dx + W]
            wsum += w
            wmax = np.maximum(wmax, w)
    wc = np.where(wmax > 0, wmax, 1.0) if info.centre_max else np.ones((H, W))
    out = (acc + wc[..., None] * x) / (wsum + wc)[..., None]
    return np.clip(np.rint(out), 0, 255).astype(np.uint8).reshape(img.shape)


def local_variance(noisy, model):
    """The fitted model's noise variance (sRGB units^2) at each pixel, from
    its 5x5 mean brightness, averaged over the colour channels."""
    x = noisy.astype(np.float64).reshape(noisy.shape[0], noisy.shape[1], -1)
    var = np.zeros(x.shape[:2])
    for c in range(x.shape[2]):
        m = cv2.blur(x[..., c], (5, 5))
        lin = srgb_to_linear(m)
        v = m / 255.0
        slope = 255 * np.where(v <= 0.04045, 12.92, 1.055 / 2.4 * np.maximum(lin, 1e-9) ** (1 / 2.4 - 1))
        var += slope ** 2 * (model.a[c] * lin + model.b[c]) / x.shape[2]
    return np.maximum(var, 0.25)


def local_h(engine, today):
    """The other way to follow camera noise, measured against the one kept: nl-means whose
    weights follow the local noise level (numpy, the parameters today's
    --auto picks) beside the same numpy nl-means with one sigma (which should
    match today's --auto) and ours (the transform)."""
    images = [(n, True) for n in COLOUR] + [(n, False) for n in GREY]
    print("camera noise: ours (transform) against nl-means with h following the fitted noise level")
    print("image      level   today  numpy-one-sigma  numpy-local-h   ours")
    for level in CAMERA_LEVELS:
        for i, (name, colour) in enumerate(images):
            clean = load(name, colour)
            noisy = camera_noisy_copy(clean, level, seed=5000 * level + i)
            ours, info, _ = auto_run(engine, noisy)
            old, old_info, _ = auto_run(today, noisy)
            flat = nlmeans_numpy(noisy, old_info)
            local = nlmeans_numpy(noisy, old_info, local_variance(noisy, info.noise))
            print(f"{name:9s}  {level:5d}  {psnr(clean, old):6.2f}  {psnr(clean, flat):15.2f}  "
                  f"{psnr(clean, local):13.2f}  {psnr(clean, ours):5.2f}", flush=True)


def save_camera(path):
    """The camera-noise photos of camera_quality, with their clean images."""
    arrays = {}
    images = [(n, True) for n in COLOUR] + [(n, False) for n in GREY]
    for level in CAMERA_LEVELS:
        for i, (name, colour) in enumerate(images):
            clean = load(name, colour)
            arrays["clean " + name] = clean
            arrays[f"noisy {name}-{level}"] = camera_noisy_copy(clean, level, seed=5000 * level + i)
    np.savez_compressed(path, **arrays)
    print(f"wrote {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-gmic", action="store_true", help="skip G'MIC (also when not installed)")
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--lib", help="the engine to measure (default build/libcudafx.so)")
    ap.add_argument("--only", choices=("gaussian", "camera"), help="one kind of noise, no speed")
    ap.add_argument("--crop", help="write the sigma 30 before/after crop here and stop")
    ap.add_argument("--local-h", action="store_true",
                    help="camera noise: compare with weights that follow the noise level (numpy, slow) and stop")
    ap.add_argument("--save-camera", metavar="FILE.npz",
                    help="write the camera-noise photos (for bench/bench_nlmeans_noise.py --check) and stop")
    args = ap.parse_args()
    engine = pycudafx.Engine(args.lib)
    cv2.setNumThreads(os.cpu_count() or 1)
    if args.crop:
        save_crop(engine, args.crop)
        return
    if args.save_camera:
        save_camera(args.save_camera)
        return
    if args.local_h:
        local_h(engine, baseline_engine())
        return
    use_gmic = not args.no_gmic and shutil.which("gmic") is not None
    if not use_gmic and not args.no_gmic:
        print("G'MIC not found (apt-get install gmic): its column is nan")
    today = baseline_engine()
    if args.only != "camera":
        quality(engine, today, use_gmic)
    if args.only != "gaussian":
        camera_quality(engine, today, use_gmic)
    if not args.no_speed and not args.only:
        speed(engine, args.repeats)


if __name__ == "__main__":
    main()
