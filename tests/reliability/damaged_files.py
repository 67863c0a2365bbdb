#!/usr/bin/python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Damaged and hostile image files, and what cudafx makes of them.

  damaged_files.py generate DIR [small]
                                     writes the corpus (PNG, JPEG, TIFF, WebP, PNM
                                     made from tests/data, each cut at many offsets,
                                     bit-flipped, overwritten; forged headers) to DIR;
                                     "small" makes 40x30 images (fuzzing seeds)
  damaged_files.py check CUDAFX      generates it in a temporary folder and runs
                                     `cudafx convolve --kernel 1 CASE out.png` on every case

A case passes when cudafx either refuses it (exit 1, a message naming the
file, no output and no temporary file left) or writes exactly the pixels that
an independent decoder (Pillow) gets from the same bytes; forged headers must
be refused. Never a crash, never more than 10 s. Prints one line per failure,
then "N passed, N failed". Needs Pillow and numpy (python3-pil, python3-numpy).
"""
import io
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np
from PIL import Image, ImageFile

ImageFile.LOAD_TRUNCATED_IMAGES = False
Image.MAX_IMAGE_PIXELS = None  # cudafx's own limit is what is tested
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..')
SECONDS = 10


def sources(small=False):
    """Small undamaged files in every format and layout the CLI reads itself."""
    w, h = (40, 30) if small else (160, 120)
    rgb = Image.open(os.path.join(ROOT, 'tests/data/chelsea.png')).convert('RGB').crop((100, 60, 100 + w, 60 + h))
    grey = Image.open(os.path.join(ROOT, 'tests/data/camera.png')).convert('L').crop((150, 100, 150 + w, 100 + h))
    rgba = rgb.copy()
    rgba.putalpha(grey)
    grey16 = Image.fromarray((np.asarray(grey, dtype=np.uint16) * 257 + 3).astype(np.uint16))

    def save(img, fmt, **kw):
        b = io.BytesIO()
        img.save(b, fmt, **kw)
        return b.getvalue()

    return {
        'rgb.png': save(rgb, 'PNG'),
        'grey.png': save(grey, 'PNG'),
        'rgba.png': save(rgba, 'PNG'),
        'grey16.png': save(grey16, 'PNG'),
        'rgb.jpg': save(rgb, 'JPEG', quality=90),
        'grey.jpg': save(grey, 'JPEG', quality=90),
        'progressive.jpg': save(rgb, 'JPEG', quality=90, progressive=True),
        'rgb.tif': save(rgb, 'TIFF'),
        'deflate.tif': save(rgba, 'TIFF', compression='tiff_adobe_deflate'),
        'grey16.tif': save(grey16, 'TIFF', compression='tiff_lzw'),
        'rgb.webp': save(rgb, 'WEBP', quality=90),
        'rgba.webp': save(rgba, 'WEBP', lossless=True),
        'rgb.ppm': save(rgb, 'PPM'),
        'grey.pgm': save(grey, 'PPM'),
    }


def png_chunk(kind, body):
    return struct.pack('>I', len(body)) + kind + body + struct.pack('>I', zlib.crc32(kind + body) & 0xffffffff)


def png_with_size(png, width, height):
    """The same PNG with IHDR claiming another size (CRC fixed)."""
    ihdr = struct.pack('>II', width, height) + png[24:29]
    return png[:8] + png_chunk(b'IHDR', ihdr) + png[33:]


def jpeg_with_size(jpg, width, height):
    i = 2
    while i < len(jpg):
        marker, length = jpg[i + 1], struct.unpack('>H', jpg[i + 2:i + 4])[0]
        if marker in (0xC0, 0xC1, 0xC2):
            return jpg[:i + 5] + struct.pack('>HH', height, width) + jpg[i + 9:]
        i += 2 + length
    raise ValueError('no SOF')


def tiff_with_size(tif, width, height):
    """Little-endian TIFF: rewrite the first IFD's width and length entries."""
    out = bytearray(tif)
    ifd = struct.unpack('<I', tif[4:8])[0]
    for k in range(struct.unpack('<H', tif[ifd:ifd + 2])[0]):
        e = ifd + 2 + 12 * k
        tag, kind = struct.unpack('<HH', tif[e:e + 4])
        value = {256: width, 257: height}.get(tag)
        if value is not None:
            out[e + 8:e + 12] = struct.pack('<I', value) if kind == 4 else struct.pack('<HH', value, 0)
    return bytes(out)


def forged(src):
    """Headers that lie about the size, and a decompression bomb."""
    png, jpg, tif = src['rgb.png'], src['rgb.jpg'], src['rgb.tif']
    rows = zlib.compress(b'\0' * (1 + 12000) * 12000, 9)  # 144 MP of black, 140 KB
    bomb = (b'\x89PNG\r\n\x1a\n' + png_chunk(b'IHDR', struct.pack('>IIBBBBB', 12000, 12000, 8, 0, 0, 0, 0))
            + png_chunk(b'IDAT', rows) + png_chunk(b'IEND', b''))
    webp = bytearray(src['rgb.webp'])  # simple lossy: 14-bit sizes at bytes 26..29
    webp[26:30] = struct.pack('<HH', 16383, 16383)
    return {
        'huge.png': png_with_size(png, 100000, 100000),
        'zero.png': png_with_size(png, 0, 0),
        'max.png': png_with_size(png, 65535, 65535),
        'bomb.png': bomb,  # refused by --max-megapixels 100 (see LIMITS)
        'huge.jpg': jpeg_with_size(jpg, 65500, 65500),
        'zero.jpg': jpeg_with_size(jpg, 0, 0),
        'huge.tif': tiff_with_size(tif, 100000, 100000),
        'zero.tif': tiff_with_size(tif, 0, 0),
        'huge.webp': bytes(webp),
        'huge.ppm': b'P6\n100000 100000\n255\n' + src['rgb.ppm'][15:],
        'zero.ppm': b'P6\n0 0\n255\n',
        'empty.png': b'',
        'text.jpg': b'not an image at all\n',
    }


LIMITS = {'bomb.png': '100'}


def damaged(name, data, rng):
    """Cuts at many offsets, single bit flips, and overwritten runs."""
    n = len(data)
    cuts = sorted({k for k in [1, 8, 16, 33, 100, n // 100, n // 20, n // 10, n // 4, n // 2,
                               3 * n // 4, 9 * n // 10, 99 * n // 100, n - 16, n - 1] if 0 < k < n})
    stem, ext = os.path.splitext(name)
    for k in cuts:
        yield '%s-cut%d%s' % (stem, k, ext), data[:k]
    for i in range(8):
        pos = rng.randrange(n)
        b = bytearray(data)
        b[pos] ^= 1 << rng.randrange(8)
        yield '%s-flip%d%s' % (stem, pos, ext), bytes(b)
    for i in range(3):
        pos = rng.randrange(max(1, n - 16))
        b = bytearray(data)
        b[pos:pos + 16] = bytes(rng.randrange(256) for _ in range(16))
        yield '%s-junk%d%s' % (stem, pos, ext), bytes(b)


def corpus(small=False):
    """(name, bytes, must_refuse) for every case, deterministic."""
    rng = random.Random(19)
    src = sources(small)
    cases = [(name, data, False) for name, data in src.items()]
    for name, data in src.items():
        cases += [(n, d, False) for n, d in damaged(name, data, rng)]
    cases += [(name, data, True) for name, data in forged(src).items()]
    return cases


def reference(path):
    """Pillow's pixels for the file, or None when Pillow refuses it. The
    colour of fully transparent pixels is left out: the filters set it to 0."""
    try:
        with Image.open(path) as im:
            im.load()
            a = np.asarray(im).astype(np.int64)
    except Exception:
        return None
    if a.ndim == 3 and a.shape[2] in (2, 4):
        a[a[:, :, -1] == 0] = 0
    return a


def check(cli):
    tmp = tempfile.mkdtemp(prefix='cudafx-damaged-')
    passed = failed = refused = decoded = 0
    tally = {}  # extension: [cases, refused, decoded]
    try:
        for name, data, must_refuse in corpus():
            case = os.path.join(tmp, name)
            with open(case, 'wb') as f:
                f.write(data)
            out = os.path.join(tmp, 'out.png')
            args = [cli, 'convolve', '--kernel', '1', '--backend', 'cpu']
            if name in LIMITS:
                args += ['--max-megapixels', LIMITS[name]]
            start = time.time()
            try:
                r = subprocess.run(args + [case, out], capture_output=True, timeout=SECONDS)
                rc, err = r.returncode, r.stderr.decode(errors='replace')
            except subprocess.TimeoutExpired:
                rc, err = 'timeout', ''
            seconds = time.time() - start
            leftovers = [f for f in os.listdir(tmp) if '.cudafx-' in f]
            problem = None
            if rc == 1:
                if os.path.exists(out) or leftovers:
                    problem = 'refused but left %s' % (leftovers or 'out.png')
                elif name not in err:
                    problem = 'refused without naming the file: %s' % err.strip()
                else:
                    refused += 1
            elif rc == 0:
                ref = reference(case)
                ours = reference(out) if os.path.exists(out) else None
                if must_refuse:
                    problem = 'a forged header was accepted'
                elif ref is None:
                    problem = 'exit 0 on a file Pillow refuses'
                elif ours is None or ours.shape != ref.shape or not np.array_equal(ours, ref):
                    problem = 'exit 0 with pixels unlike Pillow\'s decoding'
                else:
                    decoded += 1
            else:
                problem = 'exit %s (%.1f s): %s' % (rc, seconds, err.strip()[-300:])
            t = tally.setdefault(os.path.splitext(name)[1], [0, 0, 0])
            t[0] += 1
            t[1] += rc == 1 and not problem
            t[2] += rc == 0 and not problem
            if problem:
                failed += 1
                print('FAIL: %s (%d bytes): %s' % (name, len(data), problem))
            else:
                passed += 1
            for f in [case, out] + [os.path.join(tmp, f) for f in leftovers]:
                if os.path.exists(f):
                    os.unlink(f)
    finally:
        shutil.rmtree(tmp)
    for ext, (n, r, d) in sorted(tally.items()):
        print('  %-5s %3d cases: %3d refused, %3d decoded as Pillow does' % (ext, n, r, d))
    print('damaged files: %d cases, %d refused with a message, %d decoded as Pillow decodes them'
          % (passed + failed, refused, decoded))
    print('%d passed, %d failed' % (passed, failed))
    return failed == 0


def main():
    if len(sys.argv) in (3, 4) and sys.argv[1] == 'generate':
        os.makedirs(sys.argv[2], exist_ok=True)
        for name, data, _ in corpus(sys.argv[3:] == ['small']):
            if len(data) < 1 << 20:  # the bomb stays out of fuzzing seeds
                with open(os.path.join(sys.argv[2], name), 'wb') as f:
                    f.write(data)
        return 0
    if len(sys.argv) == 3 and sys.argv[1] == 'check':
        return 0 if check(os.path.abspath(sys.argv[2])) else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == '__main__':
    sys.exit(main())
