#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""End-to-end wall time of the cudafx command, file in to file out.

Prints one table, wall milliseconds per image:
  1. one 12 MP JPEG -> JPEG, `median --radius 1 --backend cpu`, beside OpenCV's
     imread + imwrite of the same file in the same run;
  2. one 12 MP JPEG, median / nl-means / quantize with --backend cpu, auto and
     (where CUDA is usable) cuda;
  3. a batch of distinct 12 MP JPEGs through `nl-means` (automatic mode,
     --backend auto, --output-dir), beside the same batch decoded and encoded
     only (cudafx-bench with CUDAFX_BENCH_CODECS_ONLY=1: same codecs, same
     threads, no filter)
     and beside an OpenCV loop of imread + fastNlMeansDenoisingColored(h=10,
     hColor=10, 7, 21) + imwrite on --opencv-threads threads over the first
     few images, extrapolated per image;
  4. with several GPUs: the batch on the first GPU only
     (CUDA_VISIBLE_DEVICES) and on all of them, for nl-means automatic (where
     the codecs may be the limit) and for nl-means with the largest search
     window (--search-radius 20: four times the GPU's work, so the GPUs are
     the limit), and optionally with few codec threads (--codec-bound-threads);
     images/s, and each GPU's busy share two ways: nvidia-smi's utilization
     (sampled every 50 ms, the share of time a kernel ran) and the engine's
     own time per file (--json "ms" summed per device, over the batch's wall
     time).
The images are made from tests/data photos by crops, flips and resizes to
4000x3000, with Gaussian noise (sigma 8) so nl-means has work to do, saved as
JPEG quality 92. A benchmark, never a test: nothing is asserted.

Usage: bench/bench_e2e.py [--cli build/cudafx] [--bench-cli build/cudafx-bench]
                          [--env "VAR=... VAR=..."]
                          [--images 64] [--opencv-images 3] [--opencv-threads N] [--runs 3]
                          [--codec-bound-threads N] [--work DIR]
"""
import argparse
import collections
import json
import multiprocessing
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

import cv2
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHOTOS = ['astronaut.png', 'chelsea.png', 'coffee.png']


def make_image(job):
    """Photo i of the batch: a crop of 70..100% of a test photo at a position
    that varies with i, flipped by i, resized to 4000x3000, with noise."""
    i, path = job
    img = cv2.imread(os.path.join(ROOT, 'tests', 'data', PHOTOS[i % len(PHOTOS)]))
    h, w = img.shape[:2]
    f = 0.7 + 0.3 * ((i * 7) % 11) / 10
    ch, cw = int(h * f), int(w * f)
    y, x = (i * 13) % (h - ch + 1), (i * 29) % (w - cw + 1)
    img = img[y:y + ch, x:x + cw]
    if i // len(PHOTOS) % 2:
        img = cv2.flip(img, 1)
    if i // len(PHOTOS) % 4 >= 2:
        img = cv2.flip(img, 0)
    img = cv2.resize(img, (4000, 3000), interpolation=cv2.INTER_CUBIC)
    noise = np.zeros(img.shape, np.int16)
    cv2.setRNGSeed(i)
    cv2.randn(noise, (0, 0, 0), (8, 8, 8))
    noisy = cv2.add(img.astype(np.int16), noise)
    cv2.imwrite(path, np.clip(noisy, 0, 255).astype(np.uint8), [cv2.IMWRITE_JPEG_QUALITY, 92])


def make_images(folder, count):
    """count distinct 4000x3000 noisy JPEGs made from the test photos."""
    os.makedirs(folder, exist_ok=True)
    jobs = [(i, os.path.join(folder, 'photo%03d.jpg' % i)) for i in range(count)]
    with multiprocessing.Pool() as pool:
        pool.map(make_image, [j for j in jobs if not os.path.exists(j[1])])
    return [path for _, path in jobs]


def wall(cmd, env, runs):
    """Median wall seconds of `runs` runs of cmd (a list); exits on failure."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        times.append(time.perf_counter() - start)
        if done.returncode:
            sys.exit('failed: %s\n%s' % (' '.join(cmd), done.stderr.decode()[-2000:]))
    return statistics.median(times), done.stdout.decode()


def gpu_sampler():
    """nvidia-smi printing each GPU's utilization every 50 ms, or None."""
    try:
        return subprocess.Popen(['nvidia-smi', '--query-gpu=index,utilization.gpu', '--format=csv,noheader,nounits',
                                 '-lms', '50'], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    except OSError:
        return None


def gpu_busy(sampler):
    """{gpu index: mean utilization %} of a sampler's output, after stopping it."""
    if sampler is None:
        return {}
    sampler.terminate()
    out = sampler.communicate()[0]
    samples = collections.defaultdict(list)
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(',')]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            samples[int(parts[0])].append(int(parts[1]))
    return {gpu: statistics.mean(v) for gpu, v in sorted(samples.items())}


def batch_run(cli, argv, env):
    """(wall s, {device: engine ms summed}, {gpu: nvidia-smi busy %}) of one batch run."""
    sampler = gpu_sampler()
    t, out = wall([cli] + argv, env, 1)
    busy = gpu_busy(sampler)
    engine = collections.defaultdict(float)
    for line in out.splitlines():
        j = json.loads(line)
        engine['%s %s' % (j.get('backend'), j.get('device'))] += j.get('ms', 0)
    return t, dict(engine), busy


def cuda_usable(cli, env):
    out = subprocess.run([cli, 'info'], env=env, stdout=subprocess.PIPE).stdout.decode()
    return 'CUDA devices: none' not in out and 'Backends: CUDA' in out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--cli', default=os.path.join(ROOT, 'build', 'cudafx'))
    ap.add_argument('--bench-cli', help='the benchmarks\' build of the CLI, for the codecs alone '
                    '(default: cudafx-bench beside --cli)')
    ap.add_argument('--env', default='', help='VAR=VALUE ... for the cudafx runs (gegl-bundle env)')
    ap.add_argument('--images', type=int, default=64, help='batch size')
    ap.add_argument('--opencv-images', type=int, default=3, help='images of the OpenCV nl-means loop')
    ap.add_argument('--opencv-threads', type=int, default=0, help="OpenCV's threads (0: all cores)")
    ap.add_argument('--codec-bound-threads', type=int, default=0,
                    help='also run the several-GPU batches with this many codec threads (0: not)')
    ap.add_argument('--runs', type=int, default=3, help='runs of each single-file command (median)')
    ap.add_argument('--work', default=None, help='folder for the images (kept between runs)')
    ap.add_argument('--skip-batch', action='store_true')
    args = ap.parse_args()

    env = dict(os.environ)
    for item in shlex.split(args.env):
        k, v = item.split('=', 1)
        env[k] = v
    cli = args.cli
    bench_cli = args.bench_cli or os.path.join(os.path.dirname(cli), 'cudafx-bench')
    work = args.work or tempfile.mkdtemp(prefix='bench-e2e-')
    cores = os.cpu_count()
    cv_threads = args.opencv_threads or cores
    cv2.setNumThreads(cv_threads)
    photos = make_images(os.path.join(work, 'in'), max(args.images, args.opencv_images, 1))
    out = os.path.join(work, 'out')
    os.makedirs(out, exist_ok=True)
    one, one_out = photos[0], os.path.join(out, 'one.jpg')
    rows = []
    gpu = cuda_usable(cli, env)
    info = subprocess.run([cli, 'info'], env=env, stdout=subprocess.PIPE).stdout.decode()
    print(info.strip())
    print('cores: %d, batch: %d images of 4000x3000, work: %s' % (cores, args.images, work))

    # 1. one JPEG through median r1 on the CPU, and OpenCV's codecs alone
    t, _ = wall([cli, 'median', '--radius', '1', '--backend', 'cpu', one, one_out], env, args.runs)
    cv_times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        cv2.imwrite(os.path.join(out, 'cv.jpg'), cv2.imread(one))
        cv_times.append(time.perf_counter() - start)
    cv = statistics.median(cv_times)
    rows.append(('one 12 MP JPEG, median r1, --backend cpu', t, 'OpenCV imread+imwrite', cv))

    # 2. one file per filter and backend
    filters = [('median r1', ['median', '--radius', '1']), ('nl-means auto', ['nl-means']),
               ('quantize K=16', ['quantize', '--colors', '16'])]
    for name, argv in filters:
        times = {}
        for backend in ['cpu', 'auto'] + (['cuda'] if gpu else []):
            times[backend], js = wall([cli] + argv + ['--backend', backend, '--json', one, one_out],
                                      env, args.runs)
            if backend == 'auto':
                print('  %s auto: %s' % (name, js.strip()[:400]))
        for backend in times:
            if backend != 'cpu':
                rows.append(('one 12 MP JPEG, %s, --backend %s' % (name, backend), times[backend],
                             '--backend cpu', times['cpu']))

    # the rule's other side: a small image, where starting CUDA does not pay
    small = os.path.join(ROOT, 'tests', 'data', 'chelsea.png')
    small_out = os.path.join(out, 'small.png')
    times = {}
    for backend in ['cpu', 'auto']:
        times[backend], js = wall([cli, 'median', '--radius', '1', '--backend', backend, '--json', small,
                                   small_out], env, args.runs)
    print('  small median r1 auto: %s' % js.strip()[:400])
    rows.append(('one 0.14 MP PNG (chelsea), median r1, --backend auto', times['auto'], '--backend cpu',
                 times['cpu']))

    # 3. the batch
    if not args.skip_batch and args.images > 0:
        batch = photos[:args.images]
        t, _ = wall([cli, 'nl-means', '--json', '--output-dir', out] + batch, env, 1)
        codecs_env = dict(env, CUDAFX_BENCH_CODECS_ONLY='1')
        c, _ = wall([bench_cli, 'nl-means', '--output-dir', out] + batch, codecs_env, 1)
        n = args.images
        rows.append(('batch of %d, nl-means auto' % n, t / n, 'decode+encode only', c / n))
        k = max(1, min(args.opencv_images, n))
        start = time.perf_counter()
        for p in photos[:k]:
            img = cv2.imread(p)
            cv2.imwrite(os.path.join(out, 'cv.jpg'), cv2.fastNlMeansDenoisingColored(img, None, 10, 10, 7, 21))
        cv = (time.perf_counter() - start) / k
        rows.append(('batch of %d, nl-means auto' % n, t / n,
                     'OpenCV imread+fastNlMeans+imwrite (%d imgs, %d threads)' % (k, cv_threads), cv))

    print()
    print('| workload | cudafx ms/image | peer | peer ms/image | ratio |')
    print('|---|---|---|---|---|')
    for name, t, peer, p in rows:
        print('| %s | %.0f | %s | %.0f | %.2f |' % (name, t * 1e3, peer, p * 1e3, t / p))

    # 4. several GPUs: the first one, then all; codecs as the limit, then the GPUs
    gpus = [g for g in env.get('CUDA_VISIBLE_DEVICES', '').split(',') if g] or None
    if gpus is None and gpu:
        listed = subprocess.run(['nvidia-smi', '-L'], stdout=subprocess.PIPE, text=True).stdout
        gpus = [str(i) for i, line in enumerate(listed.splitlines()) if line.startswith('GPU ')]
    if not args.skip_batch and args.images > 0 and gpu and gpus and len(gpus) > 1:
        batch = photos[:args.images]
        n = args.images
        wide = ['--h', '10', '--patch-radius', '1', '--search-radius', '20']
        threads = [[]] + ([['--threads', str(args.codec_bound_threads)]] if args.codec_bound_threads else [])
        configs = [('%s, %s%s' % (label, '1 GPU' if k == 1 else '%d GPUs' % k,
                                  ', %s codec threads' % extra[1] if extra else ''), gpus[:k], argv, extra)
                   for extra in threads for label, argv in (('auto', []), ('search radius 20', wide))
                   for k in (1, len(gpus))]
        print()
        print('| batch of %d, nl-means | images/s | ms/image | decode+encode only, ms/image '
              '| GPU busy (nvidia-smi) | engine time / wall, per device |' % n)
        print('|---|---|---|---|---|---|', flush=True)
        codecs = {}
        for name, visible, argv, extra in configs:
            genv = dict(env, CUDA_VISIBLE_DEVICES=','.join(visible))
            t, engine, busy = batch_run(cli, ['nl-means', '--json', '--output-dir', out] + argv + extra + batch,
                                        genv)
            if tuple(extra) not in codecs:  # the codecs alone: the same files and threads, no filter
                codecs[tuple(extra)] = wall([bench_cli, 'nl-means', '--output-dir', out] + extra + batch,
                                            dict(genv, CUDAFX_BENCH_CODECS_ONLY='1'), 1)[0]
            c = codecs[tuple(extra)]
            print('| %s | %.2f | %.0f | %.0f | %s | %s |' % (
                name, n / t, t / n * 1e3, c / n * 1e3,
                ', '.join('GPU %d %.0f%%' % (g, b) for g, b in busy.items()) or 'n/a',
                ', '.join('%s %.0f%%' % (d, 100 * ms / 1e3 / t) for d, ms in sorted(engine.items()))))


if __name__ == '__main__':
    main()
