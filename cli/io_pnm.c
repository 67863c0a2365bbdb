/* SPDX-License-Identifier: GPL-3.0-or-later */
/* PNM (PBM, PGM, PPM) and PAM files through libnetpbm. */
#include "io_codecs.h"

#include <netpbm/pam.h>

#include <pthread.h>
#include <setjmp.h>
#include <string.h>

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
    return io_fail (error, "cannot load '%s': %s", name, strerror (errno));
  pnm_start (&jump, &saved);
  if (setjmp (jump))
    {
      pm_setjmpbuf (saved);
      if (row)
        pnm_freepamrow (row);
      free ((void *) comments);
      fclose (f);
      if (!*error)
        io_fail (error, "cannot load '%s': PNM: %s", name, pnm_message);
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
  if (io_check_size (name, pam.width, pam.height, channels, bits, max_pixels, error) ||
      io_alloc_picture (pic, name, pam.width, pam.height, channels, alpha, bits, error))
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
        return io_fail (error, "cannot save '%s': PGM holds grey images; use .ppm or .pnm", name);
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
      return io_fail (error, "cannot save '%s': PNM: %s", name, pnm_message);
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


int
io_pnm_decode (const unsigned char *bytes, size_t size, const char *name, double max_pixels,
               cfx_picture *pic, char **error)
{
  pthread_mutex_lock (&pnm_lock);
  int status = pnm_decode (bytes, size, name, max_pixels, pic, error);
  pthread_mutex_unlock (&pnm_lock);
  return status;
}

int
io_pnm_encode (FILE *f, const cfx_picture *pic, const char *name, char **error)
{
  pthread_mutex_lock (&pnm_lock);
  int status = pnm_encode (f, pic, name, error);
  pthread_mutex_unlock (&pnm_lock);
  return status;
}
