/* SPDX-License-Identifier: GPL-3.0-or-later */
/* A region's memory kept between calls (operation.h): huge pages cleared
 * on GEGL's threads, and pinned late, once CUDA has started. */
#include "operation.h"

typedef struct
{
  guint8 *p;
  gsize   bytes;
} region_span;

/* Huge pages: cudafx_host_alloc_plain's memory is made of them where the
 * system gives them. */
#define HUGE_PAGE ((guintptr) 2 << 20)

/* Huge pages that bytes (> 0) at p touch. */
static guintptr
huge_pages (const region_span *s)
{
  return ((guintptr) s->p + s->bytes - 1) / HUGE_PAGE + 1 - (guintptr) s->p / HUGE_PAGE;
}

/* Thread i of n: its share of the huge pages under s, each page cleared by
 * one thread only. */
static void
clear_part (gint i, gint n, gpointer data)
{
  const region_span *s = data;
  guintptr           start = (guintptr) s->p, end = start + s->bytes, first = start / HUGE_PAGE;
  guintptr           a = MAX (start, (first + huge_pages (s) * i / n) * HUGE_PAGE);
  guintptr           b = MIN (end, (first + huge_pages (s) * (i + 1) / n) * HUGE_PAGE);

  if (b > a)
    memset ((void *) a, 0, b - a);
}

/* Bytes at p cleared on GEGL's threads, a huge page or more each, so that
 * registering them with the driver then only pins pages already there,
 * several times quicker than pages it must make itself, and GEGL's threads
 * clear them several times faster than one (docs/BENCHMARKS.md,
 * "GEGL operations: region memory and the first call"). */
static void
clear_region (guint8 *p, gsize bytes)
{
  region_span s = { p, bytes };

  if (bytes)
    gegl_parallel_distribute ((gint) MIN (huge_pages (&s), (guintptr) G_MAXINT), clear_part, &s);
}

/* Memory as cudafx_host_alloc makes it once CUDA has started (pinned, or
 * plain if pinning fails), its pages cleared on GEGL's threads. */
static guint8 *
pinned_memory (gsize bytes)
{
  guint8 *p = cudafx_host_alloc_plain (bytes);

  if (p)
    {
      clear_region (p, bytes);
      cudafx_host_pin (p, bytes);
    }
  return p;
}

/* bytes of scratch i when the caller holds scratch_lock, else fresh memory
 * (*fresh set); NULL if there is not enough memory. Plain scratch grows to
 * whole bytes (the input's at that level) at once, when the system has
 * them: GIMP asks for a merge in chunks of growing size, and memory taken
 * anew for each chunk costs its page faults again, while pages never
 * touched cost nothing (pinned memory is all taken at once: it grows as
 * asked). Scratch taken before CUDA started is pinned in place once it has
 * (pin_scratch), or else taken again, pinned (once: if pinning then fails,
 * the plain memory stays). */
guint8 *
op_region_memory (CudafxOp *self, int i, gboolean locked, gsize bytes, gsize whole, gboolean *fresh)
{
  *fresh = !locked;
  if (!locked)
    return g_try_malloc (bytes);
  if (self->scratch_size[i] < bytes || (!self->scratch_pinnable[i] && cudafx_host_pinnable ()))
    {
      cudafx_host_free (self->scratch[i]);
      self->scratch_pinnable[i] = cudafx_host_pinnable ();
      self->scratch[i] = NULL;
      /* The whole input's size when it can be had, else (memory short)
       * only what this region needs. */
      if (whole > bytes && !self->scratch_pinnable[i]
          && (self->scratch[i] = cudafx_host_alloc_plain (whole)))
        bytes = whole;
      if (!self->scratch[i])
        self->scratch[i] = self->scratch_pinnable[i] ? pinned_memory (bytes) : cudafx_host_alloc_plain (bytes);
      self->scratch_size[i] = self->scratch[i] ? bytes : 0;
    }
  return self->scratch[i];
}

/* A node's first call takes its scratch before CUDA has started (the
 * warm-up thread starts it when the node is prepared): plain memory, into
 * which the input is read while CUDA starts. The call then waits here for
 * the start (a second cudafx_backend_warm_up waits for the first: the
 * driver starts once, and the first holds the context's lock) and pins
 * that memory in place, the rows not read yet and the output cleared first
 * on GEGL's threads: far less than the engine spent making pinned staging
 * of the image's size for this call and copying through it, after which
 * the node's next call took its scratch again, pinned (docs/BENCHMARKS.md,
 * "GEGL operations: region memory and the first call"). Once a
 * node, under scratch_lock; TRUE when src and dst are then pinned. */
gboolean
op_pin_scratch (CudafxOp *self, const cudafx_image *src, const cudafx_image *dst, gsize bytes, gsize src_written)
{
  gsize written[2] = { src_written, 0 };

  if (self->scratch_pinned_late)
    return FALSE;
  self->scratch_pinned_late = TRUE;
  cudafx_backend_warm_up ();
  if (!cudafx_host_pinnable ())
    return FALSE;
  for (int i = 0; i < 2; i++)
    if (!self->scratch_pinnable[i])
      {
        clear_region (self->scratch[i] + written[i], bytes - written[i]);
        if (cudafx_host_pin (self->scratch[i], bytes))
          self->scratch_size[i] = bytes; /* what is pinned: larger asks take pinned memory anew */
        self->scratch_pinnable[i] = TRUE;
      }
  return cudafx_host_pinned (src->data, bytes) && cudafx_host_pinned (dst->data, bytes);
}
