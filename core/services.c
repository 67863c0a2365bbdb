/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The services below engine and backends (services.h): the calling thread's
 * error message and the statuses' names, the test switches, the call's
 * thread count, progress and cancel, asking the host for source rows, and
 * plain host memory in huge pages. Both the engine and every backend call
 * these; they call neither. */
#include "services.h"

#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

static _Thread_local char error_message[512];

const char *
cudafx_status_string (cudafx_status status)
{
  switch (status)
    {
    case CUDAFX_OK:                 return "success";
    case CUDAFX_ERR_INVALID_ARG:    return "invalid argument";
    case CUDAFX_ERR_NO_MEMORY:      return "out of memory";
    case CUDAFX_ERR_CANCELLED:      return "cancelled";
    case CUDAFX_ERR_CUDA_NOT_BUILT: return "CUDA support not built";
    case CUDAFX_ERR_NO_DEVICE:      return "no usable CUDA device";
    case CUDAFX_ERR_CUDA:           return "CUDA error";
    }
  return "unknown status";
}

const char *
cudafx_error_message (void)
{
  return error_message;
}

cudafx_status
cudafx_fail (cudafx_status status, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  /* xgettext extracts fmt (--keyword=cudafx_fail:2) */
  vsnprintf (error_message, sizeof error_message, _(fmt), ap);
  va_end (ap);
  return status;
}

void
cudafx_clear_error (void)
{
  error_message[0] = '\0';
}

/* Every test, fault-injection and benchmark switch (cudafx_test_switch),
 * each with what it does; docs/TESTING.md's table adds who reads it and which
 * tests and benchmarks set it. */
static const struct {
  const char *name, *what;
} test_switches[] = {
  { "CUDAFX_CUDA_STRIPES",       "N: the stripes (1-16) the CUDA runner pipelines an image that fits the device in" },
  { "CUDAFX_CUDA_SEED_SMS",      "N: quantize's device seeding laid out for N multiprocessors (fewer than the GPU's)" },
  { "CUDAFX_CUDA_FAIL",          "alloc|launch|seed|seed-launchN|stripeN: a CUDA fault injected at that step" },
  { "CUDAFX_QUANTIZE_PER_PIXEL", "1: quantize's k-means over every pixel of a u8 image, not its distinct colours" },
  { "CUDAFX_QUANTIZE_PIECES",    "N: the pieces in which quantize asks the host for a u8 image's rows" },
  { "CUDAFX_BATCH_TIMELINE",     "FILE: the CLI writes its files' stage times to FILE, one JSON object a line" },
  { "CUDAFX_GEGL_TIMELINE",      "set: the GEGL operations print on stderr when each step of a region ended" },
  { "CUDAFX_BENCH_CODECS_ONLY",  "1: cudafx-bench decodes and writes its files without filtering them" },
  { "CUDAFX_BENCH_CODEC_NICE",   "N: cudafx-bench runs a batch's codec threads at nice level N" },
  { "CUDAFX_TEST_BACKEND",       "cpu|cuda: the backend the test programs' engine calls ask for" },
};

const char *
cudafx_test_switch (const char *name)
{
  for (size_t i = 0; i < sizeof test_switches / sizeof test_switches[0]; i++)
    if (!strcmp (name, test_switches[i].name))
      return getenv (name);
  fprintf (stderr, "cudafx: %s is not in the test switches' table (core/services.c)\n", name);
  abort ();
}

size_t
cudafx_type_size (cudafx_type type)
{
  return type == CUDAFX_F32 ? sizeof (float) : 1;
}

int
cudafx_thread_count (const cudafx_options *o)
{
  if (o && o->threads > 0)
    return o->threads;
  return omp_get_max_threads ();
}

cudafx_status
cudafx_progress (const cudafx_options *o, double fraction)
{
  if (o && o->progress && o->progress (fraction, o->user_data))
    return cudafx_fail (CUDAFX_ERR_CANCELLED, "cancelled");
  return CUDAFX_OK;
}

cudafx_status
cudafx_source_rows (const cudafx_options *o, const char *filter, int y)
{
  if (o && o->rows_needed && o->rows_needed (y, o->rows_user))
    return cudafx_fail (CUDAFX_ERR_CANCELLED, "%s: the host could not provide the source's rows up to row %d",
                        filter, y);
  return CUDAFX_OK;
}

/* Huge pages: a 12 MP RGB image is 9000 page faults in 4 KB pages, 18 in
 * 2 MB ones, and on virtual machines each fault is dear; the driver pins a
 * block of them, its pages there, far quicker than cudaHostAlloc makes one,
 * which holds every other thread's CUDA calls meanwhile (docs/BENCHMARKS.md,
 * "Pinned memory and huge pages"). */
#define HUGE_PAGE ((size_t) 2 << 20)

void *
cudafx_host_alloc_plain (size_t bytes)
{
  if (bytes < HUGE_PAGE)
    return malloc (bytes ? bytes : 1);
  void *p = NULL;
  size_t rounded = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
  if (rounded < bytes || posix_memalign (&p, HUGE_PAGE, rounded))
    return NULL;
#ifdef MADV_HUGEPAGE
  madvise (p, rounded, MADV_HUGEPAGE); /* advice: without it, plain pages */
#endif
  return p;
}
