/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Automatic nl-means for camera noise (engine-internal; core/nlmeans_noise.c
 * has the method and the papers): the noise level function fitted to an
 * image, and the variance-stabilising transform nl-means then runs behind. */
#ifndef CUDAFX_NLMEANS_NOISE_H
#define CUDAFX_NLMEANS_NOISE_H

#include "cudafx.h"

/* Cells of the inverse transform's table, uniform in the transformed value. */
#define NLMEANS_VST_CELLS 4096

typedef struct {
  int   colours;
  float scale;                                         /* noise sigma after the transform (0..255 scale) */
  float forward[CUDAFX_NOISE_MAX_CHANNELS][256];       /* u8 value to transformed value */
  double a[CUDAFX_NOISE_MAX_CHANNELS], c[CUDAFX_NOISE_MAX_CHANNELS]; /* for f32: a and 3a^2/8 + b */
  float inv_z0[CUDAFX_NOISE_MAX_CHANNELS], inv_step[CUDAFX_NOISE_MAX_CHANNELS];
  float inverse[CUDAFX_NOISE_MAX_CHANNELS][NLMEANS_VST_CELLS + 1]; /* sRGB 0..255 */
} nlmeans_vst;

/* Fits the noise model of src's colour channels on the CPU; *sigma is the
 * one-sigma estimate of the same samples (core/nlmeans.c's estimator). */
cudafx_status nlmeans_noise_fit (const cudafx_image *src, int colours, const cudafx_options *o,
                                 cudafx_noise_model *m, double *sigma);
/* The transform for a signal-dependent model. */
void nlmeans_vst_make (const cudafx_noise_model *m, int colours, nlmeans_vst *v);
/* src's colour channels into t (f32, colours channels, no alpha), transformed. */
void nlmeans_vst_forward (const nlmeans_vst *v, const cudafx_image *src, cudafx_image *t,
                          const cudafx_options *o);
/* The exact unbiased inverse of u (as made by forward and denoised) into
 * dst; alpha from src. */
void nlmeans_vst_inverse (const nlmeans_vst *v, const cudafx_image *u, const cudafx_image *src,
                          cudafx_image *dst, const cudafx_options *o);

/* core/nlmeans.c's row reader: channel c of row y, columns x0 .. x0+n-1
 * clamped, on the 0..255 scale. */
void nlmeans_load_row (const cudafx_image *img, int y, int c, int x0, int n, float *out);

#endif /* CUDAFX_NLMEANS_NOISE_H */
