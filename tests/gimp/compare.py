#!/usr/bin/python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Reference outputs and image comparisons for tests/gimp/run.sh (Debian's
python3 with OpenCV and numpy).

  compare.py reference FILTER IN OUT [name=value ...]
      Runs the engine ($CUDAFX_LIB, default build/libcudafx.so, through
      bench/pycudafx.py) on IN with
      the procedure arguments given by name (choices by nick, kernel as
      comma-separated values) and writes OUT. If the engine rejects the call,
      prints its message and exits 3.
  compare.py same A B [TOLERANCE [X Y W H]]
      A (or its rectangle X Y W H) and B have the same size and channels and
      differ by at most TOLERANCE. A 16-bit file of 8-bit values (GEGL's PNG
      saver) compares with an 8-bit one.
  compare.py inside A B INSIDE X Y W H
      B equals INSIDE within the rectangle and A outside it (a selection run).
"""
import ctypes as C
import os
import sys

import cv2
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import pycudafx  # noqa: E402


def load(path):
    """RGB(A) or grey array, as GIMP sees the file."""
    a = cv2.imread(path, cv2.IMREAD_UNCHANGED)
    if a is None:
        sys.exit(f"cannot read {path}")
    if a.ndim == 3:
        a = cv2.cvtColor(a, cv2.COLOR_BGRA2RGBA if a.shape[2] == 4 else cv2.COLOR_BGR2RGB)
    return a


def save(path, a):
    if a.ndim == 3:
        a = cv2.cvtColor(a, cv2.COLOR_RGBA2BGRA if a.shape[2] == 4 else cv2.COLOR_RGB2BGR)
    if not cv2.imwrite(path, a):
        sys.exit(f"cannot write {path}")


class ArgDesc(C.Structure):
    _fields_ = [("name", C.c_char_p), ("label", C.c_char_p), ("blurb", C.c_char_p),
                ("type", C.c_int), ("min", C.c_double), ("max", C.c_double),
                ("default", C.c_double), ("choices", C.c_void_p), ("n_choices", C.c_int)]


def engine_kwargs(engine, filter_name, pairs):
    """Procedure arguments (name=value, choices by nick) as pycudafx keywords;
    choice nicks are resolved through the engine's own argument table."""
    lib = engine.lib
    lib.cudafx_filter_find.restype = C.c_void_p
    lib.cudafx_arg_find.restype = C.POINTER(ArgDesc)
    lib.cudafx_arg_find.argtypes = [C.c_void_p, C.c_char_p]
    lib.cudafx_choice_find.argtypes = [C.POINTER(ArgDesc), C.c_char_p]
    desc = lib.cudafx_filter_find(filter_name.encode())
    kwargs = {}
    for pair in pairs:
        name, value = pair.split("=", 1)
        arg = lib.cudafx_arg_find(desc, name.encode())
        if not arg:
            sys.exit(f"{filter_name} has no argument {name}")
        key = {"auto": "automatic"}.get(name, name.replace("-", "_"))
        kind = arg.contents.type
        if kind == 3:  # choice
            kwargs[key] = lib.cudafx_choice_find(arg, value.encode())
        elif kind == 4:  # kernel
            taps = [float(v) for v in value.split(",")]
            n = int(round(len(taps) ** 0.5))
            kwargs[key] = np.array(taps).reshape(n, n)
            kwargs.setdefault("preset", 0)
        elif kind == 2:  # boolean
            kwargs[key] = value.lower() in ("1", "true", "#t")
        elif kind == 0:
            kwargs[key] = int(value)
        else:
            kwargs[key] = float(value)
    return kwargs


def reference(filter_name, src_path, out_path, pairs):
    engine = pycudafx.Engine(os.environ.get("CUDAFX_LIB"))
    src = load(src_path)
    has_alpha = src.ndim == 3 and src.shape[2] in (2, 4)
    work = src if src.dtype == np.uint8 else (src.astype(np.float32) / np.iinfo(src.dtype).max)
    fn = {"median": engine.median, "nl-means": engine.nlmeans,
          "quantize": engine.quantize, "convolve": engine.convolve}[filter_name]
    try:
        out = fn(work, has_alpha=has_alpha, **engine_kwargs(engine, filter_name, pairs))[0]
    except pycudafx.CudafxError as e:
        print(e)
        sys.exit(3)
    if src.dtype != np.uint8:
        top = np.iinfo(src.dtype).max
        out = np.clip(np.rint(out.astype(np.float64) * top), 0, top).astype(src.dtype)
    save(out_path, out)


def to_u8(a, path):
    """An 8-bit image that GEGL's PNG saver wrote in 16 bits (each value
    v * 257) back to 8 bits; anything else is a difference."""
    if a.dtype != np.uint16:
        return a
    if (a % 257).any():
        sys.exit(f"{path}: 16-bit values that no 8-bit value gives")
    return (a // 257).astype(np.uint8)


def same(a_path, b_path, tolerance=0, crop=None):
    a, b = load(a_path), load(b_path)
    if a.dtype != b.dtype:
        a, b = to_u8(a, a_path), to_u8(b, b_path)
    if crop:
        x, y, w, h = crop
        a = a[y:y + h, x:x + w]
    if a.shape != b.shape:
        sys.exit(f"{b_path}: shape {b.shape}, expected {a.shape}")
    diff = np.abs(a.astype(np.int64) - b.astype(np.int64))
    if diff.max() > tolerance:
        n = int((diff > tolerance).sum())
        sys.exit(f"{b_path}: {n} values differ by more than {tolerance} (max {diff.max()})")


def inside(a_path, b_path, in_path, x, y, w, h):
    a, b, i = load(a_path), load(b_path), load(in_path)
    mask = np.zeros(a.shape[:2], bool)
    mask[y:y + h, x:x + w] = True
    if not (b[~mask] == a[~mask]).all():
        sys.exit(f"{b_path}: pixels outside the selection changed")
    if not (b[mask] == i[mask]).all():
        n = int((b[mask] != i[mask]).sum())
        sys.exit(f"{b_path}: {n} values inside the selection differ from the whole-image result")


if __name__ == "__main__":
    cmd, rest = sys.argv[1], sys.argv[2:]
    if cmd == "reference":
        reference(rest[0], rest[1], rest[2], rest[3:])
    elif cmd == "same":
        same(rest[0], rest[1], int(rest[2]) if len(rest) > 2 else 0,
             tuple(map(int, rest[3:7])) if len(rest) > 6 else None)
    elif cmd == "inside":
        inside(rest[0], rest[1], rest[2], *map(int, rest[3:7]))
    else:
        sys.exit(__doc__)
