/* SPDX-License-Identifier: GPL-3.0-or-later */
/* What image_io's files share: the dispatcher (image_io.c) and the codecs
 * it calls, one file each (io_png.c, io_jpeg.c, io_tiff.c, io_webp.c,
 * io_pnm.c, io_gegl.c for every other format), the helpers they all use
 * (io_common.c) and the output files (io_output.c). Not for the rest of the
 * CLI, which includes image_io.h.
 *
 * Each codec library reports problems its own way; all of them end here as
 * one message naming the file. Policy, the same for every format: whatever
 * the library says about the pixel data (an error, or a warning such as
 * libjpeg's "Corrupt JPEG data" or "Premature end of JPEG file", which it
 * would otherwise paper over with grey) fails the load; warnings about
 * metadata alone (an ancillary PNG chunk, an unknown TIFF tag, a bad ICC
 * chunk) drop that metadata and go on. */
#ifndef CUDAFX_CLI_IO_CODECS_H
#define CUDAFX_CLI_IO_CODECS_H

#include "image_io.h"

#include <glib.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* PNG output: the Sub filter and zlib's run-length strategy at level 1, as
 * OpenCV writes it, encode a 12 MP photo in about a third of libpng's
 * default time (level 6, adaptive filters) for a file 4% larger; TIFF uses
 * level 1 too (docs/BENCHMARKS.md, "Image codecs"). */
#define ZLIB_LEVEL 1
/* GEGL's jpg-save and webp-save default, kept. */
#define LOSSY_QUALITY 90

typedef enum { FMT_OTHER, FMT_PNG, FMT_JPEG, FMT_TIFF, FMT_WEBP, FMT_PNM } file_format;

/* ---- helpers (io_common.c) ------------------------------------------------ */

/* Sets *error to the formatted message (free with g_free); returns -1. */
int io_fail (char **error, const char *fmt, ...);

/* Replaces b's bytes with a copy of size bytes at data (0: none). */
void io_blob_set (cfx_blob *b, const void *data, size_t size);

/* The header's size against the limit and the memory, before any pixels
 * are allocated: the source and the filter's destination are both this
 * big. Returns 0 or -1 with *error set. */
int io_check_size (const char *name, double width, double height, int channels, int bits,
                   double max_pixels, char **error);
/* Set by cfx_image_probe on its thread: the decoders stop at
 * io_check_size, which records the header's pixel count here. */
extern __thread double *io_probe_pixels;

/* The layout every decoder fills: 8-bit files as u8, deeper ones as f32. */
int io_alloc_picture (cfx_picture *pic, const char *name, int width, int height, int channels,
                      int alpha, int bits, char **error);

/* Whether an ICC profile's colour space fits pixels of that many channels. */
int io_icc_matches (const cfx_blob *icc, int channels);

/* The Orientation (tag 0x0112) of EXIF's first directory, 1..8; 1 when
 * there is none or the structure is damaged. */
int io_exif_orientation (const cfx_blob *exif);

/* img turned as EXIF orientation o asks for display (2..8: mirrored,
 * turned by 180°, transposed, turned 90° clockwise, transversed, turned
 * 90° anticlockwise), into *out (pixels from cfx_image_alloc); 0 or -1
 * when there is no memory. */
int io_orient_image (const cudafx_image *img, int o, cudafx_image *out);

/* Sample conversions, inline: the codecs call them per sample and per row. */
static inline void
u16_to_f32 (const uint16_t *in, float *out, size_t n)
{
  for (size_t i = 0; i < n; i++)
    out[i] = in[i] * (1.0f / 65535.0f);
}

static inline uint16_t
f32_to_u16 (float v)
{
  return v <= 0 ? 0 : v >= 1 ? 65535 : (uint16_t) lrintf (v * 65535.0f);
}

static inline uint8_t
f32_to_u8 (float v)
{
  return v <= 0 ? 0 : v >= 1 ? 255 : (uint8_t) lrintf (v * 255.0f);
}

/* Row y of the picture as 8-bit samples: the row itself, or converted into
 * buf (width * channels bytes). */
static inline const uint8_t *
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

/* ---- the codecs ----------------------------------------------------------- */

/* The format a file name's extension names (FMT_OTHER: none of ours). */
file_format io_format_of_name (const char *path);

/* Each decodes a whole file held in memory (name in messages; max_pixels as
 * cfx_image_decode's) into pic, or fails with *error set; each encodes pic
 * into f, its metadata too unless strip is set. Return 0 or -1. */
int io_png_decode (const unsigned char *bytes, size_t size, const char *name, double max_pixels,
                   cfx_picture *pic, char **error);
int io_png_encode (FILE *f, const cfx_picture *pic, int strip, const char *name, char **error);
int io_jpeg_decode (const unsigned char *bytes, size_t size, const char *name, double max_pixels,
                   cfx_picture *pic, char **error);
int io_jpeg_encode (FILE *f, const cfx_picture *pic, int strip, const char *name, char **error);
int io_tiff_decode (const unsigned char *bytes, size_t size, const char *name, double max_pixels,
                   cfx_picture *pic, char **error);
int io_tiff_encode (FILE *f, const cfx_picture *pic, int strip, const char *name, char **error);
int io_webp_decode (const unsigned char *bytes, size_t size, const char *name, double max_pixels,
                   cfx_picture *pic, char **error);
int io_webp_encode (FILE *f, const cfx_picture *pic, int strip, const char *name, char **error);
/* PNM and PAM: one at a time (libnetpbm's hooks are process-wide); they
 * keep no metadata. */
int io_pnm_decode (const unsigned char *bytes, size_t size, const char *name, double max_pixels,
                   cfx_picture *pic, char **error);
int io_pnm_encode (FILE *f, const cfx_picture *pic, const char *name, char **error);

/* Every other format, through GEGL's loaders (by the file's name) and
 * savers (writing temp, the output's temporary file; name in messages). */
int io_gegl_load (const char *path, double max_pixels, cfx_picture *pic, char **error);
int io_gegl_save (const char *temp, const char *name, const cfx_picture *pic, char **error);
/* GEGL's saver for a file name's extension, or NULL. */
const char *io_gegl_saver_for (const char *path);

/* Encodes pic into f (the temporary file temp) in the format of name's
 * extension (image_io.c); what cfx_output_save_image does. */
int io_encode (FILE *f, const char *temp, const char *name, const cfx_picture *pic, int strip,
               char **error);

#endif /* CUDAFX_CLI_IO_CODECS_H */
