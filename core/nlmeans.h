/* SPDX-License-Identifier: GPL-3.0-or-later */
/* NL-means plan: the parameters both backends compute with, the CPU's
 * weight function, and the noise residual both count (engine-internal;
 * core/nlmeans.c makes the plan and is the reference, cuda/nlmeans.cu
 * computes the same distances and counts, and weights within this
 * function's own 1e-5 of exp). See core/nlmeans.c's header for the
 * formula and the order of the sums. */
#ifndef CUDAFX_NLMEANS_H
#define CUDAFX_NLMEANS_H

#include "cudafx.h"

#include <math.h>
#include <stdint.h>

#define NLMEANS_MAX_PATCH_RADIUS 5

#ifdef __CUDACC__
#define NLMEANS_HOST_DEVICE __host__ __device__
#else
#define NLMEANS_HOST_DEVICE
#endif

struct nlmeans_vst;

typedef struct {
  int   patch_radius, search_radius;
  /* Separable patch weights g[0 .. 2P]: all 1 (flat) or a Gaussian; always
   * symmetric, g[j] = g[2P - j] (a function of (j - P)^2), which
   * cuda/nlmeans.cu relies on: it reads g[0 .. P] only. */
  float patch_weights[2 * NLMEANS_MAX_PATCH_RADIUS + 1];
  float dist_scale;  /* 1 / (n (sum g)^2 h^2), n colour channels */
  float dist_offset; /* 2 s^2 / h^2 */
  int   centre_max;  /* the centre weighs as its most similar neighbour (else 1) */
  /* NULL, or the variance-stabilising transform (camera noise): the colour
   * channels are denoised as f32 behind it, then transformed back. */
  const struct nlmeans_vst *vst;
} nlmeans_plan;

/* exp (-max (x, 0)), relative error below 1e-5, the same bits vectorised
 * or not and for any thread count (gcc, -ffp-contract=off): no fused
 * multiply-adds, no library exp. cuda/nlmeans.cu's weight_of clamps x the
 * same way and takes the hardware's exp. Written so that gcc vectorises the
 * loops calling it: the clamp works on the float's bits (an integer max/min,
 * monotonic for floats; a float compare would stop gcc's if-conversion),
 * then exp (-x) = 2^-k exp (-g), k the integer nearest x / ln 2,
 * |g| <= ln 2 / 2, exp (-g) by its Taylor series to degree 6. */
static inline float
nlmeans_exp_neg (float x)
{
  union { float f; int32_t i; } u = { x };
  u.i = u.i > 0 ? u.i : 0;                   /* negatives and -NaN to +0 */
  u.i = u.i < 0x42ae0000 ? u.i : 0x42ae0000; /* 87.0f: 2^-k stays normal */
  x = u.f;
  int k = (int) (x * 1.44269504f + 0.5f);
  float g = x - (float) k * 0.693147182f;
  float p = 1.0f + g * (-1.0f + g * (0.5f + g * (-1.0f / 6 + g * (1.0f / 24 + g * (-1.0f / 120
                                                                                   + g * (1.0f / 720))))));
  union { int32_t i; float f; } scale = { (127 - k) << 23 };
  return p * scale.f;
}

/* Non-finite f32 values: the output keeps them, and the patches around
 * read them as 0, as nl-bayes' do, so that one bad value does not spread
 * through every weight it meets; a pixel holding one is no candidate for
 * its neighbours (weight 0), since its value would pull theirs towards 0.
 * Both backends load an f32 value x as nlmeans_patch_value (x) on the
 * 0..255 scale: a non-finite one as -0.0f, which the squared differences
 * read as 0 and nlmeans_unknown recognises; + 0.0f turns a genuine -0.0
 * into +0.0 (the same value in every sum), so that the mark is the bad
 * values' alone. */
static inline NLMEANS_HOST_DEVICE float
nlmeans_patch_value (float x)
{
  return isfinite (x) ? x * 255.0f + 0.0f : -0.0f;
}

static inline NLMEANS_HOST_DEVICE int
nlmeans_unknown (float v)
{
  union { float f; uint32_t i; } u = { v };
  return u.i == 0x80000000u;
}

/* The centre's weight from the largest weight of the other offsets. */
static inline NLMEANS_HOST_DEVICE float
nlmeans_centre_weight (int centre_max, float max_weight)
{
  return centre_max && max_weight > 0.0f ? max_weight : 1.0f;
}

/* Noise histogram: |residual| in bins of 1/4 on the 0..255 scale. */
#define NLMEANS_NOISE_BINS 4096
#define NLMEANS_NOISE_BINS_PER_UNIT 4.0

/* Whether one of the three values from v on is clipped to the range's ends. */
static inline NLMEANS_HOST_DEVICE int
nlmeans_clipped (const float *v)
{
  return v[0] <= 0.0f || v[0] >= 255.0f || v[1] <= 0.0f || v[1] >= 255.0f || v[2] <= 0.0f
         || v[2] >= 255.0f;
}

/* The noise histogram's bin for the 3x3 neighbourhood whose rows start at
 * r0, r1, r2 (0..255 scale), or -1 when it holds a clipped value (clipping
 * hides noise: dark or blown-out areas are left out). Immerkaer's mask
 * [1 -2 1; -2 4 -2; 1 -2 1], the difference of two Laplacians, blind to
 * linear ramps; the same float and double arithmetic on both backends, so
 * their histograms are the same counts. */
static inline NLMEANS_HOST_DEVICE int
nlmeans_noise_bin (const float *r0, const float *r1, const float *r2)
{
  if (nlmeans_clipped (r0) || nlmeans_clipped (r1) || nlmeans_clipped (r2))
    return -1;
  float l = (r0[0] + r0[2] + r2[0] + r2[2]) - 2.0f * (r0[1] + r2[1] + r1[0] + r1[2]) + 4.0f * r1[1];
  double b = fabs ((double) l) * NLMEANS_NOISE_BINS_PER_UNIT + 0.5;
  return b < NLMEANS_NOISE_BINS - 1 ? (int) b : NLMEANS_NOISE_BINS - 1;
}

/* The noise-model fit's histograms (core/nlmeans_noise.c): per colour
 * channel and brightness level (the 3x3 neighbourhood's mean, FIT_LEVELS
 * levels over 0..256), |residual| in one-unit bins (the residual is an
 * integer on u8). */
#define NLMEANS_FIT_LEVELS 32
#define NLMEANS_FIT_RES    512
#define NLMEANS_FIT_BINS   (NLMEANS_FIT_LEVELS * NLMEANS_FIT_RES)

/* The fit's bin, level * NLMEANS_FIT_RES + |residual|, of the neighbourhood
 * whose rows start at r0, r1, r2, or -1 when it holds a clipped value; the
 * same float and double arithmetic on both backends. */
static inline NLMEANS_HOST_DEVICE int
nlmeans_fit_bin (const float *r0, const float *r1, const float *r2)
{
  int b = nlmeans_noise_bin (r0, r1, r2);
  if (b < 0)
    return -1;
  int l = (int) (b / NLMEANS_NOISE_BINS_PER_UNIT + 0.5);
  l = l < NLMEANS_FIT_RES ? l : NLMEANS_FIT_RES - 1;
  float m = (r0[0] + r0[1] + r0[2]) + (r1[0] + r1[1] + r1[2]) + (r2[0] + r2[1] + r2[2]);
  int level = (int) (m * (NLMEANS_FIT_LEVELS / (9.0f * 256.0f)));
  level = level < 0 ? 0 : level >= NLMEANS_FIT_LEVELS ? NLMEANS_FIT_LEVELS - 1 : level;
  return level * NLMEANS_FIT_RES + l;
}

/* ---- the variance-stabilising transform (core/nlmeans_noise.c makes it) --- */

/* Cells of the inverse transform's table, uniform in the transformed value. */
#define NLMEANS_VST_CELLS 4096

typedef struct nlmeans_vst {
  int   colours;
  float scale;                                         /* noise sigma after the transform (0..255 scale) */
  float forward[CUDAFX_NOISE_MAX_CHANNELS][256];       /* u8 value to transformed value */
  double a[CUDAFX_NOISE_MAX_CHANNELS], c[CUDAFX_NOISE_MAX_CHANNELS]; /* for f32: a and 3a^2/8 + b */
  float inv_z0[CUDAFX_NOISE_MAX_CHANNELS], inv_step[CUDAFX_NOISE_MAX_CHANNELS];
  float inverse[CUDAFX_NOISE_MAX_CHANNELS][NLMEANS_VST_CELLS + 1]; /* sRGB 0..255 */
} nlmeans_vst;

/* sRGB (IEC 61966-2-1) decoded, values 0..1. */
static inline NLMEANS_HOST_DEVICE double
nlmeans_srgb_decode (double v)
{
  return v <= 0.04045 ? v / 12.92 : pow ((v + 0.055) / 1.055, 2.4);
}

/* Generalised Anscombe, c = 3a^2/8 + b (core/nlmeans_noise.c's header). */
static inline NLMEANS_HOST_DEVICE double
nlmeans_gat (double a, double c, double x)
{
  return 2.0 * x / (sqrt (a * x + c) + sqrt (c));
}

/* The transformed value of channel c of a pixel (u8: the byte at p, f32: the
 * float at p, clamped to 0..1), on the 0..1 scale of an f32 image. */
static inline NLMEANS_HOST_DEVICE float
nlmeans_vst_forward_value (const nlmeans_vst *v, int c, cudafx_type type, const void *p)
{
  float z;
  if (type == CUDAFX_U8)
    z = v->forward[c][*(const uint8_t *) p];
  else
    {
      double s = *(const float *) p;
      s = s < 0 ? 0 : s > 1 ? 1 : s;
      z = (float) (v->scale * nlmeans_gat (v->a[c], v->c[c], nlmeans_srgb_decode (s)));
    }
  return z / 255.0f;
}

/* The exact unbiased inverse of channel c's denoised value u (0..1 scale of
 * f32), on the 0..255 scale. */
static inline NLMEANS_HOST_DEVICE float
nlmeans_vst_inverse_value (const nlmeans_vst *v, int c, float u)
{
  float z = u * 255.0f;
  float pos = (z - v->inv_z0[c]) / v->inv_step[c];
  pos = pos > 0 ? pos : 0; /* also NaN */
  pos = pos < NLMEANS_VST_CELLS ? pos : NLMEANS_VST_CELLS;
  int i = (int) pos;
  i = i < NLMEANS_VST_CELLS ? i : NLMEANS_VST_CELLS - 1;
  float f = pos - i;
  return v->inverse[c][i] + f * (v->inverse[c][i + 1] - v->inverse[c][i]);
}

#endif /* CUDAFX_NLMEANS_H */
