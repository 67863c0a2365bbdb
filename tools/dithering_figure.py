#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Makes docs/dithering.png: tests/data/astronaut.png in 16 colours (the same
k-means palette, seed 0) with each dither, side by side, a crop shown at 2x
so that the patterns are visible. The pictures come from the cudafx CLI;
this script only crops, places and labels them (Pillow).

    python3 tools/dithering_figure.py [build/cudafx] [docs/dithering.png]"""
import os
import subprocess
import sys
import tempfile

from PIL import Image, ImageDraw, ImageFont

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DITHERS = [("none", "none"), ("floyd-steinberg", "Floyd–Steinberg"), ("ordered", "ordered (Bayer)"),
           ("blue-noise", "blue noise")]
CROP = (150, 40, 350, 240)  # the face and the flag patch
ZOOM = 2
LABEL = 28


def main():
    cli = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "cudafx")
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "docs", "dithering.png")
    src = os.path.join(ROOT, "tests", "data", "astronaut.png")
    w, h = (CROP[2] - CROP[0]) * ZOOM, (CROP[3] - CROP[1]) * ZOOM
    sheet = Image.new("RGB", (len(DITHERS) * (w + 8) - 8, h + LABEL), "white")
    draw = ImageDraw.Draw(sheet)
    try:
        font = ImageFont.truetype("DejaVuSans.ttf", 16)
    except OSError:  # no DejaVu: Pillow's bitmap font, Latin-1 only
        font = ImageFont.load_default()
        DITHERS[1] = ("floyd-steinberg", "Floyd-Steinberg")
    with tempfile.TemporaryDirectory() as tmp:
        for i, (dither, label) in enumerate(DITHERS):
            path = os.path.join(tmp, dither + ".png")
            subprocess.run([cli, "quantize", "--colors", "16", "--seed", "0", "--dither", dither,
                            "--backend", "cpu", src, path], check=True)
            panel = Image.open(path).convert("RGB").crop(CROP).resize((w, h), Image.NEAREST)
            sheet.paste(panel, (i * (w + 8), LABEL))
            draw.text((i * (w + 8) + 4, 6), "16 colours, dither: " + label, fill="black", font=font)
    sheet.save(out, optimize=True)
    print("wrote", out)


if __name__ == "__main__":
    main()
