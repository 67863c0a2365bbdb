/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Image files for the cudafx command (see image_io.h).
 *
 * Each codec library reports problems its own way; all of them end here as
 * one message naming the file. Policy, the same for every format: whatever
 * the library says about the pixel data (an error, or a warning such as
 * libjpeg's "Corrupt JPEG data" or "Premature end of JPEG file", which it
 * would otherwise paper over with grey) fails the load; warnings about
 * metadata alone (an ancillary PNG chunk, an unknown TIFF tag, a bad ICC
 * chunk) drop that metadata and go on. */
#define _GNU_SOURCE /* mkostemps */
#include "image_io.h"

#include <gegl.h>
#include <operation/gegl-operation-handlers.h>
#include <jpeglib.h>
#include <jerror.h>
#include <netpbm/pam.h>
#include <png.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <tiffio.h>
#include <webp/decode.h>
#include <webp/demux.h>
#include <webp/encode.h>
#include <webp/mux.h>
#include <zlib.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* PNG output: the Sub filter and zlib's run-length strategy at level 1, as
 * OpenCV writes it, encode a 12 MP photo in about a third of libpng's
 * default time (level 6, adaptive filters) for a file 4% larger; TIFF uses
 * level 1 too (docs/BENCHMARKS.md, "Image codecs"). */
#define ZLIB_LEVEL 1
/* GEGL's jpg-save and webp-save default, kept. */
#define LOSSY_QUALITY 90
/* A progressive JPEG can hold any number of scans, each one a pass over the
 * whole image: libjpeg-turbo's djpeg caps them the same way (-maxscans). */
#define JPEG_MAX_SCANS 1000

typedef enum { FMT_OTHER, FMT_PNG, FMT_JPEG, FMT_TIFF, FMT_WEBP, FMT_PNM } file_format;
static const char *const format_names[] = { "", "PNG", "JPEG", "TIFF", "WebP", "PNM" };

static int
fail (char **error, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  *error = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  return -1;
}

static void
blob_set (cfx_blob *b, const void *data, size_t size)
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

/* The header's size against the limit and the memory, before any pixels are
 * allocated: the source and the filter's destination are both this big. */
/* Set by cfx_image_probe on its thread: the decoders stop at check_size,
 * which records the header's pixel count here. */
static __thread double *probe_pixels;

static int
check_size (const char *name, double width, double height, int channels, int bits,
            double max_pixels, char **error)
{
  if (width <= 0 || height <= 0)
    return fail (error, "cannot load '%s': the header says %.0fx%.0f pixels", name, width, height);
  if (probe_pixels)
    {
      *probe_pixels = width * height;
      return fail (error, "'%s': header read", name);
    }
  double pixels = width * height;
  if (max_pixels > 0 && pixels > max_pixels)
    return fail (error, "cannot load '%s': %.0fx%.0f pixels (%.1f megapixels) exceed the "
                 "limit of %g megapixels (raise it with --max-megapixels, 0 for none)",
                 name, width, height, pixels / 1e6, max_pixels / 1e6);
  double need = 2 * pixels * channels * (bits == 8 ? 1 : 4);
  double have = available_bytes ();
  if (width > INT_MAX || height > INT_MAX || (have > 0 && need > have))
    return fail (error, "cannot load '%s': %.0fx%.0f pixels need %.1f GB, %.1f GB of memory "
                 "are available", name, width, height, need / 1e9, have / 1e9);
  return 0;
}

/* The layout every decoder fills: 8-bit files as u8, deeper ones as f32. */
static int
alloc_picture (cfx_picture *pic, const char *name, int width, int height, int channels,
               int alpha, int bits, char **error)
{
  pic->image.channels = channels;
  pic->image.has_alpha = alpha;
  pic->image.type = bits == 8 ? CUDAFX_U8 : CUDAFX_F32;
  pic->bits = bits;
  if (cfx_image_alloc (&pic->image, width, height))
    return fail (error, "cannot load '%s': %dx%d pixels do not fit in memory", name, width, height);
  return 0;
}

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

static file_format
format_of_name (const char *path)
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

/* 16-bit samples to the engine's 0..1 floats. */
static void
u16_to_f32 (const uint16_t *in, float *out, size_t n)
{
  for (size_t i = 0; i < n; i++)
    out[i] = in[i] * (1.0f / 65535.0f);
}

static uint16_t
f32_to_u16 (float v)
{
  return v <= 0 ? 0 : v >= 1 ? 65535 : (uint16_t) lrintf (v * 65535.0f);
}

static uint8_t
f32_to_u8 (float v)
{
  return v <= 0 ? 0 : v >= 1 ? 255 : (uint8_t) lrintf (v * 255.0f);
}

/* Row y of the picture as 8-bit samples: the row itself, or converted into
 * buf (width * channels bytes). */
static const uint8_t *
row_u8 (const cudafx_image *img, int y, uint8_t *buf)
{
  const char *row = (const char *) img->data + (size_t) y * img->stride;
  if (img->type == CUDAFX_U8)
    return (const uint8_t *) row;
  size_t n = (size_t) img->width * img->channels;
  for (size_t i = 0; i < n; i++)
    buf[i] = f32_to_u8 (((const float *) row)[i]);
  return buf;
}

/* ---- PNG (libpng) ------------------------------------------------------------- */

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
      blob_set (&meta->xmp, text[i].text,
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
    blob_set (&meta->icc, data, size);
  if (png_get_eXIf_1 (png, info, &size, &data) && !meta->exif.data)
    blob_set (&meta->exif, data, size);
  png_take_text (png, info, meta);
}

static int
png_decode (const unsigned char *bytes, size_t size, const char *name, double max_pixels,
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
      return fail (error, "cannot load '%s': out of memory", name);
    }
  if (setjmp (png_jmpbuf (png)))
    {
      fail (error, "cannot load '%s': PNG: %s", name, c.message);
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
  if (check_size (name, width, height, channels, bits, max_pixels, error))
    goto done;

  png_set_expand (png); /* palette to RGB, grey 1/2/4 to 8 bits, tRNS to alpha */
  if (depth == 16)
    png_set_swap (png); /* native-endian 16-bit samples */
  png_set_interlace_handling (png);
  png_read_update_info (png, info);
  if ((int) png_get_channels (png, info) != channels)
    png_error (png, "unexpected channel count after expansion");
  if (alloc_picture (pic, name, (int) width, (int) height, channels, alpha, bits, error))
    goto done;

  size_t samples = (size_t) width * channels;
  rows = g_try_malloc (height * sizeof *rows);
  if (bits == 16)
    deep = g_try_malloc ((size_t) height * samples * 2);
  if (!rows || (bits == 16 && !deep))
    {
      fail (error, "cannot load '%s': %ux%u pixels do not fit in memory", name, width, height);
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

static int
icc_matches (const cfx_blob *icc, int channels)
{
  /* The profile's colour space (bytes 16..19) must fit the pixels. */
  if (icc->size < 20)
    return 0;
  const char *space = (const char *) icc->data + 16;
  return channels <= 2 ? !memcmp (space, "GRAY", 4) : !memcmp (space, "RGB ", 4);
}

static int
png_encode (FILE *f, const cfx_picture *pic, int strip, const char *name, char **error)
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
      return fail (error, "cannot save '%s': out of memory", name);
    }
  if (setjmp (png_jmpbuf (png)))
    {
      g_free (row);
      g_free (xmp);
      png_destroy_write_struct (&png, &info);
      return fail (error, "cannot save '%s': PNG: %s", name, c.message);
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
      if (m->icc.data && icc_matches (&m->icc, img->channels))
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

/* ---- JPEG (libjpeg-turbo) ----------------------------------------------------- */

typedef struct {
  struct jpeg_error_mgr pub;
  struct jpeg_progress_mgr progress;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
} jpeg_context;

static void
jpeg_fail (j_common_ptr cinfo)
{
  jpeg_context *c = (jpeg_context *) cinfo->err;
  c->pub.format_message (cinfo, c->message);
  longjmp (c->jump, 1);
}

/* Level -1 is a warning: every one of them is about damaged data (corrupt
 * entropy-coded data, a premature end, extraneous bytes) except those about
 * metadata. Levels 0 and up are trace messages. */
static void
jpeg_message (j_common_ptr cinfo, int level)
{
  int code = cinfo->err->msg_code;
  if (level >= 0 || code == JWRN_BOGUS_ICC || code == JWRN_ADOBE_XFORM ||
      code == JWRN_JFIF_MAJOR)
    return;
  jpeg_fail (cinfo);
}

static void
jpeg_count_scans (j_common_ptr cinfo)
{
  if (cinfo->is_decompressor && ((j_decompress_ptr) cinfo)->input_scan_number > JPEG_MAX_SCANS)
    {
      jpeg_context *c = (jpeg_context *) cinfo->err;
      snprintf (c->message, sizeof c->message, "more than %d progressive scans", JPEG_MAX_SCANS);
      longjmp (c->jump, 1);
    }
}

static const char xmp_signature[] = "http://ns.adobe.com/xap/1.0/"; /* and its NUL */

static int
jpeg_decode (const unsigned char *bytes, size_t size, const char *name, double max_pixels,
             cfx_picture *pic, char **error)
{
  struct jpeg_decompress_struct cinfo;
  jpeg_context c;
  JOCTET *volatile icc = NULL;

  memset (&c, 0, sizeof c);
  cinfo.err = jpeg_std_error (&c.pub);
  c.pub.error_exit = jpeg_fail;
  c.pub.emit_message = jpeg_message;
  if (setjmp (c.jump))
    {
      free (icc);
      jpeg_destroy_decompress (&cinfo);
      if (!*error)
        fail (error, "cannot load '%s': JPEG: %s", name, c.message);
      return -1;
    }
  jpeg_create_decompress (&cinfo);
  c.progress.progress_monitor = jpeg_count_scans;
  cinfo.progress = &c.progress;
  jpeg_mem_src (&cinfo, bytes, (unsigned long) size);
  jpeg_save_markers (&cinfo, JPEG_APP0 + 1, 0xFFFF);
  jpeg_save_markers (&cinfo, JPEG_APP0 + 2, 0xFFFF);
  if (jpeg_read_header (&cinfo, TRUE) != JPEG_HEADER_OK)
    {
      snprintf (c.message, sizeof c.message, "no image in the file (tables only)");
      longjmp (c.jump, 1);
    }
  int grey = cinfo.jpeg_color_space == JCS_GRAYSCALE;
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK)
    {
      snprintf (c.message, sizeof c.message, "CMYK images are not supported");
      longjmp (c.jump, 1);
    }
  if (check_size (name, cinfo.image_width, cinfo.image_height, grey ? 1 : 3, 8, max_pixels, error))
    longjmp (c.jump, 1);
  cinfo.out_color_space = grey ? JCS_GRAYSCALE : JCS_RGB;
  unsigned int icc_size = 0;
  JOCTET *icc_data = NULL;
  if (jpeg_read_icc_profile (&cinfo, &icc_data, &icc_size))
    icc = icc_data;
  jpeg_start_decompress (&cinfo);
  if (alloc_picture (pic, name, (int) cinfo.output_width, (int) cinfo.output_height, grey ? 1 : 3,
                     0, 8, error))
    longjmp (c.jump, 1);
  while (cinfo.output_scanline < cinfo.output_height)
    {
      JSAMPROW row = (JSAMPROW) pic->image.data + (size_t) cinfo.output_scanline * pic->image.stride;
      jpeg_read_scanlines (&cinfo, &row, 1);
    }
  for (jpeg_saved_marker_ptr m = cinfo.marker_list; m; m = m->next)
    {
      if (m->marker != JPEG_APP0 + 1)
        continue;
      if (m->data_length > 6 && !memcmp (m->data, "Exif\0\0", 6) && !pic->meta.exif.data)
        blob_set (&pic->meta.exif, m->data + 6, m->data_length - 6);
      else if (m->data_length > sizeof xmp_signature &&
               !memcmp (m->data, xmp_signature, sizeof xmp_signature) && !pic->meta.xmp.data)
        blob_set (&pic->meta.xmp, m->data + sizeof xmp_signature,
                  m->data_length - sizeof xmp_signature);
    }
  if (icc)
    blob_set (&pic->meta.icc, icc, icc_size);
  jpeg_finish_decompress (&cinfo);
  free (icc);
  jpeg_destroy_decompress (&cinfo);
  return 0;
}

static int
jpeg_encode (FILE *f, const cfx_picture *pic, int strip, const char *name, char **error)
{
  struct jpeg_compress_struct cinfo;
  jpeg_context c;
  const cudafx_image *img = &pic->image;
  int grey = img->channels <= 2;
  int out_channels = grey ? 1 : 3;
  /* JPEG has no alpha: it is dropped, as GEGL's jpg-save did. */
  uint8_t *volatile row = NULL;

  memset (&c, 0, sizeof c);
  cinfo.err = jpeg_std_error (&c.pub);
  c.pub.error_exit = jpeg_fail;
  if (setjmp (c.jump))
    {
      g_free (row);
      jpeg_destroy_compress (&cinfo);
      return fail (error, "cannot save '%s': JPEG: %s", name, c.message);
    }
  jpeg_create_compress (&cinfo);
  jpeg_stdio_dest (&cinfo, f);
  cinfo.image_width = (JDIMENSION) img->width;
  cinfo.image_height = (JDIMENSION) img->height;
  cinfo.input_components = out_channels;
  cinfo.in_color_space = grey ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults (&cinfo);
  jpeg_set_quality (&cinfo, LOSSY_QUALITY, TRUE);
  jpeg_start_compress (&cinfo, TRUE);
  if (!strip)
    {
      const cfx_metadata *m = &pic->meta;
      /* A marker holds 65533 bytes; EXIF and XMP beyond that (extended XMP)
       * are left out rather than split in ways readers differ on. */
      if (m->exif.data && m->exif.size + 6 <= 65533)
        {
          guint8 *app1 = g_malloc (m->exif.size + 6);
          memcpy (app1, "Exif\0\0", 6);
          memcpy (app1 + 6, m->exif.data, m->exif.size);
          jpeg_write_marker (&cinfo, JPEG_APP0 + 1, app1, (unsigned int) m->exif.size + 6);
          g_free (app1);
        }
      if (m->xmp.data && m->xmp.size + sizeof xmp_signature <= 65533)
        {
          guint8 *app1 = g_malloc (m->xmp.size + sizeof xmp_signature);
          memcpy (app1, xmp_signature, sizeof xmp_signature);
          memcpy (app1 + sizeof xmp_signature, m->xmp.data, m->xmp.size);
          jpeg_write_marker (&cinfo, JPEG_APP0 + 1, app1,
                             (unsigned int) (m->xmp.size + sizeof xmp_signature));
          g_free (app1);
        }
      if (m->icc.data && icc_matches (&m->icc, out_channels))
        jpeg_write_icc_profile (&cinfo, m->icc.data, (unsigned int) m->icc.size);
    }
  row = g_malloc ((size_t) img->width * img->channels);
  uint8_t *packed = g_malloc ((size_t) img->width * out_channels);
  while (cinfo.next_scanline < cinfo.image_height)
    {
      const uint8_t *src = row_u8 (img, (int) cinfo.next_scanline, row);
      JSAMPROW out = (JSAMPROW) src;
      if (out_channels != img->channels)
        {
          for (int x = 0; x < img->width; x++)
            memcpy (packed + (size_t) x * out_channels, src + (size_t) x * img->channels,
                    out_channels);
          out = packed;
        }
      jpeg_write_scanlines (&cinfo, &out, 1);
    }
  g_free (packed);
  jpeg_finish_compress (&cinfo);
  jpeg_destroy_compress (&cinfo);
  g_free (row);
  return 0;
}

/* ---- EXIF orientation -------------------------------------------------------- */

/* The Orientation (tag 0x0112) of EXIF's first directory, 1..8; 1 when
 * there is none or the structure is damaged. */
static int
exif_orientation (const cfx_blob *exif)
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
static int
orient_image (const cudafx_image *img, int o, cudafx_image *out)
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

/* ---- TIFF (libtiff) ------------------------------------------------------------ */

typedef struct {
  const unsigned char *data;
  size_t size;
  toff_t pos;
  int strict;       /* warnings fail from here on: they are about pixel data */
  char message[256];
  int error_number; /* errno when the first error came */
} tiff_context;

static int
tiff_error (TIFF *tif, void *user, const char *module, const char *fmt, va_list ap)
{
  tiff_context *c = user;
  if (!c->message[0])
    {
      c->error_number = errno;
      vsnprintf (c->message, sizeof c->message, fmt, ap);
    }
  return 1;
}

static int
tiff_warning (TIFF *tif, void *user, const char *module, const char *fmt, va_list ap)
{
  tiff_context *c = user;
  if (c->strict)
    tiff_error (tif, user, module, fmt, ap);
  return 1;
}

static tsize_t
tiff_read (thandle_t h, tdata_t buf, tsize_t n)
{
  tiff_context *c = h;
  size_t left = c->pos < c->size ? c->size - c->pos : 0;
  size_t k = (size_t) n < left ? (size_t) n : left;
  memcpy (buf, c->data + c->pos, k);
  c->pos += k;
  return (tsize_t) k;
}

static tsize_t
tiff_no_write (thandle_t h, tdata_t buf, tsize_t n)
{
  return -1;
}

static toff_t
tiff_seek (thandle_t h, toff_t off, int whence)
{
  tiff_context *c = h;
  toff_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? c->pos : c->size;
  if (whence == SEEK_SET || off <= UINT64_MAX - base)
    c->pos = base + off;
  return c->pos;
}

static int
tiff_close (thandle_t h)
{
  return 0;
}

static toff_t
tiff_size (thandle_t h)
{
  return ((tiff_context *) h)->size;
}

static int
tiff_map (thandle_t h, tdata_t *base, toff_t *size)
{
  tiff_context *c = h;
  *base = (tdata_t) c->data;
  *size = c->size;
  return 1;
}

static void
tiff_unmap (thandle_t h, tdata_t base, toff_t size)
{
}

static TIFFOpenOptions *
tiff_options (tiff_context *c, double max_bytes)
{
  TIFFOpenOptions *o = TIFFOpenOptionsAlloc ();
  TIFFOpenOptionsSetErrorHandlerExtR (o, tiff_error, c);
  TIFFOpenOptionsSetWarningHandlerExtR (o, tiff_warning, c);
  if (max_bytes > 0)
    TIFFOpenOptionsSetMaxSingleMemAlloc (o, (tmsize_t) MIN (max_bytes, (double) G_MAXSSIZE));
  return o;
}

/* Layouts read sample by sample: 8- or 16-bit integers or 32-bit floats,
 * grey or RGB with at most one unassociated alpha, interleaved, in strips.
 * Everything else libtiff can read goes through its RGBA interface. */
static int
tiff_plain_layout (TIFF *tif, int *channels, int *alpha, int *bits)
{
  uint16_t spp = 1, bps = 1, format = SAMPLEFORMAT_UINT, photometric = 0, planar = PLANARCONFIG_CONTIG;
  uint16_t n_extra = 0, *extra = NULL;
  TIFFGetFieldDefaulted (tif, TIFFTAG_SAMPLESPERPIXEL, &spp);
  TIFFGetFieldDefaulted (tif, TIFFTAG_BITSPERSAMPLE, &bps);
  TIFFGetFieldDefaulted (tif, TIFFTAG_SAMPLEFORMAT, &format);
  TIFFGetFieldDefaulted (tif, TIFFTAG_PLANARCONFIG, &planar);
  TIFFGetFieldDefaulted (tif, TIFFTAG_EXTRASAMPLES, &n_extra, &extra);
  if (!TIFFGetField (tif, TIFFTAG_PHOTOMETRIC, &photometric))
    return 0;
  int colour = photometric == PHOTOMETRIC_RGB ? 3 : photometric == PHOTOMETRIC_MINISBLACK ? 1 : 0;
  int ok_type = (bps == 8 && format == SAMPLEFORMAT_UINT) || (bps == 16 && format == SAMPLEFORMAT_UINT) ||
                (bps == 32 && format == SAMPLEFORMAT_IEEEFP);
  if (!colour || !ok_type || planar != PLANARCONFIG_CONTIG || TIFFIsTiled (tif) || n_extra > 1 ||
      spp != colour + n_extra || (n_extra && extra[0] != EXTRASAMPLE_UNASSALPHA))
    return 0;
  *channels = spp;
  *alpha = n_extra;
  *bits = bps;
  return 1;
}

static int
tiff_decode (const unsigned char *bytes, size_t size, const char *name, double max_pixels,
             cfx_picture *pic, char **error)
{
  tiff_context c = { bytes, size, 0, 0, "", 0 };
  /* libtiff's own allocations (a strip, a tile, a tag's values) stay within
   * what the largest allowed image could need. */
  TIFFOpenOptions *options = tiff_options (&c, max_pixels > 0 ? MAX (max_pixels * 16, 256e6) : 0);
  TIFF *tif = TIFFClientOpenExt (name, "r", &c, tiff_read, tiff_no_write, tiff_seek, tiff_close,
                                 tiff_size, tiff_map, tiff_unmap, options);
  void *buf = NULL;
  int status = -1;
  uint32_t width = 0, height = 0;
  int channels, alpha, bits;

  TIFFOpenOptionsFree (options);
  if (!tif)
    return fail (error, "cannot load '%s': TIFF: %s", name, c.message[0] ? c.message : "not readable");
  c.strict = 1;
  TIFFGetField (tif, TIFFTAG_IMAGEWIDTH, &width);
  TIFFGetField (tif, TIFFTAG_IMAGELENGTH, &height);
  int plain = tiff_plain_layout (tif, &channels, &alpha, &bits);
  if (!plain)
    {
      uint16_t photometric = 0, n_extra = 0, *extra;
      TIFFGetFieldDefaulted (tif, TIFFTAG_EXTRASAMPLES, &n_extra, &extra);
      TIFFGetField (tif, TIFFTAG_PHOTOMETRIC, &photometric);
      alpha = n_extra > 0;
      channels = (photometric == PHOTOMETRIC_MINISBLACK || photometric == PHOTOMETRIC_MINISWHITE ? 1 : 3) + alpha;
      bits = 8;
      char why[1024];
      if (!TIFFRGBAImageOK (tif, why))
        {
          fail (error, "cannot load '%s': TIFF: %s", name, why);
          goto done;
        }
    }
  if (check_size (name, width, height, channels, bits, max_pixels, error) ||
      alloc_picture (pic, name, (int) width, (int) height, channels, alpha, bits, error))
    goto done;

  size_t samples = (size_t) width * channels;
  if (plain)
    {
      tmsize_t line = TIFFScanlineSize (tif);
      if (line != (tmsize_t) (samples * bits / 8) || !(buf = g_try_malloc (line)))
        {
          fail (error, "cannot load '%s': TIFF: scanline size %lld does not match the image",
                name, (long long) line);
          goto done;
        }
      for (uint32_t y = 0; y < height; y++)
        {
          char *dst = (char *) pic->image.data + y * pic->image.stride;
          if (TIFFReadScanline (tif, bits == 8 ? (void *) dst : buf, y, 0) < 0 || c.message[0])
            break;
          if (bits == 16)
            u16_to_f32 (buf, (float *) dst, samples);
          else if (bits == 32)
            memcpy (dst, buf, samples * 4);
        }
    }
  else
    {
      buf = g_try_malloc ((size_t) width * height * 4);
      if (!buf)
        {
          fail (error, "cannot load '%s': %ux%u pixels do not fit in memory", name, width, height);
          goto done;
        }
      if (TIFFReadRGBAImageOriented (tif, width, height, buf, ORIENTATION_TOPLEFT, 1))
        {
          /* The RGBA interface premultiplies alpha; the engine wants it straight. */
          for (uint32_t y = 0; y < height; y++)
            for (uint32_t x = 0; x < width; x++)
              {
                uint32_t p = ((uint32_t *) buf)[(size_t) y * width + x];
                uint8_t v[4] = { TIFFGetR (p), TIFFGetG (p), TIFFGetB (p), TIFFGetA (p) };
                uint8_t *dst = (uint8_t *) pic->image.data + y * pic->image.stride + x * channels;
                int colour = channels - alpha;
                for (int k = 0; k < colour; k++)
                  dst[k] = !alpha ? v[k] : v[3] ? (uint8_t) MIN (255, (v[k] * 255 + v[3] / 2) / v[3]) : 0;
                if (alpha)
                  dst[colour] = v[3];
              }
        }
      else if (!c.message[0])
        snprintf (c.message, sizeof c.message, "cannot decode the image");
    }
  if (c.message[0])
    {
      fail (error, "cannot load '%s': TIFF: %s", name, c.message);
      goto done;
    }
  uint32_t n;
  void *data;
  if (TIFFGetField (tif, TIFFTAG_ICCPROFILE, &n, &data))
    blob_set (&pic->meta.icc, data, n);
  if (TIFFGetField (tif, TIFFTAG_XMLPACKET, &n, &data))
    blob_set (&pic->meta.xmp, data, n);
  status = 0;

done:
  g_free (buf);
  TIFFClose (tif);
  return status;
}

/* libtiff's messages say where writing failed, errno says why. */
static int
tiff_write_failed (const tiff_context *c, const char *name, char **error)
{
  return fail (error, "cannot save '%s': TIFF: %s%s%s%s", name, c->message[0] ? c->message : "cannot open",
               c->error_number ? " (" : "", c->error_number ? strerror (c->error_number) : "",
               c->error_number ? ")" : "");
}

static int
tiff_encode (FILE *f, const cfx_picture *pic, int strip, const char *name, char **error)
{
  tiff_context c = { 0 };
  const cudafx_image *img = &pic->image;
  int bits = pic->bits;
  TIFFOpenOptions *options = tiff_options (&c, 0);
  /* TIFFClose closes its descriptor; the output keeps its own. */
  errno = 0;
  int fd = dup (fileno (f));
  TIFF *tif = fd < 0 ? NULL : TIFFFdOpenExt (fd, name, "w", options);
  TIFFOpenOptionsFree (options);
  if (!tif)
    {
      c.error_number = c.error_number ? c.error_number : errno;
      if (fd >= 0)
        close (fd);
      return tiff_write_failed (&c, name, error);
    }
  c.strict = 1;
  uint16_t extra = EXTRASAMPLE_UNASSALPHA;
  TIFFSetField (tif, TIFFTAG_IMAGEWIDTH, (uint32_t) img->width);
  TIFFSetField (tif, TIFFTAG_IMAGELENGTH, (uint32_t) img->height);
  TIFFSetField (tif, TIFFTAG_SAMPLESPERPIXEL, (uint16_t) img->channels);
  TIFFSetField (tif, TIFFTAG_BITSPERSAMPLE, (uint16_t) bits);
  TIFFSetField (tif, TIFFTAG_SAMPLEFORMAT, bits == 32 ? SAMPLEFORMAT_IEEEFP : SAMPLEFORMAT_UINT);
  TIFFSetField (tif, TIFFTAG_PHOTOMETRIC, img->channels <= 2 ? PHOTOMETRIC_MINISBLACK : PHOTOMETRIC_RGB);
  TIFFSetField (tif, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
  /* TIFF keeps no EXIF here: the input's EXIF orientation becomes TIFF's
   * own tag (the same values), so that the pixels display as they did. */
  TIFFSetField (tif, TIFFTAG_ORIENTATION, (uint16_t) (strip ? ORIENTATION_TOPLEFT
                                                            : exif_orientation (&pic->meta.exif)));
  if (img->has_alpha)
    TIFFSetField (tif, TIFFTAG_EXTRASAMPLES, 1, &extra);
  TIFFSetField (tif, TIFFTAG_COMPRESSION, COMPRESSION_ADOBE_DEFLATE);
  TIFFSetField (tif, TIFFTAG_ZIPQUALITY, ZLIB_LEVEL);
  TIFFSetField (tif, TIFFTAG_PREDICTOR, bits == 32 ? PREDICTOR_FLOATINGPOINT : PREDICTOR_HORIZONTAL);
  TIFFSetField (tif, TIFFTAG_ROWSPERSTRIP, TIFFDefaultStripSize (tif, 0));
  if (!strip && pic->meta.icc.data && icc_matches (&pic->meta.icc, img->channels))
    TIFFSetField (tif, TIFFTAG_ICCPROFILE, (uint32_t) pic->meta.icc.size, pic->meta.icc.data);
  if (!strip && pic->meta.xmp.data)
    TIFFSetField (tif, TIFFTAG_XMLPACKET, (uint32_t) pic->meta.xmp.size, pic->meta.xmp.data);

  size_t samples = (size_t) img->width * img->channels;
  void *row = g_malloc (samples * (bits / 8));
  errno = 0;
  for (int y = 0; y < img->height && !c.message[0]; y++)
    {
      const char *src = (const char *) img->data + (size_t) y * img->stride;
      if (bits == 8)
        memcpy (row, src, samples);
      else if (bits == 16)
        for (size_t i = 0; i < samples; i++)
          ((uint16_t *) row)[i] = f32_to_u16 (((const float *) src)[i]);
      else
        memcpy (row, src, samples * 4);
      if (TIFFWriteScanline (tif, row, (uint32_t) y, 0) < 0 && !c.message[0])
        snprintf (c.message, sizeof c.message, "cannot write row %d", y);
    }
  g_free (row);
  if (!c.message[0])
    errno = 0;
  if (!TIFFFlush (tif) && !c.message[0])
    snprintf (c.message, sizeof c.message, "cannot flush");
  TIFFClose (tif);
  return c.message[0] ? tiff_write_failed (&c, name, error) : 0;
}

/* ---- WebP (libwebp) -------------------------------------------------------------- */

static const char *
webp_status (VP8StatusCode s)
{
  switch (s)
    {
    case VP8_STATUS_OUT_OF_MEMORY:       return "out of memory";
    case VP8_STATUS_INVALID_PARAM:       return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR:     return "damaged bitstream";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature (an animation?)";
    case VP8_STATUS_SUSPENDED:           return "suspended";
    case VP8_STATUS_USER_ABORT:          return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA:     return "the file ends early (truncated)";
    default:                             return "not a WebP image";
    }
}

static void
webp_take_chunk (WebPDemuxer *demux, const char *fourcc, cfx_blob *blob)
{
  WebPChunkIterator it;
  if (WebPDemuxGetChunk (demux, fourcc, 1, &it))
    blob_set (blob, it.chunk.bytes, it.chunk.size);
  WebPDemuxReleaseChunkIterator (&it);
}

static int
webp_decode (const unsigned char *bytes, size_t size, const char *name, double max_pixels,
             cfx_picture *pic, char **error)
{
  WebPDecoderConfig config;
  VP8StatusCode s;

  if (!WebPInitDecoderConfig (&config))
    return fail (error, "cannot load '%s': WebP: library version mismatch", name);
  if ((s = WebPGetFeatures (bytes, size, &config.input)) != VP8_STATUS_OK)
    return fail (error, "cannot load '%s': WebP: %s", name, webp_status (s));
  if (config.input.has_animation)
    return fail (error, "cannot load '%s': WebP: animations are not supported", name);
  int alpha = config.input.has_alpha != 0;
  if (check_size (name, config.input.width, config.input.height, 3 + alpha, 8, max_pixels, error) ||
      alloc_picture (pic, name, config.input.width, config.input.height, 3 + alpha, alpha, 8, error))
    return -1;
  config.output.colorspace = alpha ? MODE_RGBA : MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = pic->image.data;
  config.output.u.RGBA.stride = (int) pic->image.stride;
  config.output.u.RGBA.size = pic->image.stride * pic->image.height;
  if ((s = WebPDecode (bytes, size, &config)) != VP8_STATUS_OK)
    {
      WebPFreeDecBuffer (&config.output);
      return fail (error, "cannot load '%s': WebP: %s", name, webp_status (s));
    }
  WebPFreeDecBuffer (&config.output);

  WebPData data = { bytes, size };
  WebPDemuxer *demux = WebPDemux (&data);
  if (demux)
    {
      webp_take_chunk (demux, "ICCP", &pic->meta.icc);
      webp_take_chunk (demux, "EXIF", &pic->meta.exif);
      webp_take_chunk (demux, "XMP ", &pic->meta.xmp);
      WebPDemuxDelete (demux);
    }
  /* Some writers keep JPEG's "Exif\0\0" in front of the TIFF structure. */
  if (pic->meta.exif.size > 6 && !memcmp (pic->meta.exif.data, "Exif\0\0", 6))
    {
      cfx_blob *e = &pic->meta.exif;
      memmove (e->data, e->data + 6, e->size - 6);
      e->size -= 6;
    }
  return 0;
}

static int
webp_encode (FILE *f, const cfx_picture *pic, int strip, const char *name, char **error)
{
  const cudafx_image *img = &pic->image;
  int grey = img->channels <= 2, alpha = img->has_alpha;
  int out_channels = 3 + alpha;
  size_t stride = (size_t) img->width * out_channels;
  uint8_t *rgb = g_try_malloc (stride * img->height);
  uint8_t *row = g_malloc ((size_t) img->width * img->channels);
  uint8_t *encoded = NULL;
  size_t size;
  int status = 0;

  if (!rgb)
    {
      g_free (row);
      return fail (error, "cannot save '%s': out of memory", name);
    }
  /* WebP stores RGB(A) only: grey is written as equal R, G and B. */
  for (int y = 0; y < img->height; y++)
    {
      const uint8_t *src = row_u8 (img, y, row);
      uint8_t *dst = rgb + (size_t) y * stride;
      for (int x = 0; x < img->width; x++, src += img->channels, dst += out_channels)
        {
          for (int k = 0; k < 3; k++)
            dst[k] = src[grey ? 0 : k];
          if (alpha)
            dst[3] = src[img->channels - 1];
        }
    }
  g_free (row);
  size = alpha ? WebPEncodeRGBA (rgb, img->width, img->height, (int) stride, LOSSY_QUALITY, &encoded)
               : WebPEncodeRGB (rgb, img->width, img->height, (int) stride, LOSSY_QUALITY, &encoded);
  g_free (rgb);
  if (!size)
    return fail (error, "cannot save '%s': WebP: the encoder failed (%dx%d; at most 16383 each way)",
                 name, img->width, img->height);

  const cfx_metadata *m = &pic->meta;
  WebPData out = { encoded, size };
  WebPData assembled = { NULL, 0 };
  if (!strip && (m->icc.data || m->exif.data || m->xmp.data))
    {
      WebPMux *mux = WebPMuxNew ();
      WebPData image = { encoded, size };
      int ok = mux && WebPMuxSetImage (mux, &image, 0) == WEBP_MUX_OK;
      if (ok && m->icc.data && icc_matches (&m->icc, out_channels))
        ok = WebPMuxSetChunk (mux, "ICCP", &(WebPData) { m->icc.data, m->icc.size }, 1) == WEBP_MUX_OK;
      if (ok && m->exif.data)
        ok = WebPMuxSetChunk (mux, "EXIF", &(WebPData) { m->exif.data, m->exif.size }, 1) == WEBP_MUX_OK;
      if (ok && m->xmp.data)
        ok = WebPMuxSetChunk (mux, "XMP ", &(WebPData) { m->xmp.data, m->xmp.size }, 1) == WEBP_MUX_OK;
      if (ok && WebPMuxAssemble (mux, &assembled) == WEBP_MUX_OK)
        out = assembled;
      else
        status = fail (error, "cannot save '%s': WebP: cannot add the metadata", name);
      WebPMuxDelete (mux);
    }
  if (!status && fwrite (out.bytes, 1, out.size, f) != out.size)
    status = fail (error, "cannot save '%s': %s", name, strerror (errno));
  WebPDataClear (&assembled);
  WebPFree (encoded);
  return status;
}

/* ---- PNM and PAM (libnetpbm) ----------------------------------------------------- */

/* libnetpbm reports errors through process-wide hooks: a message function
 * and a jump buffer (so PNM decoding is not reentrant across threads). */
static char pnm_message[256];

/* libnetpbm keeps its message hooks and error jump in globals: one PNM
 * decode or encode at a time (the batch pipeline runs codecs on several
 * threads). */
static pthread_mutex_t pnm_lock = PTHREAD_MUTEX_INITIALIZER;

static void
pnm_keep_message (const char *message)
{
  snprintf (pnm_message, sizeof pnm_message, "%s", message);
}

static void
pnm_start (jmp_buf *jump, jmp_buf **saved)
{
  static int started;
  if (!started)
    pm_init ("cudafx", 0);
  started = 1;
  pm_setusererrormsgfn (pnm_keep_message);
  pm_setusermessagefn (pnm_keep_message);
  pnm_message[0] = '\0';
  pm_setjmpbufsave (jump, saved);
}

static int
pnm_decode (const unsigned char *bytes, size_t size, const char *name, double max_pixels,
            cfx_picture *pic, char **error)
{
  struct pam pam;
  jmp_buf jump, *saved;
  tuple *volatile row = NULL;
  const char *volatile comments = NULL;
  /* fmemopen wants a writable buffer type; "r" never writes to it. */
  FILE *f = fmemopen ((void *) bytes, size, "r");

  if (!f)
    return fail (error, "cannot load '%s': %s", name, strerror (errno));
  pnm_start (&jump, &saved);
  if (setjmp (jump))
    {
      pm_setjmpbuf (saved);
      if (row)
        pnm_freepamrow (row);
      free ((void *) comments);
      fclose (f);
      if (!*error)
        fail (error, "cannot load '%s': PNM: %s", name, pnm_message);
      return -1;
    }
  /* The whole struct, zeroed (libnetpbm's PAM_STRUCT_SIZE macro is an
   * offsetof through a null pointer: UB); libnetpbm fills what the size
   * covers and hands over the header's comments through comment_p. */
  memset (&pam, 0, sizeof pam);
  pam.comment_p = (const char **) &comments;
  pnm_readpaminit (f, &pam, sizeof pam);
  free ((void *) comments);
  comments = NULL;
  int alpha = pam.have_opacity != 0;
  int channels = (int) pam.depth;
  if (channels < 1 || channels > 4 || (alpha && pam.opacity_plane != pam.depth - 1) ||
      (channels == 2 && !alpha) || (channels == 4 && !alpha))
    {
      snprintf (pnm_message, sizeof pnm_message, "%d planes%s: not grey or RGB, with or without alpha",
                channels, alpha ? " with alpha" : "");
      pm_longjmp ();
    }
  int bits = pam.maxval > 255 ? 16 : 8;
  if (check_size (name, pam.width, pam.height, channels, bits, max_pixels, error) ||
      alloc_picture (pic, name, pam.width, pam.height, channels, alpha, bits, error))
    pm_longjmp ();
  row = pnm_allocpamrow (&pam);
  double scale = (bits == 8 ? 255.0 : 1.0) / pam.maxval;
  for (int y = 0; y < pam.height; y++)
    {
      pnm_readpamrow (&pam, row);
      char *dst = (char *) pic->image.data + (size_t) y * pic->image.stride;
      for (int x = 0; x < pam.width; x++)
        for (int k = 0; k < channels; k++)
          {
            double v = MIN (row[x][k], pam.maxval) * scale;
            if (bits == 8)
              ((uint8_t *) dst)[x * channels + k] = (uint8_t) lrint (v);
            else
              ((float *) dst)[x * channels + k] = (float) v;
          }
    }
  pnm_freepamrow (row);
  pm_setjmpbuf (saved);
  fclose (f);
  return 0;
}

/* .pam keeps alpha; .pgm is grey and .ppm colour (alpha left out, grey
 * written as equal R, G, B); .pnm picks PGM or PPM by the image. */
static int
pnm_encode (FILE *f, const cfx_picture *pic, const char *name, char **error)
{
  const cudafx_image *img = &pic->image;
  const char *ext = strrchr (name, '.');
  int grey = img->channels <= 2;
  struct pam pam;
  jmp_buf jump, *saved;
  tuple *volatile row = NULL;

  memset (&pam, 0, sizeof pam);
  pam.size = sizeof pam;
  pam.len = sizeof pam;
  pam.file = f;
  pam.width = img->width;
  pam.height = img->height;
  pam.maxval = pic->bits == 8 ? 255 : 65535;
  if (!g_ascii_strcasecmp (ext, ".pam"))
    {
      pam.format = PAM_FORMAT;
      pam.depth = (unsigned int) img->channels;
      snprintf (pam.tuple_type, sizeof pam.tuple_type, "%s%s", grey ? "GRAYSCALE" : "RGB",
                img->has_alpha ? "_ALPHA" : "");
    }
  else
    {
      if (!g_ascii_strcasecmp (ext, ".pgm") && !grey)
        return fail (error, "cannot save '%s': PGM holds grey images; use .ppm or .pnm", name);
      grey = grey && g_ascii_strcasecmp (ext, ".ppm");
      pam.format = grey ? RPGM_FORMAT : RPPM_FORMAT;
      pam.depth = grey ? 1 : 3;
    }
  pnm_start (&jump, &saved);
  if (setjmp (jump))
    {
      pm_setjmpbuf (saved);
      if (row)
        pnm_freepamrow (row);
      return fail (error, "cannot save '%s': PNM: %s", name, pnm_message);
    }
  pnm_writepaminit (&pam);
  row = pnm_allocpamrow (&pam);
  for (int y = 0; y < img->height; y++)
    {
      const char *src = (const char *) img->data + (size_t) y * img->stride;
      for (int x = 0; x < img->width; x++)
        for (unsigned int k = 0; k < pam.depth; k++)
          {
            /* The source channel: grey repeated for R, G, B; alpha last. */
            int from = k < 3 && img->channels <= 2 ? 0 : (int) k;
            size_t i = (size_t) x * img->channels + from;
            row[x][k] = img->type == CUDAFX_U8 ? ((const uint8_t *) src)[i]
                                               : f32_to_u16 (((const float *) src)[i]);
          }
      pnm_writepamrow (&pam, row);
    }
  pnm_freepamrow (row);
  pm_setjmpbuf (saved);
  return 0;
}

/* ---- other formats through GEGL --------------------------------------------------- */

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

static int
gegl_load (const char *path, double max_pixels, cfx_picture *pic, char **error)
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
      check_size (path, box.width, box.height, 4, 32, max_pixels, error))
    goto done;
  gegl_node_process (sink);
  const GeglRectangle *extent = buffer ? gegl_buffer_get_extent (buffer) : NULL;
  if (!extent || extent->width <= 0 || extent->height <= 0)
    {
      /* ImageMagick, GEGL's last resort, reports only GEGL's temporary file. */
      if (strstr (w.message, "gegl-magick"))
        fail (error, "cannot load '%s': not an image cudafx can read (nor ImageMagick, which GEGL "
              "tried)", path);
      else
        fail (error, "cannot load '%s': not an image cudafx can read%s%s", path,
              w.message[0] ? ": " : "", w.message);
      goto done;
    }
  if (w.message[0])
    {
      fail (error, "cannot load '%s': %s", path, w.message);
      goto done;
    }
  const Babl *space = babl_format_get_space (gegl_buffer_get_format (buffer));
  const Babl *format = engine_format (gegl_buffer_get_format (buffer), pic);
  if (alloc_picture (pic, path, extent->width, extent->height, pic->image.channels,
                     pic->image.has_alpha, pic->bits, error))
    goto done;
  gegl_buffer_get (buffer, extent, 1.0, format, pic->image.data, pic->image.stride, GEGL_ABYSS_NONE);
  if (space != babl_space ("sRGB"))
    {
      int length = 0;
      const char *icc = babl_space_get_icc (space, &length);
      if (icc && length > 0)
        blob_set (&pic->meta.icc, icc, (size_t) length);
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
static const char *
gegl_saver_for (const char *path)
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

static int
gegl_save (const char *temp, const char *name, const cfx_picture *pic, char **error)
{
  const char *saver = gegl_saver_for (name);
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
    return fail (error, "cannot save '%s': %s", name, w.message);
  if (stat (temp, &st) || st.st_size == 0)
    return fail (error, "cannot save '%s': %s wrote nothing", name, saver);
  return 0;
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
    case FMT_PNG:  status = png_decode (data, size, name, max_pixels, pic, error); break;
    case FMT_JPEG: status = jpeg_decode (data, size, name, max_pixels, pic, error); break;
    case FMT_TIFF: status = tiff_decode (data, size, name, max_pixels, pic, error); break;
    case FMT_WEBP: status = webp_decode (data, size, name, max_pixels, pic, error); break;
    case FMT_PNM:
      pthread_mutex_lock (&pnm_lock);
      status = pnm_decode (data, size, name, max_pixels, pic, error);
      pthread_mutex_unlock (&pnm_lock);
      break;
    default:       status = fail (error, "cannot load '%s': not a PNG, JPEG, TIFF, WebP or PNM file", name);
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
    return fail (error, "cannot read '%s': %s", path,
                 errno == ENOENT ? "no such file" : strerror (errno));
  if (fstat (fd, &st))
    status = fail (error, "cannot read '%s': %s", path, strerror (errno));
  else if (S_ISDIR (st.st_mode))
    status = fail (error, "cannot read '%s': is a directory", path);
  else if (!S_ISREG (st.st_mode))
    status = fail (error, "cannot read '%s': not a regular file (a FIFO, socket or device)", path);
  else if (st.st_size == 0)
    status = fail (error, "cannot load '%s': the file is empty", path);
  else if (!(data = g_try_malloc ((gsize) st.st_size)))
    status = fail (error, "cannot read '%s': %lld bytes do not fit in memory", path,
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
        status = fail (error, "cannot read '%s': %s", path, strerror (errno));
      else if (got < want)
        status = fail (error, "cannot read '%s': the file shrank while being read", path);
      else if (sniff (data, got) != FMT_OTHER)
        status = cfx_image_decode (data, got, path, max_pixels, pic, error);
      /* GEGL would pick its loader by the extension, and its JPEG loader
       * ends the process on a file that is not one. */
      else if (format_of_name (path) != FMT_OTHER)
        status = fail (error, "cannot load '%s': not a %s file (damaged, or another format)", path,
                       format_names[format_of_name (path)]);
      /* GEGL would hand it to ImageMagick, whose failure names only GEGL's
       * own temporary file. */
      else if (got >= 12 && !memcmp (data + (got >= 15 && !memcmp (data, "\xEF\xBB\xBF", 3) ? 3 : 0),
                                     "GIMP Palette", 12))
        status = fail (error, "cannot load '%s': it is a GIMP palette, not an image (quantize takes "
                       "it as --palette)", path);
      else
        status = gegl_load (path, max_pixels, pic, error);
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
  if (format_of_name (path) != FMT_OTHER || gegl_saver_for (path))
    return 1;
  fail (error, "cannot write '%s': no saver for its extension (use .png, .jpg, .tif, .webp, "
        ".exr, .ppm...)", path);
  return 0;
}

struct cfx_output {
  char *path;   /* the name as given, for messages */
  char *target; /* the file replaced: path, or what its symbolic links lead to */
  char *temp;
  FILE *file;
  cfx_output *prev, *next; /* in live_outputs while temp exists */
};

/* Every temporary file that exists, so that an interrupted run removes
 * them: each is created, renamed into place or removed with temp_lock
 * held, and the signal thread (cfx_output_guard_signals) removes them with
 * it held, so none is made or renamed while it does. */
static pthread_mutex_t temp_lock = PTHREAD_MUTEX_INITIALIZER;
static cfx_output     *live_outputs;

/* With temp_lock held. */
static void
live_add (cfx_output *o)
{
  o->prev = NULL;
  o->next = live_outputs;
  if (live_outputs)
    live_outputs->prev = o;
  live_outputs = o;
}

/* With temp_lock held. */
static void
live_remove (cfx_output *o)
{
  if (o->prev)
    o->prev->next = o->next;
  else if (live_outputs == o)
    live_outputs = o->next;
  if (o->next)
    o->next->prev = o->prev;
  o->prev = o->next = NULL;
}

static void *
signal_thread (void *data)
{
  sigset_t *set = data;
  int sig = 0;

  while (sigwait (set, &sig))
    ;
  /* Never unlocked: no thread makes or renames a temporary file after this. */
  pthread_mutex_lock (&temp_lock);
  for (cfx_output *o = live_outputs; o; o = o->next)
    unlink (o->temp);
  fprintf (stderr, "cudafx: interrupted by %s; no output written\n",
           sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP");
  /* Dies of the signal itself, so the caller's status says so (128 + n in a shell). */
  signal (sig, SIG_DFL);
  pthread_sigmask (SIG_UNBLOCK, set, NULL);
  raise (sig);
  _exit (128 + sig);
}

static sigset_t guarded_signals;

/* A child (ImageMagick, which GEGL runs for formats it lacks) gets the
 * signals back: blocked, they would reach it no more. */
static void
unblock_in_child (void)
{
  pthread_sigmask (SIG_UNBLOCK, &guarded_signals, NULL);
}

int
cfx_output_guard_signals (void)
{
  static const int signals[] = { SIGINT, SIGTERM, SIGHUP };
  sigset_t *set = &guarded_signals;
  pthread_t thread;

  sigemptyset (set);
  /* A signal the caller ignores (nohup's SIGHUP, a background job's SIGINT)
   * stays ignored. */
  for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++)
    {
      struct sigaction now;
      if (!sigaction (signals[i], NULL, &now) && now.sa_handler != SIG_IGN)
        sigaddset (set, signals[i]);
    }
  /* Blocked here, before any other thread exists, so every thread made
   * later (the pipeline's, OpenMP's, GEGL's) inherits the mask and the
   * signals reach signal_thread alone, outside any signal handler. */
  if (pthread_sigmask (SIG_BLOCK, set, NULL))
    return -1;
  if (pthread_create (&thread, NULL, signal_thread, set))
    {
      pthread_sigmask (SIG_UNBLOCK, set, NULL);
      return -1;
    }
  pthread_detach (thread);
  pthread_atfork (NULL, NULL, unblock_in_child);
  return 0;
}

/* Follows symbolic links from path to the file they name (which need not
 * exist yet), so that the link stays and its target is replaced. */
static char *
resolve_links (const char *path)
{
  char *target = g_strdup (path);
  for (int hops = 0; hops < 40; hops++)
    {
      struct stat st;
      if (lstat (target, &st) || !S_ISLNK (st.st_mode))
        break;
      char *link = g_file_read_link (target, NULL);
      if (!link)
        break;
      char *next;
      if (g_path_is_absolute (link))
        next = g_strdup (link);
      else
        {
          char *dir = g_path_get_dirname (target);
          next = g_build_filename (dir, link, NULL);
          g_free (dir);
        }
      g_free (link);
      g_free (target);
      target = next;
    }
  return target;
}

cfx_output *
cfx_output_open (const char *path, char **error)
{
  cfx_output *o = g_new0 (cfx_output, 1);
  struct stat old;

  *error = NULL;
  o->path = g_strdup (path);
  o->target = resolve_links (path);
  char *dir = g_path_get_dirname (o->target);
  char *base = g_path_get_basename (o->target);
  char *dot = strrchr (base, '.');
  int stem = dot && dot != base ? (int) (dot - base) : (int) strlen (base);
  const char *ext = base + stem;
  /* Hidden, named after the file it will become and marked as ours, so a
   * killed run's leftover says what it was: ".photo.cudafx-XXXXXX.jpg". The
   * extension stays last for GEGL, which picks loaders by it. */
  o->temp = g_strdup_printf ("%s/.%.*s.cudafx-XXXXXX%s", dir, stem, base, ext);
  pthread_mutex_lock (&temp_lock);
  int fd = mkostemps (o->temp, (int) strlen (ext), O_CLOEXEC), saved = errno;
  if (fd >= 0)
    live_add (o);
  pthread_mutex_unlock (&temp_lock);
  long name_max = fd < 0 && saved == ENAMETOOLONG ? pathconf (dir, _PC_NAME_MAX) : -1;
  size_t base_len = strlen (base);
  g_free (dir);
  g_free (base);
  if (fd < 0)
    {
      /* A name that fits but leaves no room for the temporary one's
       * 15 more bytes: say so, rather than that the name is too long. */
      if (name_max > 0 && base_len <= (size_t) name_max)
        fail (error, "cannot write '%s': its name is %zu bytes, and the temporary file written "
              "beside it first (\".NAME.cudafx-XXXXXX\", 15 bytes longer) would pass the "
              "limit of %ld bytes",
              path, base_len, name_max);
      else
        fail (error, "cannot write '%s': %s", path, strerror (saved));
      g_free (o->temp);
      o->temp = NULL;
      cfx_output_discard (o);
      return NULL;
    }
  /* mkstemp makes the file 0600: give it the mode of the file it replaces,
   * or the one a new file would get. */
  if (stat (o->target, &old) == 0)
    fchmod (fd, old.st_mode & 07777);
  else
    {
      mode_t mask = umask (0);
      umask (mask);
      fchmod (fd, 0666 & ~mask);
    }
  o->file = fdopen (fd, "wb");
  if (!o->file)
    {
      fail (error, "cannot write '%s': %s", path, strerror (errno));
      close (fd);
      cfx_output_discard (o);
      return NULL;
    }
  return o;
}

FILE *
cfx_output_file (cfx_output *o)
{
  return o->file;
}

int
cfx_output_save_image (cfx_output *o, const cfx_picture *pic, int strip, char **error)
{
  *error = NULL;
  switch (format_of_name (o->path))
    {
    case FMT_PNG:  return png_encode (o->file, pic, strip, o->path, error);
    case FMT_JPEG: return jpeg_encode (o->file, pic, strip, o->path, error);
    case FMT_TIFF: return tiff_encode (o->file, pic, strip, o->path, error);
    case FMT_WEBP: return webp_encode (o->file, pic, strip, o->path, error);
    case FMT_PNM:
      {
        pthread_mutex_lock (&pnm_lock);
        int status = pnm_encode (o->file, pic, o->path, error);
        pthread_mutex_unlock (&pnm_lock);
        return status;
      }
    default:
      {
        /* GEGL's savers (EXR, ...) keep no EXIF: the pixels are turned as
         * the orientation says, so that they display as the input did. */
        int orientation = strip ? 1 : exif_orientation (&pic->meta.exif);
        if (orientation == 1)
          return gegl_save (o->temp, o->path, pic, error);
        cfx_picture turned = *pic;
        if (orient_image (&pic->image, orientation, &turned.image))
          return fail (error, "cannot save '%s': out of memory turning it upright", o->path);
        int status = gegl_save (o->temp, o->path, &turned, error);
        cfx_image_free (turned.image.data);
        return status;
      }
    }
}

int
cfx_output_commit (cfx_output *o, char **error)
{
  int status = 0;
  *error = NULL;
  /* Every byte on the disk before the rename, so that a crash leaves the old
   * file or the new one, never an empty new one. */
  if (fflush (o->file) || fsync (fileno (o->file)))
    status = fail (error, "cannot write '%s': %s", o->path, strerror (errno));
  if (fclose (o->file) && !status)
    status = fail (error, "cannot write '%s': %s", o->path, strerror (errno));
  o->file = NULL;
  pthread_mutex_lock (&temp_lock);
  if (!status && rename (o->temp, o->target))
    status = fail (error, "cannot write '%s': %s", o->path, strerror (errno));
  if (!status)
    live_remove (o);
  pthread_mutex_unlock (&temp_lock);
  if (!status)
    {
      g_free (o->temp);
      o->temp = NULL;
      char *dir = g_path_get_dirname (o->target);
      int fd = open (dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd >= 0)
        {
          fsync (fd); /* the rename itself; a failure here changes nothing written */
          close (fd);
        }
      g_free (dir);
    }
  cfx_output_discard (o);
  return status;
}

void
cfx_output_discard (cfx_output *o)
{
  if (!o)
    return;
  if (o->file)
    fclose (o->file);
  if (o->temp)
    {
      pthread_mutex_lock (&temp_lock);
      unlink (o->temp);
      live_remove (o);
      pthread_mutex_unlock (&temp_lock);
    }
  g_free (o->temp);
  g_free (o->target);
  g_free (o->path);
  g_free (o);
}

int
cfx_image_probe (const char *path, double *pixels)
{
  cfx_picture pic;
  char *error = NULL;
  double found = 0;

  /* Only the formats image_io decodes itself stop at their header; GEGL's
   * loaders are not asked (the file's own load will be). */
  if (format_of_name (path) == FMT_OTHER)
    return 1;
  probe_pixels = &found;
  cfx_image_load (path, 0, &pic, &error);
  probe_pixels = NULL;
  g_free (error);
  *pixels = found;
  return found > 0 ? 0 : 1;
}
