/* cudafx — region I/O through GEGL: selection bounds plus halo in, engine,
 * selection rectangle out to the shadow buffer. Host-neutral (GEGL, babl and
 * GLib only). */
#include "region.h"

#include <string.h>

const Babl *
cudafx_region_format (GeglBuffer *source, GError **error)
{
  const Babl *format = gegl_buffer_get_format (source);
  gboolean    alpha, grey, u8;
  char        name[32];

  if (babl_format_is_palette (format))
    {
      g_set_error_literal (error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG,
                           "indexed images are not supported: convert the image to RGB or "
                           "grayscale first (Image ▸ Mode)");
      return NULL;
    }
  alpha = babl_format_has_alpha (format);
  grey = babl_format_get_n_components (format) - (alpha ? 1 : 0) == 1;
  u8 = babl_format_get_type (format, 0) == babl_type ("u8");
  g_snprintf (name, sizeof name, "%s%s %s", grey ? "Y'" : "R'G'B'", alpha ? "A" : "",
              u8 ? "u8" : "float");
  /* In the drawable's own colour space: filter the values as they are. */
  return babl_format_with_space (name, babl_format_get_space (format));
}

/* area grown by halo on each side, cut to the buffer's extent. */
static GeglRectangle
with_halo (GeglBuffer *source, const GeglRectangle *area, int halo)
{
  GeglRectangle grown = { area->x - halo, area->y - halo,
                          area->width + 2 * halo, area->height + 2 * halo };
  GeglRectangle read;

  gegl_rectangle_intersect (&read, &grown, gegl_buffer_get_extent (source));
  return read;
}

gboolean
cudafx_region_process (GeglBuffer *source, GeglBuffer *shadow, const GeglRectangle *area,
                       const cudafx_proc_args *args, cudafx_progress_fn progress,
                       void *user_data, cudafx_run_result *result, GError **error)
{
  const Babl    *format;
  GeglRectangle  read;
  cudafx_image   src = { 0 }, dst;
  cudafx_options options;
  gsize          stride, bytes;
  int            halo, bpp;
  guint8        *src_pixels = NULL, *dst_pixels = NULL;
  gboolean       ok = FALSE;

  if (area->width <= 0 || area->height <= 0)
    {
      g_set_error_literal (error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG,
                           "the selection is empty: nothing to filter");
      return FALSE;
    }
  format = cudafx_region_format (source, error);
  if (!format || !cudafx_proc_halo (args, &halo, error))
    return FALSE;
  read = with_halo (source, area, halo);
  bpp = babl_format_get_bytes_per_pixel (format);

  if (!g_size_checked_mul (&stride, (gsize) read.width, (gsize) bpp) ||
      !g_size_checked_mul (&bytes, stride, (gsize) read.height) ||
      !(src_pixels = g_try_malloc (bytes)) || !(dst_pixels = g_try_malloc (bytes)))
    {
      g_set_error (error, CUDAFX_PROC_ERROR, CUDAFX_ERR_NO_MEMORY,
                   "not enough memory for a %d×%d region", read.width, read.height);
      goto out;
    }
  gegl_buffer_get (source, &read, 1.0, format, src_pixels, stride, GEGL_ABYSS_NONE);

  src.data = src_pixels;
  src.width = read.width;
  src.height = read.height;
  src.channels = babl_format_get_n_components (format);
  src.has_alpha = babl_format_has_alpha (format);
  src.type = babl_format_get_type (format, 0) == babl_type ("u8") ? CUDAFX_U8 : CUDAFX_F32;
  src.stride = stride;
  dst = src;
  dst.data = dst_pixels;

  cudafx_options_init (&options);
  options.progress = progress;
  options.user_data = user_data;
  if (!cudafx_proc_run (args, &src, &dst, &options, result, error))
    goto out;

  /* Only the selection's rectangle goes back; the halo was context. */
  gegl_buffer_set (shadow, area, 0, format,
                   dst_pixels + (gsize) (area->y - read.y) * stride
                              + (gsize) (area->x - read.x) * bpp,
                   stride);
  ok = TRUE;

out:
  g_free (src_pixels);
  g_free (dst_pixels);
  return ok;
}
