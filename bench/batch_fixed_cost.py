#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""A batch against its codecs alone (the target: at most 1.2x), whole
batches timed from outside: bench_e2e.py's distinct 12 MP JPEGs through
`nl-means --output-dir` (automatic mode, --backend auto) against the same command
run by the build's cudafx-bench with CUDAFX_BENCH_CODECS_ONLY=1, for one or more builds, the runs interleaved (build by build, round by
round), each with CUDAFX_BATCH_TIMELINE and its summary
(bench/batch_timeline.py) kept.

Usage: bench/batch_fixed_cost.py [--images 64] [--runs 3] [--threads 16]
           [--work /tmp/e2e] [--keep DIR] NAME=CLI[ OPTIONS][@ENV] ...
CLI: the build's cudafx, its cudafx-bench beside it; OPTIONS: the filter's
options for that build (e.g. "--workers 1"), words after the executable; ENV: the bundle's variables ("VAR=... VAR=..."), as
bench_e2e.py's --env.
Prints, per build, the wall ms per photo of each run, batch and codecs only,
and their ratio (median over the runs).
"""
import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_e2e  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('builds', nargs='+')
    ap.add_argument('--images', type=int, default=64)
    ap.add_argument('--runs', type=int, default=3)
    ap.add_argument('--threads', type=int, default=16)
    ap.add_argument('--work', default='/tmp/e2e')
    ap.add_argument('--keep', help='folder for the timelines and their summaries')
    a = ap.parse_args()
    photos = bench_e2e.make_images(os.path.join(a.work, 'in'), a.images)
    out = os.path.join(a.work, 'out')
    os.makedirs(out, exist_ok=True)
    keep = a.keep or a.work
    os.makedirs(keep, exist_ok=True)
    builds = []
    for spec in a.builds:
        name, rest = spec.split('=', 1)
        cli, _, env = rest.partition('@')
        e = dict(os.environ)
        e.update(item.split('=', 1) for item in shlex.split(env))
        builds.append((name, shlex.split(cli), e))
    times = {}
    for r in range(a.runs):
        for name, cli, env in builds:
            for mode in ('codecs', 'batch'):
                e = dict(env)
                exe = cli[0]
                if mode == 'codecs':
                    e['CUDAFX_BENCH_CODECS_ONLY'] = '1'
                    exe = os.path.join(os.path.dirname(exe), 'cudafx-bench')
                tl = os.path.join(keep, '%s-%s-%d.jsonl' % (name, mode, r))
                e['CUDAFX_BATCH_TIMELINE'] = tl
                cmd = [exe, 'nl-means'] + cli[1:] + ['--threads', str(a.threads), '--output-dir', out] + photos
                t0 = time.perf_counter()
                p = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                wall = time.perf_counter() - t0
                if p.returncode:
                    print('FAILED %s %s: %s' % (name, mode, p.stderr[-1500:]), flush=True)
                    continue
                times.setdefault((name, mode), []).append(wall)
                summary = ''
                if os.path.exists(tl) and os.path.getsize(tl):
                    summary = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__),
                                                                           'batch_timeline.py'), tl,
                                              '--wall', str(wall)], stdout=subprocess.PIPE,
                                             stderr=subprocess.STDOUT, text=True).stdout
                    with open(tl[:-6] + '.txt', 'w') as f:
                        f.write(summary)
                print('== %s %s run %d: %.3f s, %.1f ms a photo' % (name, mode, r, wall, wall / a.images * 1e3),
                      flush=True)
                if mode == 'batch' or r == 0:
                    print(summary, flush=True)
    print('| build | batch ms/photo (runs) | codecs only ms/photo (runs) | ratio of medians |')
    print('|---|---|---|---|')
    for name, _, _ in builds:
        b = [t / a.images * 1e3 for t in times.get((name, 'batch'), [])]
        c = [t / a.images * 1e3 for t in times.get((name, 'codecs'), [])]
        ratio = statistics.median(b) / statistics.median(c) if b and c else float('nan')
        print('| %s | %s | %s | %.2f |' % (name, ', '.join('%.1f' % x for x in b),
                                          ', '.join('%.1f' % x for x in c), ratio))


if __name__ == '__main__':
    main()
