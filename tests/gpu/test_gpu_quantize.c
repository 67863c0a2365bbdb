/* Colour quantize on the CUDA backend against the CPU reference, run by
 * `make check-gpu`: the same palette (entries, count, iterations) and the
 * same output bytes over odd sizes, channels 1-4 with and without alpha,
 * u8 and f32, both colour spaces, K = 2, 16 and 256, dither on and off; and
 * again when the device-memory cap forces stripes and a small grid. The
 * Floyd–Steinberg kernel gets its own cases: images of one row or column,
 * heights that end groups of 32 rows part way, stripes. */
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

TEST (gpu_quantize_matches_cpu)
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

TEST (gpu_quantize_stripes_match_cpu)
{
  /* 64K: a few rows per stripe and two blocks; 512K: fewer, larger stripes */
  static const char *limits[] = { "64K", "512K" };
  harness_rng r = { 31 };
  cudafx_image rgba = harness_image_new (301, 203, 4, 1, CUDAFX_U8, 9);
  cudafx_image grey = harness_image_new (301, 203, 1, 0, CUDAFX_F32, 4);
  fill (&rgba, &r, 0);
  fill (&grey, &r, 1);
  for (int i = 0; i < 2; i++)
    {
      setenv ("CUDAFX_CUDA_MEM_LIMIT", limits[i], 1);
      for (int space = 0; space < 2; space++)
        {
          cudafx_quantize_params p;
          cudafx_quantize_params_init (&p);
          p.color_space = space;
          p.colors = 16;
          compare (&rgba, &p, limits[i]);
          p.colors = 5;
          compare (&grey, &p, limits[i]);
        }
    }
  unsetenv ("CUDAFX_CUDA_MEM_LIMIT");
  harness_image_free (&rgba);
  harness_image_free (&grey);
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

TEST (gpu_quantize_dither_small_images)
{
  /* one pixel, one column (one lane per group), one row, 65 rows: groups of
   * 32, 32 and 1 rows */
  static const int sizes[][2] = { { 1, 1 }, { 1, 70 }, { 70, 1 }, { 33, 65 } };
  harness_rng r = { 37 };
  for (int si = 0; si < 4; si++)
    compare_dither_sizes (sizes[si][0], sizes[si][1], &r);
}

TEST (gpu_quantize_dither_larger_images)
{
  static const int sizes[][2] = { { 250, 41 }, { 200, 300 } };
  harness_rng r = { 41 };
  for (int si = 0; si < 2; si++)
    CHECK (compare_dither_sizes (sizes[si][0], sizes[si][1], &r),
           "%dx%d: dithering never changed the CPU's output", sizes[si][0], sizes[si][1]);
}

TEST (gpu_quantize_dither_stripes)
{
  /* 64K: stripes of a few rows, each continuing the last one's errors; 512K:
   * stripes of several groups of 32 rows */
  static const char *limits[] = { "64K", "512K" };
  harness_rng r = { 43 };
  cudafx_image rgba = harness_image_new (301, 203, 4, 1, CUDAFX_U8, 9);
  cudafx_image grey = harness_image_new (211, 230, 1, 0, CUDAFX_F32, 4);
  fill (&rgba, &r, 0);
  fill (&grey, &r, 1);
  for (int i = 0; i < 2; i++)
    {
      setenv ("CUDAFX_CUDA_MEM_LIMIT", limits[i], 1);
      for (int space = 0; space < 2; space++)
        {
          cudafx_quantize_params p;
          cudafx_quantize_params_init (&p);
          p.color_space = space;
          p.dither = CUDAFX_DITHER_FLOYD_STEINBERG;
          p.max_iterations = 4;
          p.colors = 16;
          compare (&rgba, &p, limits[i]);
          p.colors = 7;
          compare (&grey, &p, limits[i]);
        }
    }
  unsetenv ("CUDAFX_CUDA_MEM_LIMIT");
  harness_image_free (&rgba);
  harness_image_free (&grey);
}
