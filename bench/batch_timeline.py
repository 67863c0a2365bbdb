#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where a batch's wall time went, from the CLI's CUDAFX_BATCH_TIMELINE file
(cli/timeline.h).

Usage: bench/batch_timeline.py TIMELINE.jsonl [--wall SECONDS]

Prints the batch's wall time cut into consecutive parts, in ms:
  before main     the process until main (loader, libraries' constructors)
  to CUDA ready   main until the default device was ready (cli_cuda_start's
                  thread: the driver, the context, the filter's kernels)
  first call      the first file's engine call past CUDA ready, less a
                  typical (median) call: what a device's first call adds
  worker idle     after that, the gaps with no engine call in flight (the
                  next file not yet decoded, or no worker woken)
  calls           the rest until the last call ended: with one worker the
                  calls one after another, with several (two lanes of a
                  device) the time at least one call was in flight
  drain           the last call's end until the pipeline ended (last encodes)
  clean-up        the pipeline's end until main returned (pool freed, codecs
                  shut down)
  after main      --wall less all of the above: the exit (CUDA's teardown)
For a run without an engine worker (cudafx-bench, CUDAFX_BENCH_CODECS_ONLY=1)
only the codec stages are summarised. Then the stages' medians, and the image
pool's cost (blocks pinned and the ms spent pinning and freeing them).
"""
import argparse
import json
import statistics


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('timeline')
    ap.add_argument('--wall', type=float, help='the whole command, seconds, timed outside')
    a = ap.parse_args()
    events, files = {}, []
    with open(a.timeline) as f:
        for line in f:
            o = json.loads(line)
            if 'file' in o:
                files.append(o)
            else:
                events[o['event']] = o
    ok = [f for f in files if f['status'] == 0]
    dur = lambda f, stage: f[stage][1] - f[stage][0]
    med = lambda xs: statistics.median(xs) if xs else float('nan')
    before = events['main']['before_main_ms']
    end = events['end']['t']
    batch = events['batch']
    parts = [('before main', before)]
    cuda = events.get('cuda', {})
    computed = sorted((f for f in ok if f['compute'][0] >= 0), key=lambda f: f['compute'][0])
    if cuda.get('ready', -1) >= 0 and computed:
        ready = cuda['ready']
        calls = [dur(f, 'compute') for f in computed]
        typical = med(calls[1:])
        first_end = computed[0]['compute'][1]
        # Gaps with no call in flight, after the first call ended.
        gaps, reach = 0.0, first_end
        for f in computed[1:]:
            gaps += max(0.0, f['compute'][0] - reach)
            reach = max(reach, f['compute'][1])
        last_end = max(f['compute'][1] for f in computed)
        parts += [('to CUDA ready', ready), ('first call', first_end - ready - typical),
                  ('worker idle', gaps), ('calls', last_end - first_end - gaps + typical),
                  ('drain', batch['pipeline_end'] - last_end)]
        print('CUDA: thread began %.1f, devices counted %.1f, default device ready %.1f, all %.1f ms'
              % (cuda['start'], cuda['counted'], ready, cuda['all_ready']))
        print('first file: decoded %.1f..%.1f, call %.1f..%.1f (%.1f ms; typical call %.1f, engine ms %.1f)'
              % (*computed[0]['decode'], *computed[0]['compute'], calls[0], typical, computed[0]['engine_ms']))
        waiting = sum(1 for a, b in zip(computed, computed[1:]) if b['decode'][1] > a['compute'][1])
        print('calls that waited for their file\'s decode: %d of %d; decoded by CUDA ready: %d'
              % (waiting, len(computed) - 1, sum(1 for f in files if 0 <= f['decode'][1] <= ready)))
        print('calls in flight, on average while any was: %.2f; ms a file from the first call\'s end to the '
              'last\'s: %.2f' % (sum(calls[1:]) / max(1e-9, last_end - first_end - gaps),
                                  (last_end - first_end) / max(1, len(computed) - 1)))
    else:
        parts += [('pipeline', batch['pipeline_end'])]
    parts += [('clean-up', end - batch['pipeline_end'])]
    if a.wall:
        parts += [('after main', a.wall * 1e3 - before - end)]
    print('%d files, %d failed' % (len(files), len(files) - len(ok)))
    for name, ms in parts:
        print('  %-14s %8.1f ms' % (name, ms))
    print('  %-14s %8.1f ms' % ('sum', sum(ms for _, ms in parts)))
    print('stage medians, ms: decode %.1f (pool %.1f), call %.1f (pinning %.1f, engine %.1f, kernel %.1f, '
          'transfer %.1f), encode %.1f' % (med([dur(f, 'decode') for f in ok]), med([f['pool_ms'] for f in ok]),
                           med([dur(f, 'compute') for f in ok]), med([f.get('pin_ms', 0) for f in ok]),
                           med([f['engine_ms'] for f in ok]),
                           med([f['kernel_ms'] for f in ok]), med([f['transfer_ms'] for f in ok]),
                           med([dur(f, 'encode') for f in ok])))
    print('pool ms in decodes, sum %.1f, max %.1f; first decode ended %.1f, last encode ended %.1f'
          % (sum(f['pool_ms'] for f in ok), max(f['pool_ms'] for f in ok),
             min(f['decode'][1] for f in ok), max(f['encode'][1] for f in ok)))
    p = events['pool']
    print('pool: %d blocks pinned in %.1f ms, %d made in %.1f ms, %d freed in %.1f ms'
          % (p['pinned'], p['pin_ms'], p['plain'], p['plain_ms'], p['freed'], p['free_ms']))


if __name__ == '__main__':
    main()
