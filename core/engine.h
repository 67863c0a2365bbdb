/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Engine internals shared by the filters and the backends: errors,
 * validation against the argument table, the border map, and the striped
 * multithreaded row loop with progress and cancel. The backends' interface
 * is core/backend.h. Not for hosts: they include cudafx.h only. */
#ifndef CUDAFX_ENGINE_H
#define CUDAFX_ENGINE_H

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

/* Checks one image view; `what` is "source" or "destination". */
cudafx_status cudafx_check_image (const char *filter, const char *what, const cudafx_image *img);
/* Checks both views and that dst has src's size, channels, alpha flag and type,
 * and that they do not overlap. */
cudafx_status cudafx_check_pair (const char *filter, const cudafx_image *src, const cudafx_image *dst);

/* The argument table over a filter's own parameter struct (params points at a
 * cudafx_median_params, ...), by the fields the table binds (core/params.c):
 * the defaults, and every value checked against its range, the message naming
 * both, e.g. "median: radius 101 is out of range 1..100". */
void          cudafx_params_defaults (int filter, void *params);
cudafx_status cudafx_params_check (int filter, const void *params);
/* One bound field's value as a double, and set from one. */
double cudafx_field_get (const cudafx_arg *a, const void *field);
void   cudafx_field_set (const cudafx_arg *a, void *field, double value);

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

/* The CPU filters' hot loops are compiled three times, for x86-64's baseline,
 * AVX2 (x86-64-v3) and AVX-512 (x86-64-v4), and the best the processor runs
 * is chosen when the library loads (GCC's function multi-versioning), so a
 * packaged binary runs on any x86-64 without giving up the vector units
 * (docs/BENCHMARKS.md, "CPU vector paths", has what each path is worth).
 * Every path computes the
 * same values: -ffp-contract=off keeps fused multiply-adds out and nothing
 * reassociates floating-point sums. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__CUDACC__)
#define CUDAFX_CPU_CLONES __attribute__ ((target_clones ("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CUDAFX_CPU_CLONES
#endif

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

/* Runs fn over rows [0, height) in chunks of rows shared dynamically among
 * threads; reports progress from `from` to `to` as chunks finish and stops
 * early on cancel. fn must be safe to call concurrently on disjoint rows. */
typedef void (*cudafx_rows_fn) (void *ctx, int y0, int y1);
cudafx_status cudafx_parallel_rows (int height, cudafx_rows_fn fn, void *ctx,
                                    const cudafx_options *o, double from, double to);

#ifdef __cplusplus
}
#endif

#endif /* CUDAFX_ENGINE_H */
