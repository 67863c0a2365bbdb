# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU benchmark (`make bench-gpu`): cudafx's CUDA backend against CuPy, PyTorch
and NVIDIA NPP on the same GPU, in one run, on the 12-megapixel RGB u8 image
made from tests/data/astronaut.png. cudafx kernel time comes from the engine's
CUDA events (report.kernel_ms); the whole call (host image in, host image out)
is timed on the host and compared with a bare host->device->host copy.
Prints one table. A benchmark, never a test."""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import cv2
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pycudafx  # noqa: E402

ROOT = pycudafx.ROOT


def median_of(f, runs):
    f()
    return statistics.median(f() for _ in range(runs))


def cudafx_times(fn, runs):
    """(kernel ms, whole call ms) medians of a cudafx call with backend cuda."""
    kernel, whole = [], []
    fn()
    for _ in range(runs):
        t = time.perf_counter()
        _, report = fn()[:2]
        whole.append((time.perf_counter() - t) * 1e3)
        kernel.append(report.kernel_ms)
        if report.backend_used != 2:
            raise pycudafx.CudafxError("ran on the CPU: " + report.fallback.decode())
    return statistics.median(kernel), statistics.median(whole)


def cupy_ms(f, runs):
    import cupy as cp
    start, end = cp.cuda.Event(), cp.cuda.Event()

    def once():
        start.record()
        f()
        end.record()
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end)
    return median_of(once, runs)


def torch_ms(f, runs):
    import torch
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def once():
        start.record()
        f()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    return median_of(once, runs)


def torch_kmeans(t_pix, k, iterations):
    """The straightforward PyTorch k-means: cdist, argmin, index_add."""
    import torch
    g = torch.Generator(device=t_pix.device).manual_seed(0)
    centres = t_pix[torch.randint(0, t_pix.shape[0], (k,), device=t_pix.device, generator=g)]
    ones = torch.ones(t_pix.shape[0], device=t_pix.device)
    for _ in range(iterations):
        label = torch.cdist(t_pix, centres).argmin(1)
        sums = torch.zeros_like(centres).index_add_(0, label, t_pix)
        counts = torch.zeros(k, device=t_pix.device).index_add_(0, label, ones)
        centres = sums / counts.clamp(min=1)[:, None]
    return centres


def cv2_kmeans_ms(pix, k, iterations):
    """cv2.kmeans on the CPU, k-means++ seeding, one attempt, the same iterations."""
    cv2.setNumThreads(os.cpu_count())
    t = time.perf_counter()
    cv2.kmeans(pix, k, None, (cv2.TERM_CRITERIA_MAX_ITER, iterations, 0), 1, cv2.KMEANS_PP_CENTERS)
    return (time.perf_counter() - t) * 1e3


def npp_times(img, median_max):
    """Runs build/bench_npp (if built) on the image; {workload: ms}."""
    exe = os.path.join(ROOT, "build", "bench_npp")
    if not os.path.exists(exe):
        return {}
    with tempfile.NamedTemporaryFile(suffix=".raw") as f:
        f.write(b"%d %d\n" % img.shape[:2])
        f.write(img.tobytes())
        f.flush()
        out = subprocess.run([exe, f.name, str(median_max)], capture_output=True, text=True).stdout
    times = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3:
            times[parts[1]] = float(parts[2])
    return times


def nlbayes_first_call(noisy):
    """(whole ms, kernel ms) of a fresh process's first nl-bayes call on the
    image with backend cuda: the library's load, CUDA's start-up and the call."""
    with tempfile.NamedTemporaryFile(suffix=".npy") as f:
        np.save(f, noisy)
        f.flush()
        code = ("import sys, time, numpy as np; sys.path.insert(0, %r); import pycudafx; "
                "img = np.load(%r); t = time.perf_counter(); eng = pycudafx.Engine(); "
                "_, r, _ = eng.nlbayes(img, automatic=False, sigma=20.0, backend='cuda'); "
                "print((time.perf_counter() - t) * 1e3, r.kernel_ms)") % (os.path.dirname(os.path.abspath(__file__)),
                                                                         f.name)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    try:
        whole, kernel = out.stdout.split()
        return float(whole), float(kernel)
    except ValueError:
        print("nl-bayes first call failed: %s" % out.stderr.strip()[-200:])
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--skip-opencv", action="store_true", help="skip the slow OpenCV peers (nl-means, kmeans)")
    ap.add_argument("--only", default="median,convolve,nlmeans,nlbayes,quantize",
                    help="comma-separated filters to measure (default: all five)")
    ap.add_argument("--npp-median-max", type=int, default=31,
                    help="largest median window NPP is timed on (its 31x31 takes about a minute)")
    args = ap.parse_args()
    runs = args.runs
    only = set(args.only.split(","))

    import cupy as cp
    import cupyx.scipy.ndimage as ndi
    import torch

    src = cv2.cvtColor(cv2.imread(os.path.join(ROOT, "tests", "data", "astronaut.png")), cv2.COLOR_BGR2RGB)
    img = np.ascontiguousarray(cv2.resize(src, (4000, 3000), interpolation=cv2.INTER_CUBIC))
    eng = pycudafx.Engine()
    d_img = cp.asarray(img)
    rng = np.random.default_rng(1)
    npp = npp_times(img, args.npp_median_max) if only & {"median", "convolve"} else {}  # NPP peers exist for those only
    rows = []  # (workload, cudafx kernel ms, whole ms, [(peer, ms)])

    def add(name, call, peers):
        try:
            k, w = cudafx_times(call, runs)
        except pycudafx.CudafxError as e:
            k, w = None, str(e)
        measured = []
        for peer, f in peers:
            try:
                measured.append((peer, f()))
            except Exception as e:  # a peer that cannot run this workload
                measured.append((peer, "error: %s" % str(e).splitlines()[0][:40]))
        rows.append((name, k, w, measured))

    for k in (3, 5, 7, 15, 31, 101) if "median" in only else ():
        r = k // 2
        peers = []
        if k <= 15:
            peers.append(("cupy", lambda k=k: cupy_ms(lambda: ndi.median_filter(d_img, size=(k, k, 1), mode="nearest"),
                                                     max(3, runs // 3) if k >= 15 else runs)))
        if "median-%dx%d" % (k, k) in npp:
            peers.append(("npp", lambda k=k: npp["median-%dx%d" % (k, k)]))
        add("median %dx%d" % (k, k), lambda r=r: eng.median(img, radius=r, backend="cuda"), peers)

    for k in (5, 15) if "convolve" in only else ():
        kern = rng.standard_normal((k, k)) / k
        d_w = cp.asarray(kern[:, :, None].astype(np.float32))
        peers = [("cupy", lambda d_w=d_w: cupy_ms(lambda: ndi.convolve(d_img.astype(cp.float32), d_w, mode="nearest"), runs))]
        if "filter-%dx%d" % (k, k) in npp:
            peers.append(("npp", lambda k=k: npp["filter-%dx%d" % (k, k)]))
        add("convolve custom %dx%d" % (k, k),
            lambda kern=kern: eng.convolve(img, preset=0, kernel=kern, divisor=1.0, backend="cuda"), peers)

    peers = [("npp gauss 15x15", lambda: npp["gauss-15x15"])] if "gauss-15x15" in npp else []
    if "convolve" in only:
        add("convolve gaussian sigma=5", lambda: eng.convolve(img, preset=7, sigma=5.0, backend="cuda"), peers)

    # f32 against PyTorch depthwise conv2d (device-resident tensors).
    img_f = (img.astype(np.float32) / 255.0)
    t_img = torch.from_numpy(img_f).cuda().permute(2, 0, 1)[None].contiguous()
    for k in (5, 15) if "convolve" in only else ():
        kern = rng.standard_normal((k, k)) / k
        t_w = torch.from_numpy(kern.astype(np.float32)).cuda()[None, None].repeat(3, 1, 1, 1)
        pad = torch.nn.functional.pad
        peers = [("torch conv2d", lambda t_w=t_w, k=k: torch_ms(
            lambda: torch.nn.functional.conv2d(pad(t_img, (k // 2,) * 4, mode="replicate"), t_w, groups=3), runs))]
        add("convolve f32 custom %dx%d" % (k, k),
            lambda kern=kern: eng.convolve(img_f, preset=0, kernel=kern, divisor=1.0, backend="cuda"), peers)

    # Non-local means on the image with Gaussian noise sigma=20.
    noisy = np.clip(img + rng.normal(0, 20, img.shape), 0, 255).astype(np.uint8)
    crop = np.ascontiguousarray(noisy[1000:2000, 1500:2500])
    cv_ms = None
    if not args.skip_opencv and "nlmeans" in only:
        cv2.setNumThreads(os.cpu_count())
        t = time.perf_counter()
        cv2.fastNlMeansDenoisingColored(noisy, None, 10, 10, 7, 21)
        cv_ms = (time.perf_counter() - t) * 1e3
    peers = [("opencv fastNlMeansDenoisingColored %d CPU threads" % os.cpu_count(), lambda: cv_ms)] if cv_ms else []
    if "nlmeans" in only:
        add("nl-means 7x7 search 21x21", lambda: eng.nlmeans(noisy, automatic=False, h=10.0, patch_radius=3,
                                                             search_radius=10, backend="cuda")[:2], peers)
        add("nl-means auto (estimate+denoise)", lambda: eng.nlmeans(noisy, backend="cuda")[:2], [])
        add("nl-means 1 MP preview, 7x7/21x21", lambda: eng.nlmeans(crop, automatic=False, h=10.0, patch_radius=3,
                                                                    search_radius=10, backend="cuda")[:2], [])

    # Non-local Bayes on the same noisy image (sigma given: the estimate is
    # nl-means' and timed there), a 1920x1080 preview, and a first call in a
    # fresh process (library load, CUDA's start-up and the call).
    preview = np.ascontiguousarray(noisy[1000:2080, 1000:2920])
    if "nlbayes" in only:
        add("nl-bayes sigma=20", lambda: eng.nlbayes(noisy, automatic=False, sigma=20.0, backend="cuda")[:2], [])
        add("nl-bayes 1920x1080 preview", lambda: eng.nlbayes(preview, automatic=False, sigma=20.0,
                                                              backend="cuda")[:2], [])
        add("nl-bayes auto (estimate+denoise)", lambda: eng.nlbayes(noisy, backend="cuda")[:2], [])
        first_call = nlbayes_first_call(noisy)
        if first_call is not None:
            rows.append(("nl-bayes first call, fresh process", first_call[1], first_call[0], []))

    # Colour quantize (rgb, as the peers): k-means with exactly the peers'
    # 10 iterations at most (cudafx stops earlier when no centre moves: the
    # table says how many ran), plain and with Floyd-Steinberg mapping.
    t_pix = torch.from_numpy(img.reshape(-1, 3).astype(np.float32)).cuda()
    pix = img.reshape(-1, 3).astype(np.float32)
    iterations = {}

    def quantize(k, dither=0):
        out = eng.quantize(img, colors=k, color_space=1, dither=dither, max_iterations=10, backend="cuda")
        iterations[(k, dither)] = out[2].iterations
        return out

    for k in (16, 256) if "quantize" in only else ():
        peers = [("torch cdist+argmin+index_add", lambda k=k: torch_ms(lambda: torch_kmeans(t_pix, k, 10), 3))]
        if not args.skip_opencv:
            peers.append(("cv2.kmeans %d CPU threads" % os.cpu_count(), lambda k=k: cv2_kmeans_ms(pix, k, 10)))
        add("quantize K=%d 10 it" % k, lambda k=k: quantize(k), peers)
    for k in (16, 256) if "quantize" in only else ():
        add("quantize K=%d + F-S dither" % k, lambda k=k: quantize(k, 1), [])
        # the same palette and iterations as the plain run: the difference is
        # the F-S kernel less the plain map kernel
        times = {r[0]: r[1:3] for r in rows}
        plain, dithered = times["quantize K=%d 10 it" % k], times["quantize K=%d + F-S dither" % k]
        if plain[0] is not None and dithered[0] is not None:
            rows.append(("F-S mapping K=%d (- plain)" % k, dithered[0] - plain[0], dithered[1] - plain[1], []))
    if "quantize" in only:
        # one iteration: what seeding, one pass and the mapping cost
        for k in (16, 256):
            add("quantize K=%d 1 it" % k, lambda k=k: eng.quantize(img, colors=k, color_space=1,
                                                                   max_iterations=1, backend="cuda"), [])

    # Whole call vs the bare copy it cannot avoid (pageable host memory, like the engine's).
    def bare_copy():
        t = time.perf_counter()
        cp.asarray(img).get()
        cp.cuda.Device().synchronize()
        return (time.perf_counter() - t) * 1e3
    copy_ms = median_of(bare_copy, runs)

    print("\nGPU benchmark: %dx%d RGB u8, %s, median of %d runs" %
          (img.shape[1], img.shape[0], cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), runs))
    print("bare host->device->host copy of the image: %.3f ms%s" %
          (copy_ms, "; NPP device-to-device copy %.4f ms" % npp["d2d-copy"] if "d2d-copy" in npp else ""))
    print("%-28s %10s %10s %7s  %s" % ("workload", "kernel ms", "call ms", "call/cp", "peers (ms, speed-up of cudafx kernel)"))
    for name, k, w, peers in rows:
        if k is None:
            print("%-28s %10s  %s" % (name, "n/a", w))
            continue
        ptxt = ", ".join("%s %s" % (p, ("%.3f (%.1fx)" % (ms, ms / k) if k > 0 else "%.3f" % ms)
                                   if isinstance(ms, float) else ms) for p, ms in peers)
        print("%-28s %10.3f %10.2f %7.2f  %s" % (name, k, w, w / copy_ms, ptxt))
    for (k, dither), n in sorted(iterations.items()):
        print("quantize K=%d%s: %d k-means iterations run" % (k, " dither" if dither else "", n))
    print("quantize: kernel ms covers the device passes, the seeding attempts (k-means++ and Lloyd on "
          "the sample), the rows' counting and sampling (u8 without alpha) and Floyd-Steinberg; the palette "
          "runs on the host and shows in call ms only")
    print("F-S mapping: the dithered run less the plain one, i.e. the F-S kernel less the plain map kernel")


if __name__ == "__main__":
    main()
