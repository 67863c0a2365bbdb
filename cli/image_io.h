/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Image files for the cudafx command: decoding, encoding and atomic output.
 *
 * PNG, JPEG, TIFF and WebP go straight through their reference libraries
 * (libpng, libjpeg-turbo, libtiff, libwebp with libwebpmux/libwebpdemux),
 * as does PNM/PAM (libnetpbm); every other format (EXR, ...) goes through
 * GEGL's loaders and savers. One file a codec (cli/io_*.c, io_codecs.h).
 * Loading is strict: a decoder's error or warning about the pixel data, a
 * truncated file or a size beyond the caller's limit fails with a message
 * naming the file and the problem, and nothing large is allocated before the
 * header's size has been checked. Saving goes to a temporary file beside the
 * final one (".NAME.cudafx-XXXXXX"), flushed to disk and renamed into place.
 */
#ifndef CUDAFX_IMAGE_IO_H
#define CUDAFX_IMAGE_IO_H

#include "../core/cudafx.h"

#include <stddef.h>
#include <stdio.h>

typedef struct {
  unsigned char *data; /* NULL when absent */
  size_t         size;
} cfx_blob;

/* Metadata carried from input to output where the output format holds it. */
typedef struct {
  cfx_blob icc;  /* ICC profile */
  cfx_blob exif; /* EXIF as a TIFF structure ("II*\0" or "MM\0*"), without JPEG's "Exif\0\0" */
  cfx_blob xmp;  /* XMP packet (XML text, no terminating NUL) */
} cfx_metadata;

typedef struct {
  cudafx_image image; /* u8 for 8-bit files; f32 (0..1) for 16-bit and floating-point ones */
  int          bits;  /* per sample in the file: 8, 16, or 32 (floating point) */
  cfx_metadata meta;
} cfx_picture;

/* Frees the pixels and the metadata; the picture is then empty. */
void cfx_picture_clear (cfx_picture *pic);

/* Allocates img's pixels for width x height in its channels and type
 * (overflow-checked). Returns 0 or -1. */
int cfx_image_alloc (cudafx_image *img, int width, int height);
/* Frees pixels from cfx_image_alloc (NULL: nothing). */
void cfx_image_free (void *data);
/* Where cfx_image_alloc takes pixels and cfx_image_free gives them back:
 * take and give, or with NULLs plain memory (cudafx_host_alloc_plain,
 * free). Set while no image is held. */
void cfx_image_memory (void *(*take) (size_t bytes), void (*give) (void *data));

/* Reads and decodes the file at path. max_pixels > 0 refuses larger images
 * before their pixels are allocated (0: no limit beyond memory). Returns 0,
 * or -1 with *error set (free with g_free). */
int cfx_image_load (const char *path, double max_pixels, cfx_picture *pic, char **error);

/* Decodes PNG, JPEG, TIFF, WebP or PNM bytes held in memory (name is used in
 * messages); other formats are refused. What cfx_image_load does after
 * reading the file, and what the file fuzzer drives. */
int cfx_image_decode (const void *data, size_t size, const char *name, double max_pixels,
                      cfx_picture *pic, char **error);

/* The pixel count an image file's header gives, without decoding it: 0 and
 * *pixels set, or 1 when it cannot tell (not a format image_io decodes
 * itself, or no readable header). */
int cfx_image_probe (const char *path, double *pixels);

/* Whether path's extension names a format that can be written; sets *error
 * (saying which extensions work) when it does not. */
int cfx_image_can_save (const char *path, char **error);

/* An output file in the making: a temporary file in the final file's
 * directory (the symbolic link's target's, when the final name is a link:
 * the target is replaced, the link kept). */
typedef struct cfx_output cfx_output;

/* Creates the temporary file. Returns NULL with *error set. */
cfx_output *cfx_output_open (const char *path, char **error);

/* The temporary file, for writers other than cfx_output_save_image. */
FILE *cfx_output_file (cfx_output *o);

/* Encodes pic in the format of the final name's extension, with its
 * metadata unless strip is set. Returns 0 or -1 with *error set. */
int cfx_output_save_image (cfx_output *o, const cfx_picture *pic, int strip, char **error);

/* Flushes the temporary file to disk and renames it over the final name;
 * frees o whatever happens (the temporary file is removed on failure).
 * Returns 0 or -1 with *error set. */
int cfx_output_commit (cfx_output *o, char **error);

/* Removes the temporary file and frees o (NULL is fine). */
void cfx_output_discard (cfx_output *o);

/* From here on SIGINT, SIGTERM and SIGHUP remove every temporary file that
 * exists and end the process by that signal. Call before any other thread
 * is made (the signals are blocked in the calling thread, whose mask later
 * threads inherit). Returns 0 or -1. */
int cfx_output_guard_signals (void);

/* Releases GEGL if a GEGL loader or saver was used. */
void cfx_image_io_shutdown (void);

#endif
