/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Colour quantize internals shared by the CPU reference (core/quantize.c)
 * and the CUDA passes (cuda/quantize*.cu): the feature transform, the
 * distance, the integer sums of one Lloyd pass and the palette the mapping
 * reads. One definition compiled for both sides, so the GPU computes the
 * same features and the same nearest centre bit for bit; core/quantize.c's
 * header gives the scheme. Both sides build without fused multiply-adds
 * (-ffp-contract=off, nvcc --fmad=false) and with IEEE division. */
#ifndef CUDAFX_QUANTIZE_H
#define CUDAFX_QUANTIZE_H

#include "services.h"

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

/* One run's passes over the image, as a backend gets them. */
typedef struct {
  const cudafx_image *src;
  quantize_space      fs;
  int                 everyone_votes; /* no alpha, or every pixel transparent */
  /* Lloyd over the voting pixels' distinct colours with their counts
   * (core/quantize.c's header); else over every voting pixel */
  int                 distinct;
  cudafx_dither       dither;         /* the mapping's, so that a backend can prepare for it */
  int                 sample;         /* the seeding sample's size S, 0 without a seeding */
} quantize_plan;

/* What the mapping reads: the palette, and for dithering its entries on
 * the 0..255 scale and their range per channel (dithered values are clamped
 * to it); for positioned dithering the amplitude of the threshold pattern. */
typedef struct {
  quantize_palette pal;
  cudafx_dither    dither;
  float            value[CUDAFX_MAX_COLORS][3];
  float            lo[3], hi[3];
  float            spread;  /* 0..255 scale: the typical distance between neighbouring entries */
  float            sorted[CUDAFX_MAX_COLORS][4]; /* the centres by their first feature, then index; [3]: the index */
} quantize_mapping;

/* ---- dithering (core/quantize.c's header) ------------------------------- */

#define QUANTIZE_BAYER_BITS 4  /* the ordered matrix is 2^4 = 16 pixels square */
#define QUANTIZE_BLUE_SIZE  64 /* the blue-noise mask (core/bluenoise.h) is 64 pixels square */

static inline CUDAFX_HOST_DEVICE int
quantize_is_diffusion (int dither)
{
  return dither == CUDAFX_DITHER_FLOYD_STEINBERG || dither == CUDAFX_DITHER_FS_LOW_BLEED;
}

/* Threshold of pixel (x, y) >= 0 in (-1/2, 1/2): (rank + 1/2) / N - 1/2 for
 * the pixel's rank among the N cells of the pattern, exact in float. Bayer's
 * rank: the bits of x ^ y and y interleaved, lowest coordinate bits first
 * (Bayer 1973's recursive matrix); blue noise: the mask's rank. */
static inline CUDAFX_HOST_DEVICE float
quantize_threshold (int dither, const uint16_t *blue, int x, int y)
{
  if (dither == CUDAFX_DITHER_ORDERED)
    {
      int rank = 0;
      for (int b = 0; b < QUANTIZE_BAYER_BITS; b++)
        rank = (rank << 2) | ((((x >> b) ^ (y >> b)) & 1) << 1) | ((y >> b) & 1);
      return ((float) rank + 0.5f) / (float) (1 << 2 * QUANTIZE_BAYER_BITS) - 0.5f;
    }
  int rank = blue[(y % QUANTIZE_BLUE_SIZE) * QUANTIZE_BLUE_SIZE + x % QUANTIZE_BLUE_SIZE];
  return ((float) rank + 0.5f) / (float) (QUANTIZE_BLUE_SIZE * QUANTIZE_BLUE_SIZE) - 0.5f;
}

/* GIMP's "reduced colour bleeding" (app/core/gimpimage-convert-indexed.c,
 * init_error_limit with error freedom): the error a pixel receives passes
 * 1:1 up to 24 levels, 1:2 up to 72, and stops at 48. Exact in float. */
static inline CUDAFX_HOST_DEVICE float
quantize_limit_error (float e)
{
  float m = fabsf (e);
  float r = m < 24.0f ? m : m < 72.0f ? 24.0f + (m - 24.0f) * 0.5f : 48.0f;
  return e < 0.0f ? -r : r;
}

/* a^(1/n), a > 0: exponent-bits guess, then 3 Newton steps (0 otherwise). */
static inline CUDAFX_HOST_DEVICE float
quantize_root_n (float a, int n)
{
  if (!(a > 0.0f))
    return 0.0f;
  uint32_t i = cudafx_float_bits (a);
  /* log2-linear first guess from the exponent bits */
  i = (uint32_t) ((int32_t) (i - 0x3f800000u) / n + 0x3f800000);
  float y = cudafx_bits_float (i);
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

/* Non-finite f32 pixels: a pixel whose colour (on the 0..255 scale the
 * features are computed on, x 255) or alpha (as stored) is NaN or infinite
 * has no colour to vote for, and counted it would pull a centre towards
 * the clamped feature, or spend an entry of a small palette on itself. So
 * it does not vote (nor, in Floyd-Steinberg, take or pass on error, as a
 * transparent pixel) and the mapping leaves it as it is. x255: the dims
 * colour values x 255; alpha: as stored (0 without one). */
static inline CUDAFX_HOST_DEVICE int
quantize_known (const float *x255, int dims, float alpha)
{
  int known = isfinite (alpha);
  for (int c = 0; c < dims; c++)
    known &= isfinite (x255[c]);
  return known;
}

/* quantize_known for an f32 pixel as stored (channels values). */
static inline CUDAFX_HOST_DEVICE int
quantize_known_f32 (const float *px, int dims, int channels, int has_alpha)
{
  float x255[3] = { 0.0f, 0.0f, 0.0f };
  for (int c = 0; c < dims; c++)
    x255[c] = px[c] * 255.0f;
  return quantize_known (x255, dims, has_alpha ? px[channels - 1] : 0.0f);
}

/* Whether a pixel votes: its alpha is not 0 (with alpha) and, f32, it is
 * known. px: the pixel's values as stored. */
static inline CUDAFX_HOST_DEVICE int
quantize_votes (const uint8_t *px, int u8, int dims, int channels, int has_alpha)
{
  if (u8)
    return !has_alpha || px[channels - 1] != 0;
  const float *f = (const float *) px;
  return quantize_known_f32 (f, dims, channels, has_alpha) && (!has_alpha || f[channels - 1] != 0.0f);
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
 * the nearest centre is the first with the smallest distance.
 *
 * With integer features and integer centres (as everywhere here: features
 * are floorf results, centres are features or rounded means of features,
 * all within ±QUANTIZE_FEATURE_MAX < 2^21) the result is an integer below
 * 2^46 held exactly in float. Proof: each difference is an integer below
 * 2^22 in magnitude, exact in float's 24-bit significand. Every product and
 * sum of integer-valued floats is an integer; float rounds it either not at
 * all (below 2^24, where float holds every integer) or to another float of
 * magnitude at least 2^24, and every such float is an integer (its unit in
 * the last place is at least 2). The exact value is at most 3 * (2^22)^2 =
 * 3 * 2^44, itself a float, so the rounded one is no larger. Sums of up to
 * 2^16 such distances (the seeding sample) therefore fit int64 exactly and
 * in any order. */
static inline CUDAFX_HOST_DEVICE float
quantize_distance (float x, float y, float z, const float *centre)
{
  float dx = x - centre[0], dy = y - centre[1], dz = z - centre[2];
  return dx * dx + dy * dy + dz * dz;
}

/* The first of the nearest of k centres sorted by their first feature
 * (quantize_mapping.sorted), searched outward from the pixel's place in
 * that order: a direction stops at the first centre whose first-feature
 * term alone exceeds the best distance so far. Exact, the same answer as a
 * scan of every centre in index order: the distance is a float sum of
 * non-negative terms, so it is at least its first term (rounding is
 * monotone), and the terms grow along each direction; a skipped centre is
 * strictly farther than the best, so every centre that could tie is
 * compared, and ties go to the lowest index. */
static inline CUDAFX_HOST_DEVICE int
quantize_nearest_sorted (const float (*sorted)[4], int k, float fx, float fy, float fz)
{
  int lo = 0, hi = k;
  while (lo < hi)
    {
      int mid = (lo + hi) / 2;
      if (sorted[mid][0] < fx)
        lo = mid + 1;
      else
        hi = mid;
    }
  float best = INFINITY;
  int label = k, up = lo, down = lo - 1;
  while (up < k || down >= 0)
    {
      for (int side = 0; side < 2; side++)
        {
          int j = side ? down : up;
          if (j < 0 || j >= k)
            continue;
          const float *c = sorted[j];
          float dx = fx - c[0];
          if (dx * dx > best)
            {
              if (side)
                down = -1;
              else
                up = k;
              continue;
            }
          float d = quantize_distance (fx, fy, fz, c);
          int index = (int) c[3];
          if (d < best || (d == best && index < label))
            {
              best = d;
              label = index;
            }
          if (side)
            down--;
          else
            up++;
        }
    }
  return label;
}

/* ---- seeding (core/quantize.c's header; GPU version in cuda/quantize_seed.cu) */

#define QUANTIZE_SAMPLE_MAX  65536 /* samples of the seeding */
#define QUANTIZE_ATTEMPTS    8     /* most seedings tried on the sample (K <= 16) */
#define QUANTIZE_MAX_TRIALS  8     /* k-means++ trials per centre: 2 + floor (log (256)) = 7 */

/* The seeding sample, one plane per feature (planes past dims are zeros).
 * codes: the planes hold the sample pixels' u8 values (0..255) instead,
 * whose features (quantize_features) the seeding computes first. */
typedef struct {
  int    n;
  int    dims;
  float *plane[3];
  int    codes;
} sample_set;

/* One seeding job: `attempts` attempts of k-means++ with `trials` trials per
 * centre, each refined by at most `iterations` Lloyd updates on the sample. */
typedef struct {
  int      k, trials, attempts, iterations;
  uint32_t seed;
} quantize_seeding;

static inline CUDAFX_HOST_DEVICE uint64_t
quantize_splitmix64 (uint64_t *state)
{
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [0, 1) from the next splitmix64 output. */
static inline CUDAFX_HOST_DEVICE double
quantize_uniform (uint64_t *state)
{
  return (double) (quantize_splitmix64 (state) >> 11) * 0x1.0p-53;
}

/* Draw m (from 0) of the sequence that starts at state `start`: splitmix64
 * only adds a constant to its state, so any draw can be made directly. */
static inline CUDAFX_HOST_DEVICE double
quantize_draw (uint64_t start, uint64_t m)
{
  uint64_t state = start + m * 0x9E3779B97F4A7C15ull;
  return quantize_uniform (&state);
}

/* PRNG state of seeding attempt a. */
static inline CUDAFX_HOST_DEVICE uint64_t
quantize_attempt_state (uint32_t seed, int a)
{
  return seed + ((uint64_t) a << 32);
}

/* The seeding sample of S entries over n voting pixels: entry j is the
 * voting pixel of rank floor (j n / S) in raster order, for core/quantize.c's
 * sample_rows and cuda/quantize_seed.cu's gather alike. */
static inline CUDAFX_HOST_DEVICE uint64_t
quantize_sample_rank (uint64_t j, uint64_t n, int samples)
{
  return (uint64_t) ((unsigned __int128) j * n / (unsigned) samples);
}

/* The first entry of that sample whose rank is at least rank: ceil (rank S / n). */
static inline CUDAFX_HOST_DEVICE uint64_t
quantize_first_sample (uint64_t rank, uint64_t n, int samples)
{
  return (uint64_t) (((unsigned __int128) rank * (unsigned) samples + n - 1) / n);
}

/* Squared distance of a feature vector to an integer centre, exact in int64
 * (differences below 2^22, squares below 2^44). */
static inline CUDAFX_HOST_DEVICE int64_t
quantize_exact_distance (float x, float y, float z, const int32_t *centre)
{
  int32_t dx = (int32_t) x - centre[0], dy = (int32_t) y - centre[1], dz = (int32_t) z - centre[2];
  return (int64_t) dx * dx + (int64_t) dy * dy + (int64_t) dz * dz;
}

/* sum / count rounded half up (floor ((2 * sum + count) / (2 * count))), count > 0. */
static inline CUDAFX_HOST_DEVICE int64_t
quantize_round_div (int64_t sum, int64_t count)
{
  int64_t num = 2 * sum + count, den = 2 * count;
  int64_t q = num / den;
  if (num % den != 0 && num < 0)
    q--;
  return q;
}

/* Lloyd's update of one centre with count > 0 pixels whose features sum
 * to sums[0..dims): each feature the rounded mean; returns whether it
 * moved. One definition for the host's passes and the device's (the
 * seeding's and the image's). */
static inline CUDAFX_HOST_DEVICE int
quantize_move_centre (const int64_t *sums, int64_t count, int dims, int32_t *centre)
{
  int moved = 0;
  for (int c = 0; c < dims; c++)
    {
      int32_t mean = (int32_t) quantize_round_div (sums[c], count);
      moved |= mean != centre[c];
      centre[c] = mean;
    }
  return moved;
}

#endif /* CUDAFX_QUANTIZE_H */
