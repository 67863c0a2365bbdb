/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Median / percentile filter against a brute-force oracle: gather the window
 * (square or disc, edges replicated), sort it (or select), pick the rank; on
 * small images, and on images that cross the engine's tiles and strips. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int
compare_doubles (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

static int
clamp (int v, int lo, int hi)
{
  return v < lo ? lo : v > hi ? hi : v;
}

static void
oracle (const cudafx_image *src, cudafx_image *dst, const cudafx_median_params *p)
{
  int r = p->radius;
  double *win = malloc ((2 * r + 1) * (2 * r + 1) * sizeof *win);
  for (int y = 0; y < src->height; y++)
    for (int x = 0; x < src->width; x++)
      for (int c = 0; c < src->channels; c++)
        {
          /* a non-finite value is left as it is, and out of every window */
          if (!isfinite (harness_get (src, x, y, c)))
            {
              harness_set (dst, x, y, c, harness_get (src, x, y, c));
              continue;
            }
          int n = 0;
          for (int dy = -r; dy <= r; dy++)
            for (int dx = -r; dx <= r; dx++)
              if (p->shape == CUDAFX_SHAPE_SQUARE || dx * dx + dy * dy <= r * r)
                {
                  win[n] = harness_get (src, clamp (x + dx, 0, src->width - 1), clamp (y + dy, 0, src->height - 1), c);
                  n += isfinite (win[n]);
                }
          qsort (win, n, sizeof *win, compare_doubles);
          harness_set (dst, x, y, c, win[lround (p->percentile / 100 * (n - 1))]);
        }
  free (win);
}

/* Random data; f32 sometimes with many ties or outside 0..1. */
static void
fill (cudafx_image *img, harness_rng *rng, int style)
{
  harness_image_random (img, rng);
  if (img->type != CUDAFX_F32 || style == 0)
    return;
  for (int y = 0; y < img->height; y++)
    for (int x = 0; x < img->width; x++)
      for (int c = 0; c < img->channels; c++)
        harness_set (img, x, y, c, style == 1 ? (harness_rand (rng) % 5) * 255.0 / 4
                                              : (harness_uniform (rng) * 5 - 2) * 255.0);
}

/* Runs the engine and the oracle; returns nonzero on mismatch. */
static int
check_case (int w, int h, int channels, cudafx_type type, const cudafx_median_params *p,
            int threads, harness_rng *rng, int style)
{
  int alpha = (channels == 2 || channels == 4) && harness_rand (rng) % 2;
  size_t pad = harness_rand (rng) % 3 * 8;
  cudafx_image src = harness_image_new (w, h, channels, alpha, type, pad);
  cudafx_image dst = harness_image_new (w, h, channels, alpha, type, pad);
  cudafx_image want = harness_image_new (w, h, channels, alpha, type, 0);
  fill (&src, rng, style);
  harness_image_poison (&dst);
  oracle (&src, &want, p);
  cudafx_options o = harness_options ();
  o.threads = threads;
  cudafx_status s = cudafx_median (&src, &dst, p, &o);
  double diff = s ? INFINITY : harness_max_diff (&dst, &want);
  int bad = s != CUDAFX_OK || diff != 0;
  CHECK (!bad, "%dx%d c%d %s r%d p%g %s threads %d: status %d, max diff %g",
         w, h, channels, type == CUDAFX_U8 ? "u8" : "f32", p->radius, p->percentile,
         p->shape == CUDAFX_SHAPE_SQUARE ? "square" : "circle", threads, s, diff);
  if (pad)
    {
      const unsigned char *row = dst.data;
      int poisoned = 1;
      for (int y = 0; y < h; y++)
        for (size_t i = dst.stride - pad; i < dst.stride; i++)
          poisoned &= row[y * dst.stride + i] == 0xA5;
      CHECK (poisoned, "%dx%d r%d: row padding written", w, h, p->radius);
    }
  harness_image_free (&src);
  harness_image_free (&dst);
  harness_image_free (&want);
  return bad;
}

TEST (median_matches_oracle)
{
  static const int sizes[][2] = { { 1, 1 }, { 9, 1 }, { 1, 9 }, { 13, 7 }, { 31, 17 } };
  static const int radii[] = { 1, 2, 3, 4, 5, 20 };
  static const double percentiles[] = { 0, 50, 37.5, 100 };
  static const int threads[] = { 1, 2, 3, 7 };
  harness_rng rng = { 42 };
  for (int si = 0; si < 5; si++)
    for (int ri = 0; ri < 6; ri++)
      for (int shape = 0; shape < 2; shape++)
        for (int type = 0; type < 2; type++)
          for (int pi = 0; pi < 4; pi++)
            {
              int w = sizes[si][0], h = sizes[si][1];
              if (radii[ri] > 10 && w * h > 100)
                continue;
              cudafx_median_params p = { radii[ri], percentiles[pi], shape };
              if (check_case (w, h, 1 + harness_rand (&rng) % 4, type, &p,
                              threads[harness_rand (&rng) % 4], &rng, harness_rand (&rng) % 3)
                  && harness_failures () > 5)
                return;
            }
}

/* Non-finite values (NaN, both infinities, one of the 1x1 image's) stay
 * where they are and only there; every other value is the median of the
 * finite values of its window, on the network's radii and the histogram's. */
TEST (median_keeps_non_finite_values_to_themselves)
{
  static const int sizes[][2] = { { 1, 1 }, { 13, 7 }, { 31, 17 } };
  static const int radii[] = { 1, 2, 3, 5 };
  static const double percentiles[] = { 0, 50, 100 };
  static const double bad[] = { NAN, INFINITY, -INFINITY };
  harness_rng rng = { 11 };
  for (int si = 0; si < 3; si++)
    for (int ri = 0; ri < 4; ri++)
      for (int shape = 0; shape < 2; shape++)
        for (int pi = 0; pi < 3; pi++)
          {
            const int w = sizes[si][0], h = sizes[si][1], ch = 1 + harness_rand (&rng) % 4;
            cudafx_image src = harness_image_new (w, h, ch, ch % 2 == 0, CUDAFX_F32, 8);
            cudafx_image dst = harness_image_new (w, h, ch, ch % 2 == 0, CUDAFX_F32, 8);
            cudafx_image want = harness_image_new (w, h, ch, ch % 2 == 0, CUDAFX_F32, 0);
            harness_image_random (&src, &rng);
            int in = 0;
            for (int y = 0; y < h; y++)
              for (int x = 0; x < w; x++)
                for (int c = 0; c < ch; c++)
                  if (harness_rand (&rng) % 16 == 0 || w * h == 1)
                    {
                      harness_set (&src, x, y, c, bad[harness_rand (&rng) % 3]);
                      in++;
                    }
            harness_image_poison (&dst);
            cudafx_median_params p = { radii[ri], percentiles[pi], shape };
            oracle (&src, &want, &p);
            cudafx_options o = harness_options ();
            CHECK (cudafx_median (&src, &dst, &p, &o) == CUDAFX_OK, "%s", cudafx_error_message ());
            int out = 0, differ = 0;
            for (int y = 0; y < h; y++)
              for (int x = 0; x < w; x++)
                for (int c = 0; c < ch; c++)
                  {
                    double a = harness_get (&dst, x, y, c), b = harness_get (&want, x, y, c);
                    out += !isfinite (a);
                    differ += isnan (b) ? !isnan (a) : a != b;
                  }
            CHECK (out == in && !differ, "%dx%d c%d r%d p%g %s: %d non-finite values out of %d, %d values off",
                   w, h, ch, p.radius, p.percentile, shape ? "circle" : "square", out, in, differ);
            harness_image_free (&src);
            harness_image_free (&dst);
            harness_image_free (&want);
          }
}

/* Radius beyond the image, odd percentiles, many channels: histogram path. */
TEST (median_large_radius)
{
  harness_rng rng = { 7 };
  static const double percentiles[] = { 0, 12.5, 50, 99, 100 };
  for (int shape = 0; shape < 2; shape++)
    for (int type = 0; type < 2; type++)
      for (int pi = 0; pi < 5; pi++)
        {
          cudafx_median_params p = { 40, percentiles[pi], shape };
          check_case (7, 5, 3, type, &p, 3, &rng, pi % 3);
        }
  cudafx_median_params p = { 100, 50, CUDAFX_SHAPE_CIRCLE };
  check_case (3, 2, 4, CUDAFX_F32, &p, 2, &rng, 1);
}

/* The k-th smallest of v[0..n) (Hoare's selection; reorders v). */
static double
select_kth (double *v, int n, int k)
{
  int lo = 0, hi = n - 1;
  while (lo < hi)
    {
      double pivot = v[(lo + hi) / 2];
      int i = lo, j = hi;
      while (i <= j)
        {
          while (v[i] < pivot)
            i++;
          while (v[j] > pivot)
            j--;
          if (i <= j)
            {
              double t = v[i];
              v[i++] = v[j];
              v[j--] = t;
            }
        }
      if (k <= j)
        hi = j;
      else if (k >= i)
        lo = i;
      else
        break;
    }
  return v[k];
}

/* Images wider than several tiles of the selection network (1024 bytes a
 * row tile: 64 px of 4-channel f32, 341 of RGB u8, 1024 of grey u8), than
 * several strips of the column histograms (768 elements less the window,
 * 32 px at least: r = 80 on RGBA gives the narrowest), and taller than the
 * threads' row chunks, on every path (network r <= 3; column histograms for
 * u8 squares; Huang's histogram for discs and f32). The oracle is checked
 * at every element of the pixels with (3x + 7y) % every == 0. */
TEST (median_crosses_tiles_and_strips)
{
  static const struct { int w, h, channels; cudafx_type type; int r; double pct; cudafx_shape shape; int every; } cases[] = {
    { 200, 9, 4, CUDAFX_F32, 3, 50, CUDAFX_SHAPE_SQUARE, 1 },    /* network, 64 px tiles */
    { 1100, 6, 3, CUDAFX_U8, 2, 37.5, CUDAFX_SHAPE_CIRCLE, 1 },  /* network, 341 px tiles */
    { 2100, 4, 1, CUDAFX_U8, 1, 50, CUDAFX_SHAPE_SQUARE, 1 },    /* network, 1024 px tiles */
    { 150, 5, 4, CUDAFX_U8, 80, 50, CUDAFX_SHAPE_SQUARE, 7 },    /* columns, 32 px strips */
    { 500, 30, 3, CUDAFX_U8, 10, 70, CUDAFX_SHAPE_SQUARE, 5 },   /* columns, 236 px strips */
    { 300, 70, 2, CUDAFX_F32, 6, 50, CUDAFX_SHAPE_SQUARE, 5 },   /* Huang on f32 ranks */
    { 260, 40, 3, CUDAFX_U8, 8, 25, CUDAFX_SHAPE_CIRCLE, 5 },    /* Huang, disc */
  };
  harness_rng rng = { 2024 };
  for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
    {
      const int w = cases[ci].w, h = cases[ci].h, ch = cases[ci].channels, r = cases[ci].r;
      cudafx_image src = harness_image_new (w, h, ch, ch == 4, cases[ci].type, 4 * ch);
      cudafx_image dst = harness_image_new (w, h, ch, ch == 4, cases[ci].type, 0);
      fill (&src, &rng, ci % 2);
      cudafx_median_params p = { r, cases[ci].pct, cases[ci].shape };
      cudafx_options o = harness_options ();
      o.threads = 3;
      cudafx_status s = cudafx_median (&src, &dst, &p, &o);
      CHECK (s == CUDAFX_OK, "case %zu: status %d (%s)", ci, s, cudafx_error_message ());
      double *win = malloc ((size_t) (2 * r + 1) * (2 * r + 1) * sizeof *win);
      for (int y = 0; y < h && !s && harness_failures () < 5; y++)
        for (int x = 0; x < w; x++)
          {
            if ((3 * x + 7 * y) % cases[ci].every)
              continue;
            for (int c = 0; c < ch; c++)
              {
                int n = 0;
                for (int dy = -r; dy <= r; dy++)
                  for (int dx = -r; dx <= r; dx++)
                    if (p.shape == CUDAFX_SHAPE_SQUARE || dx * dx + dy * dy <= r * r)
                      win[n++] = harness_get (&src, clamp (x + dx, 0, w - 1), clamp (y + dy, 0, h - 1), c);
                double want = select_kth (win, n, (int) lround (p.percentile / 100 * (n - 1)));
                CHECK (harness_get (&dst, x, y, c) == want, "case %zu %dx%d c%d r%d: (%d,%d,%d) %g, oracle %g",
                       ci, w, h, ch, r, x, y, c, harness_get (&dst, x, y, c), want);
              }
          }
      free (win);
      harness_image_free (&src);
      harness_image_free (&dst);
    }
}

TEST (median_threads_do_not_matter)
{
  harness_rng rng = { 3 };
  for (int type = 0; type < 2; type++)
    for (int r = 1; r <= 8; r += 7)
      {
        cudafx_image src = harness_image_new (67, 45, 3, 0, type, 4);
        cudafx_image a = harness_image_new (67, 45, 3, 0, type, 0);
        cudafx_image b = harness_image_new (67, 45, 3, 0, type, 0);
        harness_image_random (&src, &rng);
        cudafx_median_params p = { r, 37.5, CUDAFX_SHAPE_CIRCLE };
        cudafx_options o = harness_options ();
        o.threads = 1;
        cudafx_status s1 = cudafx_median (&src, &a, &p, &o);
        o.threads = 7;
        cudafx_status s2 = cudafx_median (&src, &b, &p, &o);
        CHECK (!s1 && !s2 && harness_max_diff (&a, &b) == 0, "r%d type %d differs", r, type);
        harness_image_free (&src);
        harness_image_free (&a);
        harness_image_free (&b);
      }
}

TEST (median_constant_stays_constant)
{
  for (int type = 0; type < 2; type++)
    for (int r = 1; r <= 12; r += 11)
      {
        cudafx_image src = harness_image_new (20, 11, 4, 1, type, 0);
        cudafx_image dst = harness_image_new (20, 11, 4, 1, type, 0);
        for (int y = 0; y < 11; y++)
          for (int x = 0; x < 20; x++)
            for (int c = 0; c < 4; c++)
              harness_set (&src, x, y, c, 17 + 50 * c);
        cudafx_median_params p = { r, 80, CUDAFX_SHAPE_SQUARE };
        cudafx_options o = harness_options ();
        CHECK (cudafx_median (&src, &dst, &p, &o) == CUDAFX_OK, "status");
        CHECK (harness_max_diff (&src, &dst) == 0, "r%d type %d: constant changed", r, type);
        harness_image_free (&src);
        harness_image_free (&dst);
      }
}

static void
expect_invalid (const cudafx_image *src, cudafx_image *dst, const cudafx_median_params *p,
                const char *name)
{
  cudafx_options o = harness_options ();
  cudafx_status s = cudafx_median (src, dst, p, &o);
  CHECK (s == CUDAFX_ERR_INVALID_ARG, "%s: status %d", name, s);
  CHECK (strstr (cudafx_error_message (), name) != NULL, "%s: message \"%s\"", name,
         cudafx_error_message ());
}

TEST (median_invalid_arguments)
{
  cudafx_image src = harness_image_new (8, 8, 3, 0, CUDAFX_U8, 0);
  cudafx_image dst = harness_image_new (8, 8, 3, 0, CUDAFX_U8, 0);
  cudafx_image small = harness_image_new (8, 7, 3, 0, CUDAFX_U8, 0);
  cudafx_image f32 = harness_image_new (8, 8, 3, 0, CUDAFX_F32, 0);
  harness_rng rng = { 1 };
  harness_image_random (&src, &rng);
  cudafx_median_params p;
  cudafx_median_params_init (&p);
  static const int radii[] = { 0, 101, -3 };
  for (int i = 0; i < 3; i++)
    {
      cudafx_median_params q = p;
      q.radius = radii[i];
      expect_invalid (&src, &dst, &q, "radius");
    }
  static const double percentiles[] = { -1, 100.5, NAN };
  for (int i = 0; i < 3; i++)
    {
      cudafx_median_params q = p;
      q.percentile = percentiles[i];
      expect_invalid (&src, &dst, &q, "percentile");
    }
  cudafx_median_params q = p;
  q.shape = 2;
  expect_invalid (&src, &dst, &q, "shape");
  expect_invalid (&src, &dst, NULL, "params");
  expect_invalid (NULL, &dst, &p, "source");
  expect_invalid (&src, NULL, &p, "destination");
  cudafx_options o = harness_options ();
  CHECK (cudafx_median (&src, &small, &p, &o) == CUDAFX_ERR_INVALID_ARG, "size mismatch accepted");
  CHECK (cudafx_median (&src, &f32, &p, &o) == CUDAFX_ERR_INVALID_ARG, "type mismatch accepted");
  CHECK (cudafx_median (&src, &src, &p, &o) == CUDAFX_ERR_INVALID_ARG, "in-place accepted");
  harness_image_free (&src);
  harness_image_free (&dst);
  harness_image_free (&small);
  harness_image_free (&f32);
}
