/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Colour quantize: the engine against a plain double-precision k-means
 * (the seeding documented in core/quantize.c, its sample included,
 * re-implemented here, then Lloyd with exact means) and a plain sequential
 * Floyd–Steinberg, and properties: exact reproduction when K covers
 * every colour, independence of the thread count (the dither's wavefront
 * too), seeds, transparent pixels, outputs from the palette, progress and
 * cancel, layouts and invalid arguments. Given palettes and positioned
 * dithering: the mapping against a brute-force oracle (integer distances in
 * RGB, the first of the nearest), the positioned dithers' defining property
 * (a flat grey comes out with its mean, to within one level of an evenly
 * spaced ramp), thread independence, and the .gpl reader's successes and
 * errors. */
#include "harness.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Voting pixels the oracle handles: beyond the seeding sample (65536). */
#define MAX_PIXELS (300 * 300)
#define SAMPLE_MAX 65536

/* ---- oracle ---------------------------------------------------------------- */

static double
decode (double t)
{
  double m = fabs (t);
  double lin = m <= 0.04045 ? m / 12.92 : pow ((m + 0.055) / 1.055, 2.4);
  return t < 0 ? -lin : lin;
}

static double
encode (double lin)
{
  double m = fabs (lin);
  double t = m <= 0.0031308 ? 12.92 * m : 1.055 * pow (m, 1 / 2.4) - 0.055;
  return lin < 0 ? -t : t;
}

/* Features in the engine's units (0..255 scale times 256), unrounded. */
static void
oracle_features (const double *v, int dims, int oklab, double *f)
{
  if (!oklab)
    {
      for (int c = 0; c < dims; c++)
        f[c] = v[c] * 256;
      return;
    }
  if (dims == 1)
    {
      f[0] = cbrt (decode (v[0] / 255)) * 255 * 256;
      return;
    }
  double r = decode (v[0] / 255), g = decode (v[1] / 255), b = decode (v[2] / 255);
  double l = cbrt (0.4122214708 * r + 0.5363325363 * g + 0.0514459929 * b);
  double m = cbrt (0.2119034982 * r + 0.6806995451 * g + 0.1073969566 * b);
  double s = cbrt (0.0883024619 * r + 0.2817188376 * g + 0.6299787005 * b);
  f[0] = (0.2104542553 * l + 0.7936177850 * m - 0.0040720468 * s) * 255 * 256;
  f[1] = (1.9779984951 * l - 2.4285922050 * m + 0.4505937099 * s) * 255 * 256;
  f[2] = (0.0259040371 * l + 0.7827717662 * m - 0.8086757660 * s) * 255 * 256;
}

static void
oracle_colour (const double *f, int dims, int oklab, double *v)
{
  if (!oklab)
    {
      for (int c = 0; c < dims; c++)
        v[c] = f[c] / 256;
      return;
    }
  if (dims == 1)
    {
      double L = f[0] / 256 / 255;
      v[0] = 255 * encode (L * L * L);
      return;
    }
  double L = f[0] / 256 / 255, a = f[1] / 256 / 255, b = f[2] / 256 / 255;
  double l = pow (L + 0.3963377774 * a + 0.2158037573 * b, 3);
  double m = pow (L - 0.1055613458 * a - 0.0638541728 * b, 3);
  double s = pow (L - 0.0894841775 * a - 1.2914855480 * b, 3);
  v[0] = 255 * encode (4.0767416621 * l - 3.3077115913 * m + 0.2309699292 * s);
  v[1] = 255 * encode (-1.2684380046 * l + 2.6097574011 * m - 0.3413193965 * s);
  v[2] = 255 * encode (-0.0041960863 * l - 0.7034186147 * m + 1.7076147010 * s);
}

static double
dist2 (const double *a, const double *b, int dims)
{
  double d = 0;
  for (int c = 0; c < dims; c++)
    d += (a[c] - b[c]) * (a[c] - b[c]);
  return d;
}

static int
is_transparent (const cudafx_image *img, int x, int y)
{
  return img->has_alpha && harness_get (img, x, y, img->channels - 1) == 0;
}

static uint64_t
splitmix (uint64_t *s)
{
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double
unit (uint64_t *s)
{
  return (splitmix (s) >> 11) * 0x1.0p-53;
}

/* Greedy k-means++ as documented in core/quantize.c. */
static int
oracle_seed (double (*f)[3], int n, int dims, int colors, uint64_t *state, double (*centre)[3])
{
  static double d2[MAX_PIXELS];
  int trials = 2 + (int) floor (log (colors));
  memcpy (centre[0], f[(int) (unit (state) * n)], sizeof centre[0]);
  for (int j = 0; j < n; j++)
    d2[j] = INFINITY;
  int k = 1;
  while (k < colors)
    {
      double total = 0, best = INFINITY;
      for (int j = 0; j < n; j++)
        {
          d2[j] = fmin (d2[j], dist2 (f[j], centre[k - 1], dims));
          total += d2[j];
        }
      if (total == 0)
        break;
      for (int t = 0; t < trials; t++)
        {
          double target = unit (state) * total, run = 0, pot = 0;
          int chosen = -1;
          for (int j = 0; j < n; j++)
            {
              run += d2[j];
              if (d2[j] > 0)
                {
                  chosen = j;
                  if (run > target)
                    break;
                }
            }
          for (int j = 0; j < n; j++)
            pot += fmin (d2[j], dist2 (f[j], f[chosen], dims));
          if (pot < best)
            {
              best = pot;
              memcpy (centre[k], f[chosen], sizeof centre[0]);
            }
        }
      k++;
    }
  return k;
}

/* Lloyd with exact means: at most `iterations` updates, stopping when no
 * centre moves; returns the squared error of the final centres. */
static double
oracle_lloyd (double (*f)[3], int n, int dims, int k, int iterations, double (*centre)[3])
{
  static int label[MAX_PIXELS];
  double error = 0;
  for (int it = 0;; it++)
    {
      error = 0;
      for (int j = 0; j < n; j++)
        {
          double nearest = dist2 (f[j], centre[0], dims);
          label[j] = 0;
          for (int e = 1; e < k; e++)
            {
              double d = dist2 (f[j], centre[e], dims);
              if (d < nearest)
                {
                  nearest = d;
                  label[j] = e;
                }
            }
          error += nearest;
        }
      if (it == iterations)
        break;
      int moved = 0;
      static double sum[CUDAFX_MAX_COLORS][3];
      static int count[CUDAFX_MAX_COLORS];
      memset (sum, 0, sizeof sum);
      memset (count, 0, sizeof count);
      for (int j = 0; j < n; j++)
        {
          for (int c = 0; c < dims; c++)
            sum[label[j]][c] += f[j][c];
          count[label[j]]++;
        }
      for (int e = 0; e < k; e++)
        for (int c = 0; c < dims && count[e]; c++)
          {
            moved |= sum[e][c] / count[e] != centre[e][c];
            centre[e][c] = sum[e][c] / count[e];
          }
      if (!moved)
        break;
    }
  return error;
}

typedef struct {
  int    k;
  double entry[CUDAFX_MAX_COLORS][3];
} oracle_palette;

/* Plain k-means: the documented seeding attempts, Lloyd in double. */
static void
oracle_quantize (const cudafx_image *src, const cudafx_quantize_params *p, oracle_palette *out)
{
  static double f[MAX_PIXELS][3];
  int dims = src->channels - src->has_alpha, oklab = p->color_space == CUDAFX_SPACE_OKLAB;
  int n = 0, any = 0;
  for (int y = 0; y < src->height; y++)
    for (int x = 0; x < src->width; x++)
      any |= !is_transparent (src, x, y);
  for (int y = 0; y < src->height; y++)
    for (int x = 0; x < src->width; x++)
      if (!any || !is_transparent (src, x, y))
        {
          double v[3];
          for (int c = 0; c < dims; c++)
            v[c] = harness_get (src, x, y, c);
          oracle_features (v, dims, oklab, f[n++]);
        }
  /* the seeding sample: voting pixel floor (j n / S) for j < S = min (n, 65536) */
  static double sample[SAMPLE_MAX][3];
  const int S = n < SAMPLE_MAX ? n : SAMPLE_MAX;
  for (int j = 0; j < S; j++)
    memcpy (sample[j], f[(long long) j * n / S], sizeof sample[j]);
  static double attempt[8][CUDAFX_MAX_COLORS][3];
  const int attempts = p->colors >= 128 ? 1 : 128 / p->colors > 8 ? 8 : 128 / p->colors;
  double best_error = INFINITY;
  int k = 0, best = 0;
  for (int a = 0; a < attempts; a++)
    {
      uint64_t state = p->seed + ((uint64_t) a << 32);
      int found = oracle_seed (sample, S, dims, p->colors, &state, attempt[a]);
      double error = oracle_lloyd (sample, S, dims, found, 20, attempt[a]);
      if (error < best_error)
        {
          best_error = error;
          best = a;
          k = found;
        }
    }
  double (*centre)[3] = attempt[best];
  /* fewer distinct colours in the sample than K: pixels of colours it missed
   * become centres, in raster order */
  for (int j = 0; j < n && S < n && k < p->colors; j++)
    {
      int known = 0;
      for (int e = 0; e < k && !known; e++)
        known = !memcmp (f[j], centre[e], sizeof f[j]);
      if (!known)
        memcpy (centre[k++], f[j], sizeof f[j]);
    }
  oracle_lloyd (f, n, dims, k, p->max_iterations, centre);
  out->k = 0;
  for (int e = 0; e < k; e++)
    {
      double v[3] = { 0, 0, 0 };
      oracle_colour (centre[e], dims, oklab, v);
      for (int c = 0; c < dims; c++)
        v[c] = src->type == CUDAFX_U8 ? fmin (255, fmax (0, floor (v[c] + 0.5)))
                                      : (float) (v[c] / 255) * 255.0;
      int dup = 0;
      for (int o = 0; o < out->k; o++)
        dup |= !memcmp (out->entry[o], v, sizeof v);
      if (!dup)
        memcpy (out->entry[out->k++], v, sizeof v);
    }
}

/* ---- helpers --------------------------------------------------------------- */

/* Pixels drawn from a few well-separated base colours plus noise, so that
 * k-means has one clear answer and float vs double cannot flip it. */
static void
clustered_image (cudafx_image *img, harness_rng *r, int bases, double noise)
{
  double base[8][3];
  for (int b = 0; b < bases; b++)
    for (int c = 0; c < 3; c++)
      base[b][c] = 30 + harness_rand (r) % 196;
  harness_image_poison (img);
  int dims = img->channels - img->has_alpha;
  for (int y = 0; y < img->height; y++)
    for (int x = 0; x < img->width; x++)
      {
        int b = harness_rand (r) % bases;
        for (int c = 0; c < dims; c++)
          harness_set (img, x, y, c, base[b][c] + (harness_uniform (r) - 0.5) * 2 * noise);
        if (img->has_alpha)
          harness_set (img, x, y, img->channels - 1, harness_rand (r) % 4 ? 200 : 0);
      }
}

static int
pixel_is_entry (const cudafx_image *img, int x, int y, const cudafx_palette *pal)
{
  int dims = img->channels - img->has_alpha;
  for (int e = 0; e < pal->colors; e++)
    {
      int same = 1;
      for (int c = 0; c < dims; c++)
        same &= harness_get (img, x, y, c) == (img->type == CUDAFX_U8 ? pal->entries[e][c]
                                                : (float) (pal->entries[e][c] / 255) * 255.0);
      if (same)
        return e;
    }
  return -1;
}

/* Every output pixel is a palette entry, alpha is the source's, and (unless
 * dithered) the entry is the nearest in the colour space. */
static void
check_output (const cudafx_image *src, const cudafx_image *dst, const cudafx_palette *pal,
              const cudafx_quantize_params *p, const char *what)
{
  int dims = src->channels - src->has_alpha, oklab = p->color_space == CUDAFX_SPACE_OKLAB;
  for (int y = 0; y < src->height && harness_failures () < 5; y++)
    for (int x = 0; x < src->width; x++)
      {
        int e = pixel_is_entry (dst, x, y, pal);
        CHECK (e >= 0, "%s: pixel %d,%d is not a palette entry", what, x, y);
        if (src->has_alpha)
          CHECK (harness_get (dst, x, y, src->channels - 1) == harness_get (src, x, y, src->channels - 1),
                 "%s: alpha changed at %d,%d", what, x, y);
        if (e < 0 || p->dither)
          continue;
        double v[3] = { 0 }, f[3], g[3];
        for (int c = 0; c < dims; c++)
          v[c] = harness_get (src, x, y, c);
        oracle_features (v, dims, oklab, f);
        double best = INFINITY;
        for (int o = 0; o < pal->colors; o++)
          {
            oracle_features (pal->entries[o], dims, oklab, g);
            best = fmin (best, dist2 (f, g, dims));
          }
        oracle_features (pal->entries[e], dims, oklab, g);
        double mine = dist2 (f, g, dims);
        CHECK (mine <= best * (1 + 1e-4) + 1e-3 * 65536, "%s: pixel %d,%d maps to %d, not the nearest",
               what, x, y, e);
      }
}

static cudafx_status
run (const cudafx_image *src, cudafx_image *dst, const cudafx_quantize_params *p, int threads,
     cudafx_palette *pal)
{
  cudafx_options o = harness_options ();
  o.threads = threads;
  return cudafx_quantize (src, dst, p, &o, pal);
}

/* Padding after each row of dst still holds the poison. */
static int
padding_intact (const cudafx_image *dst)
{
  size_t row = (size_t) dst->width * dst->channels * cudafx_type_size (dst->type);
  for (int y = 0; y < dst->height; y++)
    for (size_t b = row; b < dst->stride; b++)
      if (((const unsigned char *) dst->data)[(size_t) y * dst->stride + b] != 0xA5)
        return 0;
  return 1;
}

/* Compares a run's palette with the oracle's, entry by entry (u8: within 1,
 * the oracle's means being exact and the engine's rounded; f32: 0.05). */
static void
check_palette (const cudafx_image *src, const cudafx_quantize_params *p, const cudafx_palette *pal,
               const char *what)
{
  static oracle_palette want;
  const int dims = src->channels - src->has_alpha;
  oracle_quantize (src, p, &want);
  CHECK (pal->colors == want.k, "%s: %d colours, oracle %d", what, pal->colors, want.k);
  double tol = src->type == CUDAFX_F32 ? 0.05 : 1.0;
  for (int e = 0; e < pal->colors && e < want.k; e++)
    for (int c = 0; c < dims; c++)
      CHECK (fabs (pal->entries[e][c] - want.entry[e][c]) <= tol, "%s: entry %d.%d %g, oracle %g",
             what, e, c, pal->entries[e][c], want.entry[e][c]);
}

/* ---- tests ----------------------------------------------------------------- */

TEST (quantize_matches_oracle)
{
  static const int sizes[][2] = { { 1, 1 }, { 1, 23 }, { 23, 1 }, { 13, 7 }, { 31, 17 }, { 64, 48 } };
  static const int layouts[][2] = { { 1, 0 }, { 2, 1 }, { 3, 0 }, { 4, 1 } };
  harness_rng r = { 7 };
  for (int si = 0; si < 6; si++)
    for (int li = 0; li < 4; li++)
      for (int t = 0; t < 2; t++)
        for (int space = 0; space < 2; space++)
          {
            cudafx_type type = t ? CUDAFX_F32 : CUDAFX_U8;
            int w = sizes[si][0], h = sizes[si][1], ch = layouts[li][0], alpha = layouts[li][1];
            cudafx_image src = harness_image_new (w, h, ch, alpha, type, 5 * cudafx_type_size (type));
            cudafx_image dst = harness_image_new (w, h, ch, alpha, type, 3 * cudafx_type_size (type));
            clustered_image (&src, &r, 6, 12);
            harness_image_poison (&dst);
            cudafx_quantize_params p;
            cudafx_quantize_params_init (&p);
            p.color_space = space;
            p.colors = 2 + (si + li) % 4;
            p.seed = (uint32_t) (si * 131 + li);
            cudafx_palette pal;
            char what[128];
            snprintf (what, sizeof what, "%dx%d ch %d alpha %d %s %s K %d", w, h, ch, alpha,
                      t ? "f32" : "u8", space ? "rgb" : "oklab", p.colors);
            cudafx_status s = run (&src, &dst, &p, 3, &pal);
            CHECK (s == CUDAFX_OK, "%s: status %d (%s)", what, s, cudafx_error_message ());
            if (s == CUDAFX_OK)
              {
                check_palette (&src, &p, &pal, what);
                CHECK (pal.channels == ch - alpha, "%s: palette channels %d", what, pal.channels);
                CHECK (pal.iterations >= 1 && pal.iterations <= p.max_iterations, "%s: iterations %d",
                       what, pal.iterations);
                check_output (&src, &dst, &pal, &p, what);
                CHECK (padding_intact (&dst), "%s: row padding written", what);
              }
            harness_image_free (&src);
            harness_image_free (&dst);
          }
}

/* The seeding's sample path (more voting pixels than its 65536 samples),
 * and K = 256 (one seeding attempt, 7 trials a centre) on 256 well separated
 * colours of a 6x7x7 grid with a little noise. In RGB on u8, where the
 * oracle's features are the engine's integers: its seeding then draws the
 * same pixels, which over ~67000 samples unrounded Oklab features do not. */
TEST (quantize_matches_oracle_sampled_and_256_colours)
{
  harness_rng r = { 29 };
  /* with alpha a quarter of the pixels are transparent (~67500 voting);
   * without, every pixel votes and the sample is taken as pixel values
   * (core/quantize.c, sample_codes) */
  for (int alpha = 1; alpha >= 0; alpha--)
    {
      const int w = 300, h = 300;
      cudafx_image src = harness_image_new (w, h, 3 + alpha, alpha, CUDAFX_U8, 4);
      cudafx_image dst = harness_image_new (w, h, 3 + alpha, alpha, CUDAFX_U8, 0);
      clustered_image (&src, &r, 6, 10);
      /* a seventh colour in the last rows only: a sample of the first 65536
       * voting pixels would miss it */
      for (int y = h - 15; y < h; y++)
        for (int x = 0; x < w; x++)
          for (int c = 0; c < 3; c++)
            harness_set (&src, x, y, c, (c ? 20 : 240) + harness_rand (&r) % 9);
      cudafx_quantize_params p;
      cudafx_quantize_params_init (&p);
      p.color_space = CUDAFX_SPACE_RGB;
      p.colors = 7;
      p.max_iterations = 10;
      p.seed = 6;
      cudafx_palette pal;
      CHECK (run (&src, &dst, &p, 3, &pal) == CUDAFX_OK, "status: %s", cudafx_error_message ());
      check_palette (&src, &p, &pal, alpha ? "300x300 RGBA K 7" : "300x300 RGB K 7");
      harness_image_free (&src);
      harness_image_free (&dst);
    }
  cudafx_image src = harness_image_new (64, 48, 3, 0, CUDAFX_U8, 0);
  cudafx_image dst = harness_image_new (64, 48, 3, 0, CUDAFX_U8, 0);
  for (int y = 0; y < 48; y++)
    for (int x = 0; x < 64; x++)
      {
        int b = (y * 64 + x) % 256; /* 12 pixels of each colour */
        int level[3] = { b % 6, b / 6 % 7, b / 42 };
        for (int c = 0; c < 3; c++)
          harness_set (&src, x, y, c, 8 + 38 * level[c] + harness_rand (&r) % 5);
      }
  cudafx_quantize_params p;
  cudafx_quantize_params_init (&p);
  p.color_space = CUDAFX_SPACE_RGB;
  p.colors = 256;
  p.max_iterations = 20;
  cudafx_palette pal;
  CHECK (run (&src, &dst, &p, 2, &pal) == CUDAFX_OK, "status: %s", cudafx_error_message ());
  check_palette (&src, &p, &pal, "64x48 RGB K 256");
  check_output (&src, &dst, &pal, &p, "64x48 RGB K 256");
  harness_image_free (&src);
  harness_image_free (&dst);
}

TEST (quantize_reproduces_images_with_few_colours)
{
  harness_rng r = { 11 };
  for (int ch = 1; ch <= 4; ch++)
    for (int space = 0; space < 2; space++)
      for (int dither = 0; dither < 2; dither++)
        {
          int alpha = ch == 2 || ch == 4;
          cudafx_image src = harness_image_new (37, 29, ch, alpha, CUDAFX_U8, 3);
          cudafx_image dst = harness_image_new (37, 29, ch, alpha, CUDAFX_U8, 0);
          clustered_image (&src, &r, 6, 0); /* exactly 6 colours (or fewer) */
          for (int x = 0; x < 37; x++)        /* the extremes, for the dither's clamp */
            for (int c = 0; c < ch - alpha; c++)
              harness_set (&src, x, 0, c, x % 2 ? 255 : 0);
          cudafx_quantize_params p;
          cudafx_quantize_params_init (&p);
          p.color_space = space;
          p.dither = dither;
          for (p.colors = 8; p.colors <= 256; p.colors *= 32)
            {
              cudafx_palette pal;
              harness_image_poison (&dst);
              CHECK (run (&src, &dst, &p, 2, &pal) == CUDAFX_OK, "status: %s", cudafx_error_message ());
              CHECK (pal.colors == 8 || (ch - alpha == 1 && pal.colors <= 8),
                     "ch %d %s: %d colours for 8 distinct", ch, space ? "rgb" : "oklab", pal.colors);
              CHECK (harness_max_diff (&src, &dst) == 0, "ch %d %s dither %d K %d: not reproduced",
                     ch, space ? "rgb" : "oklab", dither, p.colors);
            }
          harness_image_free (&src);
          harness_image_free (&dst);
        }
}

TEST (quantize_reproduces_colours_the_sample_missed)
{
  /* 300x300 voting pixels, a 65536-pixel sample: rank 3 is not sampled */
  harness_rng r = { 17 };
  cudafx_image src = harness_image_new (300, 300, 3, 0, CUDAFX_U8, 0);
  cudafx_image dst = harness_image_new (300, 300, 3, 0, CUDAFX_U8, 0);
  clustered_image (&src, &r, 4, 0);
  harness_set (&src, 3, 0, 0, 1);
  harness_set (&src, 3, 0, 1, 2);
  harness_set (&src, 3, 0, 2, 3);
  cudafx_quantize_params p;
  cudafx_quantize_params_init (&p);
  p.color_space = CUDAFX_SPACE_RGB;
  p.colors = 6;
  cudafx_palette pal;
  CHECK (run (&src, &dst, &p, 2, &pal) == CUDAFX_OK, "status");
  CHECK (pal.colors == 5, "%d colours for 5 distinct", pal.colors);
  CHECK (harness_max_diff (&src, &dst) == 0, "the unsampled colour is not reproduced");
  harness_image_free (&src);
  harness_image_free (&dst);
}

static int
same_palette (const cudafx_palette *a, const cudafx_palette *b)
{
  return a->colors == b->colors && a->iterations == b->iterations &&
         !memcmp (a->entries, b->entries, sizeof a->entries);
}

TEST (quantize_does_not_depend_on_threads)
{
  harness_rng r = { 5 };
  for (int t = 0; t < 2; t++)
    for (int space = 0; space < 2; space++)
      {
        cudafx_type type = t ? CUDAFX_F32 : CUDAFX_U8;
        cudafx_image src = harness_image_new (120, 80, 4, 1, type, 4);
        cudafx_image ref = harness_image_new (120, 80, 4, 1, type, 0);
        cudafx_image dst = harness_image_new (120, 80, 4, 1, type, 0);
        harness_image_random (&src, &r);
        cudafx_quantize_params p;
        cudafx_quantize_params_init (&p);
        p.color_space = space;
        p.colors = 12;
        p.max_iterations = 10;
        cudafx_palette want, got;
        CHECK (run (&src, &ref, &p, 1, &want) == CUDAFX_OK, "status");
        static const int threads[] = { 2, 3, 7 };
        for (int i = 0; i < 3; i++)
          {
            CHECK (run (&src, &dst, &p, threads[i], &got) == CUDAFX_OK, "status");
            CHECK (same_palette (&want, &got), "%s %s: palette differs with %d threads",
                   t ? "f32" : "u8", space ? "rgb" : "oklab", threads[i]);
            CHECK (harness_max_diff (&ref, &dst) == 0, "output differs with %d threads", threads[i]);
          }
        harness_image_free (&src);
        harness_image_free (&ref);
        harness_image_free (&dst);
      }
}

/* A u8 image without alpha seeds from a sample taken as pixel values, an
 * image with alpha from the voting pixels' features: the same pixels, so
 * the same palette when every alpha is opaque, in both spaces, grey and RGB,
 * with more pixels than the sample and fewer. */
TEST (quantize_sample_of_values_matches_opaque_alpha)
{
  harness_rng r = { 41 };
  static const int sizes[][2] = { { 320, 240 }, { 61, 37 } };
  for (int si = 0; si < 2; si++)
    for (int dims = 1; dims <= 3; dims += 2)
      for (int space = 0; space < 2; space++)
        {
          int w = sizes[si][0], h = sizes[si][1];
          cudafx_image plain = harness_image_new (w, h, dims, 0, CUDAFX_U8, 3);
          cudafx_image alpha = harness_image_new (w, h, dims + 1, 1, CUDAFX_U8, 0);
          cudafx_image out = harness_image_new (w, h, dims, 0, CUDAFX_U8, 0);
          cudafx_image out_alpha = harness_image_new (w, h, dims + 1, 1, CUDAFX_U8, 0);
          harness_image_random (&plain, &r);
          for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
              {
                for (int c = 0; c < dims; c++)
                  harness_set (&alpha, x, y, c, harness_get (&plain, x, y, c));
                harness_set (&alpha, x, y, dims, 255);
              }
          cudafx_quantize_params p;
          cudafx_quantize_params_init (&p);
          p.color_space = space;
          p.colors = 9;
          p.max_iterations = 6;
          cudafx_palette want, got;
          CHECK (run (&alpha, &out_alpha, &p, 3, &want) == CUDAFX_OK, "status: %s", cudafx_error_message ());
          CHECK (run (&plain, &out, &p, 3, &got) == CUDAFX_OK, "status: %s", cudafx_error_message ());
          CHECK (same_palette (&want, &got), "%dx%d %s %s: the palette differs without alpha", w, h,
                 dims == 1 ? "grey" : "RGB", space ? "rgb" : "oklab");
          /* out's colours against out_alpha's (alpha aside): none may differ */
          CHECK (harness_diff_share (&out, &out_alpha, 0) == 0, "%dx%d %s %s: the output differs without alpha",
                 w, h, dims == 1 ? "grey" : "RGB", space ? "rgb" : "oklab");
          harness_image_free (&plain);
          harness_image_free (&alpha);
          harness_image_free (&out);
          harness_image_free (&out_alpha);
        }
}

/* Lloyd over the distinct colours with their counts (u8, the default)
 * against every voting pixel one by one (CUDAFX_QUANTIZE_PER_PIXEL): the
 * same palette, iterations and output, on images of few colours each
 * repeated many times, a quarter of the pixels transparent (their colours
 * must not count), grey and RGB, both spaces, several thread counts, and
 * with every pixel transparent (then all vote). */
TEST (quantize_distinct_colours_match_every_pixel)
{
  harness_rng r = { 31 };
  for (int ch = 1; ch <= 4; ch++)
    for (int space = 0; space < 2; space++)
      for (int all_clear = 0; all_clear < 1 + (ch % 2 == 0); all_clear++)
        {
          int alpha = ch % 2 == 0;
          cudafx_image src = harness_image_new (211, 97, ch, alpha, CUDAFX_U8, 5);
          cudafx_image want = harness_image_new (211, 97, ch, alpha, CUDAFX_U8, 0);
          cudafx_image got = harness_image_new (211, 97, ch, alpha, CUDAFX_U8, 0);
          clustered_image (&src, &r, 5, 3); /* about 1000 colours (grey: 40) in 20467 pixels */
          for (int y = 0; y < 97 && all_clear; y++)
            for (int x = 0; x < 211; x++)
              harness_set (&src, x, y, ch - 1, 0);
          cudafx_quantize_params p;
          cudafx_quantize_params_init (&p);
          p.color_space = space;
          for (p.colors = 7; p.colors <= 56; p.colors *= 8)
            {
              cudafx_palette a, b;
              setenv ("CUDAFX_QUANTIZE_PER_PIXEL", "1", 1);
              CHECK (run (&src, &want, &p, 2, &a) == CUDAFX_OK, "status: %s", cudafx_error_message ());
              unsetenv ("CUDAFX_QUANTIZE_PER_PIXEL");
              for (int threads = 1; threads <= 3; threads += 2)
                {
                  CHECK (run (&src, &got, &p, threads, &b) == CUDAFX_OK, "status: %s", cudafx_error_message ());
                  CHECK (same_palette (&a, &b), "ch %d %s K %d%s, %d threads: %d colours, %d iterations; "
                         "every pixel: %d, %d", ch, space ? "rgb" : "oklab", p.colors,
                         all_clear ? " all transparent" : "", threads, b.colors, b.iterations, a.colors,
                         a.iterations);
                  CHECK (harness_max_diff (&want, &got) == 0, "ch %d %s K %d: output differs", ch,
                         space ? "rgb" : "oklab", p.colors);
                }
            }
          harness_image_free (&src);
          harness_image_free (&want);
          harness_image_free (&got);
        }
}

TEST (quantize_seed_decides_the_palette)
{
  harness_rng r = { 3 };
  cudafx_image src = harness_image_new (40, 30, 3, 0, CUDAFX_U8, 0);
  cudafx_image dst = harness_image_new (40, 30, 3, 0, CUDAFX_U8, 0);
  harness_image_random (&src, &r);
  cudafx_quantize_params p;
  cudafx_quantize_params_init (&p);
  p.colors = 12;
  cudafx_palette a, b;
  CHECK (run (&src, &dst, &p, 2, &a) == CUDAFX_OK, "status");
  CHECK (run (&src, &dst, &p, 3, &b) == CUDAFX_OK, "status");
  CHECK (same_palette (&a, &b), "same seed, different palette");
  int differs = 0;
  for (p.seed = 1; p.seed < 5; p.seed++)
    {
      CHECK (run (&src, &dst, &p, 2, &b) == CUDAFX_OK, "status");
      differs |= !same_palette (&a, &b);
    }
  CHECK (differs, "seeds 1..4 all give seed 0's palette");
  p.seed = 2147483647u;
  CHECK (run (&src, &dst, &p, 2, &b) == CUDAFX_OK, "largest seed refused");
  harness_image_free (&src);
  harness_image_free (&dst);
}

TEST (quantize_transparent_pixels_do_not_vote)
{
  harness_rng r = { 9 };
  for (int t = 0; t < 2; t++)
    for (int ch = 2; ch <= 4; ch += 2)
      {
        cudafx_type type = t ? CUDAFX_F32 : CUDAFX_U8;
        cudafx_image src = harness_image_new (33, 21, ch, 1, type, 8);
        cudafx_image dst = harness_image_new (33, 21, ch, 1, type, 0);
        clustered_image (&src, &r, 4, 20);
        cudafx_quantize_params p;
        cudafx_quantize_params_init (&p);
        p.colors = 6;
        p.dither = CUDAFX_DITHER_FLOYD_STEINBERG;
        cudafx_palette a, b;
        CHECK (run (&src, &dst, &p, 2, &a) == CUDAFX_OK, "status");
        check_output (&src, &dst, &a, &p, "before");
        for (int y = 0; y < 21; y++)
          for (int x = 0; x < 33; x++)
            if (is_transparent (&src, x, y))
              for (int c = 0; c < ch - 1; c++)
                harness_set (&src, x, y, c, harness_rand (&r) % 256);
        CHECK (run (&src, &dst, &p, 3, &b) == CUDAFX_OK, "status");
        CHECK (same_palette (&a, &b), "%s ch %d: transparent colours changed the palette",
               t ? "f32" : "u8", ch);
        check_output (&src, &dst, &b, &p, "after");
        /* all transparent: every pixel votes, alpha stays 0 */
        for (int y = 0; y < 21; y++)
          for (int x = 0; x < 33; x++)
            harness_set (&src, x, y, ch - 1, 0);
        CHECK (run (&src, &dst, &p, 2, &b) == CUDAFX_OK && b.colors >= 2, "all transparent");
        check_output (&src, &dst, &b, &p, "all transparent");
        harness_image_free (&src);
        harness_image_free (&dst);
      }
}

/* Non-finite f32 pixels vote as transparent ones do not (their palette is
 * that of the image with them transparent: the masked image, given an alpha
 * channel when the image has none), take and pass no error, and come out as
 * they went in; every other pixel comes out as in the masked image's run. */
TEST (quantize_non_finite_pixels_do_not_vote_and_stay)
{
  static const struct { int x, y, c; double v; } bad[] = {
    { 3, 2, 0, NAN }, { 0, 0, 0, INFINITY }, { 32, 20, -1, -INFINITY }, { 17, 9, -1, NAN }, { 18, 9, 0, 1e37 },
  };
  static const cudafx_dither dithers[] = { CUDAFX_DITHER_NONE, CUDAFX_DITHER_FLOYD_STEINBERG, CUDAFX_DITHER_ORDERED };
  harness_rng r = { 21 };
  for (int ch = 1; ch <= 4; ch++)
    for (int space = 0; space < 2; space++)
      for (size_t d = 0; d < sizeof dithers / sizeof *dithers; d++)
        {
          const int alpha = ch % 2 == 0, mch = alpha ? ch : ch + 1, colours = ch - alpha;
          cudafx_image src = harness_image_new (33, 21, ch, alpha, CUDAFX_F32, 8);
          cudafx_image masked = harness_image_new (33, 21, mch, 1, CUDAFX_F32, 0);
          cudafx_image dst = harness_image_new (33, 21, ch, alpha, CUDAFX_F32, 8);
          cudafx_image mdst = harness_image_new (33, 21, mch, 1, CUDAFX_F32, 0);
          clustered_image (&src, &r, 3, 12);
          for (int y = 0; y < 21; y++)
            for (int x = 0; x < 33; x++)
              {
                for (int c = 0; c < colours; c++)
                  harness_set (&masked, x, y, c, harness_get (&src, x, y, c));
                harness_set (&masked, x, y, mch - 1, alpha ? harness_get (&src, x, y, ch - 1) : 255);
              }
          for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
            {
              /* -1: the last channel (alpha, where there is one) */
              int c = bad[i].c < 0 ? ch - 1 : bad[i].c;
              ((float *) ((uint8_t *) src.data + bad[i].y * src.stride))[bad[i].x * ch + c] = (float) bad[i].v;
              harness_set (&masked, bad[i].x, bad[i].y, mch - 1, 0);
            }
          cudafx_quantize_params p;
          cudafx_quantize_params_init (&p);
          p.colors = 4;
          p.color_space = space ? CUDAFX_SPACE_RGB : CUDAFX_SPACE_OKLAB;
          p.dither = dithers[d];
          cudafx_palette a, b;
          harness_image_poison (&dst);
          CHECK (run (&src, &dst, &p, 2, &a) == CUDAFX_OK, "status: %s", cudafx_error_message ());
          CHECK (run (&masked, &mdst, &p, 3, &b) == CUDAFX_OK, "status: %s", cudafx_error_message ());
          CHECK (same_palette (&a, &b), "%d channels, space %d, dither %d: the non-finite pixels changed the palette",
                 ch, space, (int) dithers[d]);
          int in = 0, out = 0, kept = 1, same = 1;
          for (int y = 0; y < 21; y++)
            for (int x = 0; x < 33; x++)
              {
                const float *sp = (const float *) ((uint8_t *) src.data + y * src.stride) + x * ch;
                const float *dp = (const float *) ((uint8_t *) dst.data + y * dst.stride) + x * ch;
                int known = 1;
                for (int c = 0; c < ch; c++)
                  {
                    known &= isfinite (sp[c] * 255.0f);
                    in += !isfinite (sp[c]);
                    out += !isfinite (dp[c]);
                  }
                if (!known)
                  kept &= !memcmp (sp, dp, ch * sizeof *sp);
                else
                  for (int c = 0; c < ch; c++)
                    same &= harness_get (&dst, x, y, c) == harness_get (&mdst, x, y, c < colours ? c : mch - 1);
              }
          CHECK (in == out && kept, "%d channels, dither %d: %d non-finite values out of %d, kept %d",
                 ch, (int) dithers[d], out, in, kept);
          CHECK (same, "%d channels, space %d, dither %d: the other pixels differ from the masked image's",
                 ch, space, (int) dithers[d]);
          harness_image_free (&src);
          harness_image_free (&masked);
          harness_image_free (&dst);
          harness_image_free (&mdst);
        }
}

TEST (quantize_dither_uses_the_palette)
{
  harness_rng r = { 13 };
  for (int t = 0; t < 2; t++)
    for (int ch = 1; ch <= 4; ch++)
      for (int space = 0; space < 2; space++)
        {
          cudafx_type type = t ? CUDAFX_F32 : CUDAFX_U8;
          int alpha = ch == 2 || ch == 4;
          cudafx_image src = harness_image_new (29, 19, ch, alpha, type, 4);
          cudafx_image dst = harness_image_new (29, 19, ch, alpha, type, 4);
          harness_image_random (&src, &r);
          harness_image_poison (&dst);
          cudafx_quantize_params p;
          cudafx_quantize_params_init (&p);
          p.color_space = space;
          p.dither = CUDAFX_DITHER_FLOYD_STEINBERG;
          p.colors = 5;
          cudafx_palette pal;
          CHECK (run (&src, &dst, &p, 2, &pal) == CUDAFX_OK, "status");
          check_output (&src, &dst, &pal, &p, "dither");
          CHECK (padding_intact (&dst), "dither wrote row padding");
          harness_image_free (&src);
          harness_image_free (&dst);
        }
}

/* Floyd–Steinberg written plainly for the tests, from core/quantize.c's
 * description: one sequential scan, rows top to bottom, each left to right,
 * over a whole image of float errors. A voting pixel's value (0..255 float)
 * plus its error, clamped per channel to the palette's range, takes the
 * nearest entry; the error (value − entry) goes 7/16 right, 3/16 down-left,
 * 5/16 down, 1/16 down-right. Transparent pixels (when some pixel is not)
 * take their plain nearest entry and neither use nor pass on error. In RGB
 * only: there the features are floorf (x · 256 + 0.5) and the distance a
 * float sum of squares in channel order, which the oracle can compute itself;
 * the Oklab transform is the engine's own float arithmetic (its dither is
 * checked against this one's scan through the thread counts and the GPU). */
static void
oracle_dither_rgb (const cudafx_image *src, const cudafx_palette *pal, int low_bleed, cudafx_image *want)
{
  const int w = src->width, h = src->height, ch = src->channels, dims = ch - src->has_alpha;
  const int u8 = src->type == CUDAFX_U8;
  float value[CUDAFX_MAX_COLORS][3] = { { 0 } }, feature[CUDAFX_MAX_COLORS][3] = { { 0 } };
  float lo[3], hi[3];
  for (int e = 0; e < pal->colors; e++)
    for (int c = 0; c < dims; c++)
      {
        value[e][c] = u8 ? (float) pal->entries[e][c] : (float) (pal->entries[e][c] / 255) * 255.0f;
        feature[e][c] = floorf (value[e][c] * 256.0f + 0.5f);
        lo[c] = e ? fminf (lo[c], value[e][c]) : value[e][c];
        hi[c] = e ? fmaxf (hi[c], value[e][c]) : value[e][c];
      }
  int everyone = 1;
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      everyone &= is_transparent (src, x, y);
  float *err = calloc ((size_t) w * h * 3, sizeof *err);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      {
        const int voting = everyone || !is_transparent (src, x, y);
        float v[3] = { 0, 0, 0 }, f[3] = { 0, 0, 0 };
        for (int c = 0; c < dims; c++)
          {
            v[c] = (float) (harness_get (src, x, y, c) / (u8 ? 1 : 255)) * (u8 ? 1.0f : 255.0f);
            if (voting)
              {
                /* GIMP's reduced bleeding: the incoming error through 1:1 to
                 * 24, 1:2 to 72, flat at 48 beyond */
                float in = err[((size_t) y * w + x) * 3 + c], m = fabsf (in);
                if (low_bleed && m >= 24)
                  in = copysignf (m >= 72 ? 48.0f : 24.0f + (m - 24.0f) / 2.0f, in);
                v[c] += in;
                v[c] = v[c] < lo[c] ? lo[c] : v[c] > hi[c] ? hi[c] : v[c];
              }
            f[c] = floorf (v[c] * 256.0f + 0.5f);
          }
        int best = 0;
        float best_d = INFINITY;
        for (int e = 0; e < pal->colors; e++)
          {
            float dx = f[0] - feature[e][0], dy = f[1] - feature[e][1], dz = f[2] - feature[e][2];
            float d = dx * dx + dy * dy + dz * dz;
            if (d < best_d)
              {
                best_d = d;
                best = e;
              }
          }
        for (int c = 0; c < ch; c++)
          harness_set (want, x, y, c, c < dims ? pal->entries[best][c] : harness_get (src, x, y, c));
        if (!voting)
          continue;
        static const struct { int dx, dy; float weight; } share[4] = {
          { 1, 0, 7.0f / 16 }, { -1, 1, 3.0f / 16 }, { 0, 1, 5.0f / 16 }, { 1, 1, 1.0f / 16 },
        };
        for (int c = 0; c < dims; c++)
          {
            float e = v[c] - value[best][c];
            for (int i = 0; i < 4; i++)
              {
                int tx = x + share[i].dx, ty = y + share[i].dy;
                if (tx >= 0 && tx < w && ty < h)
                  err[((size_t) ty * w + tx) * 3 + c] += e * share[i].weight;
              }
          }
      }
  free (err);
}

/* "(x,y,c) a vs b" of the first element where a and b differ, or "none". */
static const char *
first_difference (const cudafx_image *a, const cudafx_image *b)
{
  static char text[96];
  for (int y = 0; y < a->height; y++)
    for (int x = 0; x < a->width; x++)
      for (int c = 0; c < a->channels; c++)
        if (harness_get (a, x, y, c) != harness_get (b, x, y, c))
          {
            snprintf (text, sizeof text, "(%d,%d,%d) %g vs %g", x, y, c, harness_get (a, x, y, c),
                      harness_get (b, x, y, c));
            return text;
          }
  return "none";
}

/* The wavefront dither gives the sequential scan's output bit for bit: the
 * one-thread run equals the oracle's scan (in RGB), narrow and one-row
 * images leave little or no overlap, wide ones much. Transparent pixels take
 * their plain nearest entry and pass no error: their colours change nothing
 * else. */
TEST (quantize_dither_does_not_depend_on_threads)
{
  static const int sizes[][2] = { { 1, 1 }, { 1, 9 }, { 2, 7 }, { 3, 11 }, { 17, 1 }, { 70, 1 },
                                  { 37, 29 }, { 250, 41 } };
  static const int threads[] = { 2, 3, 5, 8 };
  harness_rng r = { 21 };
  int diffused = 0;
  for (int s = 0; s < 8; s++)
    for (int t = 0; t < 2; t++)
      for (int ch = 1; ch <= 4; ch++)
        {
          int w = sizes[s][0], h = sizes[s][1], alpha = ch == 2 || ch == 4;
          cudafx_type type = t ? CUDAFX_F32 : CUDAFX_U8;
          cudafx_image src = harness_image_new (w, h, ch, alpha, type, 4);
          cudafx_image ref = harness_image_new (w, h, ch, alpha, type, 0);
          cudafx_image plain = harness_image_new (w, h, ch, alpha, type, 0);
          cudafx_image dst = harness_image_new (w, h, ch, alpha, type, 8);
          clustered_image (&src, &r, 5, 60);
          cudafx_quantize_params p;
          cudafx_quantize_params_init (&p);
          p.color_space = (s + ch) % 2;
          p.colors = 4 + (s + t) % 3;
          cudafx_palette want, got;
          CHECK (run (&src, &plain, &p, 1, &want) == CUDAFX_OK, "status");
          /* every other image with GIMP's reduced bleeding */
          int low_bleed = (s + t + ch) % 2;
          p.dither = low_bleed ? CUDAFX_DITHER_FS_LOW_BLEED : CUDAFX_DITHER_FLOYD_STEINBERG;
          CHECK (run (&src, &ref, &p, 1, &got) == CUDAFX_OK, "status");
          CHECK (same_palette (&want, &got), "dithering changed the palette");
          if (p.color_space == CUDAFX_SPACE_RGB)
            {
              oracle_dither_rgb (&src, &got, low_bleed, &dst);
              CHECK (harness_same_pixels (&ref, &dst), "%dx%d %s ch %d K %d: the dither differs "
                     "from the oracle's scan (first at %s)", w, h, t ? "f32" : "u8", ch, p.colors,
                     first_difference (&ref, &dst));
            }
          diffused |= !harness_same_pixels (&ref, &plain);
          for (int i = 0; i < 4; i++)
            {
              harness_image_poison (&dst);
              CHECK (run (&src, &dst, &p, threads[i], &got) == CUDAFX_OK, "status");
              CHECK (harness_same_pixels (&ref, &dst) && padding_intact (&dst),
                     "%dx%d %s ch %d: %d threads dither differently", w, h, t ? "f32" : "u8", ch,
                     threads[i]);
            }
          if (alpha)
            {
              for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++)
                  if (is_transparent (&src, x, y))
                    {
                      for (int c = 0; c < ch; c++)
                        CHECK (harness_get (&ref, x, y, c) == harness_get (&plain, x, y, c),
                               "%dx%d: transparent pixel %d,%d was dithered", w, h, x, y);
                      for (int c = 0; c < ch - 1; c++)
                        harness_set (&src, x, y, c, harness_rand (&r) % 256);
                    }
              CHECK (run (&src, &dst, &p, 3, &got) == CUDAFX_OK, "status");
              for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++)
                  if (!is_transparent (&src, x, y))
                    for (int c = 0; c < ch; c++)
                      CHECK (harness_get (&ref, x, y, c) == harness_get (&dst, x, y, c),
                             "%dx%d: transparent colours changed pixel %d,%d", w, h, x, y);
            }
          harness_image_free (&src);
          harness_image_free (&ref);
          harness_image_free (&plain);
          harness_image_free (&dst);
        }
  CHECK (diffused, "no image came out differently dithered: the test checks nothing");
}

/* Records progress, on which thread, and cancels at cancel_at. */
typedef struct {
  pthread_t caller;
  int       other_thread, backwards, after_cancel, cancelled;
  double    last, cancel_at;
} progress_log;

static int
log_progress (double fraction, void *user_data)
{
  progress_log *l = user_data;
  l->other_thread |= !pthread_equal (pthread_self (), l->caller);
  l->backwards |= fraction < l->last;
  l->after_cancel += l->cancelled;
  l->last = fraction;
  l->cancelled = fraction >= l->cancel_at;
  return l->cancelled;
}

/* Progress and cancel stay on the caller's thread; a cancel in the middle of
 * the dither stops every thread. */
TEST (quantize_dither_progress_and_cancel)
{
  static const int threads[] = { 1, 2, 3, 8 };
  harness_rng r = { 23 };
  cudafx_image src = harness_image_new (160, 120, 3, 0, CUDAFX_U8, 0);
  cudafx_image dst = harness_image_new (160, 120, 3, 0, CUDAFX_U8, 0);
  harness_image_random (&src, &r);
  cudafx_quantize_params p;
  cudafx_quantize_params_init (&p);
  p.dither = CUDAFX_DITHER_FLOYD_STEINBERG;
  for (int i = 0; i < 4; i++)
    for (int cancel = 0; cancel < 2; cancel++)
      {
        progress_log l = { pthread_self (), 0, 0, 0, 0, 0.0, cancel ? 0.95 : 2.0 };
        cudafx_options o = harness_options ();
        o.threads = threads[i];
        o.progress = log_progress;
        o.user_data = &l;
        cudafx_status s = cudafx_quantize (&src, &dst, &p, &o, NULL);
        CHECK (s == (cancel ? CUDAFX_ERR_CANCELLED : CUDAFX_OK), "%d threads: status %d", threads[i], s);
        CHECK (!l.other_thread, "%d threads: progress called from another thread", threads[i]);
        CHECK (!l.backwards && !l.after_cancel, "%d threads: progress went back or went on",
               threads[i]);
        CHECK (cancel ? l.last >= 0.95 && l.last < 1.0 : l.last == 1.0, "%d threads: progress ended at %g",
               threads[i], l.last);
      }
  harness_image_free (&src);
  harness_image_free (&dst);
}

TEST (quantize_single_pixel_and_null_palette)
{
  cudafx_image src = harness_image_new (1, 1, 3, 0, CUDAFX_U8, 0);
  cudafx_image dst = harness_image_new (1, 1, 3, 0, CUDAFX_U8, 0);
  harness_set (&src, 0, 0, 0, 10);
  harness_set (&src, 0, 0, 1, 200);
  harness_set (&src, 0, 0, 2, 77);
  cudafx_quantize_params p;
  cudafx_quantize_params_init (&p);
  cudafx_palette pal;
  CHECK (run (&src, &dst, &p, 1, &pal) == CUDAFX_OK && pal.colors == 1, "1x1: %d colours", pal.colors);
  CHECK (harness_max_diff (&src, &dst) == 0, "1x1 not reproduced");
  CHECK (run (&src, &dst, &p, 1, NULL) == CUDAFX_OK, "NULL palette refused");
  harness_image_free (&src);
  harness_image_free (&dst);
}

TEST (quantize_rejects_invalid_arguments)
{
  cudafx_image src = harness_image_new (4, 4, 3, 0, CUDAFX_U8, 0);
  cudafx_image dst = harness_image_new (4, 4, 3, 0, CUDAFX_U8, 0);
  memset (src.data, 0, src.stride * 4);
  cudafx_quantize_params p;
  static const char *names[] = { "colors", "colors", "max-iterations", "max-iterations",
                                 "seed", "color-space", "dither" };
  for (int i = 0; i < 7; i++)
    {
      cudafx_quantize_params_init (&p);
      switch (i)
        {
        case 0: p.colors = 1; break;
        case 1: p.colors = 257; break;
        case 2: p.max_iterations = 0; break;
        case 3: p.max_iterations = 301; break;
        case 4: p.seed = 4000000000u; break;
        case 5: p.color_space = (cudafx_color_space) 2; break;
        case 6: p.dither = (cudafx_dither) 5; break;
        }
      CHECK (run (&src, &dst, &p, 1, NULL) == CUDAFX_ERR_INVALID_ARG, "case %d accepted", i);
      CHECK (strstr (cudafx_error_message (), names[i]) != NULL,
             "case %d: message '%s' does not name %s", i, cudafx_error_message (), names[i]);
    }
  cudafx_quantize_params_init (&p);
  CHECK (run (&src, &dst, NULL, 1, NULL) == CUDAFX_ERR_INVALID_ARG &&
         strstr (cudafx_error_message (), "params"), "NULL params");
  cudafx_image two = harness_image_new (4, 4, 2, 0, CUDAFX_U8, 0);
  cudafx_image two_dst = harness_image_new (4, 4, 2, 0, CUDAFX_U8, 0);
  CHECK (run (&two, &two_dst, &p, 1, NULL) == CUDAFX_ERR_INVALID_ARG &&
         strstr (cudafx_error_message (), "colour channels"), "2 colour channels accepted");
  harness_image_free (&two);
  harness_image_free (&two_dst);
  harness_image_free (&src);
  harness_image_free (&dst);
}

/* ---- given palettes and positioned dithering ----------------------------------- */

static void
random_palette (cudafx_palette *pal, harness_rng *r, int colors, int grey)
{
  memset (pal, 0, sizeof *pal);
  pal->colors = colors;
  pal->channels = 3;
  for (int e = 0; e < colors; e++)
    {
      for (int c = 0; c < 3; c++)
        pal->entries[e][c] = grey && c ? pal->entries[e][0] : harness_rand (r) % 256;
      /* some duplicates: the first of them must be the one taken */
      if (e > 2 && harness_rand (r) % 8 == 0)
        memcpy (pal->entries[e], pal->entries[harness_rand (r) % e], sizeof pal->entries[e]);
    }
}

/* The oracle: in RGB, u8, the features are 256 v exactly, so the squared
 * distance is an exact integer; the first entry with the smallest wins. */
static int
oracle_nearest_rgb (const cudafx_palette *pal, const double *v, int dims)
{
  int best = 0;
  int64_t best_d = INT64_MAX;
  for (int e = 0; e < pal->colors; e++)
    {
      int64_t d = 0;
      for (int c = 0; c < dims; c++)
        {
          int64_t diff = 256 * ((int64_t) v[c] - (int64_t) pal->entries[e][c]);
          d += diff * diff;
        }
      if (d < best_d)
        {
          best_d = d;
          best = e;
        }
    }
  return best;
}

TEST (quantize_given_palette_matches_oracle)
{
  static const int sizes[][2] = { { 1, 1 }, { 1, 13 }, { 29, 1 }, { 37, 23 }, { 600, 3 } };
  static const int counts[] = { 1, 2, 7, 16, 100, 256 };
  harness_rng r = { 2323 };
  for (int s = 0; s < 5; s++)
    for (int ch = 1; ch <= 4; ch++)
      for (int k = 0; k < 6; k++)
        {
          int w = sizes[s][0], h = sizes[s][1], alpha = ch == 2 || ch == 4, dims = ch - alpha;
          cudafx_image src = harness_image_new (w, h, ch, alpha, CUDAFX_U8, 3);
          cudafx_image dst = harness_image_new (w, h, ch, alpha, CUDAFX_U8, 5);
          harness_image_random (&src, &r);
          cudafx_palette given, got;
          random_palette (&given, &r, counts[k], dims == 1);
          cudafx_quantize_params p;
          cudafx_quantize_params_init (&p);
          p.color_space = CUDAFX_SPACE_RGB;
          p.palette = &given;
          p.colors = 2; /* unused with a palette */
          CHECK (run (&src, &dst, &p, 1 + k % 3, &got) == CUDAFX_OK, "status: %s", cudafx_error_message ());
          CHECK (got.colors == given.colors && got.iterations == 0, "palette of %d, %d iterations",
                 got.colors, got.iterations);
          for (int e = 0; e < got.colors; e++)
            for (int c = 0; c < dims; c++)
              CHECK (got.entries[e][c] == given.entries[e][c], "entry %d changed", e);
          for (int y = 0; y < h && harness_failures () < 5; y++)
            for (int x = 0; x < w; x++)
              {
                double v[3];
                for (int c = 0; c < dims; c++)
                  v[c] = harness_get (&src, x, y, c);
                int want = oracle_nearest_rgb (&given, v, dims);
                for (int c = 0; c < dims; c++)
                  CHECK (harness_get (&dst, x, y, c) == given.entries[want][c],
                         "%dx%d ch %d K %d: pixel %d,%d is not entry %d", w, h, ch, counts[k], x, y, want);
                if (alpha)
                  CHECK (harness_get (&dst, x, y, ch - 1) == harness_get (&src, x, y, ch - 1), "alpha");
              }
          harness_image_free (&src);
          harness_image_free (&dst);
        }
}

/* In Oklab and on f32 the oracle's double features differ from the engine's
 * float ones in the last bits: the entry taken is the nearest to within
 * that. */
TEST (quantize_given_palette_oklab_and_f32)
{
  harness_rng r = { 77 };
  for (int t = 0; t < 2; t++)
    for (int space = 0; space < 2; space++)
      {
        cudafx_type type = t ? CUDAFX_F32 : CUDAFX_U8;
        cudafx_image src = harness_image_new (41, 17, 3, 0, type, 0);
        cudafx_image dst = harness_image_new (41, 17, 3, 0, type, 0);
        harness_image_random (&src, &r);
        cudafx_palette given;
        random_palette (&given, &r, 64, 0);
        cudafx_quantize_params p;
        cudafx_quantize_params_init (&p);
        p.color_space = space;
        p.palette = &given;
        CHECK (run (&src, &dst, &p, 2, NULL) == CUDAFX_OK, "status");
        for (int y = 0; y < 17; y++)
          for (int x = 0; x < 41; x++)
            {
              int at = -1;
              for (int e = 0; e < given.colors && at < 0; e++)
                {
                  int same = 1;
                  for (int c = 0; c < 3; c++)
                    same &= fabs (harness_get (&dst, x, y, c) - given.entries[e][c]) < 1e-3;
                  if (same)
                    at = e;
                }
              CHECK (at >= 0, "%s %s: pixel %d,%d is not an entry", t ? "f32" : "u8",
                     space ? "rgb" : "oklab", x, y);
            }
        harness_image_free (&src);
        harness_image_free (&dst);
      }
}

/* A ramp of `levels` evenly spaced greys; 1 or 3 channels. */
static void
grey_ramp (cudafx_palette *pal, int levels)
{
  memset (pal, 0, sizeof *pal);
  pal->colors = levels;
  pal->channels = 3;
  for (int e = 0; e < levels; e++)
    for (int c = 0; c < 3; c++)
      pal->entries[e][c] = floor (255.0 * e / (levels - 1) + 0.5);
}

/* The defining property of a positioned dither: over whole periods of its
 * pattern, a flat grey comes out with its own mean, within 1/levels of the
 * range (the bound asked of it); an evenly spaced ramp in RGB does much better
 * (a step over the pattern's size), which is checked too. */
TEST (quantize_positioned_dither_keeps_a_flat_grey)
{
  static const int levels[] = { 2, 3, 5, 16 };
  static const cudafx_dither dithers[] = { CUDAFX_DITHER_ORDERED, CUDAFX_DITHER_BLUE_NOISE };
  static const double greys[] = { 0, 10.5, 64, 100.25, 127.5, 200, 254, 255 };
  for (int l = 0; l < 4; l++)
    for (int d = 0; d < 2; d++)
      for (int t = 0; t < 2; t++)
        for (int ch = 1; ch <= 3; ch += 2)
          for (int g = 0; g < 8; g++)
            {
              cudafx_type type = t ? CUDAFX_F32 : CUDAFX_U8;
              if (type == CUDAFX_U8 && greys[g] != floor (greys[g]))
                continue;
              cudafx_image src = harness_image_new (64, 64, ch, 0, type, 0);
              cudafx_image dst = harness_image_new (64, 64, ch, 0, type, 0);
              for (int y = 0; y < 64; y++)
                for (int x = 0; x < 64; x++)
                  for (int c = 0; c < ch; c++)
                    harness_set (&src, x, y, c, greys[g]);
              cudafx_palette ramp;
              grey_ramp (&ramp, levels[l]);
              cudafx_quantize_params p;
              cudafx_quantize_params_init (&p);
              p.color_space = CUDAFX_SPACE_RGB;
              p.palette = &ramp;
              p.dither = dithers[d];
              CHECK (run (&src, &dst, &p, 2, NULL) == CUDAFX_OK, "status");
              double sum = 0, want = type == CUDAFX_U8 ? greys[g] : (float) (greys[g] / 255) * 255.0;
              int outside = 0;
              for (int y = 0; y < 64; y++)
                for (int x = 0; x < 64; x++)
                  {
                    double v = harness_get (&dst, x, y, 0);
                    sum += v;
                    for (int c = 1; c < ch; c++)
                      outside |= harness_get (&dst, x, y, c) != v;
                  }
              double mean = sum / (64 * 64), step = 255.0 / (levels[l] - 1);
              CHECK (!outside, "a grey came out coloured");
              CHECK (fabs (mean - want) <= 255.0 / levels[l] && fabs (mean - want) <= step / 32 + 1e-9,
                     "%s, %d levels, %s ch %d: grey %g comes out as %g", d ? "blue noise" : "ordered",
                     levels[l], t ? "f32" : "u8", ch, want, mean);
              harness_image_free (&src);
              harness_image_free (&dst);
            }
}

/* Positioned dithering is per pixel: the same with any thread count, every
 * pixel a palette entry, alpha kept; with computed palettes too, and not the
 * plain mapping. */
TEST (quantize_positioned_dither_is_per_pixel)
{
  harness_rng r = { 5 };
  int differs = 0;
  for (int d = CUDAFX_DITHER_ORDERED; d <= CUDAFX_DITHER_BLUE_NOISE; d++)
    for (int ch = 1; ch <= 4; ch++)
      for (int space = 0; space < 2; space++)
        {
          int alpha = ch == 2 || ch == 4;
          cudafx_image src = harness_image_new (83, 71, ch, alpha, CUDAFX_U8, 2);
          cudafx_image ref = harness_image_new (83, 71, ch, alpha, CUDAFX_U8, 0);
          cudafx_image dst = harness_image_new (83, 71, ch, alpha, CUDAFX_U8, 0);
          cudafx_image plain = harness_image_new (83, 71, ch, alpha, CUDAFX_U8, 0);
          harness_image_random (&src, &r);
          cudafx_quantize_params p;
          cudafx_quantize_params_init (&p);
          p.colors = 8;
          p.color_space = space;
          cudafx_palette pal, again;
          CHECK (run (&src, &plain, &p, 1, &pal) == CUDAFX_OK, "status");
          p.dither = d;
          CHECK (run (&src, &ref, &p, 1, &again) == CUDAFX_OK, "status");
          CHECK (again.colors == pal.colors && !memcmp (again.entries, pal.entries, sizeof pal.entries),
                 "dithering changed the palette");
          differs |= !harness_same_pixels (&ref, &plain);
          CHECK (run (&src, &dst, &p, 3, NULL) == CUDAFX_OK && harness_same_pixels (&ref, &dst),
                 "dither %d ch %d: 3 threads differ from 1", d, ch);
          for (int y = 0; y < 71; y++)
            for (int x = 0; x < 83; x++)
              {
                int found = 0;
                for (int e = 0; e < pal.colors && !found; e++)
                  {
                    found = 1;
                    for (int c = 0; c < ch - alpha; c++)
                      found &= harness_get (&ref, x, y, c) == pal.entries[e][c];
                  }
                CHECK (found, "pixel %d,%d is not an entry", x, y);
                if (alpha)
                  CHECK (harness_get (&ref, x, y, ch - 1) == harness_get (&src, x, y, ch - 1), "alpha");
              }
          harness_image_free (&src);
          harness_image_free (&ref);
          harness_image_free (&dst);
          harness_image_free (&plain);
        }
  CHECK (differs, "no positioned dither changed an image: the test checks nothing");
}

/* Reduced bleeding limits the error a pixel receives: a two-colour palette
 * over a smooth ramp gives large errors, and the outputs must differ (the
 * exact values are checked against a sequential oracle in test_quantize.c). */
TEST (quantize_reduced_bleeding_changes_the_dither)
{
  cudafx_image src = harness_image_new (200, 20, 3, 0, CUDAFX_U8, 0);
  cudafx_image fs = harness_image_new (200, 20, 3, 0, CUDAFX_U8, 0);
  cudafx_image low = harness_image_new (200, 20, 3, 0, CUDAFX_U8, 0);
  for (int y = 0; y < 20; y++)
    for (int x = 0; x < 200; x++)
      for (int c = 0; c < 3; c++)
        harness_set (&src, x, y, c, x * 255 / 199);
  cudafx_palette bw;
  grey_ramp (&bw, 2);
  cudafx_quantize_params p;
  cudafx_quantize_params_init (&p);
  p.palette = &bw;
  p.color_space = CUDAFX_SPACE_RGB;
  p.dither = CUDAFX_DITHER_FLOYD_STEINBERG;
  CHECK (run (&src, &fs, &p, 2, NULL) == CUDAFX_OK, "status");
  p.dither = CUDAFX_DITHER_FS_LOW_BLEED;
  CHECK (run (&src, &low, &p, 2, NULL) == CUDAFX_OK, "status");
  CHECK (!harness_same_pixels (&fs, &low), "reduced bleeding changed nothing");
  harness_image_free (&src);
  harness_image_free (&fs);
  harness_image_free (&low);
}

TEST (quantize_rejects_bad_given_palettes)
{
  cudafx_image grey = harness_image_new (4, 4, 1, 0, CUDAFX_U8, 0);
  cudafx_image grey_dst = harness_image_new (4, 4, 1, 0, CUDAFX_U8, 0);
  memset (grey.data, 0, grey.stride * 4);
  cudafx_palette pal;
  grey_ramp (&pal, 4);
  pal.entries[2][1] = 7;
  cudafx_quantize_params p;
  cudafx_quantize_params_init (&p);
  p.palette = &pal;
  CHECK (run (&grey, &grey_dst, &p, 1, NULL) == CUDAFX_ERR_INVALID_ARG
           && strstr (cudafx_error_message (), "entry 2") && strstr (cudafx_error_message (), "grey"),
         "a colour palette for a grey image: '%s'", cudafx_error_message ());
  pal.colors = 0;
  CHECK (run (&grey, &grey_dst, &p, 1, NULL) == CUDAFX_ERR_INVALID_ARG
           && strstr (cudafx_error_message (), "0 colors"), "an empty palette: '%s'", cudafx_error_message ());
  grey_ramp (&pal, 4);
  pal.entries[1][0] = NAN;
  CHECK (run (&grey, &grey_dst, &p, 1, NULL) == CUDAFX_ERR_INVALID_ARG
           && strstr (cudafx_error_message (), "entry 1"), "NaN entry: '%s'", cudafx_error_message ());
  harness_image_free (&grey);
  harness_image_free (&grey_dst);
}

/* ---- the .gpl reader ---------------------------------------------------------- */

static cudafx_status
parse (const char *text, cudafx_palette *pal)
{
  return cudafx_gpl_parse (text, strlen (text), "test.gpl", pal);
}

TEST (gpl_reads_gimp_palettes)
{
  cudafx_palette pal;
  const char *text = "\xEF\xBB\xBFGIMP Palette\r\nName: Brand colours\r\nColumns: 3\r\n# a comment\r\n"
                     "\r\n  0   0   0\tBlack\r\n255 128   7 Orange, bright\r\n 12  34  56\r\n"
                     "#another\n1 2 3";
  CHECK (parse (text, &pal) == CUDAFX_OK, "%s", cudafx_error_message ());
  CHECK (pal.colors == 4 && pal.channels == 3, "%d colors", pal.colors);
  static const double want[4][3] = { { 0, 0, 0 }, { 255, 128, 7 }, { 12, 34, 56 }, { 1, 2, 3 } };
  for (int e = 0; e < 4; e++)
    for (int c = 0; c < 3; c++)
      CHECK (pal.entries[e][c] == want[e][c], "entry %d.%d is %g", e, c, pal.entries[e][c]);

  /* 256 entries is the most */
  static char big[64 + 257 * 16];
  size_t at = (size_t) sprintf (big, "GIMP Palette\n");
  for (int i = 0; i < 256; i++)
    at += (size_t) sprintf (big + at, "%d %d %d\n", i, 255 - i, i / 2);
  CHECK (parse (big, &pal) == CUDAFX_OK && pal.colors == 256, "256 entries");
  sprintf (big + at, "1 1 1\n");
  CHECK (parse (big, &pal) == CUDAFX_ERR_INVALID_ARG && strstr (cudafx_error_message (), "test.gpl:258:")
           && strstr (cudafx_error_message (), "more than 256"),
         "257 entries: '%s'", cudafx_error_message ());
}

TEST (gpl_errors_name_the_file_and_line)
{
  static const struct {
    const char *text, *want;
  } cases[] = {
    { "", "empty file" },
    { "JASC-PAL\n0100\n", "test.gpl:1: not a GIMP palette" },
    { "GIMP Palette\n", "has no colors" },
    { "GIMP Palette\n# only a comment\nName: x\n", "has no colors" },
    { "GIMP Palette\n1 2 3\n256 0 0\n", "test.gpl:3: red value \"256\" is out of range" },
    { "GIMP Palette\n1 2 3\n4 5\n", "test.gpl:3: expected the blue value" },
    { "GIMP Palette\n\n0 -1 0\n", "test.gpl:3: expected the green value" },
    { "GIMP Palette\n0 1.5 0\n", "test.gpl:2: the green value must be a whole number" },
    { "GIMP Palette\nred green blue\n", "test.gpl:2: expected the red value" },
    { "GIMP Palette\n99999999999999999999 0 0\n", "test.gpl:2: red value" },
    { "GIMP Palette\nColumns: many\n1 2 3\n", "test.gpl:2: Columns" },
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    {
      cudafx_palette pal;
      CHECK (parse (cases[i].text, &pal) == CUDAFX_ERR_INVALID_ARG, "case %zu accepted", i);
      CHECK (strstr (cudafx_error_message (), cases[i].want) != NULL, "case %zu: '%s' lacks '%s'", i,
             cudafx_error_message (), cases[i].want);
    }
  cudafx_palette pal;
  const char binary[] = "GIMP Palette\n1 2\0 3\n";
  CHECK (cudafx_gpl_parse (binary, sizeof binary - 1, "bin.gpl", &pal) == CUDAFX_ERR_INVALID_ARG
           && strstr (cudafx_error_message (), "bin.gpl: not a GIMP palette"),
         "binary: '%s'", cudafx_error_message ());
  CHECK (cudafx_gpl_load ("/nonexistent/dir/x.gpl", &pal) == CUDAFX_ERR_INVALID_ARG
           && strstr (cudafx_error_message (), "/nonexistent/dir/x.gpl: cannot open"),
         "missing file: '%s'", cudafx_error_message ());
  /* The text ends where its length says, without a NUL: the last line's
   * Columns is read within it (the file fuzzer found strtol reading on;
   * ASan sees this heap copy's end in make check-asan). */
  static const char columns[] = "GIMP Palette\n1 2 3\nColumns: 4";
  char *exact = malloc (sizeof columns - 1);
  memcpy (exact, columns, sizeof columns - 1);
  CHECK (cudafx_gpl_parse (exact, sizeof columns - 1, "end.gpl", &pal) == CUDAFX_OK && pal.colors == 1,
         "Columns on the unterminated last line: '%s'", cudafx_error_message ());
  CHECK (cudafx_gpl_parse (exact, sizeof columns - 2, "end.gpl", &pal) == CUDAFX_ERR_INVALID_ARG
           && strstr (cudafx_error_message (), "end.gpl:3: Columns"),
         "Columns: with its number cut: '%s'", cudafx_error_message ());
  free (exact);
  /* Not a regular file, or too large: refused without reading (a FIFO would block). */
  CHECK (cudafx_gpl_load ("/dev/zero", &pal) == CUDAFX_ERR_INVALID_ARG
           && strstr (cudafx_error_message (), "/dev/zero: not a regular file"),
         "/dev/zero: '%s'", cudafx_error_message ());
  CHECK (cudafx_gpl_load ("/", &pal) == CUDAFX_ERR_INVALID_ARG
           && strstr (cudafx_error_message (), "/: is a directory"),
         "a directory: '%s'", cudafx_error_message ());
}
