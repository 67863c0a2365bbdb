/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The texture-robust noise estimate (core/noise_estimate.c) through
 * cudafx_nlmeans_estimate: sigma on images half covered by fine texture,
 * the flat model there and on the clean texture, the correlation of white,
 * smoothed and channel-mixed noise, and independence of the thread count. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double
gauss (harness_rng *rng)
{
  double u = harness_uniform (rng), v = harness_uniform (rng);
  return sqrt (-2 * log (1 - u)) * cos (2 * M_PI * v);
}

/* A fixed clean scene (0..255): a smooth ramp on the left half and, on the
 * right, fine texture like fur or foliage: per-pixel random detail of
 * amplitude +-40 over a gentle ramp. Texture a residual filter reads as
 * noise of sigma 20 or more. */
static double *
scene (int w, int h, int colours, harness_rng *rng)
{
  double *s = malloc (sizeof *s * w * h * colours);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < colours; c++)
        {
          double base = 60 + 120.0 * x / w + 20 * sin (y / 23.0 + c);
          if (x >= w / 2)
            base += 80 * (harness_uniform (rng) - 0.5);
          s[((size_t) y * w + x) * colours + c] = base;
        }
  return s;
}

/* img = clean + Gaussian noise of sigma (rounded and clipped by harness_set). */
static void
add_noise (cudafx_image *img, const double *clean, double sigma, harness_rng *rng)
{
  const int colours = img->channels;
  for (int y = 0; y < img->height; y++)
    for (int x = 0; x < img->width; x++)
      for (int c = 0; c < colours; c++)
        harness_set (img, x, y, c, clean[((size_t) y * img->width + x) * colours + c] + sigma * gauss (rng));
}

TEST (noise_estimate_texture)
{
  harness_rng rng = { 4101 };
  cudafx_options o = harness_options ();
  const int w = 320, h = 240;
  for (int colours = 1; colours <= 3; colours += 2)
    for (int type = 0; type < 2; type++)
      {
        double *clean = scene (w, h, colours, &rng);
        cudafx_image img = harness_image_new (w, h, colours, 0, type, 0);
        cudafx_nlmeans_info info;
        static const double sigmas[] = { 5, 10, 20 };
        for (int i = 0; i < 3; i++)
          {
            add_noise (&img, clean, sigmas[i], &rng);
            CHECK (cudafx_nlmeans_estimate (&img, &o, &info) == CUDAFX_OK, "%s", cudafx_error_message ());
            CHECK (fabs (info.sigma - sigmas[i]) < 0.1 * sigmas[i] && !info.noise.signal_dependent,
                   "%d channels %s, sigma %g on texture: estimated %g, signal dependent %d", colours,
                   type ? "f32" : "u8", sigmas[i], info.sigma, info.noise.signal_dependent);
          }
        /* The clean scene: its texture is no noise, and no camera's. */
        add_noise (&img, clean, 0, &rng);
        CHECK (cudafx_nlmeans_estimate (&img, &o, &info) == CUDAFX_OK, "%s", cudafx_error_message ());
        CHECK (info.sigma < 1.5 && !info.noise.signal_dependent,
               "%d channels %s, clean texture: sigma %g, signal dependent %d", colours, type ? "f32" : "u8",
               info.sigma, info.noise.signal_dependent);
        harness_image_free (&img);
        free (clean);
      }
}

/* Noise on a smooth image: white, smoothed by [1 2 1]/4 across and down
 * (correlation 2/3 at the 4 nearest neighbours, 4/9 at the diagonals) or
 * mixed between channels (each channel's noise shares half its variance
 * with the others': correlation 1/2). */
TEST (noise_estimate_correlation)
{
  harness_rng rng = { 4102 };
  cudafx_options o = harness_options ();
  const int w = 300, h = 220, pad = 1;
  double *n = malloc (sizeof *n * (w + 2 * pad) * (h + 2 * pad) * 4);
  for (int kind = 0; kind < 3; kind++)
    {
      cudafx_image img = harness_image_new (w, h, 3, 0, CUDAFX_U8, 0);
      for (size_t i = 0; i < (size_t) (w + 2 * pad) * (h + 2 * pad) * 4; i++)
        n[i] = gauss (&rng);
      for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
          for (int c = 0; c < 3; c++)
            {
#define N_AT(xx, yy, cc) n[(((size_t) (yy) + pad) * (w + 2 * pad) + (xx) + pad) * 4 + (cc)]
              double v;
              if (kind == 0)
                v = N_AT (x, y, c);
              else if (kind == 1)
                {
                  v = 0;
                  static const double k[3] = { 0.25, 0.5, 0.25 };
                  for (int j = -1; j <= 1; j++)
                    for (int i = -1; i <= 1; i++)
                      v += k[i + 1] * k[j + 1] * N_AT (x + i, y + j, c);
                  v /= 0.375; /* unit variance: sum of the squared taps is 0.375^2 */
                }
              else
                v = (N_AT (x, y, c) + N_AT (x, y, 3)) / M_SQRT2;
#undef N_AT
              harness_set (&img, x, y, c, 70 + 100.0 * x / w + 12 * v);
            }
      cudafx_nlmeans_info info;
      CHECK (cudafx_nlmeans_estimate (&img, &o, &info) == CUDAFX_OK, "%s", cudafx_error_message ());
      const cudafx_noise_model *m = &info.noise;
      const double near = kind == 1 ? 2.0 / 3 : 0, diag = kind == 1 ? 4.0 / 9 : 0, ch = kind == 2 ? 0.5 : 0;
      CHECK (fabs (m->spatial_corr[1][2] - near) < 0.1 && fabs (m->spatial_corr[1][0] - near) < 0.1
             && fabs (m->spatial_corr[2][1] - near) < 0.1 && fabs (m->spatial_corr[0][1] - near) < 0.1
             && fabs (m->spatial_corr[2][2] - diag) < 0.1 && fabs (m->spatial_corr[0][2] - diag) < 0.1
             && m->spatial_corr[1][1] == 1,
             "kind %d: neighbours %.3f %.3f %.3f %.3f, diagonals %.3f %.3f, want %.3f and %.3f", kind,
             m->spatial_corr[1][0], m->spatial_corr[1][2], m->spatial_corr[0][1], m->spatial_corr[2][1],
             m->spatial_corr[0][0], m->spatial_corr[0][2], near, diag);
      CHECK (fabs (m->channel_corr - ch) < 0.1, "kind %d: channel correlation %.3f, want %.3f", kind,
             m->channel_corr, ch);
      CHECK (m->correlated == (kind == 1) && fabs (m->correlation - near) < 0.1,
             "kind %d: correlated %d, correlation %.3f", kind, m->correlated, m->correlation);
      harness_image_free (&img);
    }
  free (n);
}

TEST (noise_estimate_ignores_thread_count)
{
  harness_rng rng = { 4103 };
  const int w = 400, h = 300;
  double *clean = scene (w, h, 3, &rng);
  cudafx_image img = harness_image_new (w, h, 4, 1, CUDAFX_U8, 8);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      {
        for (int c = 0; c < 3; c++)
          harness_set (&img, x, y, c, clean[((size_t) y * w + x) * 3 + c] + 9 * gauss (&rng));
        harness_set (&img, x, y, 3, 255);
      }
  cudafx_nlmeans_info one, many;
  cudafx_options o = harness_cpu_options ();
  o.threads = 1;
  CHECK (cudafx_nlmeans_estimate (&img, &o, &one) == CUDAFX_OK, "%s", cudafx_error_message ());
  o.threads = 3;
  CHECK (cudafx_nlmeans_estimate (&img, &o, &many) == CUDAFX_OK, "%s", cudafx_error_message ());
  CHECK (one.sigma > 8 && one.sigma < 10, "sigma %g", one.sigma);
  CHECK (one.sigma == many.sigma && one.noise.correlation == many.noise.correlation
         && one.noise.channel_corr == many.noise.channel_corr
         && one.noise.signal_dependent == many.noise.signal_dependent,
         "1 thread: sigma %.17g correlation %.17g; 3 threads: %.17g, %.17g", one.sigma, one.noise.correlation,
         many.sigma, many.noise.correlation);
  harness_image_free (&img);
  free (clean);
}
