#!/usr/bin/python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Checks screenshots of the GIMP 3 dialogs (tests/gimp/screenshots.sh --both): in
each dialog the preview area must show the filter's result, not the photo.

For every filter, the pixels that change when the Preview toggle goes off
mark the preview area; with the toggle off that area must be a crop of the
photo (found by template matching: this gives its position), and with the
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


def preview_area(on, off):
    """Bounding box (x, y, w, h) of the largest region that the toggle changes.

    Closing joins the changed pixels into one region (pixels the filter left
    as they were break it up); the box is then that of the changed pixels
    themselves, so it holds the preview exactly, edges included, as long as
    each edge row and column of the preview has one changed pixel."""
    raw = (np.abs(on.astype(int) - off.astype(int)).max(axis=2) > 0).astype(np.uint8)
    closed = cv2.morphologyEx(raw, cv2.MORPH_CLOSE, np.ones((9, 9), np.uint8))
    n, labels, stats, _ = cv2.connectedComponentsWithStats(closed)
    if n < 2:
        return None
    best = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    ys, xs = np.nonzero(raw * (labels == best))
    return int(xs.min()), int(ys.min()), int(xs.max() - xs.min() + 1), int(ys.max() - ys.min() + 1)


def check(name, shots, cli, failures):
    on = cv2.imread(os.path.join(shots, f"gimp3-{name}.png"))
    off = cv2.imread(os.path.join(shots, f"gimp3-{name}-off.png"))
    photo_path = os.path.join(shots, f"gimp3-{name}-input.png")
    photo = cv2.imread(photo_path)
    if on is None or off is None or photo is None or on.shape != off.shape:
        failures.append(f"{name}: screenshots missing or of different sizes")
        return
    area = preview_area(on, off)
    if area is None or area[2] < 100 or area[3] < 100:
        failures.append(f"{name}: the Preview toggle changes no area of 100x100 pixels ({area})")
        return
    x, y, w, h = area
    shown_off, shown_on = off[y:y + h, x:x + w], on[y:y + h, x:x + w]
    match = cv2.matchTemplate(photo, shown_off, cv2.TM_SQDIFF_NORMED)
    score, _, (px, py), _ = cv2.minMaxLoc(match)
    if score > 1e-3:
        failures.append(f"{name}: with the preview off, the area is not a crop of the photo "
                        f"(match {score:.4f})")
        return
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
