/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Non-local means: the engine against a brute-force oracle (direct loops over
 * search window and patch, same formula as core/nlmeans.c's header), the
 * noise estimator, automatic mode, properties and argument checks. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double
clamped (const cudafx_image *img, int x, int y, int c)
{
  x = x < 0 ? 0 : x >= img->width ? img->width - 1 : x;
  y = y < 0 ? 0 : y >= img->height ? img->height - 1 : y;
  return harness_get (img, x, y, c);
}

/* A value as the patches read it: non-finite as 0 (core/nlmeans.h). */
static double
known (const cudafx_image *img, int x, int y, int c)
{
  double v = clamped (img, x, y, c);
  return isfinite (v) ? v : 0;
}

/* Whether one of the n colour values at (x, y) is not finite: such a pixel
 * is no candidate. */
static int
unknown_pixel (const cudafx_image *img, int x, int y, int n)
{
  for (int c = 0; c < n; c++)
    if (!isfinite (clamped (img, x, y, c)))
      return 1;
  return 0;
}

/* What a run computes with: the manual parameters, or what auto chose. */
typedef struct {
  double h;
  int    P, S;
  double s;           /* sigma subtracted in the weight (0 in manual mode) */
  double patch_sigma; /* Gaussian patch weights' std dev, 0: flat */
  int    centre_max;
} nlm_ref;

static nlm_ref
ref_manual (double h, int P, int S)
{
  return (nlm_ref) { h, P, S, 0, 0, 0 };
}

/* The sigma automatic mode's plan subtracts for an estimate of sigma: 10%
 * higher where the table's first row (sigma <= 15) applies (core/nlmeans.c's
 * flat_plan). */
static double
plan_sigma (double sigma)
{
  return sigma <= 15 ? 1.1 * sigma : sigma;
}

static nlm_ref
ref_from_info (const cudafx_nlmeans_info *info)
{
  return (nlm_ref) { info->h, info->patch_radius, info->search_radius, plan_sigma (info->sigma),
                     info->patch_sigma, info->centre_max };
}

/* Expected values (0..255 scale) of all channels at (x, y) into out. */
static void
oracle (const cudafx_image *img, int x, int y, const nlm_ref *r, double *out)
{
  const int n = img->channels - (img->has_alpha ? 1 : 0), P = r->P, S = r->S;
  double g[11], gsum = 0;
  for (int k = -P; k <= P; k++)
    gsum += g[k + P] = r->patch_sigma > 0 ? exp (-k * k / (2 * r->patch_sigma * r->patch_sigma)) : 1;
  double num[4] = { 0 }, den = 0, wmax = 0;
  for (int dy = -S; dy <= S; dy++)
    for (int dx = -S; dx <= S; dx++)
      {
        if (!dx && !dy)
          continue;
        double d2 = 0;
        for (int ky = -P; ky <= P; ky++)
          for (int kx = -P; kx <= P; kx++)
            for (int k = 0; k < n; k++)
              {
                double a = known (img, x + kx, y + ky, k);
                double b = known (img, x + dx + kx, y + dy + ky, k);
                d2 += g[ky + P] * g[kx + P] * (a - b) * (a - b);
              }
        d2 /= n * gsum * gsum;
        double w = exp (-fmax (d2 - 2 * r->s * r->s, 0) / (r->h * r->h));
        if (unknown_pixel (img, x + dx, y + dy, n))
          w = 0;
        for (int c = 0; c < n; c++)
          num[c] += w * known (img, x + dx, y + dy, c);
        den += w;
        wmax = fmax (wmax, w);
      }
  double wc = r->centre_max && wmax > 0 ? wmax : 1;
  for (int c = 0; c < img->channels; c++)
    out[c] = c < n && isfinite (harness_get (img, x, y, c))
             ? (num[c] + wc * harness_get (img, x, y, c)) / (den + wc) : harness_get (img, x, y, c);
}

/* dst against the oracle over the pixels with (3x + 7y) % every == 0:
 * the largest difference (0..255 scale; alpha must match exactly, counted
 * as infinite otherwise) and the mean distance of the oracle's colours from
 * the source's, how much the filter should have changed the image. */
typedef struct {
  double diff;      /* largest |dst - oracle| */
  double moved;     /* mean |oracle - src| over the colour elements compared */
  double moved_max; /* largest |oracle - src|: dst = src passes only below the tolerance */
} oracle_cmp;

static oracle_cmp
oracle_compare_some (const cudafx_image *src, const cudafx_image *dst, const nlm_ref *r, int every)
{
  oracle_cmp m = { 0, 0, 0 };
  double want[4], moved = 0;
  long count = 0;
  int n = src->channels - (src->has_alpha ? 1 : 0);
  for (int y = 0; y < src->height; y++)
    for (int x = 0; x < src->width; x++)
      {
        if ((3 * x + 7 * y) % every)
          continue;
        oracle (src, x, y, r, want);
        for (int c = 0; c < src->channels; c++)
          {
            /* a non-finite source value must come out as it went in */
            double got = harness_get (dst, x, y, c);
            double d = isfinite (want[c]) ? fabs (got - want[c])
                     : (isnan (want[c]) ? isnan (got) : got == want[c]) ? 0 : INFINITY;
            if (c >= n && d != 0)
              d = INFINITY;
            if (!(d <= m.diff))
              m.diff = isnan (d) ? INFINITY : d;
            if (c < n && isfinite (want[c]))
              {
                moved += fabs (want[c] - harness_get (src, x, y, c));
                m.moved_max = fmax (m.moved_max, fabs (want[c] - harness_get (src, x, y, c)));
                count++;
              }
          }
      }
  m.moved = count ? moved / count : 0;
  return m;
}

/* How far the engine may be from the oracle (0..255 scale): its float
 * arithmetic (weights from nlmeans_exp_neg, relative error below 1e-5,
 * float sums) against double, F32_TOLERANCE in f32 units (0..1 scale;
 * measured: 1.5e-6); u8 adds the rounding to an integer. */
#define F32_TOLERANCE 1e-5
static double
tolerance (cudafx_type type)
{
  return type == CUDAFX_F32 ? F32_TOLERANCE * 255 : 0.5 + F32_TOLERANCE * 255;
}

/* Padding bytes after each row still hold the poison. */
static int
padding_intact (const cudafx_image *img)
{
  size_t row = (size_t) img->width * img->channels * cudafx_type_size (img->type);
  for (int y = 0; y < img->height; y++)
    for (size_t i = row; i < img->stride; i++)
      if (((const unsigned char *) img->data)[(size_t) y * img->stride + i] != 0xA5)
        return 0;
  return 1;
}

static cudafx_nlmeans_params
manual (double h, int P, int S)
{
  cudafx_nlmeans_params p;
  cudafx_nlmeans_params_init (&p);
  p.automatic = 0;
  p.h = h;
  p.patch_radius = P;
  p.search_radius = S;
  return p;
}

static const struct { int channels, alpha; } layouts[] = {
  { 1, 0 }, { 2, 1 }, { 3, 0 }, { 4, 1 }, { 2, 0 }, { 4, 0 },
};
static const int threads[] = { 1, 2, 3, 7 };

/* A smooth image with a small motif repeated every 2 columns and 2 rows,
 * both of an amplitude that grows with h (up to h = 20), plus Gaussian noise
 * of 0.6 h, clipped to 0..255: patches that repeat within any search window
 * and noise that the weights average away (similar patches weigh about
 * exp (-2 * 0.6^2) = 0.5), so the filter changes the image by a measurable
 * amount. On uniform random data every weight underflows and the result is
 * the input. Alpha random. */
static void
fill_structured (cudafx_image *img, double h, harness_rng *rng)
{
  static const double motif[2][2] = { { 0, 30 }, { -25, 15 } };
  const double a = fmin (1, h / 20);
  const int colours = img->channels - (img->has_alpha ? 1 : 0);
  harness_image_poison (img);
  for (int y = 0; y < img->height; y++)
    for (int x = 0; x < img->width; x++)
      for (int c = 0; c < img->channels; c++)
        {
          double g = harness_gauss (rng);
          double val = 128 + a * (50 * sin (x / 7.0 + 1.3 * c) * cos (y / 5.0) + motif[y % 2][x % 2])
                       + 0.6 * h * g;
          harness_set (img, x, y, c, c < colours ? fmin (255, fmax (0, val)) : harness_rand (rng) % 256);
        }
}

TEST (nlmeans_matches_oracle)
{
  static const struct { int w, h; } sizes[] = { { 17, 13 }, { 1, 1 }, { 1, 9 }, { 9, 1 }, { 13, 7 } };
  /* h, patch and search radius */
  static const struct { double h; int P, S; } params[] = {
    { 10, 1, 2 }, { 40, 2, 3 }, { 3, 1, 1 }, { 12, 3, 5 }, { 20, 4, 4 }, { 30, 5, 6 },
  };
  const int n_params = sizeof params / sizeof *params;
  harness_rng rng = { 12345 };
  int run = 0;
  for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
    for (size_t li = 0; li < sizeof layouts / sizeof *layouts; li++)
      for (int type = 0; type < 2; type++)
        {
          const size_t pad = (run % 3) * 4;
          const int ch = layouts[li].channels, alpha = layouts[li].alpha;
          const int w = sizes[si].w, hgt = sizes[si].h;
          const int pi = (run + si) % n_params;
          cudafx_image src = harness_image_new (w, hgt, ch, alpha, type, pad);
          cudafx_image dst = harness_image_new (w, hgt, ch, alpha, type, pad + 4);
          fill_structured (&src, params[pi].h, &rng);
          harness_image_poison (&dst);
          cudafx_nlmeans_params p = manual (params[pi].h, params[pi].P, params[pi].S);
          cudafx_options o = harness_options ();
          o.threads = threads[run % 4];
          cudafx_status s = cudafx_nlmeans (&src, &dst, &p, &o, NULL);
          CHECK (s == CUDAFX_OK, "status %d: %s", s, cudafx_error_message ());
          if (s == CUDAFX_OK)
            {
              nlm_ref r = ref_manual (p.h, p.patch_radius, p.search_radius);
              oracle_cmp m = oracle_compare_some (&src, &dst, &r, 1);
              CHECK (m.diff <= tolerance (type), "%dx%d ch %d alpha %d %s h %g P %d S %d: off by %g",
                     w, hgt, ch, alpha, type ? "f32" : "u8", p.h, p.patch_radius, p.search_radius,
                     m.diff);
              /* dst = src must fail every case where a pixel has neighbours */
              CHECK (w * hgt == 1 || m.moved_max > tolerance (type),
                     "%dx%d ch %d %s h %g P %d S %d: the oracle changes no value by more than %g",
                     w, hgt, ch, type ? "f32" : "u8", p.h, p.patch_radius, p.search_radius,
                     m.moved_max);
              CHECK (padding_intact (&dst), "padding written");
            }
          harness_image_free (&src);
          harness_image_free (&dst);
          run++;
        }
}

/* Three tiles across and three down (256 x 64 at most): tile seams, inner
 * and outer halos; the oracle on every fourth pixel of each row. */
TEST (nlmeans_tiles_match_oracle_and_ignore_thread_count)
{
  harness_rng rng = { 777 };
  for (int type = 0; type < 2; type++)
    {
      cudafx_image src = harness_image_new (530, 140, 3, 0, type, 8);
      cudafx_image ref = harness_image_new (530, 140, 3, 0, type, 0);
      cudafx_image dst = harness_image_new (530, 140, 3, 0, type, 0);
      harness_image_random (&src, &rng);
      /* Smooth content plus noise: weights neither all 1 nor all 0. */
      for (int y = 0; y < 140; y++)
        for (int x = 0; x < 530; x++)
          for (int c = 0; c < 3; c++)
            harness_set (&src, x, y, c, 128 + 80 * sin (x / 9.0 + c) * cos (y / 7.0)
                                        + (harness_uniform (&rng) - 0.5) * 40);
      cudafx_nlmeans_params p = manual (15, 1, 2);
      for (size_t t = 0; t < sizeof threads / sizeof *threads; t++)
        {
          cudafx_options o = harness_options ();
          o.threads = threads[t];
          CHECK (cudafx_nlmeans (&src, t ? &dst : &ref, &p, &o, NULL) == CUDAFX_OK, "%s",
                 cudafx_error_message ());
          if (t)
            CHECK (harness_max_diff (&ref, &dst) == 0, "threads %d differ from 1", threads[t]);
        }
      nlm_ref r = ref_manual (p.h, p.patch_radius, p.search_radius);
      oracle_cmp m = oracle_compare_some (&src, &ref, &r, 4);
      CHECK (m.diff <= tolerance (type), "%s: off by %g", type ? "f32" : "u8", m.diff);
      CHECK (m.moved >= 1.0, "%s: the oracle changes the image by only %g", type ? "f32" : "u8", m.moved);
      harness_image_free (&src);
      harness_image_free (&ref);
      harness_image_free (&dst);
    }
}

TEST (nlmeans_constant_image_stays_constant)
{
  for (int type = 0; type < 2; type++)
    for (int automatic = 0; automatic < 2; automatic++)
      {
        cudafx_image src = harness_image_new (23, 19, 4, 1, type, 4);
        cudafx_image dst = harness_image_new (23, 19, 4, 1, type, 4);
        for (int y = 0; y < 19; y++)
          for (int x = 0; x < 23; x++)
            for (int c = 0; c < 4; c++)
              harness_set (&src, x, y, c, c == 3 ? 200 : 77);
        cudafx_nlmeans_params p = manual (10, 2, 5);
        p.automatic = automatic;
        cudafx_options o = harness_options ();
        CHECK (cudafx_nlmeans (&src, &dst, &p, &o, NULL) == CUDAFX_OK, "%s", cudafx_error_message ());
        CHECK (harness_max_diff (&src, &dst) <= (type ? 1e-3 : 0), "%s auto %d: changed by %g",
               type ? "f32" : "u8", automatic, harness_max_diff (&src, &dst));
        harness_image_free (&src);
        harness_image_free (&dst);
      }
}

/* Flat grey 128 plus Gaussian noise of standard deviation sigma (Box-Muller). */
static void
fill_noisy_flat (cudafx_image *img, double sigma, harness_rng *rng)
{
  for (int y = 0; y < img->height; y++)
    for (int x = 0; x < img->width; x++)
      for (int c = 0; c < img->channels; c++)
        {
          double g = harness_gauss (rng);
          harness_set (img, x, y, c, 128 + sigma * g);
        }
}

TEST (nlmeans_estimator)
{
  harness_rng rng = { 99 };
  cudafx_options o = harness_options ();
  cudafx_nlmeans_info info;
  for (int type = 0; type < 2; type++)
    {
      cudafx_image img = harness_image_new (200, 150, 3, 0, type, 4);
      fill_noisy_flat (&img, 0, &rng);
      CHECK (cudafx_nlmeans_estimate (&img, &o, &info) == CUDAFX_OK, "%s", cudafx_error_message ());
      CHECK (info.sigma < 0.01, "flat image: sigma %g", info.sigma);
      fill_noisy_flat (&img, 20, &rng);
      CHECK (cudafx_nlmeans_estimate (&img, &o, &info) == CUDAFX_OK, "%s", cudafx_error_message ());
      CHECK (fabs (info.sigma - 20) < 1.0, "%s noise 20: sigma %g", type ? "f32" : "u8", info.sigma);
      CHECK (info.patch_radius == 2 && info.search_radius == 10 && fabs (info.h - 0.55 * info.sigma) < 1e-9
             && info.patch_sigma == 1.5 && info.centre_max == 1,
             "colour sigma 20: P %d S %d h %g patch sigma %g centre max %d", info.patch_radius,
             info.search_radius, info.h, info.patch_sigma, info.centre_max);
      /* A dark left half, clipped at 0 (noise there is mostly cut off), must
       * not pull the estimate down. */
      for (int y = 0; y < 150; y++)
        for (int x = 0; x < 100; x++)
          for (int c = 0; c < 3; c++)
            harness_set (&img, x, y, c, fmax (0, harness_get (&img, x, y, c) - 123));
      CHECK (cudafx_nlmeans_estimate (&img, &o, &info) == CUDAFX_OK, "%s", cudafx_error_message ());
      CHECK (fabs (info.sigma - 20) < 1.5, "%s noise 20, half clipped: sigma %g",
             type ? "f32" : "u8", info.sigma);
      harness_image_free (&img);
    }
  cudafx_image tiny = harness_image_new (2, 2, 1, 0, CUDAFX_U8, 0);
  memset (tiny.data, 9, 4);
  CHECK (cudafx_nlmeans_estimate (&tiny, &o, &info) == CUDAFX_OK && info.sigma == 0, "2x2 image");
  CHECK (cudafx_nlmeans_estimate (&tiny, &o, NULL) == CUDAFX_ERR_INVALID_ARG &&
         strstr (cudafx_error_message (), "info"), "NULL info accepted");
  harness_image_free (&tiny);
}

TEST (nlmeans_auto_fills_info_and_matches_oracle)
{
  harness_rng rng = { 4242 };
  static const struct { int channels, alpha; double noise; int P, S; double k, patch_sigma; int centre_max; } cases[] = {
    { 2, 1, 20, 2, 10, 0.40, 0, 0 },   /* grey, sigma 15..30: IPOL */
    { 3, 0, 10, 1, 10, 0.55, 0, 0 },   /* colour, sigma <= 15: IPOL */
    { 3, 0, 20, 2, 10, 0.55, 1.5, 1 }, /* colour, sigma 15..30: Gaussian patch, centre max */
    { 4, 1, 40, 2, 10, 0.50, 1.5, 1 }, /* colour, sigma > 30 */
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    {
      cudafx_image src = harness_image_new (26, 21, cases[i].channels, cases[i].alpha, CUDAFX_U8, 0);
      cudafx_image dst = harness_image_new (26, 21, cases[i].channels, cases[i].alpha, CUDAFX_U8, 0);
      fill_noisy_flat (&src, cases[i].noise, &rng);
      cudafx_nlmeans_params p = manual (10, 1, 1);
      p.automatic = 1;
      cudafx_nlmeans_info info = { 0 };
      cudafx_options o = harness_options ();
      o.threads = 2;
      CHECK (cudafx_nlmeans (&src, &dst, &p, &o, &info) == CUDAFX_OK, "%s", cudafx_error_message ());
      CHECK (fabs (info.sigma - cases[i].noise) < 0.25 * cases[i].noise, "sigma %g", info.sigma);
      CHECK (info.patch_radius == cases[i].P && info.search_radius == cases[i].S &&
             fabs (info.h - cases[i].k * plan_sigma (info.sigma)) < 1e-9 &&
             info.patch_sigma == cases[i].patch_sigma && info.centre_max == cases[i].centre_max,
             "case %zu: P %d S %d h %g patch sigma %g centre max %d", i, info.patch_radius,
             info.search_radius, info.h, info.patch_sigma, info.centre_max);
      nlm_ref r = ref_from_info (&info);
      oracle_cmp cmp = oracle_compare_some (&src, &dst, &r, 1);
      CHECK (cmp.diff <= tolerance (CUDAFX_U8), "case %zu: off by %g", i, cmp.diff);
      CHECK (cmp.moved >= 1.0, "case %zu: the oracle changes the image by only %g", i, cmp.moved);

      /* Manual mode reports its own parameters, and the estimate when asked
       * (report_noise), not otherwise. */
      for (int report = 0; report < 2; report++)
        {
          cudafx_nlmeans_info m = { 0 };
          p.automatic = 0;
          p.report_noise = report;
          CHECK (cudafx_nlmeans (&src, &dst, &p, &o, &m) == CUDAFX_OK, "%s", cudafx_error_message ());
          CHECK (m.sigma == (report ? info.sigma : 0) && m.h == 10 && m.patch_radius == 1 &&
                 m.search_radius == 1 && m.patch_sigma == 0 && m.centre_max == 0,
                 "manual info (report_noise %d): sigma %g h %g P %d S %d patch sigma %g centre max %d", report,
                 m.sigma, m.h, m.patch_radius, m.search_radius, m.patch_sigma, m.centre_max);
        }
      harness_image_free (&src);
      harness_image_free (&dst);
    }
}

/* Automatic mode's Gaussian patches and centre weight across tiles (256 x 64
 * at most), any thread count, on u8 and f32, on a sample of the pixels. */
TEST (nlmeans_auto_tiles_match_oracle)
{
  harness_rng rng = { 31337 };
  for (int type = 0; type < 2; type++)
    {
      cudafx_image src = harness_image_new (290, 75, 3, 0, type, 4);
      cudafx_image ref = harness_image_new (290, 75, 3, 0, type, 0);
      cudafx_image dst = harness_image_new (290, 75, 3, 0, type, 0);
      fill_noisy_flat (&src, 25, &rng);
      for (int y = 0; y < 75; y++)
        for (int x = 0; x < 290; x++)
          for (int c = 0; c < 3; c++)
            harness_set (&src, x, y, c, harness_get (&src, x, y, c) + 60 * sin (x / 11.0 + c) * cos (y / 6.0));
      cudafx_nlmeans_params p = manual (10, 1, 1);
      p.automatic = 1;
      cudafx_nlmeans_info info = { 0 };
      for (size_t t = 0; t < sizeof threads / sizeof *threads; t++)
        {
          cudafx_options o = harness_options ();
          o.threads = threads[t];
          CHECK (cudafx_nlmeans (&src, t ? &dst : &ref, &p, &o, &info) == CUDAFX_OK, "%s",
                 cudafx_error_message ());
          if (t)
            CHECK (harness_max_diff (&ref, &dst) == 0, "threads %d differ from 1", threads[t]);
        }
      CHECK (info.patch_sigma > 0 && info.centre_max, "auto chose P %d patch sigma %g centre max %d",
             info.patch_radius, info.patch_sigma, info.centre_max);
      nlm_ref r = ref_from_info (&info);
      oracle_cmp m = oracle_compare_some (&src, &ref, &r, 11);
      CHECK (m.diff <= tolerance (type), "%s: off by %g", type ? "f32" : "u8", m.diff);
      CHECK (m.moved >= 1.0, "%s: the oracle changes the image by only %g", type ? "f32" : "u8", m.moved);
      harness_image_free (&src);
      harness_image_free (&ref);
      harness_image_free (&dst);
    }
}

/* A given sigma replaces the estimate and nothing else: with the image's own
 * estimate the result is the estimating run's, bit for bit; with another
 * sigma the parameters follow that sigma. */
TEST (nlmeans_auto_with_given_sigma)
{
  harness_rng rng = { 77 };
  cudafx_image src = harness_image_new (40, 30, 3, 0, CUDAFX_U8, 0);
  cudafx_image estimated = harness_image_new (40, 30, 3, 0, CUDAFX_U8, 0);
  cudafx_image given = harness_image_new (40, 30, 3, 0, CUDAFX_U8, 0);
  cudafx_options o = harness_options ();
  cudafx_nlmeans_params p = manual (10, 1, 1);
  cudafx_nlmeans_info first = { 0 }, second = { 0 };

  fill_noisy_flat (&src, 20, &rng);
  p.automatic = 1;
  CHECK (cudafx_nlmeans (&src, &estimated, &p, &o, &first) == CUDAFX_OK, "%s", cudafx_error_message ());
  p.sigma = first.sigma;
  CHECK (cudafx_nlmeans (&src, &given, &p, &o, &second) == CUDAFX_OK, "%s", cudafx_error_message ());
  CHECK (memcmp (estimated.data, given.data, estimated.stride * estimated.height) == 0,
         "given sigma %g: result differs from the estimating run", p.sigma);
  CHECK (second.sigma == first.sigma && second.h == first.h &&
         second.patch_radius == first.patch_radius && second.search_radius == first.search_radius,
         "info differs: sigma %g/%g h %g/%g", second.sigma, first.sigma, second.h, first.h);
  p.sigma = 40;
  CHECK (cudafx_nlmeans (&src, &given, &p, &o, &second) == CUDAFX_OK, "%s", cudafx_error_message ());
  CHECK (second.sigma == 40 && second.patch_radius == 2 && second.search_radius == 10,
         "sigma 40: P %d S %d", second.patch_radius, second.search_radius);
  p.sigma = -1;
  CHECK (cudafx_nlmeans (&src, &given, &p, &o, &second) == CUDAFX_ERR_INVALID_ARG &&
         strstr (cudafx_error_message (), "sigma"), "sigma -1 accepted: %s", cudafx_error_message ());
  harness_image_free (&src);
  harness_image_free (&estimated);
  harness_image_free (&given);
}

/* Correlated noise takes a larger h the more alike its colour channels'
 * noise is: 1.7 sigma up to a channel correlation of 0.3, 3.2 sigma from
 * 0.6 on, growing in between. White noise is not scaled by its channel
 * correlation, and takes a smaller h than correlated noise of its sigma. */
TEST (nlmeans_correlated_strength_follows_channel_correlation)
{
  harness_rng rng = { 78 };
  cudafx_image src = harness_image_new (40, 30, 3, 0, CUDAFX_U8, 0);
  cudafx_image dst = harness_image_new (40, 30, 3, 0, CUDAFX_U8, 0);
  cudafx_options o = harness_options ();
  cudafx_nlmeans_params p = manual (10, 1, 1);
  static const double corr[] = { 0.0, 0.3, 0.4, 0.5, 0.6, 0.9 };
  double h[6], white[2];

  fill_noisy_flat (&src, 2, &rng);
  p.automatic = 1;
  p.sigma = 2;
  p.noise.correlated = 1;
  for (int i = 0; i < 6; i++)
    {
      cudafx_nlmeans_info info = { 0 };
      p.noise.channel_corr = corr[i];
      CHECK (cudafx_nlmeans (&src, &dst, &p, &o, &info) == CUDAFX_OK, "%s", cudafx_error_message ());
      h[i] = info.h;
    }
  CHECK (h[0] == h[1] && h[4] == h[5], "h outside the ramp changes: %g %g, %g %g", h[0], h[1], h[4], h[5]);
  CHECK (h[1] < h[2] && h[2] < h[3] && h[3] < h[4], "h does not grow: %g %g %g %g", h[1], h[2], h[3], h[4]);
  CHECK (fabs (h[1] - 1.7 * 2) < 1e-9 && fabs (h[4] - 3.2 * 2) < 1e-9, "h %g at the bottom, %g at the top", h[1],
         h[4]);
  p.noise.correlated = 0;
  for (int i = 0; i < 2; i++)
    {
      cudafx_nlmeans_info info = { 0 };
      p.noise.channel_corr = i ? 0.9 : 0.0;
      CHECK (cudafx_nlmeans (&src, &dst, &p, &o, &info) == CUDAFX_OK, "%s", cudafx_error_message ());
      white[i] = info.h;
    }
  CHECK (white[0] == white[1] && white[0] < h[0], "white noise h %g %g (correlated %g)", white[0], white[1], h[0]);
  harness_image_free (&src);
  harness_image_free (&dst);
}

/* Non-finite values at fixed places of an f32 image: a NaN inside, +Inf
 * and -Inf on the edges, one channel of a colour pixel. Returns how many. */
static int
put_non_finite (cudafx_image *img)
{
  static const struct { int x, y, c; double v; } bad[] = {
    { 5, 4, 0, NAN }, { 0, 0, 0, INFINITY }, { 16, 12, 0, -INFINITY }, { 9, 8, 0, NAN }, { 10, 8, 0, NAN },
  };
  int n = 0;
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    if (bad[i].x < img->width && bad[i].y < img->height)
      {
        /* the last colour channel of the pixel (the first for grey) */
        int c = (bad[i].x + bad[i].y) % (img->channels - (img->has_alpha ? 1 : 0));
        harness_set (img, bad[i].x, bad[i].y, c, bad[i].v);
        n++;
      }
  return n;
}

/* Non-finite values stay where they are, and each only there; the finite
 * values around them are the oracle's, which reads them as 0 in the patches
 * and gives their pixels no weight. Automatic mode keeps them too. */
TEST (nlmeans_keeps_non_finite_values_to_themselves)
{
  for (size_t l = 0; l < sizeof layouts / sizeof *layouts; l++)
    {
      harness_rng rng = { 31 + l };
      cudafx_image src = harness_image_new (17, 13, layouts[l].channels, layouts[l].alpha, CUDAFX_F32, 8);
      cudafx_image dst = harness_image_new (17, 13, layouts[l].channels, layouts[l].alpha, CUDAFX_F32, 8);
      fill_structured (&src, 20, &rng);
      int bad = put_non_finite (&src);
      harness_image_poison (&dst);
      cudafx_nlmeans_params p = manual (20, 1, 3);
      cudafx_options o = harness_options ();
      CHECK (cudafx_nlmeans (&src, &dst, &p, &o, NULL) == CUDAFX_OK, "%s", cudafx_error_message ());
      nlm_ref r = ref_manual (20, 1, 3);
      oracle_cmp m = oracle_compare_some (&src, &dst, &r, 1);
      CHECK (m.diff <= tolerance (CUDAFX_F32) && m.moved_max > tolerance (CUDAFX_F32),
             "%d channels: %g from the oracle (which moves values by up to %g)", layouts[l].channels, m.diff,
             m.moved_max);
      int out = harness_count_non_finite (&dst);
      CHECK (out == bad, "%d channels: %d non-finite values out of %d", layouts[l].channels, out, bad);
      for (int y = 0; y < 13; y++)
        for (int x = 0; x < 17; x++)
          for (int c = 0; c < src.channels; c++)
            {
              double a = harness_get (&src, x, y, c), b = harness_get (&dst, x, y, c);
              if (!isfinite (a))
                CHECK (isnan (a) ? isnan (b) : a == b, "(%d, %d, %d): %g became %g", x, y, c, a, b);
            }
      cudafx_nlmeans_params pa;
      cudafx_nlmeans_params_init (&pa);
      CHECK (cudafx_nlmeans (&src, &dst, &pa, &o, NULL) == CUDAFX_OK, "%s", cudafx_error_message ());
      out = harness_count_non_finite (&dst);
      CHECK (out == bad, "automatic, %d channels: %d non-finite values out of %d", layouts[l].channels, out, bad);
      harness_image_free (&src);
      harness_image_free (&dst);
    }
}

static int
cancel_at_half (double fraction, void *user_data)
{
  double *last = user_data;
  *last = fraction;
  return fraction >= 0.5;
}

static int
record (double fraction, void *user_data)
{
  *(double *) user_data = fraction;
  return 0;
}

TEST (nlmeans_progress_and_cancel)
{
  harness_rng rng = { 5 };
  cudafx_image src = harness_image_new (300, 200, 3, 0, CUDAFX_U8, 0);
  cudafx_image dst = harness_image_new (300, 200, 3, 0, CUDAFX_U8, 0);
  harness_image_random (&src, &rng);
  cudafx_nlmeans_params p = manual (10, 1, 1);
  cudafx_options o = harness_options ();
  double last = 0;
  o.threads = 1;
  o.progress = record;
  o.user_data = &last;
  CHECK (cudafx_nlmeans (&src, &dst, &p, &o, NULL) == CUDAFX_OK, "%s", cudafx_error_message ());
  CHECK (last == 1.0, "progress ended at %g", last);
  o.progress = cancel_at_half;
  CHECK (cudafx_nlmeans (&src, &dst, &p, &o, NULL) == CUDAFX_ERR_CANCELLED, "not cancelled");
  CHECK (last >= 0.5 && last < 1.0, "cancelled at %g", last);
  harness_image_free (&src);
  harness_image_free (&dst);
}

TEST (nlmeans_rejects_invalid_arguments)
{
  cudafx_image src = harness_image_new (8, 8, 3, 0, CUDAFX_U8, 0);
  cudafx_image dst = harness_image_new (8, 8, 3, 0, CUDAFX_U8, 0);
  memset (src.data, 50, src.stride * 8);
  static const struct { double h; int P, S; const char *name; } bad[] = {
    { 0, 1, 10, "h" }, { 101, 1, 10, "h" }, { NAN, 1, 10, "h" },
    { 10, 0, 10, "patch-radius" }, { 10, 6, 10, "patch-radius" },
    { 10, 1, 0, "search-radius" }, { 10, 1, 21, "search-radius" },
  };
  cudafx_options o = harness_options ();
  for (int automatic = 0; automatic < 2; automatic++)
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
      {
        harness_image_poison (&dst);
        cudafx_nlmeans_params p = manual (bad[i].h, bad[i].P, bad[i].S);
        p.automatic = automatic;
        CHECK (cudafx_nlmeans (&src, &dst, &p, &o, NULL) == CUDAFX_ERR_INVALID_ARG,
               "%s h %g P %d S %d accepted", bad[i].name, bad[i].h, bad[i].P, bad[i].S);
        CHECK (strstr (cudafx_error_message (), bad[i].name) != NULL, "message '%s' lacks %s",
               cudafx_error_message (), bad[i].name);
        CHECK (((unsigned char *) dst.data)[0] == 0xA5, "dst written on error");
      }
  cudafx_nlmeans_params p = manual (10, 1, 1);
  CHECK (cudafx_nlmeans (&src, &dst, NULL, &o, NULL) == CUDAFX_ERR_INVALID_ARG &&
         strstr (cudafx_error_message (), "params"), "NULL params accepted");
  CHECK (cudafx_nlmeans (NULL, &dst, &p, &o, NULL) == CUDAFX_ERR_INVALID_ARG &&
         strstr (cudafx_error_message (), "source"), "NULL source accepted");
  CHECK (cudafx_nlmeans (&src, &src, &p, &o, NULL) == CUDAFX_ERR_INVALID_ARG &&
         strstr (cudafx_error_message (), "overlaps"), "in-place accepted");
  harness_image_free (&src);
  harness_image_free (&dst);
}
