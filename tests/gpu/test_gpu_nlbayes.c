/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Non-local Bayes on the CUDA backend against the CPU reference, run by
 * `make check-gpu`: sizes down to 1x1, 1xN and Nx1, primes, every channel
 * layout with and without alpha, u8 and f32, rows with padding, every
 * parameter set of the table (grey and colour sigmas up to 90, 7x7 patches
 * of four channels), the flat-area test on and off, a grid phase, automatic
 * mode, stripes under a device-memory cap and cancel. The GPU stays within
 * 1 (0..255 scale) of the CPU, u8 and f32, with few values off (see
 * NLB_SHARE). */
#include "../unit/harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Smooth colours, a flat dark corner, a bright band, an edge, plus Gaussian
 * noise of sigma, clipped; alpha random. */
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
            base = 20;
          else if (y % 40 >= 30)
            base = 230;
          else if (x > img->width * 3 / 4)
            base = 60 + 40 * c;
          double val = c < colours ? base + sigma * g : harness_rand (r) % 256;
          val = val < 0 ? 0 : val > 255 ? 255 : val;
          harness_set (img, x, y, c, val);
        }
}

/* How far the GPU's nl-bayes may lie from the CPU's (0..255 scale).
 * Step 1's distances, groups and restored values are the CPU's floats, but
 * the GPU adds them up in another order (atomics), and step 2 sums its
 * means and covariances in another order: the basic estimate differs in
 * its last bits, and a step-2 group differs where two candidates'
 * distances, or one and tau, are that close. So every value within 1 (u8:
 * the rounding; f32: 1/255 of full scale: docs/TESTING.md, "Determinism"), and at most
 * NLB_SHARE of the values off by one (u8) or by more than NLB_F32_DIFF
 * (f32); a kernel off by one everywhere fails. Measured: docs/TESTING.md. */
#define NLB_SHARE    0.001
#define NLB_F32_DIFF 0.05

/* The largest differences so far, printed after each test for
 * docs/TESTING.md's record. */
static double worst_share_u8, worst_share_f32, worst_diff_f32;

static void
print_worst (const char *test)
{
  printf ("%s: so far, the largest share of u8 values off by one %.4f %%, of f32 values further than %g %.4f %%; "
          "the largest f32 difference %.4g (0..255)\n",
          test, 100 * worst_share_u8, NLB_F32_DIFF, 100 * worst_share_f32, worst_diff_f32);
}

static int
stop_at_once (double fraction, void *user_data)
{
  (void) fraction;
  ++*(int *) user_data;
  return 1;
}

static int
record (double fraction, void *user_data)
{
  *(double *) user_data = fraction;
  return 0;
}

static void
compare (const cudafx_image *src, const cudafx_nlbayes_params *p, int progress, const char *what)
{
  if (!harness_case ())
    return;
  cudafx_image ref = harness_image_new (src->width, src->height, src->channels, src->has_alpha, src->type, 0);
  cudafx_image out = harness_image_new (src->width, src->height, src->channels, src->has_alpha, src->type,
                                        5 * cudafx_type_size (src->type));
  harness_image_poison (&out);
  cudafx_nlbayes_info want, got;
  memset (&want, 0, sizeof want);
  memset (&got, 0, sizeof got);
  cudafx_report report;
  memset (&report, 0, sizeof report);
  cudafx_options cpu = harness_cpu_options (), gpu = harness_cpu_options ();
  gpu.backend = CUDAFX_BACKEND_CUDA;
  gpu.report = &report;
  double last = 0;
  if (progress)
    {
      gpu.progress = record;
      gpu.user_data = &last;
    }
  cudafx_status s1 = cudafx_nlbayes (src, &ref, p, &cpu, &want);
  cudafx_status s2 = cudafx_nlbayes (src, &out, p, &gpu, &got);
  CHECK (s1 == CUDAFX_OK && s2 == CUDAFX_OK, "%s: status %d/%d (%s)", what, s1, s2, cudafx_error_message ());
  if (!s1 && !s2)
    {
      const int u8 = src->type == CUDAFX_U8;
      const double d = harness_max_diff (&ref, &out);
      const double share = harness_diff_share (&ref, &out, u8 ? 0 : NLB_F32_DIFF);
      if (u8 && share > worst_share_u8)
        worst_share_u8 = share;
      if (!u8 && share > worst_share_f32)
        worst_share_f32 = share;
      if (!u8 && d > worst_diff_f32)
        worst_diff_f32 = d;
      CHECK (report.backend_used == CUDAFX_BACKEND_CUDA, "%s: ran on backend %d", what, report.backend_used);
      CHECK (d <= 1.0 && share <= NLB_SHARE,
             "%s %dx%d c%d%s %s sigma %g patches %d/%d: differs from the CPU by %g, %.3g %% of the values by more "
             "than %g",
             what, src->width, src->height, src->channels, src->has_alpha ? "+alpha" : "", u8 ? "u8" : "f32",
             got.sigma, got.patch_size[0], got.patch_size[1], d, 100 * share, u8 ? 0 : NLB_F32_DIFF);
      CHECK (want.sigma == got.sigma && want.patch_size[0] == got.patch_size[0] &&
             want.patch_size[1] == got.patch_size[1] && want.group_size[1] == got.group_size[1],
             "%s: info differs: sigma %.17g/%.17g", what, want.sigma, got.sigma);
      CHECK (!progress || last == 1.0, "%s: progress ended at %g", what, last);
    }
  harness_image_free (&ref);
  harness_image_free (&out);
}

static const struct { int channels, alpha; } layouts[] = {
  { 1, 0 }, { 2, 1 }, { 3, 0 }, { 4, 1 }, { 2, 0 }, { 4, 0 },
};

/* Odd and tiny sizes, every layout and type, sigmas across the grey and
 * colour tables, the flat-area test on and off. */
TEST_SHARDED (gpu_nlbayes_matches_cpu, 8)
{
  static const struct { int w, h; } sizes[] = {
    { 1, 1 }, { 1, 23 }, { 23, 1 }, { 2, 2 }, { 3, 5 }, { 7, 5 }, { 37, 29 }, { 61, 53 }, { 101, 67 },
  };
  static const double sigmas[] = { 5, 12, 25, 45 };
  harness_rng rng = { 4242 };
  char what[96];
  int run = 0;
  for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
    for (size_t li = 0; li < sizeof layouts / sizeof *layouts; li++)
      for (int type = 0; type < 2; type++, run++)
        {
          const double sigma = sigmas[run % 4];
          cudafx_image src = harness_image_new (sizes[si].w, sizes[si].h, layouts[li].channels, layouts[li].alpha,
                                                type, 4 * (run % 3));
          fill_noisy (&src, sigma, &rng);
          cudafx_nlbayes_params p;
          cudafx_nlbayes_params_init (&p);
          p.automatic = 0;
          p.sigma = sigma;
          p.flat_area = run % 5 != 0;
          snprintf (what, sizeof what, "sigma %g flat %d", sigma, p.flat_area);
          compare (&src, &p, run % 7 == 0, what);
          harness_image_free (&src);
          if (harness_failures () > 5)
            return;
        }
  print_worst ("gpu_nlbayes_matches_cpu");
}

/* The large sigmas: 7x7 patches, windows up to 73x73, step 2's groups of
 * up to 196 values in chunks; grey's every row of the table. */
TEST_SHARDED (gpu_nlbayes_large_sigma_matches_cpu, 6)
{
  static const struct { int channels, alpha; double sigma; } cases[] = {
    { 3, 0, 55 }, { 3, 0, 75 }, { 4, 0, 90 }, { 4, 1, 60 }, { 2, 0, 72 },
    { 1, 0, 16 }, { 1, 0, 32 }, { 1, 0, 38 }, { 1, 0, 50 }, { 1, 0, 75 }, { 1, 0, 90 },
  };
  harness_rng rng = { 777 };
  char what[96];
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    {
      const int type = i % 2;
      cudafx_image src = harness_image_new (97, 89, cases[i].channels, cases[i].alpha, type, 8);
      fill_noisy (&src, cases[i].sigma, &rng);
      cudafx_nlbayes_params p;
      cudafx_nlbayes_params_init (&p);
      p.automatic = 0;
      p.sigma = cases[i].sigma;
      p.flat_area = i % 3 != 2;
      snprintf (what, sizeof what, "large sigma %g", cases[i].sigma);
      compare (&src, &p, 0, what);
      harness_image_free (&src);
      if (harness_failures () > 5)
        return;
    }
  print_worst ("gpu_nlbayes_large_sigma_matches_cpu");
}

/* A grid phase (a part of a larger image) and automatic mode (the noise
 * estimated on the GPU, equal to the CPU's). */
TEST (gpu_nlbayes_origin_and_auto_match_cpu)
{
  harness_rng rng = { 99 };
  for (int li = 0; li < 4; li++)
    {
      cudafx_image src = harness_image_new (83, 71, layouts[li].channels, layouts[li].alpha, li % 2, 4);
      fill_noisy (&src, 10 + 6 * li, &rng);
      cudafx_nlbayes_params p;
      cudafx_nlbayes_params_init (&p);
      p.automatic = 0;
      p.sigma = 10 + 6 * li;
      p.origin_x = 3 + li;
      p.origin_y = 5 + 2 * li;
      compare (&src, &p, 0, "grid phase");
      p.origin_x = p.origin_y = 0;
      p.automatic = 1;
      compare (&src, &p, 1, "automatic");
      harness_image_free (&src);
    }
  print_worst ("gpu_nlbayes_origin_and_auto_match_cpu");
}

/* Under a device-memory cap the image runs in stripes with halos: the same
 * values as the CPU's whole-image run, within the tolerance. The cap lies
 * between what one stripe with its halos needs and what the whole image
 * needs (the stripe runner's sums: cuda/stripes.cu). */
TEST_SHARDED (gpu_nlbayes_stripes_match_cpu, 4)
{
  static const struct { int w, h, channels, alpha; double sigma; } cases[] = {
    { 301, 203, 3, 0, 15 }, { 301, 203, 4, 1, 25 }, { 120, 700, 1, 0, 60 }, { 150, 500, 2, 1, 8 },
  };
  harness_rng rng = { 31337 };
  char what[96], limit[32];
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    for (int type = 0; type < 2; type++)
      {
        cudafx_image src = harness_image_new (cases[i].w, cases[i].h, cases[i].channels, cases[i].alpha, type, 4);
        fill_noisy (&src, cases[i].sigma, &rng);
        cudafx_nlbayes_params p;
        cudafx_nlbayes_params_init (&p);
        p.automatic = 0;
        p.sigma = cases[i].sigma;
        cudafx_nlbayes_info info;
        cudafx_image tiny = harness_image_new (1, 1, cases[i].channels, cases[i].alpha, type, 0);
        cudafx_image tiny_out = harness_image_new (1, 1, cases[i].channels, cases[i].alpha, type, 0);
        cudafx_options cpu = harness_cpu_options ();
        harness_image_random (&tiny, &rng);
        CHECK (cudafx_nlbayes (&tiny, &tiny_out, &p, &cpu, &info) == CUDAFX_OK, "striped: the plan");
        harness_image_free (&tiny);
        harness_image_free (&tiny_out);
        int halo = 0;
        for (int s = 0; s < 2; s++)
          halo += 2 * (info.search_size[s] / 2 + info.patch_size[s]);
        const int colours = cases[i].channels - cases[i].alpha;
        const size_t pitch = ((size_t) cases[i].w * cases[i].channels * cudafx_type_size (type) + 255) / 256 * 256;
        /* cuda/nlbayes.cu's scratch row: noisy and basic floats, fixed-point sums, weights; 8-aligned */
        const size_t scratch = ((size_t) cases[i].w * (colours * (2 * 4 + 8) + 4) + 7) / 8 * 8;
        const size_t fixed = 2 * (size_t) halo * (pitch + scratch) + 2 * pitch + scratch;
        const size_t whole = (size_t) cases[i].h * (2 * pitch + scratch);
        CHECK (fixed < whole, "striped case %zu: no room for stripes (halo %d)", i, halo);
        snprintf (limit, sizeof limit, "%zu", fixed + (whole - fixed) / 3);
        setenv ("CUDAFX_CUDA_MEM_LIMIT", limit, 1);
        snprintf (what, sizeof what, "striped under %s bytes", limit);
        compare (&src, &p, type, what);
        unsetenv ("CUDAFX_CUDA_MEM_LIMIT");
        harness_image_free (&src);
        if (harness_failures () > 5)
          return;
      }
  print_worst ("gpu_nlbayes_stripes_match_cpu");
}

/* A host that cancels at the first progress report: the call says so, and
 * the next call runs as before. */
TEST (gpu_nlbayes_cancel)
{
  harness_rng rng = { 5 };
  cudafx_image src = harness_image_new (211, 400, 3, 0, CUDAFX_U8, 0);
  cudafx_image out = harness_image_new (211, 400, 3, 0, CUDAFX_U8, 0);
  fill_noisy (&src, 20, &rng);
  cudafx_nlbayes_params p;
  cudafx_nlbayes_params_init (&p);
  p.automatic = 0;
  p.sigma = 20;
  for (int capped = 0; capped < 2; capped++)
    {
      if (capped)
        setenv ("CUDAFX_CUDA_MEM_LIMIT", "2M", 1); /* five stripes */
      cudafx_options o = harness_cpu_options ();
      o.backend = CUDAFX_BACKEND_CUDA;
      int calls = 0;
      o.progress = stop_at_once;
      o.user_data = &calls;
      cudafx_status s = cudafx_nlbayes (&src, &out, &p, &o, NULL);
      CHECK (s == CUDAFX_ERR_CANCELLED && calls == 1, "cancel%s: status %d (%s), %d progress calls",
             capped ? " striped" : "", s, cudafx_error_message (), calls);
      unsetenv ("CUDAFX_CUDA_MEM_LIMIT");
    }
  compare (&src, &p, 1, "after a cancel");
  harness_image_free (&src);
  harness_image_free (&out);
}
