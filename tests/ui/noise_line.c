/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The dialogs' noise line (ui/common/dialog-common.c) on buffers as GIMP
 * hands them over: white noise reads as noise alone; noise smoothed over
 * neighbouring pixels and alike in the colour channels (what a camera's
 * demosaicking and JPEG leave) is named correlated, with its strength
 * between pixels and between channels and what each filter's automatic
 * mode does about it; a grey layer's line names no channels. The engine's
 * estimate decides, on the CPU backend.
 *
 *   test-noise-line     prints a line per check, ends with "N passed, N failed" */
#include <gegl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dialog-common.h"

#define SIDE 256

static int passed, failed;

static void
check (int ok, const char *what, const char *text)
{
  printf ("%s %s%s%s\n", ok ? "ok  " : "FAIL", what, ok ? "" : ": ", ok ? "" : (text ? text : "(null)"));
  if (ok)
    passed++;
  else
    failed++;
}

/* Standard normal deviates from a fixed seed (Box-Muller on a 64-bit LCG). */
static double
normal (uint64_t *state)
{
  double u[2];
  for (int i = 0; i < 2; i++)
    {
      *state = *state * 6364136223846793005ull + 1442695040888963407ull;
      u[i] = ((*state >> 11) + 0.5) / 9007199254740992.0;
    }
  return sqrt (-2.0 * log (u[0])) * cos (6.283185307179586 * u[1]);
}

/* A mid-grey buffer of `channels` (1: Y', 3: R'G'B') u8 values with noise of
 * about sigma: white and independent per channel, or (smooth) white noise
 * through the [1 2 1] / 4 kernel in both directions, one field for all
 * channels. */
static GeglBuffer *
noisy_buffer (int channels, int smooth, double sigma, uint64_t seed)
{
  const int pad = SIDE + 2;
  double *field = malloc (sizeof *field * pad * pad * channels);
  guint8 *pixels = malloc ((size_t) SIDE * SIDE * channels);
  for (int i = 0; i < pad * pad * channels; i++)
    field[i] = normal (&seed);
  /* [1 2 1] / 4 leaves 3/8 of the variance in each direction, 9/64 in
   * both: scale back to sigma. */
  const double gain = smooth ? sigma / sqrt (9.0 / 64.0) : sigma;
  for (int y = 0; y < SIDE; y++)
    for (int x = 0; x < SIDE; x++)
      for (int c = 0; c < channels; c++)
        {
          double v;
          if (smooth)
            {
              static const double k[3] = { 0.25, 0.5, 0.25 };
              v = 0;
              for (int dy = 0; dy < 3; dy++)
                for (int dx = 0; dx < 3; dx++)
                  v += k[dy] * k[dx] * field[(y + dy) * pad + x + dx];
            }
          else
            v = field[((y + 1) * pad + x + 1) * channels + c];
          double p = 128.0 + gain * v;
          pixels[((size_t) y * SIDE + x) * channels + c] = (guint8) (p < 0 ? 0 : p > 255 ? 255 : p + 0.5);
        }
  GeglRectangle r = { 0, 0, SIDE, SIDE };
  GeglBuffer *b = gegl_buffer_new (&r, babl_format (channels == 1 ? "Y' u8" : "R'G'B' u8"));
  gegl_buffer_set (b, &r, 0, NULL, pixels, GEGL_AUTO_ROWSTRIDE);
  free (field);
  free (pixels);
  return b;
}

static gchar *
line (GeglBuffer *b, int filter, cudafx_noise_model *noise)
{
  GeglRectangle r = { 0, 0, SIDE, SIDE };
  double sigma;
  return cudafx_dialog_noise_text (b, &r, filter, &sigma, noise);
}

int
main (int argc, char **argv)
{
  cudafx_noise_model noise;
  gchar *t;

  setenv ("CUDAFX_BACKEND", "cpu", 1);
  gegl_init (&argc, &argv);

  GeglBuffer *white = noisy_buffer (3, 0, 8.0, 1);
  t = line (white, CUDAFX_FILTER_NLMEANS, &noise);
  check (t && strstr (t, "Estimated noise σ") && !noise.correlated && !strstr (t, "Correlated"),
         "white noise: the line names no correlation", t);
  g_free (t);
  g_object_unref (white);

  GeglBuffer *smooth = noisy_buffer (3, 1, 8.0, 2);
  t = line (smooth, CUDAFX_FILTER_NLMEANS, &noise);
  check (noise.correlated && !noise.signal_dependent, "smoothed noise: estimated correlated and flat", t);
  gchar *expect =
      g_strdup_printf ("Correlated noise: %.2f between neighbouring pixels, %.2f between the colour "
                       "channels",
                       noise.correlation, noise.channel_corr);
  check (t && strstr (t, expect) && noise.channel_corr > 0.8, "nl-means: the line gives both correlations",
         t);
  check (t && strstr (t, "raises the strength"), "nl-means: the line says what automatic mode does", t);
  g_free (expect);
  g_free (t);
  t = line (smooth, CUDAFX_FILTER_NLBAYES, &noise);
  check (t && strstr (t, "Correlated noise") && strstr (t, "at full and at half size"),
         "nl-bayes: the line says it denoises at two sizes", t);
  g_free (t);
  g_object_unref (smooth);

  GeglBuffer *grey = noisy_buffer (1, 1, 8.0, 3);
  t = line (grey, CUDAFX_FILTER_NLMEANS, &noise);
  check (t && noise.correlated && strstr (t, "Correlated noise") && !strstr (t, "colour channels"),
         "grey layer: correlation between pixels only", t);
  g_free (t);
  g_object_unref (grey);

  /* Camera noise behind its transform: seen, but nothing more claimed. */
  memset (&noise, 0, sizeof noise);
  noise.correlated = 1;
  noise.signal_dependent = 1;
  noise.channels = 3;
  noise.correlation = 0.6;
  t = cudafx_dialog_correlation_note (CUDAFX_FILTER_NLMEANS, &noise);
  check (t && strstr (t, "Correlated noise: 0.60") && !strstr (t, "Automatic mode"),
         "camera noise: the correlation alone", t);
  g_free (t);
  noise.correlated = 0;
  t = cudafx_dialog_correlation_note (CUDAFX_FILTER_NLBAYES, &noise);
  check (t == NULL, "uncorrelated noise: no note", t);
  g_free (t);

  gegl_exit ();
  printf ("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
