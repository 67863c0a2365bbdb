/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — dialog pieces shared by the GIMP 3 and GIMP 2.10 front ends:
 * strings built from the argument table and the engine, and the kernel
 * grid's resizing. No toolkit code. */
#include "dialog-common.h"

#include <string.h>

#include "i18n.h"

#include "region.h"

gchar *
cudafx_dialog_title (const cudafx_filter_desc *desc)
{
  const gchar *label = _(desc->menu_label);
  GString     *title = g_string_new (NULL);

  /* Drop mnemonic underscores ("__" stands for a real one). */
  for (const gchar *c = label; *c; c++)
    if (*c != '_' || c[1] == '_')
      g_string_append_c (title, *c == '_' ? *++c : *c);
  if (g_str_has_suffix (title->str, "..."))
    g_string_truncate (title, title->len - 3);
  else if (g_str_has_suffix (title->str, "…"))
    g_string_truncate (title, title->len - strlen ("…"));
  return g_string_free (title, FALSE);
}

gchar *
cudafx_dialog_backend_text (void)
{
  char backend[256];

  cudafx_backend_describe (backend, sizeof backend);
  return g_strdup_printf (_("Backend available: %s"), backend);
}

gchar *
cudafx_dialog_noise_text (GeglBuffer *source, const GeglRectangle *selection, int filter,
                          double *sigma, cudafx_noise_model *noise)
{
  cudafx_nlmeans_info info;
  GError             *error = NULL;
  gchar              *text, *note;

  *sigma = 0;
  memset (noise, 0, sizeof *noise);
  if (!selection)
    return g_strdup (_("Noise σ: the selection does not touch the layer"));
  if (!cudafx_region_noise (source, selection, filter, &info, &error))
    {
      text = g_strdup_printf (_("Noise σ could not be estimated: %s"), error->message);
      g_error_free (error);
      return text;
    }
  *sigma = info.sigma;
  *noise = info.noise;
  /* nl-bayes' plan follows the noise alone: no parameters to show. */
  if (filter == CUDAFX_FILTER_NLBAYES && info.noise.signal_dependent)
    text = g_strdup_printf (_("Estimated noise σ: %.1f in the shadows … %.1f in the highlights "
                              "(camera noise, stronger in the dark) — automatic mode evens it out "
                              "and denoises what is left"),
                            info.noise.sigma_dark, info.noise.sigma_light);
  else if (filter == CUDAFX_FILTER_NLBAYES)
    text = g_strdup_printf (_("Estimated noise σ: %.1f — automatic mode denoises with it"), info.sigma);
  else if (info.noise.signal_dependent)
    text = g_strdup_printf (_("Estimated noise σ: %.1f in the shadows … %.1f in the highlights "
                              "(camera noise, stronger in the dark) — automatic mode evens it out "
                              "and uses strength %.1f, patch radius %d, search radius %d"),
                            info.noise.sigma_dark, info.noise.sigma_light, info.h,
                            info.patch_radius, info.search_radius);
  else
    text = g_strdup_printf (_("Estimated noise σ: %.1f — automatic mode uses strength %.1f, "
                              "patch radius %d, search radius %d"),
                            info.sigma, info.h, info.patch_radius, info.search_radius);
  note = cudafx_dialog_correlation_note (filter, &info.noise);
  if (note)
    {
      gchar *both = g_strconcat (text, "\n", note, NULL);
      g_free (text);
      g_free (note);
      text = both;
    }
  return text;
}

gchar *
cudafx_dialog_correlation_note (int filter, const cudafx_noise_model *noise)
{
  const gchar *done = NULL;
  gchar       *seen, *note;

  if (!noise->correlated)
    return NULL;
  /* Grey noise has no channels to correlate. */
  if (noise->channels > 1)
    seen = g_strdup_printf (_("Correlated noise: %.2f between neighbouring pixels, %.2f between the "
                              "colour channels, as a camera's demosaicking and JPEG leave it."),
                            noise->correlation, noise->channel_corr);
  else
    seen = g_strdup_printf (_("Correlated noise: %.2f between neighbouring pixels, as a camera's "
                              "demosaicking and JPEG leave it."),
                            noise->correlation);
  /* What automatic mode does about it: flat noise only (behind the camera
   * noise's transform both filters denoise as for white noise). */
  if (!noise->signal_dependent)
    done = filter == CUDAFX_FILTER_NLBAYES
             ? _("Automatic mode denoises the image at full and at half size.")
             : _("Automatic mode raises the strength for it.");
  if (!done)
    return seen;
  note = g_strconcat (seen, " ", done, NULL);
  g_free (seen);
  return note;
}

gchar *
cudafx_dialog_kernel_note (int size)
{
  if (size >= 3 && size <= CUDAFX_KERNEL_GRID_MAX)
    return NULL;
  return g_strdup_printf (_("This kernel is %d×%d; the grid edits kernels from 3×3 to %d×%d. "
                            "Editing the grid makes a custom kernel."),
                          size, size, CUDAFX_KERNEL_GRID_MAX, CUDAFX_KERNEL_GRID_MAX);
}

void
cudafx_kernel_recentre (const double *taps, int n, double *resized, int new_n)
{
  int shift = (new_n - n) / 2;

  memset (resized, 0, sizeof *resized * new_n * new_n);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      if (i + shift >= 0 && i + shift < new_n && j + shift >= 0 && j + shift < new_n)
        resized[(i + shift) * new_n + j + shift] = taps[i * n + j];
}
