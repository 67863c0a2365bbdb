# SPDX-License-Identifier: GPL-3.0-or-later
"""A simple camera pipeline for the nl-means quality script: what a
photographer's JPEG looks like, made from an 8-bit sRGB photo with numpy and
OpenCV only. Its noise is added to the raw mosaic, so what reaches the file
is spatially correlated (demosaicking interpolates it), mixed between the
channels (the colour matrix) and compressed (JPEG).

Steps, each the usual one of a camera or raw converter:
 1. the photo, linearised (IEC 61966-2-1), is the scene in linear sRGB;
 2. into camera RGB: the inverse of CAM_TO_SRGB (rows summing to 1, so grey
    stays grey), then the inverse white-balance gains WB (the sensor sees
    less red and blue than green), clipped to 0..1;
 3. mosaic: an RGGB Bayer pattern keeps one channel per pixel;
 4. raw noise: Poisson-Gaussian, z = a P(x / a) + N(0, b) (shot noise plus
    read noise, variance a x + b), at the ISO-like levels of
    bench/camera_noise.py's camera_model (whose sRGB sigma at mid grey
    would be `level` if the noise were added to the linear image), clipped
    to 0..1 and quantised to 12 bits;
 5. demosaicking, one of DEMOSAIC: OpenCV's bilinear or edge-aware
    (cv2.demosaicing on the 16-bit mosaic);
 6. white balance (WB) and the colour matrix CAM_TO_SRGB, clipped to 0..1;
 7. sRGB encoding, rounded to 8 bits;
 8. JPEG at a quality of 85-95 (OpenCV's libjpeg, 4:2:0 chroma).
The clean reference is the same pipeline without noise and without JPEG
(steps 1-3, 5-7): what a perfect denoiser could give back, demosaicking
errors aside."""
import cv2
import numpy as np

from camera_noise import camera_model, linear_to_srgb, srgb_to_linear

# Camera RGB to linear sRGB, a typical one (rows sum to 1): it amplifies
# and mixes the channels' noise.
CAM_TO_SRGB = np.array([[1.70, -0.55, -0.15],
                        [-0.25, 1.55, -0.30],
                        [0.02, -0.52, 1.50]])
WB = np.array([2.0, 1.0, 1.6])  # red, green, blue gains
DEMOSAIC = ("bilinear", "edge-aware")
RAW_BITS = 12


def _rgb(img):
    """HxWx3 RGB float from cv2's BGR or grey u8."""
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    return img[..., ::-1].astype(np.float64)


def _mosaic(cam):
    """RGGB: R at (even, even), G at (even, odd) and (odd, even), B at (odd, odd)."""
    h, w = cam.shape[:2]
    m = np.empty((h, w))
    m[0::2, 0::2] = cam[0::2, 0::2, 0]
    m[0::2, 1::2] = cam[0::2, 1::2, 1]
    m[1::2, 0::2] = cam[1::2, 0::2, 1]
    m[1::2, 1::2] = cam[1::2, 1::2, 2]
    return m


def _develop(raw, method):
    """Mosaic 0..1 to an 8-bit sRGB image (cv2's BGR order)."""
    m16 = np.rint(np.clip(raw, 0, 1) * 65535).astype(np.uint16)
    # OpenCV names Bayer patterns by the second row's first two pixels:
    # its BayerBG is our RGGB.
    code = {"bilinear": cv2.COLOR_BayerBG2RGB, "edge-aware": cv2.COLOR_BayerBG2RGB_EA}[method]
    cam = cv2.demosaicing(m16, code).astype(np.float64) / 65535
    lin = np.clip((cam * WB) @ CAM_TO_SRGB.T, 0, 1)
    return np.rint(linear_to_srgb(lin))[..., ::-1].astype(np.uint8)


def _raw(img):
    """The clean mosaic of an 8-bit photo (cv2's BGR or grey)."""
    lin = srgb_to_linear(_rgb(img))
    cam = np.clip((lin @ np.linalg.inv(CAM_TO_SRGB).T) / WB, 0, 1)
    return _mosaic(cam)


def clean_reference(img, method):
    """The pipeline's output without noise and JPEG (BGR u8)."""
    return _develop(_raw(img), method)


def camera_jpeg(img, level, method, quality, seed):
    """The pipeline's JPEG of img (BGR u8, decoded) at a noise level."""
    a, b = camera_model(level)
    rng = np.random.default_rng(seed)
    x = _raw(img)
    z = a * rng.poisson(x / a) + rng.normal(0, np.sqrt(b), x.shape)
    levels = 2 ** RAW_BITS - 1
    z = np.rint(np.clip(z, 0, 1) * levels) / levels
    out = _develop(z, method)
    ok, data = cv2.imencode(".jpg", out, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    assert ok
    return cv2.imdecode(data, cv2.IMREAD_COLOR)
