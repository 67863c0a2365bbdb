/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Automatic nl-means for camera noise (core/nlmeans_noise.c): the noise
 * level function fitted to images of known noise, the choice between it and
 * one sigma, the denoising behind the variance-stabilising transform, and
 * its inverse's lack of bias where clipping at black skews the noise. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double
srgb_decode (double v)
{
  return v <= 0.04045 ? v / 12.92 : pow ((v + 0.055) / 1.055, 2.4);
}

static double
srgb_encode (double x)
{
  x = x < 0 ? 0 : x > 1 ? 1 : x;
  return x <= 0.0031308 ? 12.92 * x : 1.055 * pow (x, 1 / 2.4) - 0.055;
}


/* The model's sigma in sRGB units (0..255) at sRGB level y. */
static double
true_sigma (double a, double b, double y)
{
  double x = srgb_decode (y / 255), h = 1e-6;
  double slope = 255 * (srgb_encode (x + h) - srgb_encode (x)) / h;
  return slope * sqrt (a * x + b);
}

/* clean(x, y, c) in sRGB 0..255: a ramp across the columns, shifted a little
 * per channel, with a slow wave down the rows. */
static double
clean_value (int x, int y, int c, int w)
{
  double v = 255.0 * x / (w - 1) + 6 * sin (y / 17.0 + c);
  return v < 0 ? 0 : v > 255 ? 255 : v;
}

/* Camera noise (a, b >= 0) in linear light, or (a < 0) Gaussian noise of
 * sigma b on the sRGB values; clipped (u8: and rounded) by harness_set. */
static void
fill (cudafx_image *img, double a, double b, harness_rng *rng)
{
  int colours = img->channels - (img->has_alpha ? 1 : 0);
  for (int y = 0; y < img->height; y++)
    for (int x = 0; x < img->width; x++)
      {
        for (int c = 0; c < colours; c++)
          {
            double v = clean_value (x, y, c, img->width), out;
            if (a < 0)
              out = v + b * harness_gauss (rng);
            else
              {
                double lin = srgb_decode (v / 255);
                out = 255 * srgb_encode (lin + sqrt (a * lin + b) * harness_gauss (rng));
              }
            harness_set (img, x, y, c, out);
          }
        if (img->has_alpha)
          harness_set (img, x, y, colours, (x * 7 + y) % 256);
      }
}

static double
psnr_to_clean (const cudafx_image *img)
{
  int colours = img->channels - (img->has_alpha ? 1 : 0);
  double se = 0;
  for (int y = 0; y < img->height; y++)
    for (int x = 0; x < img->width; x++)
      for (int c = 0; c < colours; c++)
        {
          double d = harness_get (img, x, y, c) - round (clean_value (x, y, c, img->width));
          se += d * d;
        }
  return 10 * log10 (255.0 * 255.0 / (se / ((double) img->width * img->height * colours)));
}

/* Level 16 of tests/quality: sRGB sigma 16 at mid grey. */
static const double A16 = 1.420e-2, B16 = 3.406e-4;

TEST (nlmeans_noise_model_fit)
{
  harness_rng rng = { 2208 };
  cudafx_options o = harness_options ();
  cudafx_nlmeans_info info;
  for (int type = 0; type < 2; type++)
    {
      cudafx_image img = harness_image_new (384, 256, 3, 0, type, 4);
      fill (&img, A16, B16, &rng);
      CHECK (cudafx_nlmeans_estimate (&img, &o, &info) == CUDAFX_OK, "%s", cudafx_error_message ());
      const cudafx_noise_model *m = &info.noise;
      CHECK (m->signal_dependent && m->channels == 3, "%s camera noise: flat model",
             type ? "f32" : "u8");
      for (int c = 0; c < 3; c++)
        CHECK (fabs (m->a[c] - A16) < 0.25 * A16 && m->b[c] < 3 * B16,
               "%s channel %d: a %g b %g, true %g %g", type ? "f32" : "u8", c, m->a[c], m->b[c], A16, B16);
      double dark = true_sigma (A16, B16, 32), light = true_sigma (A16, B16, 224);
      CHECK (fabs (m->sigma_dark - dark) < 0.2 * dark && fabs (m->sigma_light - light) < 0.15 * light,
             "%s: sigma %g in the shadows, %g in the highlights; true %g, %g", type ? "f32" : "u8",
             m->sigma_dark, m->sigma_light, dark, light);
      CHECK (info.stabilised_sigma > 0 && info.h > 0, "stabilised sigma %g h %g",
             info.stabilised_sigma, info.h);

      /* Gaussian noise on the sRGB values, as strong at mid grey: one sigma. */
      fill (&img, -1, 16, &rng);
      CHECK (cudafx_nlmeans_estimate (&img, &o, &info) == CUDAFX_OK, "%s", cudafx_error_message ());
      CHECK (!info.noise.signal_dependent && fabs (info.sigma - 16) < 1.0
             && info.noise.sigma_dark == info.sigma && info.noise.sigma_light == info.sigma,
             "%s Gaussian noise 16: signal dependent %d, sigma %g (%g .. %g)", type ? "f32" : "u8",
             info.noise.signal_dependent, info.sigma, info.noise.sigma_dark, info.noise.sigma_light);
      harness_image_free (&img);
    }
}

TEST (nlmeans_auto_camera_noise)
{
  harness_rng rng = { 22 };
  cudafx_options o = harness_options ();
  for (int type = 0; type < 2; type++)
    {
      cudafx_image src = harness_image_new (300, 200, 3, 0, type, 0);
      cudafx_image dst = harness_image_new (300, 200, 3, 0, type, 0);
      cudafx_image again = harness_image_new (300, 200, 3, 0, type, 0);
      fill (&src, A16, B16, &rng);
      cudafx_nlmeans_params p;
      cudafx_nlmeans_params_init (&p);
      p.automatic = 1;
      cudafx_nlmeans_info info = { 0 }, flat = { 0 };
      CHECK (cudafx_nlmeans (&src, &dst, &p, &o, &info) == CUDAFX_OK, "%s", cudafx_error_message ());
      CHECK (info.noise.signal_dependent, "%s: flat model", type ? "f32" : "u8");
      double ours = psnr_to_clean (&dst);

      /* One sigma, as automatic mode ran before the noise model. */
      p.sigma = info.sigma;
      CHECK (cudafx_nlmeans (&src, &again, &p, &o, &flat) == CUDAFX_OK, "%s", cudafx_error_message ());
      double one_sigma = psnr_to_clean (&again);
      CHECK (ours > one_sigma + 0.5, "%s: %.2f dB with the model, %.2f with one sigma (noisy %.2f)",
             type ? "f32" : "u8", ours, one_sigma, psnr_to_clean (&src));

      /* The model found, given back (a dialog's preview), is the same run. */
      p.noise = info.noise;
      CHECK (cudafx_nlmeans (&src, &again, &p, &o, &flat) == CUDAFX_OK, "%s", cudafx_error_message ());
      CHECK (harness_max_diff (&dst, &again) == 0 && flat.h == info.h
             && flat.stabilised_sigma == info.stabilised_sigma,
             "%s: given model differs by %g", type ? "f32" : "u8", harness_max_diff (&dst, &again));
      p.noise.channels = 1;
      CHECK (cudafx_nlmeans (&src, &again, &p, &o, NULL) == CUDAFX_ERR_INVALID_ARG
             && strstr (cudafx_error_message (), "noise model"), "model of 1 channel accepted: %s",
             cudafx_error_message ());
      harness_image_free (&src);
      harness_image_free (&dst);
      harness_image_free (&again);
    }

  /* Alpha is copied and changes nothing else. */
  cudafx_image src = harness_image_new (200, 120, 4, 1, CUDAFX_U8, 0);
  cudafx_image dst = harness_image_new (200, 120, 4, 1, CUDAFX_U8, 0);
  cudafx_image rgb = harness_image_new (200, 120, 3, 0, CUDAFX_U8, 0);
  cudafx_image rgb_out = harness_image_new (200, 120, 3, 0, CUDAFX_U8, 0);
  fill (&src, A16, B16, &rng);
  for (int y = 0; y < 120; y++)
    for (int x = 0; x < 200; x++)
      for (int c = 0; c < 3; c++)
        harness_set (&rgb, x, y, c, harness_get (&src, x, y, c));
  cudafx_nlmeans_params p;
  cudafx_nlmeans_params_init (&p);
  p.automatic = 1;
  cudafx_nlmeans_info info = { 0 };
  CHECK (cudafx_nlmeans (&src, &dst, &p, &o, &info) == CUDAFX_OK, "%s", cudafx_error_message ());
  CHECK (cudafx_nlmeans (&rgb, &rgb_out, &p, &o, NULL) == CUDAFX_OK, "%s", cudafx_error_message ());
  CHECK (info.noise.signal_dependent, "RGBA: flat model");
  double diff = 0;
  for (int y = 0; y < 120; y++)
    for (int x = 0; x < 200; x++)
      {
        CHECK (harness_get (&dst, x, y, 3) == harness_get (&src, x, y, 3), "alpha changed at %d,%d", x, y);
        for (int c = 0; c < 3; c++)
          diff = fmax (diff, fabs (harness_get (&dst, x, y, c) - harness_get (&rgb_out, x, y, c)));
      }
  CHECK (diff == 0, "RGBA's colours differ from RGB's by %g", diff);
  harness_image_free (&src);
  harness_image_free (&dst);
  harness_image_free (&rgb);
  harness_image_free (&rgb_out);
}

/* Flat areas keep their mean through transform, nl-means and inverse, also
 * in the dark, where clipping at 0 makes the noisy pixels' mean too bright
 * (level 28 of tests/quality: the noise at sRGB 20 reaches sRGB 60). */
TEST (nlmeans_camera_inverse_unbiased)
{
  harness_rng rng = { 2028 };
  const double a = 4.349e-2, b = 1.043e-3;
  cudafx_options o = harness_options ();
  cudafx_nlmeans_params p;
  cudafx_nlmeans_params_init (&p);
  p.automatic = 1;
  p.sigma = 1; /* any: the model decides */
  p.noise.signal_dependent = 1;
  p.noise.channels = 1;
  p.noise.a[0] = a;
  p.noise.b[0] = b;
  static const double levels[] = { 20, 60, 128, 220 };
  for (size_t i = 0; i < sizeof levels / sizeof *levels; i++)
    {
      cudafx_image src = harness_image_new (160, 160, 1, 0, CUDAFX_U8, 0);
      cudafx_image dst = harness_image_new (160, 160, 1, 0, CUDAFX_U8, 0);
      double lin = srgb_decode (levels[i] / 255), noisy = 0, out = 0;
      for (int y = 0; y < 160; y++)
        for (int x = 0; x < 160; x++)
          harness_set (&src, x, y, 0, 255 * srgb_encode (lin + sqrt (a * lin + b) * harness_gauss (&rng)));
      CHECK (cudafx_nlmeans (&src, &dst, &p, &o, NULL) == CUDAFX_OK, "%s", cudafx_error_message ());
      for (int y = 0; y < 160; y++)
        for (int x = 0; x < 160; x++)
          noisy += harness_get (&src, x, y, 0) / (160 * 160), out += harness_get (&dst, x, y, 0) / (160 * 160);
      CHECK (fabs (out - levels[i]) < 1.0, "level %g: mean %.2f after denoising (noisy %.2f)",
             levels[i], out, noisy);
      harness_image_free (&src);
      harness_image_free (&dst);
    }
}
