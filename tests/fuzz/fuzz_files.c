/* SPDX-License-Identifier: GPL-3.0-or-later */
/* libFuzzer harness for the CLI's image files (cli/image_io.c and its codecs,
 * cli/io_*.c).
 *
 * The input is a file's bytes. cfx_image_decode sniffs the format (PNG,
 * JPEG, TIFF, WebP, PNM) and decodes it as the CLI does, with a 4-megapixel
 * limit standing in for --max-megapixels. A decoded picture must be
 * consistent (size, layout, stride) and every pixel byte is read, so ASan
 * sees an allocation shorter than the header promised; small pictures are
 * then encoded again, with their metadata, in a format the first byte picks,
 * so whatever a damaged file carries (a huge or truncated ICC profile, EXIF,
 * XMP) also reaches the encoders. A refused file must come with a message
 * naming it. The same bytes are also read as a GIMP palette (quantize's
 * --palette, the GEGL operation's palette file) and, NUL-terminated, as
 * a convolution kernel's text (--kernel, the operation's kernel): each
 * either fails with a message (a palette's naming it) or gives what its
 * reader promises. The codec libraries are not instrumented: coverage guides the
 * fuzzer through our code and the libraries' answers, and ASan/UBSan watch
 * every byte our code touches. Built and run by `make fuzz-files`. */
#include "../../cli/io_codecs.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static void
check (int ok, const char *what)
{
  if (!ok)
    {
      fprintf (stderr, "fuzz_files: invariant broken: %s\n", what);
      abort ();
    }
}

static void
encode_again (const cfx_picture *pic, uint8_t choice)
{
  char *buffer = NULL, *error = NULL;
  size_t length = 0;
  FILE *f = open_memstream (&buffer, &length);
  static const char *const names[] = { "fuzz.png", "fuzz.jpg", "fuzz.tif", "fuzz.webp", "fuzz.pam" };
  const char *name = names[choice % 5];
  int strip = (choice / 5) % 2;
  int status;

  check (f != NULL, "open_memstream");
  switch (io_format_of_name (name))
    {
    case FMT_PNG:  status = io_png_encode (f, pic, strip, name, &error); break;
    case FMT_JPEG: status = io_jpeg_encode (f, pic, strip, name, &error); break;
    case FMT_TIFF: status = io_tiff_encode (f, pic, strip, name, &error); break;
    case FMT_WEBP: status = io_webp_encode (f, pic, strip, name, &error); break;
    default:       status = io_pnm_encode (f, pic, name, &error); break;
    }
  fclose (f);
  check (status == 0 ? error == NULL && length > 0 : error != NULL, "encoder status and message");
  g_free (error);
  free (buffer);
}

/* The bytes as a .gpl file and as kernel text. */
static void
read_as_text (const uint8_t *data, size_t size)
{
  cudafx_palette palette;
  double taps[CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE];
  int n = 0;
  char *text = g_strndup ((const char *) data, size);

  if (cudafx_gpl_parse ((const char *) data, size, "fuzz-input", &palette) == CUDAFX_OK)
    {
      check (palette.colors >= 1 && palette.colors <= CUDAFX_MAX_COLORS && palette.channels == 3,
             "palette size");
      for (int i = 0; i < palette.colors; i++)
        for (int c = 0; c < 3; c++)
          check (palette.entries[i][c] >= 0 && palette.entries[i][c] <= 255, "palette entry range");
    }
  else
    check (strstr (cudafx_error_message (), "fuzz-input") != NULL, "a palette error not naming the file");
  if (cudafx_kernel_parse (text, taps, &n) == CUDAFX_OK)
    {
      check (n >= 1 && n <= CUDAFX_MAX_KERNEL_SIZE && n % 2 == 1, "kernel size");
      for (int i = 0; i < n * n; i++)
        check (isfinite (taps[i]), "kernel taps finite");
    }
  else
    check (cudafx_error_message ()[0] != '\0', "a kernel error without a message");
  g_free (text);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  cfx_picture pic;
  char *error = NULL;

  read_as_text (data, size);

  if (cfx_image_decode (data, size, "fuzz-input", 4e6, &pic, &error))
    {
      check (error != NULL && strstr (error, "'fuzz-input'") != NULL, "a failure without a message naming the file");
      check (pic.image.data == NULL, "pixels left after a failure");
      g_free (error);
      return 0;
    }
  const cudafx_image *img = &pic.image;
  check (error == NULL, "a message after success");
  check (img->width > 0 && img->height > 0 && (double) img->width * img->height <= 4e6, "size");
  check (img->channels >= 1 && img->channels <= 4, "channels");
  check (img->has_alpha == (img->channels == 2 || img->channels == 4), "alpha");
  check ((img->type == CUDAFX_U8) == (pic.bits == 8), "type and bit depth");
  check (img->stride >= (size_t) img->width * img->channels * cudafx_type_size (img->type), "stride");
  volatile uint8_t sum = 0;
  for (size_t i = 0; i < img->stride * img->height; i++)
    sum += ((const uint8_t *) img->data)[i];
  if ((size_t) img->width * img->height <= 256 * 256)
    encode_again (&pic, size ? data[size - 1] : 0);
  cfx_picture_clear (&pic);
  return 0;
}
