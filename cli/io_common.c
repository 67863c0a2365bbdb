/* SPDX-License-Identifier: GPL-3.0-or-later */
/* What image_io's codecs share (io_codecs.h): messages, metadata blobs,
 * image memory, size checks before pixels are allocated, ICC and EXIF
 * orientation. */
#include "io_codecs.h"

#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int
io_fail (char **error, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  *error = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  return -1;
}

void
io_blob_set (cfx_blob *b, const void *data, size_t size)
{
  g_free (b->data);
  b->data = size ? g_memdup2 (data, size) : NULL;
  b->size = b->data ? size : 0;
}
static void *(*image_take) (size_t bytes);
static void (*image_give) (void *data);

void
cfx_image_memory (void *(*take) (size_t bytes), void (*give) (void *data))
{
  image_take = take;
  image_give = give;
}

void
cfx_image_free (void *data)
{
  if (image_give)
    image_give (data);
  else
    free (data);
}

void
cfx_picture_clear (cfx_picture *pic)
{
  cfx_image_free (pic->image.data);
  g_free (pic->meta.icc.data);
  g_free (pic->meta.exif.data);
  g_free (pic->meta.xmp.data);
  memset (pic, 0, sizeof *pic);
}

int
cfx_image_alloc (cudafx_image *img, int width, int height)
{
  gsize row, total;
  if (width <= 0 || height <= 0 ||
      !g_size_checked_mul (&row, (gsize) width, (gsize) img->channels * cudafx_type_size (img->type)) ||
      !g_size_checked_mul (&total, row, (gsize) height))
    return -1;
  img->width = width;
  img->height = height;
  img->stride = row;
  img->data = image_take ? image_take (total) : cudafx_host_alloc_plain (total); /* huge pages: few faults */
  return img->data ? 0 : -1;
}

/* Memory the system can still give without swapping anything out, from
 * /proc/meminfo; 0 when unknown. */
static double
available_bytes (void)
{
  FILE *f = fopen ("/proc/meminfo", "r");
  char line[128];
  double kb = 0;
  if (!f)
    return 0;
  while (fgets (line, sizeof line, f))
    if (sscanf (line, "MemAvailable: %lf kB", &kb) == 1)
      break;
  fclose (f);
  return kb * 1024;
}

__thread double *io_probe_pixels;

int
io_check_size (const char *name, double width, double height, int channels, int bits,
               double max_pixels, char **error)
{
  if (width <= 0 || height <= 0)
    return io_fail (error, "cannot load '%s': the header says %.0fx%.0f pixels", name, width, height);
  if (io_probe_pixels)
    {
      *io_probe_pixels = width * height;
      return io_fail (error, "'%s': header read", name);
    }
  double pixels = width * height;
  if (max_pixels > 0 && pixels > max_pixels)
    return io_fail (error, "cannot load '%s': %.0fx%.0f pixels (%.1f megapixels) exceed the "
                    "limit of %g megapixels (raise it with --max-megapixels, 0 for none)",
                    name, width, height, pixels / 1e6, max_pixels / 1e6);
  double need = 2 * pixels * channels * (bits == 8 ? 1 : 4);
  double have = available_bytes ();
  if (width > INT_MAX || height > INT_MAX || (have > 0 && need > have))
    return io_fail (error, "cannot load '%s': %.0fx%.0f pixels need %.1f GB, %.1f GB of memory "
                    "are available", name, width, height, need / 1e9, have / 1e9);
  return 0;
}

/* The layout every decoder fills: 8-bit files as u8, deeper ones as f32. */
int
io_alloc_picture (cfx_picture *pic, const char *name, int width, int height, int channels,
                  int alpha, int bits, char **error)
{
  pic->image.channels = channels;
  pic->image.has_alpha = alpha;
  pic->image.type = bits == 8 ? CUDAFX_U8 : CUDAFX_F32;
  pic->bits = bits;
  if (cfx_image_alloc (&pic->image, width, height))
    return io_fail (error, "cannot load '%s': %dx%d pixels do not fit in memory", name, width, height);
  return 0;
}
int
io_icc_matches (const cfx_blob *icc, int channels)
{
  /* The profile's colour space (bytes 16..19) must fit the pixels. */
  if (icc->size < 20)
    return 0;
  const char *space = (const char *) icc->data + 16;
  return channels <= 2 ? !memcmp (space, "GRAY", 4) : !memcmp (space, "RGB ", 4);
}

/* ---- EXIF orientation -------------------------------------------------------- */

/* The Orientation (tag 0x0112) of EXIF's first directory, 1..8; 1 when
 * there is none or the structure is damaged. */
int
io_exif_orientation (const cfx_blob *exif)
{
  const unsigned char *d = exif->data;
  size_t n = exif->size;
  if (!d || n < 8 || !((d[0] == 'I' && d[1] == 'I') || (d[0] == 'M' && d[1] == 'M')))
    return 1;
  int le = d[0] == 'I';
#define U16(p) (le ? (unsigned) (p)[0] | (unsigned) (p)[1] << 8 : (unsigned) (p)[0] << 8 | (unsigned) (p)[1])
#define U32(p) (le ? (uint32_t) (p)[0] | (uint32_t) (p)[1] << 8 | (uint32_t) (p)[2] << 16 | (uint32_t) (p)[3] << 24 \
                   : (uint32_t) (p)[0] << 24 | (uint32_t) (p)[1] << 16 | (uint32_t) (p)[2] << 8 | (uint32_t) (p)[3])
  uint32_t ifd = U32 (d + 4);
  if (ifd > n - 2)
    return 1;
  unsigned entries = U16 (d + ifd);
  for (unsigned i = 0; i < entries && ifd + 2 + 12 * (size_t) (i + 1) <= n; i++)
    {
      const unsigned char *e = d + ifd + 2 + 12 * i;
      if (U16 (e) == 0x0112 && U16 (e + 2) == 3 /* SHORT */)
        {
          unsigned v = U16 (e + 8);
          return v >= 1 && v <= 8 ? (int) v : 1;
        }
    }
  return 1;
#undef U16
#undef U32
}

/* img turned as EXIF orientation o asks for display (2..8: mirrored,
 * turned by 180°, transposed, turned 90° clockwise, transversed, turned
 * 90° anticlockwise), into *out (pixels from cfx_image_alloc); 0 or -1
 * when there is no memory. */
int
io_orient_image (const cudafx_image *img, int o, cudafx_image *out)
{
  int w = img->width, h = img->height, swap = o >= 5;
  size_t bpp = (size_t) img->channels * (img->type == CUDAFX_U8 ? 1 : 4);
  *out = *img;
  out->data = NULL;
  if (cfx_image_alloc (out, swap ? h : w, swap ? w : h))
    return -1;
  for (int y2 = 0; y2 < out->height; y2++)
    for (int x2 = 0; x2 < out->width; x2++)
      {
        int x, y;
        switch (o)
          {
          case 2: x = w - 1 - x2; y = y2; break;
          case 3: x = w - 1 - x2; y = h - 1 - y2; break;
          case 4: x = x2; y = h - 1 - y2; break;
          case 5: x = y2; y = x2; break;
          case 6: x = y2; y = h - 1 - x2; break;
          case 7: x = w - 1 - y2; y = h - 1 - x2; break;
          case 8: x = w - 1 - y2; y = x2; break;
          default: x = x2; y = y2; break;
          }
        memcpy ((char *) out->data + (size_t) y2 * out->stride + (size_t) x2 * bpp,
                (const char *) img->data + (size_t) y * img->stride + (size_t) x * bpp, bpp);
      }
  return 0;
}
