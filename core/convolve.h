/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Convolution plan: the border and the float taps and constants both
 * backends compute with (engine-internal; core/convolve.c makes it and is
 * the reference, cuda/convolve.cu computes the same sums). See
 * core/convolve.c's header for the arithmetic. */
#ifndef CUDAFX_CONVOLVE_H
#define CUDAFX_CONVOLVE_H

#include "cudafx.h"

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

#endif
