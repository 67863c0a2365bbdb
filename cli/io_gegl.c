/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Every other format (EXR, ...) through GEGL's loaders and savers. */
#include "io_codecs.h"

#include <gegl.h>
#include <operation/gegl-operation-handlers.h>

#include <string.h>
#include <sys/stat.h>

static int gegl_started;

static void
gegl_start (void)
{
  if (!gegl_started)
    gegl_init (NULL, NULL);
  gegl_started = 1;
}

void
cfx_image_io_shutdown (void)
{
  if (gegl_started)
    gegl_exit ();
  gegl_started = 0;
}

/* GEGL's loaders and savers report problems only as warnings, in GEGL's log
 * domain or in none (exr-save's "No space left on device"): the first is kept
 * as the reason of a failure. */
typedef struct {
  char message[256];
} gegl_warnings;

static void
keep_warning (const gchar *domain, GLogLevelFlags level, const gchar *message, gpointer data)
{
  gegl_warnings *w = data;
  if (!(level & (G_LOG_LEVEL_ERROR | G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING)))
    return;
  if (!w->message[0])
    snprintf (w->message, sizeof w->message, "%s", message);
}

/* The engine format for a GEGL buffer's format: grey or colour, alpha or
 * not, u8 for 8-bit files and float otherwise, perceptual (non-linear)
 * values in the file's own colour space. */
static const Babl *
engine_format (const Babl *file, cfx_picture *pic)
{
  const char *model = babl_get_name (babl_format_get_model (file));
  const char *type = babl_get_name (babl_format_get_type (file, 0));
  /* Grey models are Y, Y', Y~ with or without (premultiplied) alpha; the
   * terminating NUL of a bare "Y" is in strchr's set too. */
  int grey = !babl_format_is_palette (file) && model[0] == 'Y' && strchr ("'~aA", model[1]);
  int alpha = babl_format_has_alpha (file);
  int bits = !strcmp (type, "u8") ? 8 : !strcmp (type, "u16") ? 16 : 32;
  char name[64];
  snprintf (name, sizeof name, "%s %s", grey ? (alpha ? "Y'A" : "Y'") : (alpha ? "R'G'B'A" : "R'G'B'"),
            bits == 8 ? "u8" : "float");
  pic->image.channels = (grey ? 1 : 3) + alpha;
  pic->image.has_alpha = alpha;
  pic->image.type = bits == 8 ? CUDAFX_U8 : CUDAFX_F32;
  pic->bits = bits;
  return babl_format_with_space (name, babl_format_get_space (file));
}

int
io_gegl_load (const char *path, double max_pixels, cfx_picture *pic, char **error)
{
  GeglBuffer *buffer = NULL;
  gegl_warnings w = { "" };
  int status = -1;

  gegl_start ();
  GeglNode *graph = gegl_node_new ();
  GeglNode *load = gegl_node_new_child (graph, "operation", "gegl:load", "path", path, NULL);
  GeglNode *sink = gegl_node_new_child (graph, "operation", "gegl:buffer-sink", "buffer", &buffer, NULL);
  gegl_node_link (load, sink);
  GLogFunc previous = g_log_set_default_handler (keep_warning, &w);
  /* The header's size first: the loaders read only that for the bounding box. */
  GeglRectangle box = gegl_node_get_bounding_box (load);
  if (box.width > 0 && box.height > 0 &&
      io_check_size (path, box.width, box.height, 4, 32, max_pixels, error))
    goto done;
  gegl_node_process (sink);
  const GeglRectangle *extent = buffer ? gegl_buffer_get_extent (buffer) : NULL;
  if (!extent || extent->width <= 0 || extent->height <= 0)
    {
      /* ImageMagick, GEGL's last resort, reports only GEGL's temporary file. */
      if (strstr (w.message, "gegl-magick"))
        io_fail (error, "cannot load '%s': not an image cudafx can read (nor ImageMagick, which GEGL "
                 "tried)", path);
      else
        io_fail (error, "cannot load '%s': not an image cudafx can read%s%s", path,
                 w.message[0] ? ": " : "", w.message);
      goto done;
    }
  if (w.message[0])
    {
      io_fail (error, "cannot load '%s': %s", path, w.message);
      goto done;
    }
  const Babl *space = babl_format_get_space (gegl_buffer_get_format (buffer));
  const Babl *format = engine_format (gegl_buffer_get_format (buffer), pic);
  if (io_alloc_picture (pic, path, extent->width, extent->height, pic->image.channels,
                        pic->image.has_alpha, pic->bits, error))
    goto done;
  gegl_buffer_get (buffer, extent, 1.0, format, pic->image.data, pic->image.stride, GEGL_ABYSS_NONE);
  if (space != babl_space ("sRGB"))
    {
      int length = 0;
      const char *icc = babl_space_get_icc (space, &length);
      if (icc && length > 0)
        io_blob_set (&pic->meta.icc, icc, (size_t) length);
    }
  status = 0;

done:
  g_log_set_default_handler (previous, NULL);
  if (buffer)
    g_object_unref (buffer);
  g_object_unref (graph);
  return status;
}

/* GEGL's saver for a file name's extension, or NULL. GEGL falls back to
 * gegl:png-save (with a warning) for extensions it has no saver for; those
 * are refused instead of writing PNG data under another name. */
const char *
io_gegl_saver_for (const char *path)
{
  const char *base = strrchr (path, '/') ? strrchr (path, '/') + 1 : path;
  const char *ext = strrchr (base, '.');
  gegl_warnings w = { "" };
  if (!ext || ext == base)
    return NULL;
  gegl_start ();
  guint n;
  g_free (gegl_list_operations (&n)); /* savers register their extensions when listed */
  guint handler = g_log_set_handler ("GEGL", G_LOG_LEVEL_WARNING, keep_warning, &w);
  const char *saver = gegl_operation_handlers_get_saver (ext);
  g_log_remove_handler ("GEGL", handler);
  if (saver && !strcmp (saver, "gegl:png-save"))
    return NULL; /* a .png would not be here */
  return saver;
}

int
io_gegl_save (const char *temp, const char *name, const cfx_picture *pic, char **error)
{
  const char *saver = io_gegl_saver_for (name);
  const cudafx_image *img = &pic->image;
  const char *layout = img->channels == 1 ? "Y'" : img->channels == 2 ? "Y'A" : img->channels == 3 ? "R'G'B'" : "R'G'B'A";
  const Babl *space = NULL;
  char format[64], file_format[64];
  gegl_warnings w = { "" };
  struct stat st;

  if (pic->meta.icc.data)
    space = babl_space_from_icc ((const char *) pic->meta.icc.data, (int) pic->meta.icc.size,
                                 BABL_ICC_INTENT_RELATIVE_COLORIMETRIC, NULL);
  snprintf (format, sizeof format, "%s %s", layout, img->type == CUDAFX_U8 ? "u8" : "float");
  snprintf (file_format, sizeof file_format, "%s %s", layout,
            pic->bits == 8 ? "u8" : pic->bits == 16 ? "u16" : "float");
  GeglRectangle rect = { 0, 0, img->width, img->height };
  GeglBuffer *buffer = gegl_buffer_new (&rect, babl_format_with_space (file_format, space));
  GeglNode *graph = gegl_node_new ();
  gegl_buffer_set (buffer, &rect, 0, babl_format_with_space (format, space), img->data, img->stride);
  GeglNode *source = gegl_node_new_child (graph, "operation", "gegl:buffer-source", "buffer", buffer, NULL);
  GeglNode *save = gegl_node_new_child (graph, "operation", saver, "path", temp, NULL);
  /* ppm-save writes 16 bits unless told; tiff-save follows the buffer. */
  if (gegl_operation_find_property (saver, "bitdepth"))
    gegl_node_set (save, "bitdepth", pic->bits == 8 ? 8 : 16, NULL);
  gegl_node_link (source, save);
  GLogFunc previous = g_log_set_default_handler (keep_warning, &w);
  gegl_node_process (save);
  g_log_set_default_handler (previous, NULL);
  g_object_unref (graph);
  g_object_unref (buffer);

  if (w.message[0])
    return io_fail (error, "cannot save '%s': %s", name, w.message);
  if (stat (temp, &st) || st.st_size == 0)
    return io_fail (error, "cannot save '%s': %s wrote nothing", name, saver);
  return 0;
}
