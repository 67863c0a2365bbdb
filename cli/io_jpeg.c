/* SPDX-License-Identifier: GPL-3.0-or-later */
/* JPEG files through libjpeg-turbo. */
#include "io_codecs.h"

#include <jpeglib.h>
#include <jerror.h>

#include <setjmp.h>
#include <string.h>

/* A progressive JPEG can hold any number of scans, each one a pass over the
 * whole image: libjpeg-turbo's djpeg caps them the same way (-maxscans). */
#define JPEG_MAX_SCANS 1000

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

int
io_jpeg_decode (const unsigned char *bytes, size_t size, const char *name, double max_pixels,
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
        io_fail (error, "cannot load '%s': JPEG: %s", name, c.message);
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
  if (io_check_size (name, cinfo.image_width, cinfo.image_height, grey ? 1 : 3, 8, max_pixels, error))
    longjmp (c.jump, 1);
  cinfo.out_color_space = grey ? JCS_GRAYSCALE : JCS_RGB;
  unsigned int icc_size = 0;
  JOCTET *icc_data = NULL;
  if (jpeg_read_icc_profile (&cinfo, &icc_data, &icc_size))
    icc = icc_data;
  jpeg_start_decompress (&cinfo);
  if (io_alloc_picture (pic, name, (int) cinfo.output_width, (int) cinfo.output_height, grey ? 1 : 3,
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
        io_blob_set (&pic->meta.exif, m->data + 6, m->data_length - 6);
      else if (m->data_length > sizeof xmp_signature &&
               !memcmp (m->data, xmp_signature, sizeof xmp_signature) && !pic->meta.xmp.data)
        io_blob_set (&pic->meta.xmp, m->data + sizeof xmp_signature,
                     m->data_length - sizeof xmp_signature);
    }
  if (icc)
    io_blob_set (&pic->meta.icc, icc, icc_size);
  jpeg_finish_decompress (&cinfo);
  free (icc);
  jpeg_destroy_decompress (&cinfo);
  return 0;
}

int
io_jpeg_encode (FILE *f, const cfx_picture *pic, int strip, const char *name, char **error)
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
      return io_fail (error, "cannot save '%s': JPEG: %s", name, c.message);
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
      if (m->icc.data && io_icc_matches (&m->icc, out_channels))
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
