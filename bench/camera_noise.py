# SPDX-License-Identifier: GPL-3.0-or-later
"""Camera noise for the nl-means quality script and benchmark:
Poisson-Gaussian noise added in linear light to an 8-bit sRGB image, numpy
only. The sRGB photo is linearised (IEC 61966-2-1), x in 0..1; the noisy
value is z = a P(x / a) + N(0, b) (P Poisson: variance a x + b, shot noise
plus read noise), clipped to 0..1, encoded back to sRGB and rounded to 8 bits.
A level is the sRGB sigma at mid grey (128), SHOT_SHARE of the linear
variance there shot noise (a), the rest read noise (b): the shadows carry
much more noise in sRGB units than the highlights, as a camera's do."""
import numpy as np

SHOT_SHARE = 0.9


def srgb_to_linear(v):
    v = np.asarray(v, np.float64) / 255.0
    return np.where(v <= 0.04045, v / 12.92, ((v + 0.055) / 1.055) ** 2.4)


def linear_to_srgb(x):
    x = np.clip(x, 0.0, 1.0)
    return 255.0 * np.where(x <= 0.0031308, 12.92 * x, 1.055 * x ** (1 / 2.4) - 0.055)


def camera_model(level):
    """(a, b) of the variance a x + b in linear light whose sRGB sigma at
    mid grey is `level` units."""
    x = float(srgb_to_linear(128))
    slope = 255 * 1.055 / 2.4 * x ** (1 / 2.4 - 1)  # d sRGB / dx at mid grey
    var = (level / slope) ** 2
    return SHOT_SHARE * var / x, (1 - SHOT_SHARE) * var


def camera_noisy_copy(img, level, seed):
    a, b = camera_model(level)
    rng = np.random.default_rng(seed)
    x = srgb_to_linear(img)
    z = a * rng.poisson(x / a) + rng.normal(0, np.sqrt(b), img.shape)
    return np.rint(linear_to_srgb(z)).astype(np.uint8)
