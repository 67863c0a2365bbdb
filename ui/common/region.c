/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — region I/O through GEGL: selection bounds plus halo in, engine,
 * selection rectangle out to the shadow buffer. Host-neutral (GEGL, babl and
 * GLib only). */
#include "region.h"

#include <string.h>

#include "i18n.h"

/* format's channels (grey or RGB, alpha or not) as perceptual values of
 * type ("u8" or "float") in format's own colour space, or NULL with an error
 * for palette formats. */
static const Babl *
layout_format (const Babl *format, const char *type, GError **error)
{
  gboolean alpha, grey;
  char     name[32];

  if (babl_format_is_palette (format))
    {
      g_set_error_literal (error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG,
                           _("indexed images are not supported: convert the image to RGB or "
                             "grayscale first (Image ▸ Mode)"));
      return NULL;
    }
  alpha = babl_format_has_alpha (format);
  grey = babl_format_get_n_components (format) - (alpha ? 1 : 0) == 1;
  g_snprintf (name, sizeof name, "%s%s %s", grey ? "Y'" : "R'G'B'", alpha ? "A" : "", type);
  /* In the drawable's own colour space: filter the values as they are. */
  return babl_format_with_space (name, babl_format_get_space (format));
}

const Babl *
cudafx_region_format_of (const Babl *format, GError **error)
{
  gboolean u8 = babl_format_get_type (format, 0) == babl_type ("u8");

  return layout_format (format, u8 ? "u8" : "float", error);
}

const Babl *
cudafx_region_format (GeglBuffer *source, GError **error)
{
  return cudafx_region_format_of (gegl_buffer_get_format (source), error);
}

const Babl *
cudafx_region_u8_format (GeglBuffer *source, GError **error)
{
  return layout_format (gegl_buffer_get_format (source), "u8", error);
}

gboolean
cudafx_region_read (GeglBuffer *source, const GeglRectangle *rect, cudafx_image *image,
                    GError **error)
{
  const Babl *format = cudafx_region_format (source, error);

  return format && cudafx_region_read_as (source, rect, 0, format, image, error);
}

gboolean
cudafx_region_read_as (GeglBuffer *source, const GeglRectangle *rect, int level,
                       const Babl *format, cudafx_image *image, GError **error)
{
  gsize   stride, bytes;
  guint8 *pixels;

  if (!g_size_checked_mul (&stride, (gsize) rect->width,
                           (gsize) babl_format_get_bytes_per_pixel (format)) ||
      !g_size_checked_mul (&bytes, stride, (gsize) rect->height) ||
      !(pixels = g_try_malloc (bytes)))
    {
      g_set_error (error, CUDAFX_PROC_ERROR, CUDAFX_ERR_NO_MEMORY,
                   _("not enough memory for a %d×%d region"), rect->width, rect->height);
      return FALSE;
    }
  cudafx_region_read_into (source, rect, level, format, pixels, image);
  return TRUE;
}

void
cudafx_region_read_into (GeglBuffer *source, const GeglRectangle *rect, int level,
                         const Babl *format, void *pixels, cudafx_image *image)
{
  gsize stride = (gsize) rect->width * babl_format_get_bytes_per_pixel (format);

  gegl_buffer_get (source, rect, 1.0 / (1 << level), format, pixels, stride, GEGL_ABYSS_NONE);
  memset (image, 0, sizeof *image);
  image->data = pixels;
  image->width = rect->width;
  image->height = rect->height;
  image->channels = babl_format_get_n_components (format);
  image->has_alpha = babl_format_has_alpha (format);
  image->type = babl_format_get_type (format, 0) == babl_type ("u8") ? CUDAFX_U8 : CUDAFX_F32;
  image->stride = stride;
}

gboolean
cudafx_region_input (GeglBuffer *source, const GeglRectangle *area,
                     const cudafx_proc_args *args, GeglRectangle *read, GError **error)
{
  GeglRectangle grown;
  int           halo;

  if (!cudafx_proc_halo (args, &halo, error))
    return FALSE;
  grown = (GeglRectangle) { area->x - halo, area->y - halo,
                            area->width + 2 * halo, area->height + 2 * halo };
  gegl_rectangle_intersect (read, &grown, gegl_buffer_get_extent (source));
  return TRUE;
}

/* The noise of image as nl-means' estimator (automatic nl-means' and nl-bayes') finds it. */
static gboolean
estimate_noise (const cudafx_image *image, cudafx_nlmeans_info *info, GError **error)
{
  cudafx_options options;
  cudafx_status  status;

  cudafx_options_init (&options);
  status = cudafx_nlmeans_estimate (image, &options, info);
  if (status != CUDAFX_OK)
    {
      g_set_error_literal (error, CUDAFX_PROC_ERROR, status, cudafx_error_message ());
      return FALSE;
    }
  return TRUE;
}

gboolean
cudafx_region_process (GeglBuffer *source, GeglBuffer *shadow, const GeglRectangle *area,
                       const cudafx_proc_args *args, cudafx_progress_fn progress,
                       void *user_data, cudafx_run_result *result, GError **error)
{
  const Babl      *format;
  GeglRectangle    read, part;
  cudafx_image     all = { 0 }, src, dst = { 0 };
  cudafx_options   options;
  cudafx_proc_args own = *args;
  int              bpp;
  gboolean         ok = FALSE;

  if (area->width <= 0 || area->height <= 0)
    {
      g_set_error_literal (error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG,
                           _("the selection is empty: nothing to filter"));
      return FALSE;
    }
  format = cudafx_region_format (source, error);
  if (!format || !cudafx_region_input (source, area, args, &read, error))
    return FALSE;
  bpp = babl_format_get_bytes_per_pixel (format);
  if (!cudafx_region_read (source, &read, &all, error))
    return FALSE;
  src = all;
  part = read;
  /* A halo that follows the noise: the noise of what the largest halo
   * reads (what the run would estimate it on), then only the part that the
   * halo of that noise reads is filtered. */
  if (cudafx_proc_halo_follows_noise (args))
    {
      cudafx_nlmeans_info info;

      if (!estimate_noise (&all, &info, error))
        goto out;
      own.nlmeans_sigma = info.sigma;
      own.nlmeans_noise = info.noise;
      if (!cudafx_region_input (source, area, &own, &part, error))
        goto out;
      src.data = (guint8 *) all.data + (gsize) (part.y - read.y) * all.stride
                 + (gsize) (part.x - read.x) * bpp;
      src.width = part.width;
      src.height = part.height;
    }
  own.origin_x = part.x - gegl_buffer_get_extent (source)->x;
  own.origin_y = part.y - gegl_buffer_get_extent (source)->y;
  dst = src;
  dst.stride = (gsize) src.width * bpp;
  /* no larger than all, whose size was checked */
  if (!(dst.data = g_try_malloc (dst.stride * (gsize) src.height)))
    {
      g_set_error (error, CUDAFX_PROC_ERROR, CUDAFX_ERR_NO_MEMORY,
                   _("not enough memory for a %d×%d region"), part.width, part.height);
      goto out;
    }

  cudafx_options_init (&options);
  options.progress = progress;
  options.user_data = user_data;
  if (!cudafx_proc_run (&own, &src, &dst, &options, result, error))
    goto out;
  /* The colours of the filtered rectangle: the palette a run creates. */
  if (result && cudafx_proc_removes_unused (args))
    cudafx_proc_palette_keep_used (&result->palette, &dst);

  /* Only the selection's rectangle goes back; the halo was context. */
  gegl_buffer_set (shadow, area, 0, format,
                   (guint8 *) dst.data + (gsize) (area->y - part.y) * dst.stride
                                       + (gsize) (area->x - part.x) * bpp,
                   dst.stride);
  ok = TRUE;

out:
  g_free (all.data);
  g_free (dst.data);
  return ok;
}

GeglBuffer *
cudafx_region_preview (GeglBuffer *source, const GeglRectangle *selection,
                       const GeglRectangle *area, const cudafx_proc_args *args,
                       GeglBuffer **whole, cudafx_run_result *run, GError **error)
{
  GeglBuffer *result;

  if (args->filter != CUDAFX_FILTER_QUANTIZE)
    {
      /* Sparse: only the tiles the area touches take memory. */
      result = gegl_buffer_new (gegl_buffer_get_extent (source), gegl_buffer_get_format (source));
      if (!cudafx_region_process (source, result, area, args, NULL, NULL, run, error))
        g_clear_object (&result);
      return result;
    }
  if (!*whole)
    {
      if (!selection)
        {
          g_set_error_literal (error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG,
                               _("the selection does not touch the layer"));
          return NULL;
        }
      *whole = gegl_buffer_new (gegl_buffer_get_extent (source), gegl_buffer_get_format (source));
      if (!cudafx_region_process (source, *whole, selection, args, NULL, NULL, run, error))
        {
          g_clear_object (whole);
          return NULL;
        }
    }
  return g_object_ref (*whole);
}

gboolean
cudafx_region_noise (GeglBuffer *source, const GeglRectangle *selection, int filter,
                     cudafx_nlmeans_info *info, GError **error)
{
  cudafx_proc_args args;
  GeglRectangle    read;
  cudafx_image     image;
  gboolean         ok;

  cudafx_proc_args_init (&args, filter);
  args.values[cudafx_proc_arg_index (filter, "auto")] = 1;
  if (!cudafx_region_input (source, selection, &args, &read, error) ||
      !cudafx_region_read (source, &read, &image, error))
    return FALSE;
  ok = estimate_noise (&image, info, error);
  g_free (image.data);
  return ok;
}
