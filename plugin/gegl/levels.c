/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Levels of detail (operation.h): a zoomed-out view's rectangles and the
 * spatial settings scaled to its level. */
#include "operation.h"

/* r (level-0 coordinates) at level: both ends rounded down, as GEGL's own
 * level-aware filters (gblur-1d) do, so that the chunks of a region tile
 * that level's rectangle. */
GeglRectangle
op_at_level (const GeglRectangle *r, int level)
{
  int x0 = r->x >> level, y0 = r->y >> level;

  return (GeglRectangle) { x0, y0, ((r->x + r->width) >> level) - x0,
                           ((r->y + r->height) >> level) - y0 };
}

/* The settings of args for the pixels of level L: window radii scaled by
 * 2^-L and rounded down, which keeps each window inside what GEGL prepared
 * for the level-0 halo (a rectangle grown by h at level 0 covers the level
 * rectangle grown by h >> L): an operation before this one may have
 * computed only that much. FALSE when nothing is left of the window at
 * that scale: the level's input is then its output. Automatic nl-means
 * picks its radii from the noise it finds at the level (the whole input is
 * read, so any radius fits); nl-bayes too, and manual nl-bayes filters the
 * noise its σ leaves at the level (each level halves the one before in both
 * directions, averaging four pixels: σ / 2^L), reading the whole input too;
 * quantize has no window. A convolution's
 * Gaussian preset scales σ (reduced, if need be, until its kernel fits);
 * other kernels are per pixel whatever the scale and keep their taps, so
 * they read their own radius at the level (exact on a layer, whose pixels
 * GEGL gives at every level). */
gboolean
op_at_level_args (cudafx_proc_args *args, int level, int halo)
{
  int          f = args->filter;
  double      *v = args->values;
  const double scale = 1.0 / (1 << level);
  const int    budget = halo >> level;

  if (level == 0)
    return TRUE;
  switch (f)
    {
    case CUDAFX_FILTER_MEDIAN:
      {
        int r = cudafx_proc_arg_index (f, "radius");

        v[r] = (int) v[r] >> level;
        return v[r] >= 1;
      }
    case CUDAFX_FILTER_NLMEANS:
      {
        int p = cudafx_proc_arg_index (f, "patch-radius");
        int s = cudafx_proc_arg_index (f, "search-radius");

        if (v[cudafx_proc_arg_index (f, "auto")] != 0)
          return TRUE;
        v[p] = MAX (1, (int) v[p] >> level);
        v[s] = MIN ((int) v[s] >> level, budget - (int) v[p]);
        return v[s] >= 1;
      }
    case CUDAFX_FILTER_NLBAYES:
      {
        int g = cudafx_proc_arg_index (f, "sigma");

        v[g] = MAX (v[g] * scale, cudafx_proc_arg (f, g)->min);
        return TRUE;
      }
    case CUDAFX_FILTER_CONVOLVE:
      {
        int    g = cudafx_proc_arg_index (f, "sigma");
        double sigma;

        if (v[cudafx_proc_arg_index (f, "preset")] != CUDAFX_PRESET_GAUSSIAN)
          return TRUE;
        if (budget < 1)
          return FALSE;
        /* The engine's Gaussian reaches ceil (3σ) pixels. */
        sigma = MAX (v[g] * scale, cudafx_proc_arg (f, g)->min);
        if (ceil (3 * sigma) > budget)
          sigma = budget / 3.0;
        while (ceil (3 * sigma) > budget)
          sigma = nextafter (sigma, 0);
        v[g] = sigma;
        return TRUE;
      }
    }
  return TRUE;
}

/* Copies roi (level-0 coordinates) of input to output at level: what a
 * setting that does nothing at that level (a radius of 0 pixels once
 * scaled) gives. FALSE if there was no memory for it. */
gboolean
op_pass_through (GeglBuffer *input, GeglBuffer *output, const GeglRectangle *roi, int level)
{
  GeglRectangle r = op_at_level (roi, level);
  const Babl   *format = gegl_buffer_get_format (input);
  guint8       *pixels;

  if (level == 0)
    {
      gegl_buffer_copy (input, roi, GEGL_ABYSS_NONE, output, roi);
      return TRUE;
    }
  if (gegl_rectangle_is_empty (&r))
    return TRUE;
  pixels = g_try_malloc ((gsize) r.width * r.height * babl_format_get_bytes_per_pixel (format));
  if (!pixels)
    return FALSE;
  gegl_buffer_get (input, &r, 1.0 / (1 << level), format, pixels, GEGL_AUTO_ROWSTRIDE,
                   GEGL_ABYSS_NONE);
  gegl_buffer_set (output, &r, level, format, pixels, GEGL_AUTO_ROWSTRIDE);
  g_free (pixels);
  return TRUE;
}
