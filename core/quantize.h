/* Colour quantize internals shared by the CPU reference (core/quantize.c)
 * and the CUDA passes (cuda/quantize.cu): the feature transform, the
 * distance, the integer sums of one Lloyd pass and the palette the mapping
 * reads. One definition compiled for both sides, so the GPU computes the
 * same features and the same nearest centre bit for bit; core/quantize.c's
 * header gives the scheme. Both sides build without fused multiply-adds
 * (-ffp-contract=off, nvcc --fmad=false) and with IEEE division. */
#ifndef CUDAFX_QUANTIZE_H
#define CUDAFX_QUANTIZE_H

#include "engine.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define QUANTIZE_FIXED         256.0f  /* feature units per 0..255 level */
#define QUANTIZE_FEATURE_LIMIT 8191.0f /* 0..255 scale: keeps |feature| < 2^21 */
/* Largest |feature|: fixed_point (QUANTIZE_FEATURE_LIMIT). Integer sums of
 * up to 1024 features therefore fit int32 (the GPU's shared partial sums). */
#define QUANTIZE_FEATURE_MAX   2096896

/* Per-call constants of the feature transform. */
typedef struct {
  int   dims;        /* 1 grey, 3 RGB */
  int   oklab;
  float decode[256]; /* srgb_decode (v / 255.0f) for u8 values */
} quantize_space;

/* Integer sums of one assignment pass: order-free, so any thread count or
 * GPU reduction gives the same. */
typedef struct {
  int64_t sums[CUDAFX_MAX_COLORS][3];
  int64_t counts[CUDAFX_MAX_COLORS];
} quantize_sums;

/* What the mapping reads: k entries as stored and as features. */
typedef struct {
  int     k;
  float   centre[CUDAFX_MAX_COLORS][3];  /* features; grey: [1], [2] are 0 */
  uint8_t u8[CUDAFX_MAX_COLORS][3];
  float   f32[CUDAFX_MAX_COLORS][3];
} quantize_palette;

static inline CUDAFX_HOST_DEVICE uint32_t
quantize_float_bits (float a)
{
#ifdef __CUDA_ARCH__
  return __float_as_uint (a);
#else
  uint32_t i;
  memcpy (&i, &a, sizeof i);
  return i;
#endif
}

static inline CUDAFX_HOST_DEVICE float
quantize_bits_float (uint32_t i)
{
#ifdef __CUDA_ARCH__
  return __uint_as_float (i);
#else
  float a;
  memcpy (&a, &i, sizeof a);
  return a;
#endif
}

/* a^(1/n), a > 0: exponent-bits guess, then 3 Newton steps (0 otherwise). */
static inline CUDAFX_HOST_DEVICE float
quantize_root_n (float a, int n)
{
  if (!(a > 0.0f))
    return 0.0f;
  uint32_t i = quantize_float_bits (a);
  /* log2-linear first guess from the exponent bits */
  i = (uint32_t) ((int32_t) (i - 0x3f800000u) / n + 0x3f800000);
  float y = quantize_bits_float (i);
  for (int step = 0; step < 3; step++)
    {
      float power = y;
      for (int j = 1; j < n - 1; j++)
        power *= y;
      y = ((float) (n - 1) * y + a / power) / (float) n;
    }
  return y;
}

static inline CUDAFX_HOST_DEVICE float
quantize_signed_root3 (float a)
{
  return a < 0.0f ? -quantize_root_n (-a, 3) : quantize_root_n (a, 3);
}

static inline CUDAFX_HOST_DEVICE float
quantize_srgb_decode (float t)
{
  float m = fabsf (t), lin;
  if (m <= 0.04045f)
    lin = m / 12.92f;
  else
    {
      float u = (m + 0.055f) / 1.055f;
      lin = u * u * quantize_root_n (u * u, 5);
    }
  return t < 0.0f ? -lin : lin;
}

static inline CUDAFX_HOST_DEVICE float
quantize_fixed_point (float v)
{
  return floorf (v * QUANTIZE_FIXED + 0.5f);
}

/* NaN to 0, then clamped to +-QUANTIZE_FEATURE_LIMIT. */
static inline CUDAFX_HOST_DEVICE float
quantize_sanitize (float x)
{
  if (!(x == x))
    return 0.0f;
  return x > QUANTIZE_FEATURE_LIMIT ? QUANTIZE_FEATURE_LIMIT
       : x < -QUANTIZE_FEATURE_LIMIT ? -QUANTIZE_FEATURE_LIMIT : x;
}

/* Features of one colour given as 0..255-scale floats x[0..dims-1]; `code`
 * holds the u8 values when the caller has them (decode, a table of
 * srgb_decode on the u8 codes, then replaces the decode). */
static inline CUDAFX_HOST_DEVICE void
quantize_features (int dims, int oklab, const float *decode, const float *x, const uint8_t *code,
                   float *f)
{
  if (!oklab)
    {
      for (int c = 0; c < dims; c++)
        f[c] = quantize_fixed_point (quantize_sanitize (x[c]));
      return;
    }
  float lin[3] = { 0.0f, 0.0f, 0.0f };
  for (int c = 0; c < dims; c++)
    lin[c] = code ? decode[code[c]] : quantize_srgb_decode (quantize_sanitize (x[c]) / 255.0f);
  if (dims == 1)
    {
      f[0] = quantize_fixed_point (quantize_sanitize (quantize_signed_root3 (lin[0]) * 255.0f));
      return;
    }
  float l = 0.4122214708f * lin[0] + 0.5363325363f * lin[1] + 0.0514459929f * lin[2];
  float m = 0.2119034982f * lin[0] + 0.6806995451f * lin[1] + 0.1073969566f * lin[2];
  float s = 0.0883024619f * lin[0] + 0.2817188376f * lin[1] + 0.6299787005f * lin[2];
  l = quantize_signed_root3 (l);
  m = quantize_signed_root3 (m);
  s = quantize_signed_root3 (s);
  f[0] = quantize_fixed_point (quantize_sanitize ((0.2104542553f * l + 0.7936177850f * m - 0.0040720468f * s) * 255.0f));
  f[1] = quantize_fixed_point (quantize_sanitize ((1.9779984951f * l - 2.4285922050f * m + 0.4505937099f * s) * 255.0f));
  f[2] = quantize_fixed_point (quantize_sanitize ((0.0259040371f * l + 0.7827717662f * m - 0.8086757660f * s) * 255.0f));
}

/* Squared distance of a feature vector to a centre, summed in this order;
 * the nearest centre is the first with the smallest distance. */
static inline CUDAFX_HOST_DEVICE float
quantize_distance (float x, float y, float z, const float *centre)
{
  float dx = x - centre[0], dy = y - centre[1], dz = z - centre[2];
  return dx * dx + dy * dy + dz * dz;
}

#endif /* CUDAFX_QUANTIZE_H */
