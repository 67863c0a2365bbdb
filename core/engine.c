/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Engine plumbing: validation, the one place where a call's backend is
 * chosen (cudafx_dispatch: auto, cpu or cuda, and the fallback to the CPU
 * with its reason), host memory through the backend's table, and the
 * striped multithreaded row loop with progress and cancel. Errors,
 * progress, threads and the host's rows are services.c's, which the
 * backends call too. */
#include "backend.h"
#include "engine.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cudafx_status
cudafx_check_image (const char *filter, const char *what, const cudafx_image *img)
{
  what = _(what); /* "source" or "destination", marked N_ by the callers */
  if (!img)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s: %s image is NULL", filter, what);
  if (!img->data)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s: %s image has no data", filter, what);
  if (img->width <= 0 || img->height <= 0)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s: %s image size %dx%d is empty",
                        filter, what, img->width, img->height);
  if (img->channels < 1 || img->channels > 4)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s: %s image has %d channels (1..4 allowed)",
                        filter, what, img->channels);
  if (img->type != CUDAFX_U8 && img->type != CUDAFX_F32)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s: %s image has an unknown element type",
                        filter, what);
  if (img->has_alpha && img->channels != 2 && img->channels != 4)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG,
                        "%s: %s image has alpha but %d channels (alpha needs 2 or 4)",
                        filter, what, img->channels);
  size_t row = (size_t) img->width * img->channels * cudafx_type_size (img->type);
  if (row / img->width / img->channels != cudafx_type_size (img->type))
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "%s: %s image row size overflows", filter, what);
  if (img->stride < row)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG,
                        "%s: %s image stride %zu is smaller than a row (%zu bytes)",
                        filter, what, img->stride, row);
  /* f32 elements are read as floats: rows must start on a float boundary. */
  size_t element = cudafx_type_size (img->type);
  if (img->stride % element || (uintptr_t) img->data % element)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG,
                        "%s: %s image %s is not a multiple of the element size (%zu bytes)",
                        filter, what, img->stride % element ? "stride" : "data address", element);
  if (img->stride > SIZE_MAX / (size_t) img->height)
    return cudafx_fail (CUDAFX_ERR_NO_MEMORY, "%s: %s image size overflows", filter, what);
  return CUDAFX_OK;
}

cudafx_status
cudafx_check_pair (const char *filter, const cudafx_image *src, const cudafx_image *dst)
{
  cudafx_status s;
  if ((s = cudafx_check_image (filter, N_("source"), src)) ||
      (s = cudafx_check_image (filter, N_("destination"), dst)))
    return s;
  if (src->width != dst->width || src->height != dst->height)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG,
                        "%s: destination size %dx%d differs from source %dx%d",
                        filter, dst->width, dst->height, src->width, src->height);
  if (src->channels != dst->channels || src->has_alpha != dst->has_alpha || src->type != dst->type)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG,
                        "%s: destination layout (channels, alpha, type) differs from source", filter);
  const uint8_t *s0 = src->data, *d0 = dst->data;
  const uint8_t *s1 = s0 + (src->height - 1) * src->stride + src->width * src->channels * cudafx_type_size (src->type);
  const uint8_t *d1 = d0 + (dst->height - 1) * dst->stride + dst->width * dst->channels * cudafx_type_size (dst->type);
  if (s0 < d1 && d0 < s1)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s: destination overlaps source", filter);
  return CUDAFX_OK;
}

void
cudafx_options_init (cudafx_options *options)
{
  memset (options, 0, sizeof *options);
  options->backend = CUDAFX_BACKEND_AUTO;
}

cudafx_status
cudafx_parallel_rows (int height, cudafx_rows_fn fn, void *ctx,
                      const cudafx_options *o, double from, double to)
{
  int threads = cudafx_thread_count (o);
  /* Many small chunks handed out dynamically in one parallel region: a
   * thread that is descheduled on a busy machine delays only its chunk, and
   * no barrier waits between stripes. The calling thread (thread 0) reports
   * progress after each chunk it finishes; a cancel stops every thread at its
   * next chunk. */
  int rows = height / (threads * 16);
  rows = rows < 1 ? 1 : rows > 64 ? 64 : rows;
  int chunks = (height + rows - 1) / rows;
  int done = 0, cancelled = 0;
#pragma omp parallel num_threads (threads)
  {
#pragma omp for schedule (dynamic, 1) nowait
    for (int c = 0; c < chunks; c++)
      {
        int stop;
#pragma omp atomic read
        stop = cancelled;
        if (stop)
          continue;
        int y0 = c * rows;
        fn (ctx, y0, y0 + rows < height ? y0 + rows : height);
        int now;
#pragma omp atomic capture
        now = ++done;
        if (omp_get_thread_num () == 0 && o && o->progress &&
            o->progress (from + (to - from) * now / chunks, o->user_data))
          {
#pragma omp atomic write
            cancelled = 1;
          }
      }
  }
  if (cancelled)
    return cudafx_fail (CUDAFX_ERR_CANCELLED, "cancelled");
  return cudafx_progress (o, to);
}

/* The one reading of CUDAFX_BACKEND=cpu|cuda|auto (cudafx.h). */
cudafx_backend
cudafx_backend_requested (cudafx_backend asked)
{
  const char *env = getenv ("CUDAFX_BACKEND");
  if (asked == CUDAFX_BACKEND_AUTO && env)
    {
      if (!strcmp (env, "cpu"))
        return CUDAFX_BACKEND_CPU;
      if (!strcmp (env, "cuda"))
        return CUDAFX_BACKEND_CUDA;
    }
  return asked;
}

/* The backend asked for: options, then CUDAFX_BACKEND. */
static cudafx_backend
requested_backend (const cudafx_options *o)
{
  return cudafx_backend_requested (o ? o->backend : CUDAFX_BACKEND_AUTO);
}

/* The CUDA backend's table, or NULL in a build without nvcc. */
static const cudafx_backend_ops *
cuda_backend (void)
{
#ifdef CUDAFX_HAVE_CUDA
  return &cudafx_cuda_backend;
#else
  return NULL;
#endif
}

/* 1 when the CUDA backend is built and the device (options.device) is
 * usable; else why not. */
static int
cuda_usable (const cudafx_backend_ops *cuda, int device, char *name, size_t name_size, char *why,
             size_t why_size)
{
  if (cuda)
    return cuda->probe (device, name, name_size, why, why_size);
  snprintf (name, name_size, "%s", "");
  snprintf (why, why_size, "built without CUDA");
  return 0;
}

void
cudafx_backend_describe (char *buf, size_t size)
{
  char name[128], why[256];
  if (requested_backend (NULL) != CUDAFX_BACKEND_CPU &&
      cuda_usable (cuda_backend (), 0, name, sizeof name, why, sizeof why))
    snprintf (buf, size, "CUDA: %s", name); /* hosts look for this prefix */
  else
    {
      if (requested_backend (NULL) == CUDAFX_BACKEND_CPU)
        snprintf (why, sizeof why, "CUDAFX_BACKEND=cpu");
      snprintf (buf, size, _("CPU, %d threads — %s"), omp_get_max_threads (), why);
    }
}

int
cudafx_cuda_devices (void)
{
  const cudafx_backend_ops *cuda = cuda_backend ();
  return cuda ? cuda->device_count () : 0;
}

void
cudafx_backend_warm_up (void)
{
  char name[128], why[256];
  uint8_t pixel = 0, filtered;
  cudafx_image src = { &pixel, 1, 1, 1, 0, CUDAFX_U8, 1 }, dst = src;
  cudafx_median_params p;
  cudafx_options o;

  if (requested_backend (NULL) == CUDAFX_BACKEND_CPU
      || !cuda_usable (cuda_backend (), 0, name, sizeof name, why, sizeof why))
    return;
  /* The probe started the driver; the backend makes the device's context,
   * streams and events on its first call, which a one-pixel median is. */
  dst.data = &filtered;
  cudafx_median_params_init (&p);
  p.radius = 1;
  cudafx_options_init (&o);
  o.backend = CUDAFX_BACKEND_CUDA;
  cudafx_median (&src, &dst, &p, &o);
  cudafx_clear_error ();
}

/* Host memory the device copies directly belongs to the backend whose
 * device copies it: the CUDA backend where it is built (the CPU's table has
 * no blocks), asked to pin only where CUDA may be used at all. */
static const cudafx_backend_ops *
host_memory_backend (void)
{
  const cudafx_backend_ops *cuda = cuda_backend ();
  return cuda ? cuda : &cudafx_cpu_backend;
}

static int
may_pin (void)
{
  return requested_backend (NULL) != CUDAFX_BACKEND_CPU;
}

void *
cudafx_host_alloc (size_t bytes)
{
  void *p = cudafx_host_alloc_plain (bytes);

  /* The pages made here, outside the driver, then registered. */
  if (p && bytes && cudafx_host_pinnable ())
    {
      memset (p, 0, bytes);
      cudafx_host_pin (p, bytes);
    }
  return p;
}

void
cudafx_host_free (void *p)
{
  if (p && host_memory_backend ()->host_free (p))
    return;
  free (p);
}

int
cudafx_host_pinned (const void *p, size_t bytes)
{
  return p && host_memory_backend ()->host_pinned (p, bytes);
}

int
cudafx_host_pin (void *p, size_t bytes)
{
  return p && may_pin () && host_memory_backend ()->host_register (p, bytes);
}

int
cudafx_host_pinnable (void)
{
  return may_pin () && host_memory_backend ()->host_pinnable ();
}

static void
report_cpu (const cudafx_options *o, const char *fallback)
{
  cudafx_report *r = o ? o->report : NULL;
  if (!r)
    return;
  r->backend_used = CUDAFX_BACKEND_CPU;
  r->threads_used = cudafx_thread_count (o);
  r->kernel_ms = r->transfer_ms = 0;
  snprintf (r->device, sizeof r->device, "CPU");
  snprintf (r->fallback, sizeof r->fallback, "%s", fallback);
}

/* The host's rows_ready and rows_needed behind ones that keep where the
 * reports and the asks have got to, so that dispatch can report the rows a
 * backend left (all of the CPU's), start again from row 0 after a fallback,
 * and ask the host only for rows it was not asked for yet, within the
 * source. */
typedef struct {
  cudafx_rows_ready_fn  fn;
  cudafx_rows_needed_fn needed;
  void                 *user;
  int                   reported; /* rows [0, reported) reported */
  int                   asked;    /* rows [0, asked) of src asked for */
  int                   height;   /* src's */
} rows_tracker;

static void
track_rows (int y0, int y1, void *user)
{
  rows_tracker *t = user;
  t->fn (y0, y1, t->user);
  t->reported = y1;
}

static int
track_needed (int y, void *user)
{
  rows_tracker *t = user;
  if (y > t->height)
    y = t->height;
  if (y <= t->asked)
    return 0;
  if (t->needed (y, t->user))
    return 1;
  t->asked = y;
  return 0;
}

static void
finish_rows (rows_tracker *t, const cudafx_image *dst)
{
  if (t->fn && t->reported < dst->height)
    t->fn (t->reported, dst->height, t->user);
}

cudafx_status
cudafx_dispatch (const char *filter, cudafx_run_fn run, void *job, const cudafx_image *src,
                 const cudafx_image *dst, int cuda_streams, const cudafx_options *o)
{
  cudafx_backend want = requested_backend (o);
  const cudafx_backend_ops *cuda = cuda_backend ();
  char name[128], why[256] = "";
  cudafx_options tracked, whole;
  rows_tracker rows = { NULL, NULL, NULL, 0, 0, src->height };
  cudafx_status s;

  cudafx_clear_error ();
  if (o && (o->rows_ready || o->rows_needed))
    {
      tracked = *o;
      rows.user = o->rows_user;
      tracked.rows_user = &rows;
      tracked.rows_ready = NULL;
      if (dst && o->rows_ready)
        {
          rows.fn = o->rows_ready;
          tracked.rows_ready = track_rows;
        }
      if (o->rows_needed)
        {
          rows.needed = o->rows_needed;
          tracked.rows_needed = track_needed;
        }
      o = &tracked;
    }
  /* The one rule for rows_needed: only the CUDA stripe pipeline of a job
   * that reads its source through it alone (cuda_streams) asks as it goes;
   * any other run gets all of src asked for first, and no rows_needed. */
  if (o)
    {
      whole = *o;
      whole.rows_needed = NULL;
    }
  if (want != CUDAFX_BACKEND_AUTO && want != CUDAFX_BACKEND_CPU && want != CUDAFX_BACKEND_CUDA)
    return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s: backend %d is not auto (0), cpu (1) or cuda (2)",
                        filter, (int) want);
  if (want != CUDAFX_BACKEND_CPU)
    {
      int usable = cuda_usable (cuda, o ? o->device : 0, name, sizeof name, why, sizeof why);
      if (!usable && want == CUDAFX_BACKEND_CUDA)
        return cudafx_fail (cuda ? CUDAFX_ERR_NO_DEVICE : CUDAFX_ERR_CUDA_NOT_BUILT,
                            "%s: backend cuda: %s", filter, why);
      if (usable)
        {
          if (o && o->report)
            o->report->kernel_ms = o->report->transfer_ms = 0;
          if (!cuda_streams && (s = cudafx_source_rows (o, filter, src->height)))
            return s;
          s = run (cuda, job, cuda_streams || !o ? o : &whole);
          if (s == CUDAFX_OK)
            {
              cudafx_report *r = o ? o->report : NULL;
              if (r)
                {
                  r->backend_used = CUDAFX_BACKEND_CUDA;
                  r->threads_used = 0;
                  snprintf (r->device, sizeof r->device, "%s", name);
                  r->fallback[0] = '\0';
                }
              finish_rows (&rows, dst);
              return s;
            }
          if (want == CUDAFX_BACKEND_CUDA || s == CUDAFX_ERR_INVALID_ARG ||
              s == CUDAFX_ERR_CANCELLED || s == CUDAFX_ERR_NO_MEMORY)
            return s;
          snprintf (why, sizeof why, "%s", cudafx_error_message ());
          cudafx_clear_error ();
        }
    }
  else
    snprintf (why, sizeof why, "%s", _("CPU requested"));
  rows.reported = 0;
  if ((s = cudafx_source_rows (o, filter, src->height)))
    return s;
  s = run (&cudafx_cpu_backend, job, o ? &whole : NULL);
  if (s == CUDAFX_OK)
    {
      report_cpu (o, why);
      finish_rows (&rows, dst);
    }
  return s;
}
