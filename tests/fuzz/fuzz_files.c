/* SPDX-License-Identifier: GPL-3.0-or-later */
/* libFuzzer harness for the CLI's image files (cli/image_io.c).
 *
 * The input is a file's bytes. cfx_image_decode sniffs the format (PNG,
 * JPEG, TIFF, WebP, PNM) and decodes it as the CLI does, with a 4-megapixel
 * limit standing in for --max-megapixels. A decoded picture must be
 * consistent (size, layout, stride) and every pixel byte is read, so ASan
 * sees an allocation shorter than the header promised; small pictures are
 * then encoded again, with their metadata, in a format the first byte picks,
 * so whatever a damaged file carries (a huge or truncated ICC profile, EXIF,
 * XMP) also reaches the encoders. A refused file must come with a message
 * naming it. The codec libraries are not instrumented: coverage guides the
 * fuzzer through our code and the libraries' answers, and ASan/UBSan watch
 * every byte our code touches. Built and run by `make fuzz-files`. */
#include "../../cli/image_io.c"

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
  switch (format_of_name (name))
    {
    case FMT_PNG:  status = png_encode (f, pic, strip, name, &error); break;
    case FMT_JPEG: status = jpeg_encode (f, pic, strip, name, &error); break;
    case FMT_TIFF: status = tiff_encode (f, pic, strip, name, &error); break;
    case FMT_WEBP: status = webp_encode (f, pic, strip, name, &error); break;
    default:       status = pnm_encode (f, pic, name, &error); break;
    }
  fclose (f);
  check (status == 0 ? error == NULL && length > 0 : error != NULL, "encoder status and message");
  g_free (error);
  free (buffer);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  cfx_picture pic;
  char *error = NULL;

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
