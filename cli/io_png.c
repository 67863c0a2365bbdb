/* SPDX-License-Identifier: GPL-3.0-or-later */
/* PNG files through libpng. */
#include "io_codecs.h"

#include <png.h>
#include <zlib.h>

#include <setjmp.h>
#include <string.h>

typedef struct {
  const unsigned char *data;
  size_t size, pos;
  char message[256];
} png_context;

static void
png_fail (png_structp png, png_const_charp message)
{
  png_context *c = png_get_error_ptr (png);
  snprintf (c->message, sizeof c->message, "%s", message);
  png_longjmp (png, 1);
}

/* libpng prefixes a chunk's problems with its name: a lower-case first
 * letter is an ancillary chunk (metadata), which libpng drops and which
 * leaves the pixels alone. Anything else is about the image. */
static void
png_warn (png_structp png, png_const_charp message)
{
  int ancillary = strlen (message) > 5 && g_ascii_islower (message[0]) && message[4] == ':';
  if (!ancillary)
    png_fail (png, message);
}

static void
png_write_file (png_structp png, png_bytep data, size_t n)
{
  if (fwrite (data, 1, n, png_get_io_ptr (png)) != n)
    png_error (png, strerror (errno));
}

static void
png_flush_file (png_structp png)
{
}

static void
png_read_memory (png_structp png, png_bytep out, size_t n)
{
  png_context *c = png_get_io_ptr (png);
  if (n > c->size - c->pos)
    png_error (png, "the file ends early (truncated)");
  memcpy (out, c->data + c->pos, n);
  c->pos += n;
}

/* XMP in a PNG: an iTXt (or tEXt) chunk with the key Adobe's spec names. */
static void
png_take_text (png_structp png, png_infop info, cfx_metadata *meta)
{
  png_textp text;
  int n = 0;
  if (!png_get_text (png, info, &text, &n))
    return;
  for (int i = 0; i < n; i++)
    if (!strcmp (text[i].key, "XML:com.adobe.xmp") && !meta->xmp.data)
      io_blob_set (&meta->xmp, text[i].text,
                   text[i].compression >= PNG_ITXT_COMPRESSION_NONE ? text[i].itxt_length
                                                                    : text[i].text_length);
}

static void
png_take_metadata (png_structp png, png_infop info, cfx_metadata *meta)
{
  png_charp name;
  int compression;
  png_bytep data;
  png_uint_32 size;
  if (png_get_iCCP (png, info, &name, &compression, &data, &size) && !meta->icc.data)
    io_blob_set (&meta->icc, data, size);
  if (png_get_eXIf_1 (png, info, &size, &data) && !meta->exif.data)
    io_blob_set (&meta->exif, data, size);
  png_take_text (png, info, meta);
}

int
io_png_decode (const unsigned char *bytes, size_t size, const char *name, double max_pixels,
               cfx_picture *pic, char **error)
{
  png_context c = { bytes, size, 0, "" };
  png_structp png = png_create_read_struct (PNG_LIBPNG_VER_STRING, &c, png_fail, png_warn);
  png_infop info = png ? png_create_info_struct (png) : NULL;
  png_infop end = png ? png_create_info_struct (png) : NULL;
  /* volatile: changed after setjmp and read after the longjmp */
  uint16_t *volatile deep = NULL;
  png_bytep *volatile rows = NULL;
  volatile int status = -1;

  if (!png || !info || !end)
    {
      png_destroy_read_struct (&png, &info, &end);
      return io_fail (error, "cannot load '%s': out of memory", name);
    }
  if (setjmp (png_jmpbuf (png)))
    {
      io_fail (error, "cannot load '%s': PNG: %s", name, c.message);
      goto done;
    }
  png_set_read_fn (png, &c, png_read_memory);
  png_set_option (png, PNG_SKIP_sRGB_CHECK_PROFILE, PNG_OPTION_ON);
  png_read_info (png, info);

  png_uint_32 width, height;
  int depth, color, interlace;
  png_get_IHDR (png, info, &width, &height, &depth, &color, &interlace, NULL, NULL);
  int alpha = (color & PNG_COLOR_MASK_ALPHA) || png_get_valid (png, info, PNG_INFO_tRNS);
  int channels = ((color & PNG_COLOR_MASK_COLOR) ? 3 : 1) + alpha;
  int bits = depth == 16 ? 16 : 8;
  if (io_check_size (name, width, height, channels, bits, max_pixels, error))
    goto done;

  png_set_expand (png); /* palette to RGB, grey 1/2/4 to 8 bits, tRNS to alpha */
  if (depth == 16)
    png_set_swap (png); /* native-endian 16-bit samples */
  png_set_interlace_handling (png);
  png_read_update_info (png, info);
  if ((int) png_get_channels (png, info) != channels)
    png_error (png, "unexpected channel count after expansion");
  if (io_alloc_picture (pic, name, (int) width, (int) height, channels, alpha, bits, error))
    goto done;

  size_t samples = (size_t) width * channels;
  rows = g_try_malloc (height * sizeof *rows);
  if (bits == 16)
    deep = g_try_malloc ((size_t) height * samples * 2);
  if (!rows || (bits == 16 && !deep))
    {
      io_fail (error, "cannot load '%s': %ux%u pixels do not fit in memory", name, width, height);
      goto done;
    }
  for (png_uint_32 y = 0; y < height; y++)
    rows[y] = bits == 16 ? (png_bytep) (deep + y * samples)
                         : (png_bytep) pic->image.data + y * pic->image.stride;
  png_read_image (png, rows);
  png_read_end (png, end); /* the rest of the file, up to IEND, checked too */
  if (bits == 16)
    for (png_uint_32 y = 0; y < height; y++)
      u16_to_f32 (deep + y * samples, (float *) ((char *) pic->image.data + y * pic->image.stride),
                  samples);
  png_take_metadata (png, info, &pic->meta);
  png_take_metadata (png, end, &pic->meta);
  status = 0;

done:
  g_free (rows);
  g_free (deep);
  png_destroy_read_struct (&png, &info, &end);
  return status;
}

/* On writing, libpng warns only about metadata it leaves out (an ICC
 * profile it finds invalid, say): the image is still right. */
static void
png_write_warn (png_structp png, png_const_charp message)
{
}

int
io_png_encode (FILE *f, const cfx_picture *pic, int strip, const char *name, char **error)
{
  png_context c = { 0 };
  const cudafx_image *img = &pic->image;
  png_structp png = png_create_write_struct (PNG_LIBPNG_VER_STRING, &c, png_fail, png_write_warn);
  png_infop info = png ? png_create_info_struct (png) : NULL;
  void *volatile row = NULL;
  char *volatile xmp = NULL;
  int bits = pic->bits == 8 ? 8 : 16;

  if (!png || !info)
    {
      png_destroy_write_struct (&png, &info);
      return io_fail (error, "cannot save '%s': out of memory", name);
    }
  if (setjmp (png_jmpbuf (png)))
    {
      g_free (row);
      g_free (xmp);
      png_destroy_write_struct (&png, &info);
      return io_fail (error, "cannot save '%s': PNG: %s", name, c.message);
    }
  png_set_write_fn (png, f, png_write_file, png_flush_file); /* flushed at commit */
  /* Profiles libpng knows to be sRGB with a wrong checksum are kept as they
   * came; any other problem with the metadata drops it with a warning. */
  png_set_option (png, PNG_SKIP_sRGB_CHECK_PROFILE, PNG_OPTION_ON);
  png_set_benign_errors (png, 1);
  png_set_compression_level (png, ZLIB_LEVEL);
  png_set_compression_strategy (png, Z_RLE);
  png_set_filter (png, PNG_FILTER_TYPE_BASE, PNG_FILTER_SUB);
  static const int colors[] = { 0, PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA,
                                PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGB_ALPHA };
  png_set_IHDR (png, info, (png_uint_32) img->width, (png_uint_32) img->height, bits,
                colors[img->channels], PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                PNG_FILTER_TYPE_DEFAULT);
  if (!strip)
    {
      const cfx_metadata *m = &pic->meta;
      if (m->icc.data && io_icc_matches (&m->icc, img->channels))
        png_set_iCCP (png, info, "ICC profile", PNG_COMPRESSION_TYPE_BASE, m->icc.data,
                      (png_uint_32) m->icc.size);
      if (m->exif.data)
        png_set_eXIf_1 (png, info, (png_uint_32) m->exif.size, m->exif.data);
      if (m->xmp.data)
        {
          xmp = g_strndup ((const char *) m->xmp.data, m->xmp.size);
          png_text text = { .compression = PNG_ITXT_COMPRESSION_NONE,
                            .key = "XML:com.adobe.xmp", .text = xmp,
                            .itxt_length = strlen (xmp), .lang = "", .lang_key = "" };
          png_set_text (png, info, &text, 1);
        }
    }
  png_write_info (png, info);
  if (bits == 16)
    png_set_swap (png);
  size_t samples = (size_t) img->width * img->channels;
  row = g_malloc (samples * 2);
  for (int y = 0; y < img->height; y++)
    {
      const char *src = (const char *) img->data + (size_t) y * img->stride;
      if (bits == 8)
        png_write_row (png, row_u8 (img, y, row));
      else
        {
          for (size_t i = 0; i < samples; i++)
            ((uint16_t *) row)[i] = f32_to_u16 (((const float *) src)[i]);
          png_write_row (png, row);
        }
    }
  png_write_end (png, info);
  png_destroy_write_struct (&png, &info);
  g_free (row);
  g_free (xmp);
  return 0;
}
