/* SPDX-License-Identifier: GPL-3.0-or-later */
/* TIFF files through libtiff. */
#include "io_codecs.h"

#include <tiffio.h>

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

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

int
io_tiff_decode (const unsigned char *bytes, size_t size, const char *name, double max_pixels,
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
    return io_fail (error, "cannot load '%s': TIFF: %s", name, c.message[0] ? c.message : "not readable");
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
          io_fail (error, "cannot load '%s': TIFF: %s", name, why);
          goto done;
        }
    }
  if (io_check_size (name, width, height, channels, bits, max_pixels, error) ||
      io_alloc_picture (pic, name, (int) width, (int) height, channels, alpha, bits, error))
    goto done;

  size_t samples = (size_t) width * channels;
  if (plain)
    {
      tmsize_t line = TIFFScanlineSize (tif);
      if (line != (tmsize_t) (samples * bits / 8) || !(buf = g_try_malloc (line)))
        {
          io_fail (error, "cannot load '%s': TIFF: scanline size %lld does not match the image",
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
          io_fail (error, "cannot load '%s': %ux%u pixels do not fit in memory", name, width, height);
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
      io_fail (error, "cannot load '%s': TIFF: %s", name, c.message);
      goto done;
    }
  uint32_t n;
  void *data;
  if (TIFFGetField (tif, TIFFTAG_ICCPROFILE, &n, &data))
    io_blob_set (&pic->meta.icc, data, n);
  if (TIFFGetField (tif, TIFFTAG_XMLPACKET, &n, &data))
    io_blob_set (&pic->meta.xmp, data, n);
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
  return io_fail (error, "cannot save '%s': TIFF: %s%s%s%s", name, c->message[0] ? c->message : "cannot open",
                  c->error_number ? " (" : "", c->error_number ? strerror (c->error_number) : "",
                  c->error_number ? ")" : "");
}

int
io_tiff_encode (FILE *f, const cfx_picture *pic, int strip, const char *name, char **error)
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
                                                            : io_exif_orientation (&pic->meta.exif)));
  if (img->has_alpha)
    TIFFSetField (tif, TIFFTAG_EXTRASAMPLES, 1, &extra);
  TIFFSetField (tif, TIFFTAG_COMPRESSION, COMPRESSION_ADOBE_DEFLATE);
  TIFFSetField (tif, TIFFTAG_ZIPQUALITY, ZLIB_LEVEL);
  TIFFSetField (tif, TIFFTAG_PREDICTOR, bits == 32 ? PREDICTOR_FLOATINGPOINT : PREDICTOR_HORIZONTAL);
  TIFFSetField (tif, TIFFTAG_ROWSPERSTRIP, TIFFDefaultStripSize (tif, 0));
  if (!strip && pic->meta.icc.data && io_icc_matches (&pic->meta.icc, img->channels))
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
