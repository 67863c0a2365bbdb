/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The noise of an image, estimated from the image alone where texture does
 * not pass for noise (engine-internal; core/noise_estimate.c has the method
 * and the papers): per colour channel the noise variance at each brightness
 * level, and how the noise is correlated between neighbouring pixels and
 * between the colour channels. Automatic nl-means fits its noise model to it
 * (core/nlmeans_noise.c). */
#ifndef CUDAFX_NOISE_ESTIMATE_H
#define CUDAFX_NOISE_ESTIMATE_H

#include "cudafx.h"

#define NOISE_LEVELS 16 /* brightness levels of 16 sRGB units */
/* Levels closer to 0 or 255 than this many of their sigmas have their
 * noise clipped, which makes it look smaller: flat noise is measured
 * without them (tests/quality, README). */
#define NOISE_CLIP_MARGIN 3.0

typedef struct {
  int    colours;
  /* Per channel and level: the noise variance (0..255 units; 0 where the
   * level has too few weak-texture patches for one), the level's mean
   * brightness (0..255) and the weak-texture patches it rests on. */
  double var[CUDAFX_NOISE_MAX_CHANNELS][NOISE_LEVELS];
  double y[CUDAFX_NOISE_MAX_CHANNELS][NOISE_LEVELS];
  int    count[CUDAFX_NOISE_MAX_CHANNELS][NOISE_LEVELS];
  /* Per channel: the variance if the noise is flat (one texture threshold
   * for all levels; the levels within NOISE_CLIP_MARGIN of clipping left out). */
  double flat[CUDAFX_NOISE_MAX_CHANNELS];
  /* Correlation of the noise of a pixel with its neighbour at (dx, dy),
   * spatial[dy + 1][dx + 1] (spatial[1][1] = 1), mean over the channels,
   * and between colour channels at one pixel (mean over the pairs; 0 for
   * one channel). */
  double spatial[3][3];
  double channel;
  /* The noise's whole variance at a pixel over the variance of its
   * uncorrelated share that var and flat measure (1 for white noise; more
   * where the noise is smoothed, which hides it from the patches' noise
   * directions). */
  double variance_ratio;
} noise_estimate;

/* Estimates the noise of src's first colours channels (u8 or f32, sRGB;
 * a bounded sample of patches, whatever the image's size). The result does
 * not depend on the thread count. */
cudafx_status noise_estimate_image (const cudafx_image *src, int colours, const cudafx_options *o,
                                    noise_estimate *e);

#endif /* CUDAFX_NOISE_ESTIMATE_H */
