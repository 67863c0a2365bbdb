/* SPDX-License-Identifier: GPL-3.0-or-later */
/* WebP files through libwebp, libwebpmux and libwebpdemux. */
#include "io_codecs.h"

#include <webp/decode.h>
#include <webp/demux.h>
#include <webp/encode.h>
#include <webp/mux.h>

#include <string.h>

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
    io_blob_set (blob, it.chunk.bytes, it.chunk.size);
  WebPDemuxReleaseChunkIterator (&it);
}

int
io_webp_decode (const unsigned char *bytes, size_t size, const char *name, double max_pixels,
                cfx_picture *pic, char **error)
{
  WebPDecoderConfig config;
  VP8StatusCode s;

  if (!WebPInitDecoderConfig (&config))
    return io_fail (error, "cannot load '%s': WebP: library version mismatch", name);
  if ((s = WebPGetFeatures (bytes, size, &config.input)) != VP8_STATUS_OK)
    return io_fail (error, "cannot load '%s': WebP: %s", name, webp_status (s));
  if (config.input.has_animation)
    return io_fail (error, "cannot load '%s': WebP: animations are not supported", name);
  int alpha = config.input.has_alpha != 0;
  if (io_check_size (name, config.input.width, config.input.height, 3 + alpha, 8, max_pixels, error) ||
      io_alloc_picture (pic, name, config.input.width, config.input.height, 3 + alpha, alpha, 8, error))
    return -1;
  config.output.colorspace = alpha ? MODE_RGBA : MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = pic->image.data;
  config.output.u.RGBA.stride = (int) pic->image.stride;
  config.output.u.RGBA.size = pic->image.stride * pic->image.height;
  if ((s = WebPDecode (bytes, size, &config)) != VP8_STATUS_OK)
    {
      WebPFreeDecBuffer (&config.output);
      return io_fail (error, "cannot load '%s': WebP: %s", name, webp_status (s));
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

int
io_webp_encode (FILE *f, const cfx_picture *pic, int strip, const char *name, char **error)
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
      return io_fail (error, "cannot save '%s': out of memory", name);
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
    return io_fail (error, "cannot save '%s': WebP: the encoder failed (%dx%d; at most 16383 each way)",
                    name, img->width, img->height);

  const cfx_metadata *m = &pic->meta;
  WebPData out = { encoded, size };
  WebPData assembled = { NULL, 0 };
  if (!strip && (m->icc.data || m->exif.data || m->xmp.data))
    {
      WebPMux *mux = WebPMuxNew ();
      WebPData image = { encoded, size };
      int ok = mux && WebPMuxSetImage (mux, &image, 0) == WEBP_MUX_OK;
      if (ok && m->icc.data && io_icc_matches (&m->icc, out_channels))
        ok = WebPMuxSetChunk (mux, "ICCP", &(WebPData) { m->icc.data, m->icc.size }, 1) == WEBP_MUX_OK;
      if (ok && m->exif.data)
        ok = WebPMuxSetChunk (mux, "EXIF", &(WebPData) { m->exif.data, m->exif.size }, 1) == WEBP_MUX_OK;
      if (ok && m->xmp.data)
        ok = WebPMuxSetChunk (mux, "XMP ", &(WebPData) { m->xmp.data, m->xmp.size }, 1) == WEBP_MUX_OK;
      if (ok && WebPMuxAssemble (mux, &assembled) == WEBP_MUX_OK)
        out = assembled;
      else
        status = io_fail (error, "cannot save '%s': WebP: cannot add the metadata", name);
      WebPMuxDelete (mux);
    }
  if (!status && fwrite (out.bytes, 1, out.size, f) != out.size)
    status = io_fail (error, "cannot save '%s': %s", name, strerror (errno));
  WebPDataClear (&assembled);
  WebPFree (encoded);
  return status;
}
