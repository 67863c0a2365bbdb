#!/usr/bin/python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Checks screenshots of the GIMP 3 dialogs (tests/gimp/screenshots.sh --both): in
each dialog the preview area must show the filter's result, not the photo.

For every filter, the pixels that change when the Preview toggle goes off
mark where the preview is (the toggle itself changes too); with the toggle
off, the preview area is the rectangle there that is a crop of the photo
(found by template matching: this gives its position), and with the
toggle on it must equal the CLI's output for the same settings at that
position, every pixel of the area, edges included, while differing from the
photo. The preview is the engine's output for a region with its real
neighbours as halo (not clamped at the region's edge), drawn 1:1 through
GIMP's display path, which leaves sRGB 8-bit pixels as they are: so no
tolerance, and a preview that ignored its neighbours would differ at the edges.

    tests/gimp/check-dialogs.py SHOTS_DIR CLI      ends with "N passed, N failed"
"""
import os
import subprocess
import sys
import tempfile

import cv2
import numpy as np

# What each dialog shows, as CLI options: the defaults of a fresh profile,
# except what tests/gimp/screenshots.sh types (convolution: Sharpen 5x5).
SETTINGS = {
    "median": [],
    "nl-means": [],
    "nl-bayes": [],
    "quantize": [],
    "convolve": ["--preset", "sharpen-5x5"],
}


def changed_box(on, off):
    """Bounding box (x, y, w, h) of the largest region that the toggle changes.

    Closing joins the changed pixels into one region (pixels the filter left
    as they were break it up); the box is then that of the changed pixels
    themselves, so it holds the preview exactly, edges included, as long as
    each edge row and column of the preview has one changed pixel. The toggle
    changes too, and GIMP 3.2 draws it close enough to join the region: the
    box can hold it (preview_area takes it out)."""
    raw = (np.abs(on.astype(int) - off.astype(int)).max(axis=2) > 0).astype(np.uint8)
    closed = cv2.morphologyEx(raw, cv2.MORPH_CLOSE, np.ones((9, 9), np.uint8))
    n, labels, stats, _ = cv2.connectedComponentsWithStats(closed)
    if n < 2:
        return None
    best = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    ys, xs = np.nonzero(raw * (labels == best))
    return int(xs.min()), int(ys.min()), int(xs.max() - xs.min() + 1), int(ys.max() - ys.min() + 1)


def preview_area(box, off, photo):
    """The preview's area (x, y, w, h) in the screenshots and the photo's
    pixel (px, py) it shows at its corner, or None when, with the preview off,
    the box's middle is not a crop of the photo.

    The preview is the part of the changed box that, with the preview off,
    equals the photo pixel for pixel: the region of such pixels around the
    box's middle, whose place in the photo a patch from there gives."""
    x, y, w, h = box
    half = min(32, w // 4, h // 4)
    cx, cy = x + w // 2 - half, y + h // 2 - half
    patch = off[cy:cy + 2 * half, cx:cx + 2 * half]
    score, _, (px, py), _ = cv2.minMaxLoc(cv2.matchTemplate(photo, patch, cv2.TM_SQDIFF_NORMED))
    if score > 1e-3:
        return None
    dx, dy = px - cx, py - cy
    # Where the box, moved by (dx, dy), lies on the photo.
    x0, y0 = max(x, -dx), max(y, -dy)
    x1, y1 = min(x + w, photo.shape[1] - dx), min(y + h, photo.shape[0] - dy)
    same = np.zeros(off.shape[:2], np.uint8)
    same[y0:y1, x0:x1] = (off[y0:y1, x0:x1] == photo[y0 + dy:y1 + dy, x0 + dx:x1 + dx]).all(axis=2)
    _, labels, stats, _ = cv2.connectedComponentsWithStats(same, connectivity=4)
    sx, sy, sw, sh = stats[labels[cy + half, cx + half], :4]
    if not same[sy:sy + sh, sx:sx + sw].all():
        return None
    return (int(sx), int(sy), int(sw), int(sh)), (int(sx + dx), int(sy + dy))


def check(name, shots, cli, failures):
    on = cv2.imread(os.path.join(shots, f"gimp3-{name}.png"))
    off = cv2.imread(os.path.join(shots, f"gimp3-{name}-off.png"))
    photo_path = os.path.join(shots, f"gimp3-{name}-input.png")
    photo = cv2.imread(photo_path)
    if on is None or off is None or photo is None or on.shape != off.shape:
        failures.append(f"{name}: screenshots missing or of different sizes")
        return
    box = changed_box(on, off)
    if box is None or box[2] < 100 or box[3] < 100:
        failures.append(f"{name}: the Preview toggle changes no area of 100x100 pixels ({box})")
        return
    found = preview_area(box, off, photo)
    if found is None:
        failures.append(f"{name}: with the preview off, the changed area {box} holds no crop "
                        "of the photo")
        return
    (x, y, w, h), (px, py) = found
    if w < 100 or h < 100:
        failures.append(f"{name}: with the preview off, only {w}x{h} pixels of the changed area "
                        f"{box} show the photo")
        return
    shown_on = on[y:y + h, x:x + w]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.png")
        subprocess.run([cli, name, *SETTINGS[name], photo_path, out], check=True,
                       stdout=subprocess.DEVNULL)
        expected = cv2.imread(out)[py:py + h, px:px + w]
    diff = np.abs(shown_on.astype(int) - expected.astype(int)).max(axis=2)
    to_photo = np.abs(shown_on.astype(float) - photo[py:py + h, px:px + w]).mean()
    print(f"-- {name}: preview area {w}x{h} at ({x},{y}) shows the photo at ({px},{py}); "
          f"{np.count_nonzero(diff)} pixels differ from the CLI's (largest {diff.max()}), "
          f"mean |preview - photo| {to_photo:.3f}, std {shown_on.std():.1f}")
    if shown_on.std() < 5:
        failures.append(f"{name}: the preview is blank (std {shown_on.std():.1f})")
    if diff.any():
        ys, xs = np.nonzero(diff)
        edge = np.count_nonzero((xs < 4) | (ys < 4) | (xs >= w - 4) | (ys >= h - 4))
        failures.append(f"{name}: {len(xs)} of {w * h} preview pixels differ from the CLI's result "
                        f"(largest difference {diff.max()}, {edge} within 4 px of the edge; "
                        f"first at ({xs[0]},{ys[0]}) of the area)")
    if to_photo < 1:
        failures.append(f"{name}: the preview is the photo (mean difference {to_photo:.3f})")


def main():
    shots, cli = sys.argv[1], sys.argv[2]
    passed = failed = 0
    for name in SETTINGS:
        failures = []
        check(name, shots, cli, failures)
        for f in failures:
            print(f"FAIL {f}")
        passed += not failures
        failed += bool(failures)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
