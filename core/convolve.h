/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Convolution plan: the border and the float taps and constants both
 * backends compute with (engine-internal; core/convolve.c makes it and is
 * the reference, cuda/convolve.cu computes the same sums). See
 * core/convolve.c's header for the arithmetic. */
#ifndef CUDAFX_CONVOLVE_H
#define CUDAFX_CONVOLVE_H

#include "cudafx.h"
#include "services.h"

#include <math.h>
#include <stdint.h>

/* Largest 1-D size: the gaussian at the table's largest sigma, 50. */
#define CONVOLVE_MAX_TAPS_1D 301
/* Largest 1-D size of the fixed-point path: its rounding biases stay
 * below 1/2 of the 1/256 unit, so the sums cannot overflow 16 bits. */
#define CONVOLVE_FIXED_MAX_TAPS 127
#define CONVOLVE_MAX_TAPS_2D (CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE)

typedef struct {
  cudafx_border border; /* columns, and the rows above and below the image */
  int   size, radius;
  int   separable;
  /* direct: size*size row-major; separable: size horizontal, then size vertical */
  float taps[CONVOLVE_MAX_TAPS_2D];
  float abs_taps[CONVOLVE_MAX_TAPS_2D]; /* |k| without divisor: alpha coverage weights */
  float abs_sum;                        /* sum |k| */
  float alpha_scale;                    /* d / s: alpha as the kernel's weighted average */
  int   zero_sum;                       /* keep the source alpha */
  float offset;                         /* on the element's scale */
  /* u8 without alpha, separable, taps >= 0 summing to at most 1: the sums
   * run in 16-bit fixed point (see core/convolve.c) */
  int      fixed16;
  uint16_t fixed_taps[2 * CONVOLVE_FIXED_MAX_TAPS]; /* horizontal then vertical, x 65536 */
  uint16_t fixed_bias[2];                           /* per pass: nonzero taps / 2 */
  /* u8 without alpha, direct: taps holds integers, the sums are exact and
   * the result is sum * sum_scale + offset (see core/convolve.c) */
  int   exact;
  float sum_scale;                                  /* 2^-S */
} convolve_plan;

/* ---- non-finite f32 values ---------------------------------------------------
 *
 * A non-finite value (NaN, ±Inf) of an f32 image stays as it is in the
 * output and takes no part in any other pixel's result: a window reads a
 * neighbour's non-finite element as the centre pixel's value of the same
 * channel. That moves the tap's weight onto the centre tap and keeps the
 * kernel's sum, so a blur gets no dark or bright halo around a hole and a
 * zero-sum kernel (Sobel, Laplacian, high-pass) still gives 0 on a flat
 * area, which reading it as 0 would not (the median's "leave it out" has no
 * meaning for fixed taps). A divisor of 0 (the kernel's sum) is therefore
 * unchanged. A pixel whose own alpha is non-finite gives its colour no
 * weight to work with and is copied as it is; a non-finite colour element
 * is kept in its own channel, the other channels computed.
 *
 * Both backends first convolve as if every value were finite (u8 images
 * hold none, so only f32 pays anything), then recompute each output whose
 * window, after the border map, holds a non-finite element with
 * convolve_fix_pixel: one definition for the CPU and the GPU, which is the
 * normal f32 path's arithmetic on the substituted values, term for term
 * (core/convolve.c's header): the same float taps, zero taps skipped, a
 * multiply then an add, in the same order. Direct kernels: row-major from
 * 0.0f. Separable ones: each window row's horizontal sum left to right
 * from 0.0f, then those sums top to bottom from 0.0f, as the two passes
 * do; the horizontal sums are the output's own, since what a row reads
 * depends on the centre, so the substituted window is the one the 2-D
 * kernel would read, summed in the separable path's factored order. An
 * output so fixed equals the normal path's on the substituted image bit for
 * bit, and the normal path's own where its window holds no non-finite
 * value (so a conservative choice of outputs changes nothing). */

/* An f32 output's window: rows y0 .. y0 + size - 1 of data (pitch bytes
 * apart), mapped through border at height when height > 0, else read as
 * they are (the GPU's stripe, whose halo rows are made up already); black
 * rows and columns read 0. */
typedef struct {
  const unsigned char *data;
  size_t               pitch;
  int                  y0, height, width, channels, has_alpha;
  cudafx_border        border;
} convolve_window;

/* Source pixel v (a virtual column) of row (NULL: black) as the sums read
 * it: non-finite elements replaced by the centre's, colour premultiplied
 * by (the replaced) alpha as core/convolve.c's convert_pixels does. */
static inline CUDAFX_HOST_DEVICE void
convolve_fix_read (const convolve_window *w, const unsigned char *row, int v, const float *centre,
                   float *px)
{
  const int c = w->channels, sx = cudafx_border_index (v, w->width, w->border);
  for (int k = 0; k < c; k++)
    {
      const float e = row && sx >= 0 ? ((const float *) row)[(size_t) sx * c + k] : 0.0f;
      px[k] = isfinite (e) ? e : centre[k];
    }
  if (w->has_alpha)
    for (int k = 0; k < c - 1; k++)
      px[k] *= px[c - 1];
}

static inline CUDAFX_HOST_DEVICE const unsigned char *
convolve_fix_row (const convolve_window *w, int j)
{
  const int sy = w->height > 0 ? cudafx_border_index (w->y0 + j, w->height, w->border) : w->y0 + j;
  return sy < 0 ? 0 : w->data + (size_t) sy * w->pitch;
}

/* out[0 .. channels) of output column x of window w, whose own pixel is
 * centre (as stored), under the substitution rule above. */
static inline CUDAFX_HOST_DEVICE void
convolve_fix_pixel (const convolve_plan *pl, const convolve_window *w, int x, const float *centre,
                    float *out)
{
  const int n = pl->size, r = pl->radius, c = w->channels, alpha = w->has_alpha;
  float sum[4] = { 0.0f, 0.0f, 0.0f, 0.0f }, cover = 0.0f, px[4];
  if (alpha && !isfinite (centre[c - 1]))
    {
      for (int k = 0; k < c; k++)
        out[k] = centre[k];
      return;
    }
  for (int j = 0; j < n; j++)
    {
      const unsigned char *row = convolve_fix_row (w, j);
      if (pl->separable)
        {
          const float vw = pl->taps[n + j], va = alpha ? pl->abs_taps[n + j] : 0.0f;
          float h[4] = { 0.0f, 0.0f, 0.0f, 0.0f }, ha = 0.0f;
          if (vw == 0.0f && va == 0.0f)
            continue;
          for (int i = 0; i < n; i++)
            {
              const float hw = pl->taps[i], haw = alpha ? pl->abs_taps[i] : 0.0f;
              if (hw == 0.0f && haw == 0.0f)
                continue;
              convolve_fix_read (w, row, x - r + i, centre, px);
              if (hw != 0.0f)
                for (int k = 0; k < c; k++)
                  h[k] = h[k] + hw * px[k];
              if (haw != 0.0f)
                ha = ha + haw * px[c - 1];
            }
          if (vw != 0.0f)
            for (int k = 0; k < c; k++)
              sum[k] = sum[k] + vw * h[k];
          if (va != 0.0f)
            cover = cover + va * ha;
        }
      else
        for (int i = 0; i < n; i++)
          {
            const float wt = pl->taps[j * n + i], at = alpha ? pl->abs_taps[j * n + i] : 0.0f;
            if (wt == 0.0f && at == 0.0f)
              continue;
            convolve_fix_read (w, row, x - r + i, centre, px);
            if (wt != 0.0f)
              for (int k = 0; k < c; k++)
                sum[k] = sum[k] + wt * px[k];
            if (at != 0.0f)
              cover = cover + at * px[c - 1];
          }
    }
  /* the finish of core/convolve.c's store_row, f32 */
  if (alpha)
    {
      for (int k = 0; k < c - 1; k++)
        out[k] = cover > 0.0f ? sum[k] * pl->abs_sum / cover + pl->offset : pl->offset;
      float a = centre[c - 1];
      if (!pl->zero_sum)
        {
          a = sum[c - 1] * pl->alpha_scale;
          a = a > 0.0f ? a : 0.0f;
          a = a < 1.0f ? a : 1.0f;
        }
      out[c - 1] = a;
    }
  else
    for (int k = 0; k < c; k++)
      out[k] = sum[k] * pl->sum_scale + pl->offset;
  for (int k = 0; k < c; k++)
    if (!isfinite (centre[k]))
      out[k] = centre[k];
}

#endif
