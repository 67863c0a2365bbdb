/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The services every backend may call, below both the engine and the
 * backends: the calling thread's error message, the call's thread count,
 * progress and cancel, the host's rows (asked for and reported), and the
 * arithmetic the CPU filters, the stripe runner and the kernels share (float
 * bits, border index, row address). The test switches' reader
 * (cudafx_test_switch) is one of them too, declared in cudafx.h because the
 * hosts read switches as well. Nothing here knows a backend or the dispatch,
 * so cuda/ calls nothing in core/engine.c; tools/check-layers.sh keeps it so. */
#ifndef CUDAFX_SERVICES_H
#define CUDAFX_SERVICES_H

#include "cudafx.h"
#include "i18n.h"

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Sets the calling thread's error message and returns status. */
cudafx_status cudafx_fail (cudafx_status status, const char *fmt, ...)
  __attribute__ ((format (printf, 2, 3)));
void cudafx_clear_error (void);

static inline uint8_t *
cudafx_row (const cudafx_image *img, int y)
{
  return (uint8_t *) img->data + (size_t) y * img->stride;
}

#ifdef __CUDACC__
#define CUDAFX_HOST_DEVICE __host__ __device__
#else
#define CUDAFX_HOST_DEVICE
#endif

/* The bits of a float and back, the same on the host and the device. */
static inline CUDAFX_HOST_DEVICE uint32_t
cudafx_float_bits (float a)
{
#ifdef __CUDA_ARCH__
  return __float_as_uint (a);
#else
  uint32_t i;
  memcpy (&i, &a, sizeof i);
  return i;
#endif
}

static inline CUDAFX_HOST_DEVICE float
cudafx_bits_float (uint32_t i)
{
#ifdef __CUDA_ARCH__
  return __uint_as_float (i);
#else
  float a;
  memcpy (&a, &i, sizeof a);
  return a;
#endif
}

/* Index that stands for position i (any integer) of a row or column of n
 * under a border policy; -1 for black. One definition for the CPU filters,
 * the CUDA stripe runner and the CUDA kernels, so all make up the same pixels.
 * Mirror reflects without repeating the edge (period 2(n-1)). */
static inline CUDAFX_HOST_DEVICE int
cudafx_border_index (int i, int n, cudafx_border border)
{
  if (i >= 0 && i < n)
    return i;
  switch (border)
    {
    case CUDAFX_BORDER_CLAMP:
      return i < 0 ? 0 : n - 1;
    case CUDAFX_BORDER_MIRROR:
      {
        if (n == 1)
          return 0;
        long long period = 2LL * (n - 1);
        long long m = (i < 0 ? -(long long) i : (long long) i) % period;
        return (int) (m < n ? m : period - m);
      }
    case CUDAFX_BORDER_WRAP:
      return (int) (((long long) i % n + n) % n);
    default:
      return -1;
    }
}

/* Threads to use for this call (options->threads, else all cores). */
int cudafx_thread_count (const cudafx_options *o);

/* Calls progress(fraction); returns CUDAFX_ERR_CANCELLED (with a message) when
 * the host asked to stop. */
cudafx_status cudafx_progress (const cudafx_options *o, double fraction);

/* Tells the host (options.rows_ready) that rows [y0, y1) of the call's dst
 * are final; for backends, in row order (cudafx_dispatch reports the rest). */
static inline void
cudafx_rows_final (const cudafx_options *o, int y0, int y1)
{
  if (o && o->rows_ready && y1 > y0)
    o->rows_ready (y0, y1, o->rows_user);
}

/* Asks the host (options.rows_needed) for rows [0, y) of the call's src
 * before they are read; y may pass the image's end (cudafx_dispatch keeps it
 * within, and asks only beyond what was asked). CUDAFX_ERR_CANCELLED, with a
 * message naming filter, when the host cannot provide them. */
cudafx_status cudafx_source_rows (const cudafx_options *o, const char *filter, int y);

#ifdef __cplusplus
}
#endif

#endif /* CUDAFX_SERVICES_H */
