/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Non-local means on the CUDA backend against the CPU reference, run by
 * `make check-gpu`: the noise estimate gives the same sigma bit for bit (so
 * the same parameters), over images with clipped areas, grey and colour, u8
 * and f32, sizes down to 2x2, 3x3 and 1xN, whole and striped under a
 * device-memory cap; the filter stays within 1 (0..255 scale) of the CPU on
 * u8, with few values off by one, and within 2e-5 (0..1 scale) on f32 for
 * every kernel kind (u8 flat and Gaussian patches, f32), channel layout,
 * patch radius 1..5, search radii up to 20, tiles, stripes and chunks;
 * under camera noise the same noise model and the output within 1 (u8) or
 * 1/255 (f32) of the CPU, few values further than the above, the noise-model
 * fit's histograms (a backend operation, core/backend.h) the same counts. */
#include "../unit/harness.h"

/* The backends' tables: test-gpu is built only with nvcc. */
#ifndef CUDAFX_HAVE_CUDA
#define CUDAFX_HAVE_CUDA 1
#endif
#include "../../core/backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Smooth colours plus Gaussian noise of sigma, clipped to the range: a
 * dark corner (clipped at 0) and a bright band (clipped at 255); alpha random. */
static void
fill_noisy (cudafx_image *img, double sigma, harness_rng *r)
{
  const int colours = img->channels - img->has_alpha;
  for (int y = 0; y < img->height; y++)
    for (int x = 0; x < img->width; x++)
      for (int c = 0; c < img->channels; c++)
        {
          double g = harness_gauss (r);
          double base = 128 + 70 * sin (x / 13.0 + c) * cos (y / 9.0);
          if (x < img->width / 4 && y < img->height / 3)
            base = 5;
          else if (y % 40 >= 30)
            base = 250;
          double val = c < colours ? base + sigma * g : harness_rand (r) % 256;
          val = val < 0 ? 0 : val > 255 ? 255 : val;
          /* f32 keeps fractions; u8 rounds in harness_set */
          harness_set (img, x, y, c, val);
        }
}

static cudafx_options
gpu_options (cudafx_report *report)
{
  cudafx_options o = harness_cpu_options ();
  o.backend = CUDAFX_BACKEND_CUDA;
  memset (report, 0, sizeof *report);
  o.report = report;
  return o;
}

static int
record (double fraction, void *user_data)
{
  *(double *) user_data = fraction;
  return 0;
}

static const struct { int channels, alpha; } layouts[] = {
  { 1, 0 }, { 2, 1 }, { 3, 0 }, { 4, 1 }, { 2, 0 }, { 4, 0 },
};

/* cudafx_nlmeans_estimate on both backends: the same info, bit for bit. */
static void
compare_estimate (const cudafx_image *img, const char *what)
{
  cudafx_nlmeans_info want, got;
  cudafx_report report;
  cudafx_options cpu = harness_cpu_options (), gpu = gpu_options (&report);
  cpu.threads = 3;
  cudafx_status s1 = cudafx_nlmeans_estimate (img, &cpu, &want);
  cudafx_status s2 = cudafx_nlmeans_estimate (img, &gpu, &got);
  CHECK (s1 == CUDAFX_OK && s2 == CUDAFX_OK, "%s: status %d/%d (%s)", what, s1, s2, cudafx_error_message ());
  if (s1 || s2)
    return;
  CHECK (report.backend_used == CUDAFX_BACKEND_CUDA, "%s: ran on backend %d", what, report.backend_used);
  CHECK (!memcmp (&want.sigma, &got.sigma, sizeof want.sigma) && want.h == got.h &&
         want.patch_radius == got.patch_radius && want.search_radius == got.search_radius &&
         want.patch_sigma == got.patch_sigma && want.centre_max == got.centre_max,
         "%s %dx%d c%d%s %s: sigma %.17g on the CPU, %.17g on the GPU", what, img->width, img->height,
         img->channels, img->has_alpha ? "+alpha" : "", img->type == CUDAFX_U8 ? "u8" : "f32",
         want.sigma, got.sigma);
}

static void
estimates_match (const char *what)
{
  static const struct { int w, h; } sizes[] = {
    { 2, 2 }, { 3, 3 }, { 1, 40 }, { 40, 1 }, { 3, 50 }, { 50, 3 }, { 37, 29 }, { 301, 203 }, { 700, 90 },
  };
  harness_rng rng = { 2024 };
  char name[96];
  for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
    for (size_t li = 0; li < sizeof layouts / sizeof *layouts; li++)
      for (int type = 0; type < 2; type++)
        {
          cudafx_image img = harness_image_new (sizes[si].w, sizes[si].h, layouts[li].channels,
                                                layouts[li].alpha, type, 4 * (si % 3));
          double sigma = (double) (si * 7 + li * 3 + type * 11) / 2;
          fill_noisy (&img, sigma, &rng);
          snprintf (name, sizeof name, "%s noise %g", what, sigma);
          compare_estimate (&img, name);
          harness_image_free (&img);
          if (harness_failures () > 5)
            return;
        }
}

TEST (gpu_nlmeans_estimate_equals_cpu)
{
  estimates_match ("whole");
  /* ~30 rows a stripe: the counts over many stripes, each with its halo row. */
  setenv ("CUDAFX_CUDA_MEM_LIMIT", "64K", 1);
  estimates_match ("striped");
  unsetenv ("CUDAFX_CUDA_MEM_LIMIT");
}

/* The fit's histograms of img counted on backend b with every stride-th
 * row, into hist (colours x NLMEANS_FIT_BINS). */
static cudafx_status
count_levels (const cudafx_backend_ops *b, const cudafx_image *img, int max_halo, int stride, uint64_t *hist)
{
  cudafx_options o = harness_cpu_options ();
  nlmeans_session *ses = NULL;
  cudafx_status s = b->nlmeans_open (img, img->channels - img->has_alpha, max_halo, 0, &o, &ses);
  if (!s)
    s = b->nlmeans_count_levels (ses, stride, hist);
  if (ses)
    b->nlmeans_close (ses);
  return s;
}

/* The noise-model fit's histograms: the same counts on both backends, for
 * sizes down to 2x2 and 1xN, every layout, u8 and f32, strides 1 to 7, on
 * a kept image (max_halo > 0) and stripe by stripe under a memory cap. */
TEST (gpu_nlmeans_fit_counts_equal_cpu)
{
  static const struct { int w, h; } sizes[] = { { 2, 2 }, { 3, 3 }, { 1, 40 }, { 40, 1 }, { 50, 3 }, { 301, 203 } };
  static const int strides[] = { 1, 2, 3, 7 };
  harness_rng rng = { 77 };
  for (int capped = 0; capped < 2; capped++)
    {
      if (capped)
        setenv ("CUDAFX_CUDA_MEM_LIMIT", "64K", 1);
      for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
        for (size_t li = 0; li < sizeof layouts / sizeof *layouts; li++)
          for (int type = 0; type < 2; type++)
            {
              cudafx_image img = harness_image_new (sizes[si].w, sizes[si].h, layouts[li].channels,
                                                    layouts[li].alpha, type, 4 * (si % 2));
              fill_noisy (&img, 3 + 5.0 * ((si + li) % 4), &rng);
              const size_t n = (size_t) (layouts[li].channels - layouts[li].alpha) * NLMEANS_FIT_BINS;
              uint64_t *want = calloc (n, sizeof *want), *got = calloc (n, sizeof *got);
              for (int k = 0; k < 4 && want && got; k++)
                {
                  const int stride = strides[(si + k) % 4], halo = k % 2 ? 12 : 0;
                  memset (got, 0xff, n * sizeof *got);
                  cudafx_status s1 = count_levels (&cudafx_cpu_backend, &img, halo, stride, want);
                  cudafx_status s2 = count_levels (&cudafx_cuda_backend, &img, halo, stride, got);
                  uint64_t total = 0;
                  for (size_t i = 0; i < n; i++)
                    total += want[i];
                  CHECK (!s1 && !s2 && !memcmp (want, got, n * sizeof *want),
                         "%dx%d c%d%s %s stride %d halo %d%s: fit counts differ (status %d/%d, %llu counted)",
                         img.width, img.height, img.channels, img.has_alpha ? "+alpha" : "",
                         type ? "f32" : "u8", stride, halo, capped ? " striped" : "", s1, s2,
                         (unsigned long long) total);
                }
              free (want);
              free (got);
              harness_image_free (&img);
              if (harness_failures () > 5)
                break;
            }
      unsetenv ("CUDAFX_CUDA_MEM_LIMIT");
    }
}

/* How far the GPU's nl-means may lie from the CPU's (0..255 scale).
 * docs/TESTING.md's Determinism allows 1 on u8 and 1/255 of full scale on
 * f32, which alone would pass a kernel whose every u8 value is off by one.
 * The patch distances are the same floats on both backends; the weights are not
 * (the CPU's polynomial exp, the GPU's ex2: both within 1e-5 of exp,
 * relative), and weights within e of each other move a weighted mean by at
 * most e times the spread of the values it averages. So f32 stays within
 * NLM_F32_DIFF of full scale (1e-5 for the weights, 1e-5 for the sums'
 * other order), and a u8 value changes only where the CPU's unrounded one
 * lies that close to a rounding boundary: at most NLM_SHARE of the values.
 * Behind the camera-noise transform (its inverse stretches the shadows'
 * differences) f32 gets the contract's 1/255, and at most NLM_SHARE of
 * its values may lie further than NLM_F32_DIFF. Measured over these tests
 * (docs/BENCHMARKS.md, "nl-means kernels"): f32 within 4e-6 of full scale, at most
 * 6 u8 values of an image off by one, the largest share 0.018 % (1 value
 * of 5650); the kernel with its exponent 0.1 % too large fails them (u8
 * off by 1 in 1.07 % of an image's values, f32 by 0.02 to 0.08 of 255). */
#define NLM_F32_DIFF (2e-5 * 255)
#define NLM_SHARE    0.001

/* nl-means on both backends: the same info exactly, outputs within the
 * bounds above. */
static void
compare_filter (const cudafx_image *src, const cudafx_nlmeans_params *p, int progress, const char *what)
{
  if (!harness_case ())
    return;
  cudafx_image ref = harness_image_new (src->width, src->height, src->channels, src->has_alpha, src->type, 0);
  cudafx_image out = harness_image_new (src->width, src->height, src->channels, src->has_alpha, src->type,
                                        3 * cudafx_type_size (src->type));
  harness_image_poison (&out);
  cudafx_nlmeans_info want = { 0 }, got = { 0 };
  cudafx_report report;
  cudafx_options cpu = harness_cpu_options (), gpu = gpu_options (&report);
  double last = 0;
  if (progress)
    {
      gpu.progress = record;
      gpu.user_data = &last;
    }
  cudafx_status s1 = cudafx_nlmeans (src, &ref, p, &cpu, &want);
  cudafx_status s2 = cudafx_nlmeans (src, &out, p, &gpu, &got);
  CHECK (s1 == CUDAFX_OK && s2 == CUDAFX_OK, "%s: status %d/%d (%s)", what, s1, s2, cudafx_error_message ());
  if (!s1 && !s2)
    {
      const int u8 = src->type == CUDAFX_U8;
      double d = harness_max_diff (&ref, &out);
      double share = harness_diff_share (&ref, &out, u8 ? 0 : NLM_F32_DIFF);
      double tol = u8 || got.noise.signal_dependent ? 1.0 : NLM_F32_DIFF;
      CHECK (report.backend_used == CUDAFX_BACKEND_CUDA, "%s: ran on backend %d", what, report.backend_used);
      CHECK (d <= tol && share <= NLM_SHARE,
             "%s %dx%d c%d%s %s P %d S %d: differs from the CPU by %g, %.3g %% of the values by more than %g",
             what, src->width, src->height, src->channels, src->has_alpha ? "+alpha" : "", u8 ? "u8" : "f32",
             got.patch_radius, got.search_radius, d, 100 * share, u8 ? 0 : NLM_F32_DIFF);
      CHECK (!memcmp (&want.sigma, &got.sigma, sizeof want.sigma) && want.h == got.h &&
             want.patch_radius == got.patch_radius && want.search_radius == got.search_radius &&
             want.patch_sigma == got.patch_sigma && want.centre_max == got.centre_max &&
             !memcmp (&want.noise, &got.noise, sizeof want.noise),
             "%s: info differs: sigma %.17g/%.17g P %d/%d", what, want.sigma, got.sigma,
             want.patch_radius, got.patch_radius);
      CHECK (!progress || last == 1.0, "%s: progress ended at %g", what, last);
    }
  harness_image_free (&ref);
  harness_image_free (&out);
}

/* Automatic mode (estimate, then the filter with the parameters it picks:
 * Gaussian patches above sigma 15 on colour) and manual mode reporting
 * sigma, on one upload and, under a device-memory cap, counted and filtered
 * stripe by stripe. */
TEST_SHARDED (gpu_nlmeans_auto_matches_cpu, 8)
{
  static const double noise[] = { 8, 22, 40 };
  harness_rng rng = { 99 };
  char what[96];
  for (int capped = 0; capped < 2; capped++)
    {
      if (capped)
        setenv ("CUDAFX_CUDA_MEM_LIMIT", "512K", 1); /* a few stripes */
      for (size_t li = 0; li < sizeof layouts / sizeof *layouts; li++)
        for (int type = 0; type < 2; type++)
          {
            cudafx_image src = harness_image_new (301, 203, layouts[li].channels, layouts[li].alpha, type, 8);
            double sigma = noise[(li + type) % 3];
            fill_noisy (&src, sigma, &rng);
            cudafx_nlmeans_params p;
            cudafx_nlmeans_params_init (&p);
            p.automatic = 1;
            snprintf (what, sizeof what, "auto noise %g%s", sigma, capped ? " striped" : "");
            compare_filter (&src, &p, 0, what);
            p.automatic = 0;
            p.patch_radius = 2;
            p.search_radius = 4;
            p.h = 12;
            snprintf (what, sizeof what, "manual with info%s", capped ? " striped" : "");
            compare_filter (&src, &p, li == 3, what);
            harness_image_free (&src);
            if (harness_failures () > 5)
              break;
          }
      unsetenv ("CUDAFX_CUDA_MEM_LIMIT");
    }
}

/* Every patch radius with several search radii (up to 20: the largest
 * tile halo and the most pairs), every kernel kind and layout, images wider
 * and taller than a tile, split into launches by a progress callback. */
TEST_SHARDED (gpu_nlmeans_kernels_match_cpu, 8)
{
  static const int search[5][2] = { { 1, 20 }, { 3, 11 }, { 10, 20 }, { 5, 15 }, { 2, 20 } };
  harness_rng rng = { 4321 };
  char what[96];
  int run = 0;
  for (int P = 1; P <= 5; P++)
    for (int si = 0; si < 2; si++)
      for (int kind = 0; kind < 3; kind++)
        {
          const int S = search[P - 1][si];
          const int li = run % 6;
          cudafx_image src = harness_image_new (77 + 9 * P, 45 + S, layouts[li].channels, layouts[li].alpha,
                                                kind == 2 ? CUDAFX_F32 : CUDAFX_U8, 4);
          fill_noisy (&src, 18, &rng);
          cudafx_nlmeans_params p;
          cudafx_nlmeans_params_init (&p);
          p.automatic = kind == 1; /* sigma given: Gaussian patches on colour, P 2 S 10 */
          p.sigma = 20 + 2 * P;
          p.patch_radius = P;
          p.search_radius = S;
          p.h = 6 + 3 * P;
          snprintf (what, sizeof what, "%s P %d S %d", kind == 1 ? "auto sigma given" : "manual", P, S);
          compare_filter (&src, &p, run % 2, what);
          harness_image_free (&src);
          run++;
          if (harness_failures () > 5)
            return;
        }
}

/* Camera noise (variance a x + b in linear light, tests/quality's level
 * 16) on a ramp: automatic mode fits the same noise model on both (from
 * histograms each backend counts) and transforms, denoises and transforms
 * back on the GPU, whole and striped, every layout, u8 and f32. */
TEST_SHARDED (gpu_nlmeans_camera_noise_matches_cpu, 4)
{
  const double a = 1.42e-2, b = 3.4e-4;
  harness_rng rng = { 2222 };
  char what[96];
  for (int capped = 0; capped < 2; capped++)
    {
      if (capped)
        setenv ("CUDAFX_CUDA_MEM_LIMIT", "2M", 1);
      for (size_t li = 0; li < sizeof layouts / sizeof *layouts; li++)
        for (int type = 0; type < 2; type++)
          {
            cudafx_image src = harness_image_new (301, 203, layouts[li].channels, layouts[li].alpha, type, 8);
            const int colours = layouts[li].channels - layouts[li].alpha;
            for (int y = 0; y < 203; y++)
              for (int x = 0; x < 301; x++)
                for (int c = 0; c < layouts[li].channels; c++)
                  {
                    double g = harness_gauss (&rng);
                    double s = (x * 255.0 / 300 + 5 * sin (y / 11.0 + c)) / 255;
                    s = s < 0 ? 0 : s > 1 ? 1 : s;
                    double lin = s <= 0.04045 ? s / 12.92 : pow ((s + 0.055) / 1.055, 2.4);
                    lin += sqrt (a * lin + b) * g;
                    lin = lin < 0 ? 0 : lin > 1 ? 1 : lin;
                    double e = lin <= 0.0031308 ? 12.92 * lin : 1.055 * pow (lin, 1 / 2.4) - 0.055;
                    harness_set (&src, x, y, c, c < colours ? 255 * e : harness_rand (&rng) % 256);
                  }
            cudafx_nlmeans_params p;
            cudafx_nlmeans_params_init (&p);
            p.automatic = 1;
            cudafx_options cpu = harness_cpu_options ();
            cudafx_nlmeans_info info;
            CHECK (cudafx_nlmeans_estimate (&src, &cpu, &info) == CUDAFX_OK && info.noise.signal_dependent,
                   "camera noise, %d channels%s: flat model", layouts[li].channels,
                   layouts[li].alpha ? " with alpha" : "");
            snprintf (what, sizeof what, "camera noise%s", capped ? " striped" : "");
            compare_filter (&src, &p, li == 2, what);
            harness_image_free (&src);
            if (harness_failures () > 5)
              break;
          }
      unsetenv ("CUDAFX_CUDA_MEM_LIMIT");
    }
}
