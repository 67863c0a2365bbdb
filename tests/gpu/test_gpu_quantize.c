/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Colour quantize on the CUDA backend against the CPU reference, run by
 * `make check-gpu`: the same palette (entries, count, iterations) and the
 * same output bytes over odd sizes, channels 1-4 with and without alpha,
 * u8 and f32, both colour spaces, K = 2, 16 and 256, dither on and off; and
 * again when the device-memory cap forces stripes and a small grid. The
 * seeding on the device: the same palettes after one Lloyd iteration (which
 * shows the starting centres) over K, seeds and sample sizes, and proof
 * that it ran there (a fault injected into it). The Floyd–Steinberg kernel
 * gets its own cases: images of one row or column, heights that end groups
 * of 32 rows part way, stripes, and few-level images where entries can be
 * exactly as near (palettes of every size its nearest search handles apart).
 * Given palettes, positioned dithering and reduced bleeding: every mode
 * against the CPU, in one piece and in stripes. */
#include "../unit/harness.h"

#include <stdlib.h>
#include <string.h>

/* Random colours, or a few colours plus noise; alpha (when present) 0 on
 * about a quarter of the pixels, so transparent pixels are left out of the vote. */
static void
fill (cudafx_image *img, harness_rng *r, int clustered)
{
  double base[5][3];
  for (int b = 0; b < 5; b++)
    for (int c = 0; c < 3; c++)
      base[b][c] = harness_rand (r) % 256;
  int dims = img->channels - img->has_alpha;
  harness_image_random (img, r);
  for (int y = 0; y < img->height; y++)
    for (int x = 0; x < img->width; x++)
      {
        int b = harness_rand (r) % 5;
        if (clustered)
          for (int c = 0; c < dims; c++)
            {
              double v = base[b][c] + (harness_uniform (r) - 0.5) * 16;
              harness_set (img, x, y, c, v < 0 ? 0 : v > 255 ? 255 : v);
            }
        if (img->has_alpha)
          harness_set (img, x, y, img->channels - 1, harness_rand (r) % 4 ? 1 + harness_rand (r) % 255 : 0);
      }
}

static int
same_palette (const cudafx_palette *a, const cudafx_palette *b)
{
  return a->colors == b->colors && a->channels == b->channels && a->iterations == b->iterations &&
         !memcmp (a->entries, b->entries, sizeof a->entries);
}

/* Quantizes src on the CPU and on the device; checks they agree exactly. */
static void
compare (const cudafx_image *src, const cudafx_quantize_params *p, const char *what)
{
  if (!harness_case ())
    return;
  cudafx_image ref = harness_image_new (src->width, src->height, src->channels, src->has_alpha,
                                        src->type, 0);
  cudafx_image out = harness_image_new (src->width, src->height, src->channels, src->has_alpha,
                                        src->type, 7 * cudafx_type_size (src->type));
  harness_image_poison (&ref);
  harness_image_poison (&out);
  cudafx_palette want, got;
  cudafx_options cpu = harness_cpu_options ();
  cpu.threads = 3;
  cudafx_status s = cudafx_quantize (src, &ref, p, &cpu, &want);
  CHECK (s == CUDAFX_OK, "%s: CPU status %d (%s)", what, s, cudafx_error_message ());
  cudafx_report report;
  memset (&report, 0, sizeof report);
  cudafx_options gpu = harness_cpu_options ();
  gpu.backend = CUDAFX_BACKEND_CUDA;
  gpu.report = &report;
  s = cudafx_quantize (src, &out, p, &gpu, &got);
  CHECK (s == CUDAFX_OK, "%s: CUDA status %d (%s)", what, s, cudafx_error_message ());
  if (s == CUDAFX_OK)
    {
      CHECK (report.backend_used == CUDAFX_BACKEND_CUDA, "%s: ran on backend %d", what, report.backend_used);
      CHECK (same_palette (&want, &got), "%s: palette differs (%d/%d colours, %d/%d iterations)", what,
             got.colors, want.colors, got.iterations, want.iterations);
      CHECK (harness_same_pixels (&ref, &out), "%s: output differs from the CPU", what);
    }
  harness_image_free (&ref);
  harness_image_free (&out);
}

TEST_SHARDED (gpu_quantize_matches_cpu, 16)
{
  static const int sizes[][2] = { { 1, 1 }, { 1, 23 }, { 23, 1 }, { 13, 7 }, { 31, 17 }, { 64, 48 } };
  static const int layouts[][2] = { { 1, 0 }, { 2, 1 }, { 3, 0 }, { 4, 1 } };
  static const int colors[] = { 2, 16, 256 };
  harness_rng r = { 23 };
  for (int si = 0; si < 6; si++)
    for (int li = 0; li < 4; li++)
      for (int t = 0; t < 2; t++)
        {
          cudafx_type type = t ? CUDAFX_F32 : CUDAFX_U8;
          int w = sizes[si][0], h = sizes[si][1], ch = layouts[li][0], alpha = layouts[li][1];
          cudafx_image src = harness_image_new (w, h, ch, alpha, type, 5 * cudafx_type_size (type));
          fill (&src, &r, (si + li) % 2);
          for (int ki = 0; ki < 3; ki++)
            for (int space = 0; space < 2 && harness_failures () < 5; space++)
              for (int dither = 0; dither < 2; dither++)
                {
                  cudafx_quantize_params p;
                  cudafx_quantize_params_init (&p);
                  p.colors = colors[ki];
                  p.color_space = space;
                  p.dither = dither;
                  p.seed = (uint32_t) (si * 7 + li);
                  char what[128];
                  snprintf (what, sizeof what, "%dx%d ch %d alpha %d %s %s K %d dither %d", w, h, ch,
                            alpha, t ? "f32" : "u8", space ? "rgb" : "oklab", p.colors, dither);
                  compare (&src, &p, what);
                }
          harness_image_free (&src);
        }
}

TEST (gpu_quantize_larger_images_match_cpu)
{
  /* more pixels than the seeding sample (the colours it missed become
   * centres), several chunks per block, and an all-transparent image */
  harness_rng r = { 29 };
  static const int layouts[][2] = { { 3, 0 }, { 4, 1 }, { 1, 0 } };
  for (int li = 0; li < 3; li++)
    for (int t = 0; t < 2; t++)
      {
        cudafx_type type = t ? CUDAFX_F32 : CUDAFX_U8;
        int ch = layouts[li][0], alpha = layouts[li][1];
        cudafx_image src = harness_image_new (307, 263, ch, alpha, type, 3 * cudafx_type_size (type));
        fill (&src, &r, li != 1);
        for (int ki = 0; ki < 3; ki++)
          {
            cudafx_quantize_params p;
            cudafx_quantize_params_init (&p);
            p.colors = ki == 0 ? 2 : ki == 1 ? 16 : 256;
            p.color_space = (li + ki) % 2;
            p.max_iterations = 12;
            char what[96];
            snprintf (what, sizeof what, "307x263 ch %d %s K %d", ch, t ? "f32" : "u8", p.colors);
            compare (&src, &p, what);
          }
        if (alpha)
          {
            for (int y = 0; y < src.height; y++)
              for (int x = 0; x < src.width; x++)
                harness_set (&src, x, y, ch - 1, 0);
            cudafx_quantize_params p;
            cudafx_quantize_params_init (&p);
            compare (&src, &p, "all transparent");
          }
        harness_image_free (&src);
      }
}

/* Colour (RGBA u8, K 16) and grey (f32, K grey_colors) images under device
 * memory caps that force stripes: 64K gives a few rows per stripe (and two
 * assignment blocks), 512K fewer, larger stripes (for the dither, several
 * groups of 32 rows); both colour spaces, the rest of the parameters from base. */
static void
compare_capped (unsigned long long seed, int grey_w, int grey_h, const cudafx_quantize_params *base,
                int grey_colors)
{
  static const char *limits[] = { "64K", "512K" };
  harness_rng r = { seed };
  cudafx_image rgba = harness_image_new (301, 203, 4, 1, CUDAFX_U8, 9);
  cudafx_image grey = harness_image_new (grey_w, grey_h, 1, 0, CUDAFX_F32, 4);
  fill (&rgba, &r, 0);
  fill (&grey, &r, 1);
  for (int i = 0; i < 2; i++)
    {
      setenv ("CUDAFX_CUDA_MEM_LIMIT", limits[i], 1);
      for (int space = 0; space < 2; space++)
        {
          cudafx_quantize_params p = *base;
          p.color_space = space;
          p.colors = 16;
          compare (&rgba, &p, limits[i]);
          p.colors = grey_colors;
          compare (&grey, &p, limits[i]);
        }
    }
  unsetenv ("CUDAFX_CUDA_MEM_LIMIT");
  harness_image_free (&rgba);
  harness_image_free (&grey);
}

TEST (gpu_quantize_stripes_match_cpu)
{
  cudafx_quantize_params p;
  cudafx_quantize_params_init (&p);
  compare_capped (31, 301, 203, &p, 5);
}

/* Lloyd over the distinct colours on the device: an RGBA image of many
 * repeated colours in one piece (the 2^24 counters), and grey u8, with and
 * without alpha, under the caps that force stripes (its 256 counters still
 * fit, so the histogram adds up stripe after stripe), against the CPU. */
TEST (gpu_quantize_distinct_colours_match_cpu)
{
  static const char *limits[] = { "", "64K", "512K" };
  harness_rng r = { 37 };
  cudafx_image rgba = harness_image_new (97, 61, 4, 1, CUDAFX_U8, 3);
  fill (&rgba, &r, 1);
  for (int alpha = 0; alpha < 2; alpha++)
    {
      cudafx_image grey = harness_image_new (301, 203, 1 + alpha, alpha, CUDAFX_U8, 4);
      fill (&grey, &r, 1);
      for (int i = 0; i < 3; i++)
        {
          setenv ("CUDAFX_CUDA_MEM_LIMIT", limits[i], 1);
          for (int space = 0; space < 2; space++)
            for (int colors = 5; colors <= 20; colors *= 4)
              {
                cudafx_quantize_params p;
                cudafx_quantize_params_init (&p);
                p.color_space = space;
                p.colors = colors;
                char what[96];
                snprintf (what, sizeof what, "grey alpha %d cap %s %s K %d", alpha, *limits[i] ? limits[i] : "none",
                          space ? "rgb" : "oklab", colors);
                compare (&grey, &p, what);
                if (alpha || *limits[i])
                  continue;
                snprintf (what, sizeof what, "RGBA %s K %d", space ? "rgb" : "oklab", colors);
                compare (&rgba, &p, what);
              }
        }
      unsetenv ("CUDAFX_CUDA_MEM_LIMIT");
      harness_image_free (&grey);
    }
  harness_image_free (&rgba);
}

/* Seeding on the device: every K the seeding tests name, seeds 1..5, both spaces, on
 * a sample smaller than the image's 65536 cap with transparent pixels; one
 * Lloyd iteration (the starting centres decide the palette) or ten. */
TEST_SHARDED (gpu_quantize_seeding_matches_cpu, 8)
{
  static const int colors[] = { 2, 3, 16, 100, 256 };
  harness_rng r = { 37 };
  cudafx_image rgba = harness_image_new (97, 83, 4, 1, CUDAFX_U8, 3);
  cudafx_image grey = harness_image_new (61, 45, 1, 0, CUDAFX_F32, 4);
  fill (&rgba, &r, 0);
  fill (&grey, &r, 1);
  for (int ki = 0; ki < 5; ki++)
    for (uint32_t seed = 1; seed <= 5 && harness_failures () < 5; seed++)
      for (int space = 0; space < 2; space++)
        {
          cudafx_quantize_params p;
          cudafx_quantize_params_init (&p);
          p.colors = colors[ki];
          p.seed = seed;
          p.color_space = space;
          p.max_iterations = seed % 2 ? 1 : 10;
          char what[96];
          snprintf (what, sizeof what, "seeding 97x83 rgba K %d seed %u %s", p.colors, seed,
                    space ? "rgb" : "oklab");
          compare (&rgba, &p, what);
          if (seed <= 2)
            {
              snprintf (what, sizeof what, "seeding 61x45 grey K %d seed %u %s", p.colors, seed,
                        space ? "rgb" : "oklab");
              compare (&grey, &p, what);
            }
        }
  harness_image_free (&rgba);
  harness_image_free (&grey);
}

/* A small image for compute-sanitizer (memcheck, racecheck): several
 * attempts with up to 5 trials per pick, one with 7, colour and grey. */
TEST (gpu_quantize_seeding_small_image)
{
  harness_rng r = { 47 };
  cudafx_image rgba = harness_image_new (33, 21, 4, 1, CUDAFX_U8, 2);
  cudafx_image grey = harness_image_new (19, 14, 1, 0, CUDAFX_U8, 0);
  fill (&rgba, &r, 0);
  fill (&grey, &r, 0);
  cudafx_quantize_params p;
  cudafx_quantize_params_init (&p);
  p.max_iterations = 1;
  p.colors = 40;
  compare (&rgba, &p, "33x21 K 40");
  p.colors = 3;
  p.color_space = CUDAFX_SPACE_RGB;
  compare (&rgba, &p, "33x21 K 3 rgb");
  p.colors = 150;
  compare (&grey, &p, "19x14 grey K 150");
  harness_image_free (&rgba);
  harness_image_free (&grey);
}

/* A sample of exactly 65536 pixels and one taken from more; fewer distinct
 * colours than K; 1x1 and 7x3 images. */
TEST_SHARDED (gpu_quantize_seeding_edge_cases_match_cpu, 8)
{
  harness_rng r = { 41 };
  cudafx_image full = harness_image_new (256, 256, 3, 0, CUDAFX_U8, 0);
  cudafx_image more = harness_image_new (300, 241, 3, 0, CUDAFX_U8, 5);
  cudafx_image few = harness_image_new (64, 50, 4, 1, CUDAFX_U8, 0);
  cudafx_image one = harness_image_new (1, 1, 3, 0, CUDAFX_U8, 0);
  cudafx_image small = harness_image_new (7, 3, 2, 1, CUDAFX_F32, 0);
  fill (&full, &r, 0);
  fill (&more, &r, 1);
  fill (&one, &r, 0);
  fill (&small, &r, 0);
  /* four colours, a quarter of the pixels transparent */
  for (int y = 0; y < few.height; y++)
    for (int x = 0; x < few.width; x++)
      {
        int b = (x / 5 + y / 3) % 4;
        for (int c = 0; c < 3; c++)
          harness_set (&few, x, y, c, 40 + 60 * b + 7 * c);
        harness_set (&few, x, y, 3, (x + y) % 4 ? 255 : 0);
      }
  static const int colors[] = { 2, 3, 16, 100, 256 };
  for (int ki = 0; ki < 5 && harness_failures () < 5; ki++)
    for (int space = 0; space < 2; space++)
      {
        cudafx_quantize_params p;
        cudafx_quantize_params_init (&p);
        p.colors = colors[ki];
        p.seed = 3 + ki;
        p.color_space = space;
        p.max_iterations = 1;
        char what[96];
        snprintf (what, sizeof what, "K %d %s", p.colors, space ? "rgb" : "oklab");
        if (p.colors == 16 || p.colors == 256)
          {
            compare (&full, &p, "sample of 65536");
            compare (&more, &p, "sample of 65536 of 72300");
          }
        compare (&few, &p, "four colours");
        compare (&one, &p, "1x1");
        compare (&small, &p, "7x3");
      }
  harness_image_free (&full);
  harness_image_free (&more);
  harness_image_free (&few);
  harness_image_free (&one);
  harness_image_free (&small);
}

/* The seeding's geometry of smaller GPUs (CUDAFX_CUDA_SEED_SMS): with 40
 * multiprocessors the attempts take two launches, with 8 one each (a fault
 * injected at the second launch shows it is reached); the palettes and
 * pixels equal the CPU's, for samples of the cap and of small images. */
TEST_SHARDED (gpu_quantize_seeding_in_several_launches_matches_cpu, 8)
{
  harness_rng r = { 53 };
  cudafx_image more = harness_image_new (300, 241, 3, 0, CUDAFX_U8, 5);
  cudafx_image small = harness_image_new (33, 21, 4, 1, CUDAFX_U8, 2);
  fill (&more, &r, 1);
  fill (&small, &r, 0);
  static const char *sms[] = { "40", "8" };
  for (int i = 0; i < 2 && harness_failures () < 5; i++)
    {
      setenv ("CUDAFX_CUDA_SEED_SMS", sms[i], 1);
      cudafx_quantize_params p;
      cudafx_quantize_params_init (&p);
      p.max_iterations = 2;
      cudafx_image out = harness_image_new (more.width, more.height, 3, 0, CUDAFX_U8, 0);
      cudafx_palette got;
      cudafx_options o = harness_cpu_options ();
      o.backend = CUDAFX_BACKEND_CUDA;
      setenv ("CUDAFX_CUDA_FAIL", "seed-launch1", 1);
      cudafx_status s = cudafx_quantize (&more, &out, &p, &o, &got);
      CHECK (s == CUDAFX_ERR_CUDA && strstr (cudafx_error_message (), "seeding"),
             "as if %s SMs: a fault at the second launch: status %d (%s)", sms[i], s, cudafx_error_message ());
      unsetenv ("CUDAFX_CUDA_FAIL");
      harness_image_free (&out);
      static const int colors[] = { 2, 16, 256 };
      for (int ki = 0; ki < 3; ki++)
        for (int space = 0; space < 2; space++)
          {
            p.colors = colors[ki];
            p.color_space = space;
            p.seed = (uint32_t) (7 + ki);
            char what[96];
            snprintf (what, sizeof what, "as if %s SMs, 300x241 K %d %s", sms[i], p.colors, space ? "rgb" : "oklab");
            compare (&more, &p, what);
            snprintf (what, sizeof what, "as if %s SMs, 33x21 K %d %s", sms[i], p.colors, space ? "rgb" : "oklab");
            compare (&small, &p, what);
          }
    }
  unsetenv ("CUDAFX_CUDA_SEED_SMS");
  harness_image_free (&more);
  harness_image_free (&small);
}

/* The seeding runs on the device when the budget allows, the image in one
 * stripe or several: a fault injected there fails a forced-CUDA call and
 * sends an auto call to the CPU (a host seeding would not see it). Under a
 * small memory cap the host seeds, and the same fault point is never
 * reached. */
TEST (gpu_quantize_seeding_runs_on_the_device)
{
  harness_rng r = { 43 };
  cudafx_image src = harness_image_new (120, 90, 3, 0, CUDAFX_U8, 0);
  cudafx_image ref = harness_image_new (120, 90, 3, 0, CUDAFX_U8, 0);
  cudafx_image out = harness_image_new (120, 90, 3, 0, CUDAFX_U8, 0);
  fill (&src, &r, 1);
  cudafx_quantize_params p;
  cudafx_quantize_params_init (&p);
  cudafx_palette want, got;
  cudafx_options cpu = harness_cpu_options ();
  CHECK (cudafx_quantize (&src, &ref, &p, &cpu, &want) == CUDAFX_OK, "CPU run failed");

  cudafx_report report;
  cudafx_options o = harness_cpu_options ();
  o.report = &report;
  setenv ("CUDAFX_CUDA_FAIL", "seed", 1);
  o.backend = CUDAFX_BACKEND_CUDA;
  cudafx_status s = cudafx_quantize (&src, &out, &p, &o, &got);
  CHECK (s == CUDAFX_ERR_CUDA && strstr (cudafx_error_message (), "seeding"),
         "forced CUDA with a seeding fault: status %d (%s)", s, cudafx_error_message ());
  memset (&report, 0, sizeof report);
  o.backend = CUDAFX_BACKEND_AUTO;
  s = cudafx_quantize (&src, &out, &p, &o, &got);
  CHECK (s == CUDAFX_OK && report.backend_used == CUDAFX_BACKEND_CPU && strstr (report.fallback, "seeding"),
         "auto with a seeding fault: status %d, backend %d, fallback '%s'", s, report.backend_used,
         report.fallback);
  CHECK (s == CUDAFX_OK && same_palette (&want, &got) && harness_same_pixels (&ref, &out),
         "the CPU fallback differs from the CPU");

  /* a 24 MB cap: room for the seeding, the image in two stripes */
  setenv ("CUDAFX_CUDA_MEM_LIMIT", "24M", 1);
  o.backend = CUDAFX_BACKEND_CUDA;
  cudafx_image big = harness_image_new (1200, 800, 4, 1, CUDAFX_U8, 0);
  cudafx_image big_ref = harness_image_new (1200, 800, 4, 1, CUDAFX_U8, 0);
  cudafx_image big_out = harness_image_new (1200, 800, 4, 1, CUDAFX_U8, 0);
  fill (&big, &r, 1);
  cudafx_quantize_params two = p;
  two.max_iterations = 2;
  cudafx_palette big_want;
  CHECK (cudafx_quantize (&big, &big_ref, &two, &cpu, &big_want) == CUDAFX_OK, "CPU run failed");
  s = cudafx_quantize (&big, &big_out, &two, &o, &got);
  CHECK (s == CUDAFX_ERR_CUDA && strstr (cudafx_error_message (), "seeding"),
         "24M cap, forced CUDA with a seeding fault: status %d (%s)", s, cudafx_error_message ());
  unsetenv ("CUDAFX_CUDA_FAIL");
  s = cudafx_quantize (&big, &big_out, &two, &o, &got);
  CHECK (s == CUDAFX_OK && same_palette (&big_want, &got) && harness_same_pixels (&big_ref, &big_out),
         "24M cap: status %d, differs from the CPU", s);
  harness_image_free (&big);
  harness_image_free (&big_ref);
  harness_image_free (&big_out);

  setenv ("CUDAFX_CUDA_FAIL", "seed", 1);
  setenv ("CUDAFX_CUDA_MEM_LIMIT", "512K", 1);
  memset (&report, 0, sizeof report);
  s = cudafx_quantize (&src, &out, &p, &o, &got);
  CHECK (s == CUDAFX_OK && report.backend_used == CUDAFX_BACKEND_CUDA,
         "512K cap: the host seeds, so the seeding fault is not reached: status %d (%s)", s,
         cudafx_error_message ());
  CHECK (s == CUDAFX_OK && same_palette (&want, &got) && harness_same_pixels (&ref, &out),
         "512K cap: differs from the CPU");
  unsetenv ("CUDAFX_CUDA_MEM_LIMIT");
  unsetenv ("CUDAFX_CUDA_FAIL");

  memset (&report, 0, sizeof report);
  s = cudafx_quantize (&src, &out, &p, &o, &got);
  CHECK (s == CUDAFX_OK && report.backend_used == CUDAFX_BACKEND_CUDA && report.kernel_ms > 0,
         "after the faults: status %d, backend %d, kernel %g ms", s, report.backend_used, report.kernel_ms);
  CHECK (s == CUDAFX_OK && same_palette (&want, &got) && harness_same_pixels (&ref, &out),
         "after the faults: differs from the CPU");
  harness_image_free (&src);
  harness_image_free (&ref);
  harness_image_free (&out);
}

/* A u8 image without alpha, its rows provided as asked (options.rows_needed,
 * harness_ask_rows): asked for in pieces (CUDAFX_QUANTIZE_PIECES; by
 * default one for so small an image), each uploaded, counted and sampled
 * on the device as it comes; the palette and pixels the CPU's on the whole
 * image, for RGB and grey, plainly mapped (through the colours' table) and
 * with ordered dithering (the pixels' features), and with more pixels than
 * the seeding sample. */
TEST (gpu_quantize_rows_in_pieces_match_cpu)
{
  static const char *const pieces[] = { "", "2", "3", "7" };
  harness_rng r = { 47 };
  for (int i = 0; i < 8; i++)
    {
      int ch = i % 2 ? 1 : 3, w = i < 4 ? 301 : 64, h = i < 4 ? 263 : 9;
      cudafx_image src = harness_image_new (w, h, ch, 0, CUDAFX_U8, 0);
      cudafx_image lazy = harness_image_new (w, h, ch, 0, CUDAFX_U8, 0);
      cudafx_image ref = harness_image_new (w, h, ch, 0, CUDAFX_U8, 0);
      cudafx_image out = harness_image_new (w, h, ch, 0, CUDAFX_U8, 0);
      fill (&src, &r, 1);
      cudafx_quantize_params p;
      cudafx_quantize_params_init (&p);
      p.dither = i / 2 % 2 ? CUDAFX_DITHER_ORDERED : CUDAFX_DITHER_NONE;
      p.colors = i % 3 ? 16 : 256;
      p.color_space = i / 4;
      p.max_iterations = 6;
      cudafx_palette want, got;
      cudafx_options cpu = harness_cpu_options ();
      CHECK (cudafx_quantize (&src, &ref, &p, &cpu, &want) == CUDAFX_OK, "CPU run failed");
      harness_image_poison (&lazy);
      harness_image_poison (&out);
      harness_rows feed = { &src, &lazy, 0, 0, 0, 0, 0, 0, 0 };
      cudafx_report report;
      memset (&report, 0, sizeof report);
      cudafx_options o = harness_cpu_options ();
      o.backend = CUDAFX_BACKEND_CUDA;
      o.report = &report;
      o.rows_needed = harness_ask_rows;
      o.rows_user = &feed;
      if (*pieces[i % 4])
        setenv ("CUDAFX_QUANTIZE_PIECES", pieces[i % 4], 1);
      cudafx_status s = cudafx_quantize (&lazy, &out, &p, &o, &got);
      unsetenv ("CUDAFX_QUANTIZE_PIECES");
      int want_calls = *pieces[i % 4] ? atoi (pieces[i % 4]) : 1;
      CHECK (s == CUDAFX_OK, "case %d: status %d (%s)", i, s, cudafx_error_message ());
      CHECK (feed.calls == want_calls && feed.asked == h, "case %d: %d asks (%d wanted), rows up to %d of %d", i,
             feed.calls, want_calls, feed.asked, h);
      CHECK (s == CUDAFX_OK && same_palette (&want, &got) && harness_same_pixels (&ref, &out),
             "case %d: differs from the CPU (%d/%d colours, %d/%d iterations)", i, got.colors, want.colors,
             got.iterations, want.iterations);
      CHECK (report.kernel_ms > 0 && report.transfer_ms > 0, "case %d: kernel %g ms, transfer %g ms", i,
             report.kernel_ms, report.transfer_ms);
      harness_image_free (&src);
      harness_image_free (&lazy);
      harness_image_free (&ref);
      harness_image_free (&out);
    }
}

/* Floyd–Steinberg on the device for every layout and type of one size; K and
 * the colour space rotate so that each pairing occurs. Returns whether the
 * CPU's dithered output differed from its plain mapping in some case (the
 * comparison then covers the diffused errors, not just the nearest entries). */
static int
compare_dither_sizes (int w, int h, harness_rng *r)
{
  static const int layouts[][2] = { { 3, 0 }, { 4, 1 }, { 1, 0 }, { 2, 1 } };
  static const int colors[] = { 2, 16, 256 };
  int diffused = 0;
  for (int li = 0; li < 4; li++)
    for (int t = 0; t < 2 && harness_failures () < 5; t++)
      {
        cudafx_type type = t ? CUDAFX_F32 : CUDAFX_U8;
        int ch = layouts[li][0], alpha = layouts[li][1];
        cudafx_image src = harness_image_new (w, h, ch, alpha, type, 3 * cudafx_type_size (type));
        fill (&src, r, li % 2);
        for (int i = 0; i < 2; i++)
          {
            int combo = 2 * (2 * li + t) + i;
            cudafx_quantize_params p;
            cudafx_quantize_params_init (&p);
            p.colors = colors[combo % 3];
            p.color_space = (combo / 3) % 2;
            p.max_iterations = 4;
            p.seed = (uint32_t) combo;
            p.dither = CUDAFX_DITHER_FLOYD_STEINBERG;
            char what[128];
            snprintf (what, sizeof what, "dither %dx%d ch %d alpha %d %s %s K %d", w, h, ch, alpha,
                      t ? "f32" : "u8", p.color_space ? "rgb" : "oklab", p.colors);
            compare (&src, &p, what);

            cudafx_image plain = harness_image_new (w, h, ch, alpha, type, 0);
            cudafx_image dithered = harness_image_new (w, h, ch, alpha, type, 0);
            cudafx_options cpu = harness_cpu_options ();
            CHECK (cudafx_quantize (&src, &dithered, &p, &cpu, NULL) == CUDAFX_OK, "%s on the CPU", what);
            p.dither = CUDAFX_DITHER_NONE;
            CHECK (cudafx_quantize (&src, &plain, &p, &cpu, NULL) == CUDAFX_OK, "%s on the CPU", what);
            diffused |= !harness_same_pixels (&plain, &dithered);
            harness_image_free (&plain);
            harness_image_free (&dithered);
          }
        harness_image_free (&src);
      }
  return diffused;
}

TEST_SHARDED (gpu_quantize_dither_small_images, 8)
{
  /* one pixel, one column (one lane per group), one row, 65 rows: groups of
   * 32, 32 and 1 rows */
  static const int sizes[][2] = { { 1, 1 }, { 1, 70 }, { 70, 1 }, { 33, 65 } };
  harness_rng r = { 37 };
  for (int si = 0; si < 4; si++)
    compare_dither_sizes (sizes[si][0], sizes[si][1], &r);
}

TEST_SHARDED (gpu_quantize_dither_larger_images, 16)
{
  static const int sizes[][2] = { { 250, 41 }, { 200, 300 } };
  harness_rng r = { 41 };
  for (int si = 0; si < 2; si++)
    CHECK (compare_dither_sizes (sizes[si][0], sizes[si][1], &r),
           "%dx%d: dithering never changed the CPU's output", sizes[si][0], sizes[si][1]);
}

TEST (gpu_quantize_dither_stripes)
{
  /* each stripe continues the last one's errors */
  cudafx_quantize_params p;
  cudafx_quantize_params_init (&p);
  p.dither = CUDAFX_DITHER_FLOYD_STEINBERG;
  p.max_iterations = 4;
  compare_capped (43, 211, 230, &p, 7);
}

TEST (gpu_quantize_dither_ties)
{
  /* Few levels (0..3 of 255, or the extremes) on a lattice: the centres sit
   * on or between lattice points, so diffused values can lie exactly halfway
   * between entries, where the lowest index must win (not counted here: the
   * engine does not expose the distances). Grey and RGB, both spaces, K 4,
   * 16, 23 (the kernel's padded palettes: up to 16 entries in registers,
   * more in groups of 8 in shared memory) and 256. */
  harness_rng r = { 47 };
  static const int layouts[][2] = { { 1, 0 }, { 3, 0 }, { 4, 1 } };
  for (int li = 0; li < 3; li++)
    for (int lv = 0; lv < 2; lv++)
      {
        int ch = layouts[li][0], alpha = layouts[li][1], dims = ch - alpha;
        cudafx_image src = harness_image_new (97, 70, ch, alpha, CUDAFX_U8, 0);
        for (int y = 0; y < src.height; y++)
          for (int x = 0; x < src.width; x++)
            {
              for (int c = 0; c < dims; c++)
                harness_set (&src, x, y, c, lv ? 255 * (harness_rand (&r) % 2) : harness_rand (&r) % 4);
              if (alpha)
                harness_set (&src, x, y, ch - 1, harness_rand (&r) % 8 ? 255 : 0);
            }
        static const int colors[] = { 4, 16, 23, 256 };
        for (int ki = 0; ki < 4; ki++)
          for (int space = 0; space < 2; space++)
            {
              cudafx_quantize_params p;
              cudafx_quantize_params_init (&p);
              p.colors = colors[ki];
              p.color_space = space;
              p.max_iterations = 4;
              p.dither = CUDAFX_DITHER_FLOYD_STEINBERG;
              char what[96];
              snprintf (what, sizeof what, "ties ch %d levels %s %s K %d", ch, lv ? "0/255" : "0..3",
                        space ? "rgb" : "oklab", p.colors);
              compare (&src, &p, what);
            }
        harness_image_free (&src);
      }
}

/* Given palettes and every dither on the device: palettes of up to 2, 7,
 * 100 and 256 entries (with duplicates: the first must win on both sides),
 * odd sizes, every layout and type, both spaces; positioned dithers on
 * computed palettes too, and everything again in stripes (the pattern is
 * the image's, not the stripe's). */
/* A given palette: the CPU's k-means palette of src with K colours, every
 * fifth entry then made a copy of an earlier one. */
static void
given_palette (const cudafx_image *src, int colors, cudafx_palette *pal)
{
  cudafx_image tmp = harness_image_new (src->width, src->height, src->channels, src->has_alpha,
                                        src->type, 0);
  cudafx_quantize_params p;
  cudafx_quantize_params_init (&p);
  p.colors = colors;
  p.max_iterations = 3;
  cudafx_options cpu = harness_cpu_options ();
  CHECK (cudafx_quantize (src, &tmp, &p, &cpu, pal) == CUDAFX_OK, "palette: %s", cudafx_error_message ());
  for (int e = 3; e < pal->colors; e += 5)
    memcpy (pal->entries[e], pal->entries[e / 2], sizeof pal->entries[e]);
  harness_image_free (&tmp);
}

TEST_SHARDED (gpu_quantize_given_palettes_and_dithers_match_cpu, 16)
{
  static const int sizes[][2] = { { 1, 1 }, { 1, 37 }, { 45, 1 }, { 67, 71 }, { 200, 130 } };
  static const int layouts[][2] = { { 1, 0 }, { 2, 1 }, { 3, 0 }, { 4, 1 } };
  static const int colors[] = { 2, 7, 100, 256 };
  harness_rng r = { 2323 };
  for (int si = 0; si < 5; si++)
    for (int li = 0; li < 4; li++)
      for (int t = 0; t < 2 && harness_failures () < 5; t++)
        {
          cudafx_type type = t ? CUDAFX_F32 : CUDAFX_U8;
          int w = sizes[si][0], h = sizes[si][1], ch = layouts[li][0], alpha = layouts[li][1];
          cudafx_image src = harness_image_new (w, h, ch, alpha, type, 3 * cudafx_type_size (type));
          fill (&src, &r, (si + li) % 2);
          for (int dither = 0; dither <= CUDAFX_DITHER_BLUE_NOISE; dither++)
            for (int space = 0; space < 2; space++)
              {
                int combo = (si + li + t + dither + space) % 5;
                cudafx_palette given;
                cudafx_quantize_params p;
                cudafx_quantize_params_init (&p);
                p.color_space = space;
                p.dither = dither;
                p.max_iterations = 4;
                if (combo < 4)
                  {
                    given_palette (&src, colors[combo], &given);
                    p.palette = &given;
                  }
                char what[128];
                snprintf (what, sizeof what, "%dx%d ch %d %s %s dither %d palette %d", w, h, ch,
                          t ? "f32" : "u8", space ? "rgb" : "oklab", dither,
                          combo < 4 ? colors[combo] : 0);
                compare (&src, &p, what);
              }
          harness_image_free (&src);
        }
}

TEST (gpu_quantize_positioned_and_low_bleed_stripes)
{
  static const cudafx_dither dithers[] = { CUDAFX_DITHER_ORDERED, CUDAFX_DITHER_BLUE_NOISE,
                                           CUDAFX_DITHER_FS_LOW_BLEED };
  for (int d = 0; d < 3; d++)
    {
      cudafx_quantize_params p;
      cudafx_quantize_params_init (&p);
      p.dither = dithers[d];
      p.max_iterations = 4;
      compare_capped (53 + d, 211, 230, &p, 7);
    }
}
