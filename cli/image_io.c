/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Image files for the cudafx command (see image_io.h): the format told by
 * the file's first bytes (or, for output, its name), the file read whole
 * and refused early when it is not a regular file, and the codec file
 * chosen (io_codecs.h). */
#include "io_codecs.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const format_names[] = { "", "PNG", "JPEG", "TIFF", "WebP", "PNM" };

static file_format
sniff (const unsigned char *d, size_t n)
{
  if (n >= 8 && !memcmp (d, "\x89PNG\r\n\x1a\n", 8))
    return FMT_PNG;
  if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF)
    return FMT_JPEG;
  if (n >= 4 && (!memcmp (d, "II*\0", 4) || !memcmp (d, "MM\0*", 4) ||
                 !memcmp (d, "II+\0", 4) || !memcmp (d, "MM\0+", 4)))
    return FMT_TIFF;
  if (n >= 12 && !memcmp (d, "RIFF", 4) && !memcmp (d + 8, "WEBP", 4))
    return FMT_WEBP;
  if (n >= 2 && d[0] == 'P' && d[1] >= '1' && d[1] <= '7')
    return FMT_PNM;
  return FMT_OTHER;
}

file_format
io_format_of_name (const char *path)
{
  const char *base = strrchr (path, '/') ? strrchr (path, '/') + 1 : path;
  const char *ext = strrchr (base, '.');
  static const struct { const char *ext; file_format format; } table[] = {
    { ".png", FMT_PNG },   { ".jpg", FMT_JPEG }, { ".jpeg", FMT_JPEG }, { ".jpe", FMT_JPEG },
    { ".tif", FMT_TIFF },  { ".tiff", FMT_TIFF }, { ".webp", FMT_WEBP },
    { ".pnm", FMT_PNM },   { ".ppm", FMT_PNM },  { ".pgm", FMT_PNM },   { ".pam", FMT_PNM },
  };
  if (!ext || ext == base)
    return FMT_OTHER;
  for (size_t i = 0; i < G_N_ELEMENTS (table); i++)
    if (!g_ascii_strcasecmp (ext, table[i].ext))
      return table[i].format;
  return FMT_OTHER;
}

/* ---- loading ---------------------------------------------------------------------- */

int
cfx_image_decode (const void *data, size_t size, const char *name, double max_pixels,
                  cfx_picture *pic, char **error)
{
  int status;
  *error = NULL;
  memset (pic, 0, sizeof *pic);
  switch (sniff (data, size))
    {
    case FMT_PNG:  status = io_png_decode (data, size, name, max_pixels, pic, error); break;
    case FMT_JPEG: status = io_jpeg_decode (data, size, name, max_pixels, pic, error); break;
    case FMT_TIFF: status = io_tiff_decode (data, size, name, max_pixels, pic, error); break;
    case FMT_WEBP: status = io_webp_decode (data, size, name, max_pixels, pic, error); break;
    case FMT_PNM:  status = io_pnm_decode (data, size, name, max_pixels, pic, error); break;
    default:       status = io_fail (error, "cannot load '%s': not a PNG, JPEG, TIFF, WebP or PNM file", name);
    }
  if (status)
    cfx_picture_clear (pic);
  return status;
}

int
cfx_image_load (const char *path, double max_pixels, cfx_picture *pic, char **error)
{
  struct stat st;
  unsigned char *data = NULL;
  int status;

  *error = NULL;
  memset (pic, 0, sizeof *pic);
  /* O_NONBLOCK: a FIFO must not hang the open; it is refused below. */
  int fd = open (path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return io_fail (error, "cannot read '%s': %s", path,
                    errno == ENOENT ? "no such file" : strerror (errno));
  if (fstat (fd, &st))
    status = io_fail (error, "cannot read '%s': %s", path, strerror (errno));
  else if (S_ISDIR (st.st_mode))
    status = io_fail (error, "cannot read '%s': is a directory", path);
  else if (!S_ISREG (st.st_mode))
    status = io_fail (error, "cannot read '%s': not a regular file (a FIFO, socket or device)", path);
  else if (st.st_size == 0)
    status = io_fail (error, "cannot load '%s': the file is empty", path);
  else if (!(data = g_try_malloc ((gsize) st.st_size)))
    status = io_fail (error, "cannot read '%s': %lld bytes do not fit in memory", path,
                      (long long) st.st_size);
  else
    {
      size_t got = 0, want = (size_t) st.st_size;
      ssize_t n = 1;
      while (got < want && (n = read (fd, data + got, want - got)) != 0)
        {
          if (n < 0 && errno == EINTR)
            continue;
          if (n < 0)
            break;
          got += (size_t) n;
        }
      if (n < 0)
        status = io_fail (error, "cannot read '%s': %s", path, strerror (errno));
      else if (got < want)
        status = io_fail (error, "cannot read '%s': the file shrank while being read", path);
      else if (sniff (data, got) != FMT_OTHER)
        status = cfx_image_decode (data, got, path, max_pixels, pic, error);
      /* GEGL would pick its loader by the extension, and its JPEG loader
       * ends the process on a file that is not one. */
      else if (io_format_of_name (path) != FMT_OTHER)
        status = io_fail (error, "cannot load '%s': not a %s file (damaged, or another format)", path,
                          format_names[io_format_of_name (path)]);
      /* GEGL would hand it to ImageMagick, whose failure names only GEGL's
       * own temporary file. */
      else if (got >= 12 && !memcmp (data + (got >= 15 && !memcmp (data, "\xEF\xBB\xBF", 3) ? 3 : 0),
                                     "GIMP Palette", 12))
        status = io_fail (error, "cannot load '%s': it is a GIMP palette, not an image (quantize takes "
                          "it as --palette)", path);
      else
        status = io_gegl_load (path, max_pixels, pic, error);
    }
  close (fd);
  g_free (data);
  if (status)
    cfx_picture_clear (pic);
  return status;
}

/* ---- saving --------------------------------------------------------------------- */

int
cfx_image_can_save (const char *path, char **error)
{
  *error = NULL;
  if (io_format_of_name (path) != FMT_OTHER || io_gegl_saver_for (path))
    return 1;
  io_fail (error, "cannot write '%s': no saver for its extension (use .png, .jpg, .tif, .webp, "
           ".exr, .ppm...)", path);
  return 0;
}

int
io_encode (FILE *f, const char *temp, const char *name, const cfx_picture *pic, int strip,
           char **error)
{
  *error = NULL;
  switch (io_format_of_name (name))
    {
    case FMT_PNG:  return io_png_encode (f, pic, strip, name, error);
    case FMT_JPEG: return io_jpeg_encode (f, pic, strip, name, error);
    case FMT_TIFF: return io_tiff_encode (f, pic, strip, name, error);
    case FMT_WEBP: return io_webp_encode (f, pic, strip, name, error);
    case FMT_PNM:  return io_pnm_encode (f, pic, name, error);
    default:
      {
        /* GEGL's savers (EXR, ...) keep no EXIF: the pixels are turned as
         * the orientation says, so that they display as the input did. */
        int orientation = strip ? 1 : io_exif_orientation (&pic->meta.exif);
        if (orientation == 1)
          return io_gegl_save (temp, name, pic, error);
        cfx_picture turned = *pic;
        if (io_orient_image (&pic->image, orientation, &turned.image))
          return io_fail (error, "cannot save '%s': out of memory turning it upright", name);
        int status = io_gegl_save (temp, name, &turned, error);
        cfx_image_free (turned.image.data);
        return status;
      }
    }
}

int
cfx_image_probe (const char *path, double *pixels)
{
  cfx_picture pic;
  char *error = NULL;
  double found = 0;

  /* Only the formats image_io decodes itself stop at their header; GEGL's
   * loaders are not asked (the file's own load will be). */
  if (io_format_of_name (path) == FMT_OTHER)
    return 1;
  io_probe_pixels = &found;
  cfx_image_load (path, 0, &pic, &error);
  io_probe_pixels = NULL;
  g_free (error);
  *pixels = found;
  return found > 0 ? 0 : 1;
}
