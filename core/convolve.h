/* Convolution plan: the float taps and constants both backends compute with
 * (engine-internal; core/convolve.c makes it, cuda/convolve.cu copies its
 * arithmetic). See core/convolve.c for the arithmetic. */
#ifndef CUDAFX_CONVOLVE_H
#define CUDAFX_CONVOLVE_H

#include "cudafx.h"

/* Largest 1-D size: the gaussian at the table's largest sigma, 50. */
#define CONVOLVE_MAX_TAPS_1D 301
#define CONVOLVE_MAX_TAPS_2D (CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE)

typedef struct {
  int   size, radius;
  int   separable;
  /* direct: size*size row-major; separable: size horizontal, then size vertical */
  float taps[CONVOLVE_MAX_TAPS_2D];
  float abs_taps[CONVOLVE_MAX_TAPS_2D]; /* |k| without divisor: alpha coverage weights */
  float abs_sum;                        /* sum |k| */
  float alpha_scale;                    /* d / s: alpha as the kernel's weighted average */
  int   zero_sum;                       /* keep the source alpha */
  float offset;                         /* on the element's scale */
} convolve_plan;

#endif
