/* SPDX-License-Identifier: GPL-3.0-or-later */
/* libFuzzer harness for the engine's public entry points (core/cudafx.h).
 *
 * The input picks a filter, an image (1x1 up to 32x32, or a 1..300 long strip;
 * 1..4 channels, alpha or not, u8 or f32, row padding 0..15 bytes, pixels from
 * the input so f32 also gets NaN, infinities and values outside 0..1), the
 * parameters (mostly in range, sometimes raw values: out of range, NaN, huge,
 * unknown enum values), the thread count, the backend and a cancel point.
 * Parameters go either straight into the filter's struct or through the
 * argument-table path the hosts use (cudafx_filter_params_from_values).
 *
 * Besides ASan and UBSan reports, it aborts when an invariant breaks:
 *   - the source is never written (padding included);
 *   - on an error other than cancel, the destination is untouched;
 *   - on success, the destination's row padding is untouched;
 *   - an error has a message, a success clears it and reports the CPU;
 *   - what a run reports is in range: nl-means parameters, palette entries
 *     (0..255 for u8, finite for f32).
 * Images are allocated to their last pixel, so ASan sees any read or write
 * past the rows. Built and run by `make fuzz`. */
#include "../../core/cudafx.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

/* ---- reading the input --------------------------------------------------------- */

typedef struct {
  const uint8_t *p;
  size_t         left;
} fuzz_input;

/* Next byte, 0 once the input is used up. */
static unsigned
take_byte (fuzz_input *in)
{
  if (!in->left)
    return 0;
  in->left--;
  return *in->p++;
}

static unsigned
take_u16 (fuzz_input *in)
{
  unsigned lo = take_byte (in);
  return lo | take_byte (in) << 8;
}

/* Eight raw bytes as a double: any value, NaN and infinities included. */
static double
take_raw_double (fuzz_input *in)
{
  uint8_t b[8];
  double v;
  for (int i = 0; i < 8; i++)
    b[i] = (uint8_t) take_byte (in);
  memcpy (&v, b, sizeof v);
  return v;
}

/* Mostly a value in [min, max] (whole when integer), sometimes its edges or
 * just outside them, sometimes anything at all. In range, small values are
 * likelier (cubed): a 100-pixel median radius costs a second per run under
 * ASan, and most branches show at small sizes. */
static double
take_value (fuzz_input *in, double min, double max, int integer)
{
  unsigned mode = take_byte (in);
  if (mode < 176)
    {
      double u = take_u16 (in) / 65535.0;
      double v = min + (max - min) * u * u * u;
      return integer ? round (v) : v;
    }
  switch (mode % 6)
    {
    case 0: return min;
    case 1: return max;
    case 2: return min - (integer ? 1 : 1e-3);
    case 3: return max + (integer ? 1 : 1e-3);
    case 4: return take_raw_double (in);
    default: return (double) (int16_t) take_u16 (in);
    }
}

/* An int parameter: in range mostly, else any int (no double in between). */
static int
take_int (fuzz_input *in, int min, int max)
{
  double v = take_value (in, min, max, 1);
  return v >= -2147483648.0 && v <= 2147483647.0 ? (int) v : (int) take_u16 (in) - 32768;
}

/* ---- images ---------------------------------------------------------------------- */

typedef struct {
  cudafx_image view;
  size_t       row_bytes;
  size_t       bytes;  /* allocated: stride * (height - 1) + row_bytes */
} fuzz_image;

static int
image_new (fuzz_image *img, const cudafx_image *layout)
{
  img->view = *layout;
  img->row_bytes = (size_t) layout->width * layout->channels * cudafx_type_size (layout->type);
  img->bytes = layout->stride * (layout->height - 1) + img->row_bytes;
  img->view.data = malloc (img->bytes);
  return img->view.data != NULL;
}

/* Pixels from the input, cycled; f32 elements are mostly 0..1 with some raw
 * floats (NaN, infinities, negatives, large values). Padding gets 0xA5. */
static void
image_fill (fuzz_image *img, fuzz_input *in)
{
  uint8_t *data = img->view.data;
  memset (data, 0xA5, img->bytes);
  if (!in->left)
    return;
  const uint8_t *pixels = in->p;
  size_t n = in->left, k = 0;
  for (int y = 0; y < img->view.height; y++)
    {
      uint8_t *row = data + (size_t) y * img->view.stride;
      if (img->view.type == CUDAFX_U8)
        for (size_t i = 0; i < img->row_bytes; i++)
          row[i] = pixels[k++ % n];
      else
        for (size_t i = 0; i < img->row_bytes; i += sizeof (float))
          {
            uint8_t b = pixels[k++ % n];
            float v = b / 250.0f;
            if (b > 250)
              {
                uint8_t raw[4] = { pixels[k % n], pixels[(k + 1) % n], pixels[(k + 2) % n], b };
                memcpy (&v, raw, sizeof v);
                k += 3;
              }
            memcpy (row + i, &v, sizeof v);
          }
    }
}

/* Whether dst's row padding still holds what `before` has there. */
static int
padding_kept (const fuzz_image *dst, const uint8_t *before)
{
  const uint8_t *data = dst->view.data;
  for (int y = 0; y + 1 < dst->view.height; y++)
    {
      size_t at = (size_t) y * dst->view.stride + dst->row_bytes;
      if (memcmp (data + at, before + at, dst->view.stride - dst->row_bytes))
        return 0;
    }
  return 1;
}

/* ---- options ---------------------------------------------------------------------- */

static int cancel_after;  /* progress calls before cancelling; -1 never */

static int
progress (double fraction, void *user_data)
{
  int *calls = user_data;
  if (!(fraction >= 0 && fraction <= 1.0 + 1e-9))
    {
      fprintf (stderr, "fuzz_engine: progress fraction %g outside 0..1\n", fraction);
      abort ();
    }
  return cancel_after >= 0 && ++*calls > cancel_after;
}

/* ---- the filters ----------------------------------------------------------------- */

enum { RUN_MEDIAN, RUN_NLMEANS, RUN_QUANTIZE, RUN_CONVOLVE, RUN_TABLE, RUN_ESTIMATE, RUN_KERNEL,
       N_RUNS };

static double kernel_taps[CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE];

/* A convolution kernel of n*n raw or small values (n may be any size the
 * caller gives: the filter must reject the wrong ones). */
static const double *
take_kernel (fuzz_input *in, int n)
{
  int count = n >= 1 && n <= CUDAFX_MAX_KERNEL_SIZE ? n * n : 0;
  for (int i = 0; i < count; i++)
    kernel_taps[i] = take_value (in, -8, 8, 0);
  return kernel_taps;
}

static void
check (int ok, const char *what)
{
  if (!ok)
    {
      fprintf (stderr, "fuzz_engine: invariant broken: %s\n", what);
      abort ();
    }
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  fuzz_input in = { data, size };
  int run = (int) (take_byte (&in) % N_RUNS);

  /* The image layout. */
  cudafx_image layout = { 0 };
  unsigned shape = take_byte (&in);
  int strip = 1 + (int) (take_u16 (&in) % 300);
  layout.width = 1 + (int) (shape & 31);
  layout.height = 1 + (int) (take_byte (&in) & 31);
  if (shape & 0x40)
    layout.width = strip;
  else if (shape & 0x80)
    layout.height = strip;
  unsigned kind = take_byte (&in);
  layout.channels = 1 + (int) (kind & 3);
  layout.has_alpha = (kind >> 2) & 1;
  layout.type = (kind >> 3) & 1 ? CUDAFX_F32 : CUDAFX_U8;
  unsigned extra = take_byte (&in);
  size_t row = (size_t) layout.width * layout.channels * cudafx_type_size (layout.type);
  layout.stride = row + (extra & 15);

  /* The options. */
  int calls = 0;
  cudafx_report report;
  cudafx_options o;
  cudafx_options_init (&o);
  o.threads = 1 + (int) ((extra >> 4) & 1) + (int) ((extra >> 5) & 1);
  o.backend = (cudafx_backend) (extra >> 6); /* 3: not a backend */
  o.progress = progress;
  o.user_data = &calls;
  o.report = &report;
  unsigned cancel = take_byte (&in);
  cancel_after = cancel < 224 ? -1 : (int) (cancel & 7);

  /* The parameters, before the pixels take the rest of the input. */
  cudafx_median_params median;
  cudafx_nlmeans_params nlmeans;
  cudafx_quantize_params quantize;
  cudafx_convolve_params convolve;
  double values[16];
  int table_filter = 0, kernel_size = 0;
  const double *kernel = NULL;
  switch (run)
    {
    case RUN_MEDIAN:
      cudafx_median_params_init (&median);
      median.radius = take_int (&in, 1, 100);
      median.percentile = take_value (&in, 0, 100, 0);
      median.shape = (cudafx_shape) take_int (&in, 0, 1);
      break;
    case RUN_NLMEANS:
    case RUN_ESTIMATE:
      cudafx_nlmeans_params_init (&nlmeans);
      nlmeans.automatic = (int) (take_byte (&in) % 3) - (take_byte (&in) == 255);
      nlmeans.h = take_value (&in, 0.1, 100, 0);
      nlmeans.patch_radius = take_int (&in, 1, 5);
      nlmeans.search_radius = take_int (&in, 1, 20);
      break;
    case RUN_QUANTIZE:
      cudafx_quantize_params_init (&quantize);
      quantize.colors = take_int (&in, 2, 256);
      quantize.color_space = (cudafx_color_space) take_int (&in, 0, 1);
      quantize.dither = (cudafx_dither) take_int (&in, 0, 1);
      quantize.max_iterations = take_int (&in, 1, 300);
      quantize.seed = (uint32_t) take_u16 (&in) * (take_byte (&in) + 1u) * 257u;
      break;
    case RUN_CONVOLVE:
    case RUN_KERNEL:
      cudafx_convolve_params_init (&convolve);
      convolve.preset = (cudafx_preset) take_int (&in, 0, 9);
      convolve.kernel_size = take_int (&in, 1, CUDAFX_MAX_KERNEL_SIZE);
      convolve.kernel = take_byte (&in) == 255 ? NULL : take_kernel (&in, convolve.kernel_size);
      convolve.sigma = take_value (&in, 0.1, 50, 0);
      convolve.divisor = take_value (&in, -20, 20, 0);
      convolve.offset = take_value (&in, -255, 255, 0);
      convolve.border = (cudafx_border) take_int (&in, 0, 3);
      break;
    case RUN_TABLE:
      {
        table_filter = (int) (take_byte (&in) % CUDAFX_N_FILTERS);
        const cudafx_filter_desc *f = &cudafx_filters[table_filter];
        check (f->n_args <= 16, "table has more than 16 arguments");
        for (int i = 0; i < f->n_args; i++)
          {
            const cudafx_arg *a = &f->args[i];
            if (a->type == CUDAFX_ARG_DOUBLE_ARRAY)
              {
                kernel_size = take_int (&in, a->min, a->max);
                kernel = take_byte (&in) & 1 ? take_kernel (&in, kernel_size) : NULL;
                values[i] = kernel_size;
              }
            else
              values[i] = take_value (&in, a->min, a->max, a->type != CUDAFX_ARG_DOUBLE);
          }
      }
      break;
    }

  fuzz_image src, dst;
  if (!image_new (&src, &layout))
    return 0;
  if (!image_new (&dst, &layout))
    {
      free (src.view.data);
      return 0;
    }
  image_fill (&src, &in);
  memset (dst.view.data, 0x5A, dst.bytes);
  uint8_t *src_before = malloc (src.bytes), *dst_before = malloc (dst.bytes);
  check (src_before && dst_before, "out of memory for copies");
  memcpy (src_before, src.view.data, src.bytes);
  memcpy (dst_before, dst.view.data, dst.bytes);

  cudafx_nlmeans_info info;
  cudafx_palette palette;
  cudafx_run_result result;
  cudafx_status s = CUDAFX_OK;
  memset (&report, 0, sizeof report);
  switch (run)
    {
    case RUN_MEDIAN:
      s = cudafx_median (&src.view, &dst.view, &median, &o);
      break;
    case RUN_NLMEANS:
      s = cudafx_nlmeans (&src.view, &dst.view, &nlmeans, &o, &info);
      break;
    case RUN_ESTIMATE:
      s = cudafx_nlmeans_estimate (&src.view, &o, &info);
      break;
    case RUN_QUANTIZE:
      s = cudafx_quantize (&src.view, &dst.view, &quantize, &o, &palette);
      break;
    case RUN_CONVOLVE:
      s = cudafx_convolve (&src.view, &dst.view, &convolve, &o);
      break;
    case RUN_KERNEL:
      {
        int n = 0;
        s = cudafx_convolve_kernel (&convolve, kernel_taps, &n);
        check (s != CUDAFX_OK || (n >= 1 && n <= CUDAFX_MAX_KERNEL_SIZE && n % 2 == 1),
               "convolve kernel size");
      }
      break;
    case RUN_TABLE:
      {
        cudafx_filter_params params;
        cudafx_filter_params_from_values (table_filter, values, kernel, kernel_size, &params);
        s = cudafx_run_filter (table_filter, &params, &src.view, &dst.view, &o, &result);
        report = result.report; /* run_filter reports into result, not o.report */
      }
      break;
    }

  const char *message = cudafx_error_message ();
  check (!memcmp (src.view.data, src_before, src.bytes), "source was written");
  if (s == CUDAFX_OK)
    {
      check (message[0] == '\0', "success left an error message");
      check (padding_kept (&dst, dst_before), "destination row padding was written");
      if (run != RUN_ESTIMATE && run != RUN_KERNEL)
        check (report.backend_used == CUDAFX_BACKEND_CPU && report.threads_used == o.threads,
               "report does not say CPU with the threads asked for");
      if (run == RUN_TABLE && table_filter == CUDAFX_FILTER_NLMEANS)
        info = result.nlmeans;
      if (run == RUN_NLMEANS || run == RUN_ESTIMATE ||
          (run == RUN_TABLE && table_filter == CUDAFX_FILTER_NLMEANS))
        check (info.patch_radius >= 1 && info.patch_radius <= 5 && info.search_radius >= 1 &&
               info.search_radius <= 20 && info.h >= 0.1 && info.h <= 100 && info.sigma >= 0 &&
               isfinite (info.sigma),
               "nl-means reports parameters out of range");
      if (run == RUN_TABLE && table_filter == CUDAFX_FILTER_QUANTIZE)
        {
          palette = result.palette;
          quantize.colors = (int) values[0];
        }
      if (run == RUN_QUANTIZE || (run == RUN_TABLE && table_filter == CUDAFX_FILTER_QUANTIZE))
        {
          check (palette.colors >= 1 && palette.colors <= quantize.colors, "palette size");
          /* f32 pixels outside 0..1 (HDR) give entries outside 0..255. */
          for (int i = 0; i < palette.colors; i++)
            for (int c = 0; c < palette.channels; c++)
              check (layout.type == CUDAFX_F32 ? isfinite (palette.entries[i][c])
                                               : palette.entries[i][c] >= 0 &&
                                                 palette.entries[i][c] <= 255,
                     "palette entry outside 0..255 (u8) or not finite (f32)");
        }
    }
  else
    {
      check (message[0] != '\0', "an error without a message");
      if (s != CUDAFX_ERR_CANCELLED)
        check (!memcmp (dst.view.data, dst_before, dst.bytes), "destination written on error");
    }

  free (src_before);
  free (dst_before);
  free (src.view.data);
  free (dst.view.data);
  return 0;
}
