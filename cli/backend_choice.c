/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The CLI's backend choice (backend_choice.h).
 *
 * CUDA costs a process about 150 ms of wall time even when its start-up
 * overlaps the first file's decoding (driver, context, kernels, device
 * buffers, teardown: docs/BENCHMARKS.md, "The CLI's backend rule"). That is more
 * than the CPU needs for median or convolve on a photo, far less than it
 * needs for nl-means or quantize. So --backend auto decides twice:
 *   - at launch, from the job's estimated CPU time (files x the first file's
 *     megapixels x the filter's CPU cost per megapixel, cpu_ms_per_mp): below
 *     CUDA_COST_MS the job runs on the CPU and CUDA is never started; above
 *     it, CUDA starts on its own thread while the first file decodes;
 *   - per file, once CUDA was started: it is ready, the engine's auto (CUDA,
 *     or the CPU if it fails); it could not start, the CPU; it is still
 *     starting, one file begins on the CPU and, if CUDA becomes ready while
 *     the CPU's remaining time (extrapolated from its progress) exceeds what
 *     the GPU's whole call would take, moves to CUDA; a file of a batch waits
 *     for CUDA instead, as the codec threads use every core meanwhile and
 *     several workers racing on the CPU would take them (docs/BENCHMARKS.md,
 *     "The CLI's backend rule").
 * The JSON output's "backend_reason" says which case applied. */
#include "backend_choice.h"
#include "batch.h"
#include "image_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

enum { CUDA_OFF, CUDA_STARTING, CUDA_READY, CUDA_UNUSABLE };

/* What CUDA adds to one file's wall time when its start overlaps the decode
 * (measured: docs/BENCHMARKS.md, "The CLI's backend rule"). */
#define CUDA_COST_MS 150.0
/* What a device's first call on a photo adds to a warm one: device buffers
 * and pinned staging sized for it, kernels the start-up run did not load
 * (measured: docs/BENCHMARKS.md, "The CLI's backend rule"). */
#define FIRST_CALL_MS 160.0

/* Process-wide, like the CUDA context it stands for: CUDA starts once per
 * process (cli_cuda_start is called once, before any file is decoded). */
static pthread_t   start_thread;
static atomic_int  cuda_state = CUDA_OFF;
static int         start_thread_running; /* created, not yet joined */
static atomic_int  start_thread_done;
static char        start_why[256];   /* CUDA_UNUSABLE: why; written before the state */
static double      ready_ms;         /* when CUDA became ready, ms after cli_cuda_start */
static double      started_at;
static double      job_cpu_ms;       /* the job's estimated CPU time, when CUDA was not started */
static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  counted = PTHREAD_COND_INITIALIZER;
static int             device_count = -1; /* -1 until the start-up thread has counted, under count_lock */
static pthread_cond_t  started = PTHREAD_COND_INITIALIZER; /* cuda_state left CUDA_STARTING */
static cli_cuda_times  times;   /* under count_lock */

/* The start's own run; a custom kernel's taps stay the caller's (main's
 * command line, alive until the process ends). */
typedef struct {
  int                  filter;
  cudafx_filter_params params;
  int                  several; /* files: ready every device, for the workers */
} start_job;

static start_job job;

/* CUDA_READY or CUDA_UNUSABLE, for whoever waits on it. */
static void
set_state (int state)
{
  pthread_mutex_lock (&count_lock);
  times.ready = state == CUDA_READY ? cli_now_ms () : 0;
  atomic_store (&cuda_state, state);
  pthread_cond_broadcast (&started);
  pthread_mutex_unlock (&count_lock);
}

static void
set_device_count (int n)
{
  pthread_mutex_lock (&count_lock);
  times.counted = cli_now_ms ();
  device_count = n;
  pthread_cond_broadcast (&counted);
  pthread_mutex_unlock (&count_lock);
}

/* The batch's own filter on a 32x32 RGB image forced to CUDA on a device
 * (options.device): besides the context this loads the filter's kernels
 * and sizes the device buffers. The engine keeps all three for the files
 * that follow. */
static cudafx_status
warm_up (int device, cudafx_run_result *result)
{
  enum { SIZE = 32 };
  unsigned char *pixels = malloc (2 * SIZE * SIZE * 3);
  cudafx_image src = { pixels, SIZE, SIZE, 3, 0, CUDAFX_U8, SIZE * 3 };
  cudafx_image dst = src;
  cudafx_filter_params params = job.params;
  cudafx_options o;

  if (!pixels || !result)
    {
      free (pixels);
      return CUDAFX_ERR_NO_MEMORY;
    }
  dst.data = pixels + SIZE * SIZE * 3;
  for (int i = 0; i < SIZE * SIZE * 3; i++)
    pixels[i] = (unsigned char) (i * 37 % 251); /* texture, so no filter takes a shortcut */
  cudafx_options_init (&o);
  o.device = device;
  params.backend = CUDAFX_BACKEND_CUDA;
  cudafx_status s = cudafx_run_filter (job.filter, &params, &src, &dst, &o, result);
  free (pixels);
  return s;
}

/* Counts the devices (a batch's workers wait for that), readies the default
 * one, then, for a batch, the others for the workers that will use them
 * (one file needs no other: a context costs a device tens of milliseconds). */
static void *
start_cuda (void *arg)
{
  cudafx_run_result *result = malloc (sizeof *result); /* large (the palette): off the stack */
  int devices = cudafx_cuda_devices ();
  set_device_count (devices);
  cudafx_status s = warm_up (0, result);
  if (s == CUDAFX_OK)
    {
      ready_ms = cli_now_ms () - started_at;
      set_state (CUDA_READY);
    }
  else
    {
      const char *message = cudafx_error_message ();
      snprintf (start_why, sizeof start_why, "%s", message[0] ? message : cudafx_status_string (s));
      set_state (CUDA_UNUSABLE);
    }
  for (int d = 1; d <= devices && s == CUDAFX_OK && devices > 1 && job.several; d++)
    warm_up (d, result); /* a device that fails here: its files fall back or fail, each reporting why */
  pthread_mutex_lock (&count_lock);
  times.all_ready = s == CUDAFX_OK ? cli_now_ms () : 0;
  pthread_mutex_unlock (&count_lock);
  free (result);
  atomic_store (&start_thread_done, 1);
  return arg;
}

/* CPU milliseconds a megapixel takes with 16 threads, from the engine's own
 * times for median radius 1, automatic nl-means and quantize K=16
 * (docs/BENCHMARKS.md, "The CLI's backend rule") and nl-bayes' on the CPU;
 * the other parameters scale with the work the CPU implementations do (median
 * with the radius, nl-means with the search window, quantize with the
 * colours, a custom convolution with its taps). Rough on purpose: it
 * separates jobs that need tens of milliseconds from those that need seconds. */
static double
cpu_ms_per_mp (int filter, const cudafx_filter_params *p)
{
  switch (filter)
    {
    case CUDAFX_FILTER_MEDIAN:
      return 1.2 * p->median.radius;
    case CUDAFX_FILTER_NLMEANS:
      {
        int s = p->nlmeans.automatic ? 10 : p->nlmeans.search_radius;
        return 0.17 * (2 * s + 1) * (2 * s + 1);
      }
    case CUDAFX_FILTER_QUANTIZE:
      return 1.5 * p->quantize.colors * (p->quantize.dither ? 2 : 1);
    case CUDAFX_FILTER_NLBAYES:
      /* Its two steps of groups and covariances: 1-3 s a quarter megapixel on
       * 2 cores, about 1 s a megapixel on 16 (with the largest windows, from
       * sigma 20 on, the most), so the GPU pays from small images on. */
      return 1000.0;
    case CUDAFX_FILTER_CONVOLVE:
      if (p->convolve.preset == CUDAFX_PRESET_CUSTOM)
        return 0.5 + 0.02 * p->convolve.kernel_size * p->convolve.kernel_size;
      return p->convolve.preset == CUDAFX_PRESET_GAUSSIAN ? 0.5 + 0.2 * p->convolve.sigma : 0.5;
    }
  return 0;
}

void
cli_cuda_start (int filter, const cudafx_filter_params *p, double megapixels, int files, int threads)
{
  /* CUDAFX_BACKEND=cpu|cuda with --backend auto: the engine decides, as it
   * documents; the CLI's rule steps aside. */
  cudafx_backend want = cudafx_backend_requested (p->backend);
  if (want == CUDAFX_BACKEND_CPU)
    return;
  if (want == CUDAFX_BACKEND_AUTO)
    {
      job_cpu_ms = cpu_ms_per_mp (filter, p) * megapixels * 16.0 / (threads > 0 ? threads : 1);
      if (job_cpu_ms < CUDA_COST_MS)
        return;
    }
  job.filter = filter;
  job.params = *p;
  job.several = files > 1;
  started_at = times.start = cli_now_ms ();
  atomic_store (&cuda_state, CUDA_STARTING);
  start_thread_running = !pthread_create (&start_thread, NULL, start_cuda, NULL);
  if (!start_thread_running)
    {
      snprintf (start_why, sizeof start_why, "could not start a thread for CUDA");
      set_state (CUDA_UNUSABLE);
    }
}

int
cli_cuda_devices (void)
{
  if (atomic_load (&cuda_state) == CUDA_OFF)
    return 0;
  pthread_mutex_lock (&count_lock);
  while (start_thread_running && device_count < 0)
    pthread_cond_wait (&counted, &count_lock);
  int n = device_count > 0 ? device_count : 0;
  pthread_mutex_unlock (&count_lock);
  return n;
}

void
cli_cuda_get_times (cli_cuda_times *out)
{
  pthread_mutex_lock (&count_lock);
  *out = times;
  pthread_mutex_unlock (&count_lock);
}

int
cli_cuda_stop (void)
{
  if (!start_thread_running)
    return 0;
  if (!atomic_load (&start_thread_done))
    return 1;
  pthread_join (start_thread, NULL);
  start_thread_running = 0;
  return 0;
}

/* The GPU's whole call on an image of that many pixels, transfers included:
 * a fixed cost plus a cost a megapixel, set above the slowest whole call of
 * the README's H100 table, with room for the first call of a kernel;
 * nl-bayes, whose kernels do far more, at its target (400 ms on 12 MP). */
static double
gpu_estimate_ms (int filter, const cudafx_image *img)
{
  double per_mp = filter == CUDAFX_FILTER_NLBAYES ? 35 : 2.5;
  return 5 + per_mp * ((double) img->width * img->height / 1e6);
}

typedef struct {
  double start, budget;
  int    switched;
  double fraction;
} race;

/* Cancels the CPU run once CUDA is ready and the CPU still has longer to go
 * than the GPU would take for the whole file. */
static int
race_progress (double fraction, void *user_data)
{
  race *r = user_data;
  r->fraction = fraction;
  if (atomic_load (&cuda_state) != CUDA_READY)
    return 0;
  double elapsed = cli_now_ms () - r->start;
  double left = fraction > 0 ? elapsed * (1 - fraction) / fraction : r->budget + 1;
  r->switched = left > r->budget;
  return r->switched;
}

/* The rule kept the file on the CPU: the report's fallback (why CUDA was not
 * used) is the rule's reason, not the engine's "CPU requested". */
static cudafx_status
ran_on_cpu (cudafx_status s, cudafx_run_result *result, const char *why)
{
  if (s == CUDAFX_OK)
    snprintf (result->report.fallback, sizeof result->report.fallback, "%s", why);
  return s;
}

/* A file about to run on CUDA: its blocks of a batch's image pool pinned
 * first, so the engine copies them without staging them (a no-op for other
 * memory, or when no device is ready). */
static void
pin_images (const cudafx_image *src, const cudafx_image *dst)
{
  cli_image_pool_pin (src->data);
  cli_image_pool_pin (dst->data);
}

cudafx_status
cli_run_engine (int filter, const cudafx_filter_params *p, const cudafx_image *src,
                cudafx_image *dst, const cudafx_options *o, cudafx_run_result *result,
                char *why, size_t why_size)
{
  cudafx_filter_params params = *p;
  cudafx_options options = *o;
  cudafx_backend want = cudafx_backend_requested (p->backend); /* the rule steps aside unless auto */
  int state = atomic_load (&cuda_state);
  int waited = state == CUDA_STARTING && job.several && want == CUDAFX_BACKEND_AUTO;
  cudafx_status s;

  if (waited)
    {
      pthread_mutex_lock (&count_lock);
      while ((state = atomic_load (&cuda_state)) == CUDA_STARTING)
        pthread_cond_wait (&started, &count_lock);
      pthread_mutex_unlock (&count_lock);
    }

  if (want != CUDAFX_BACKEND_AUTO)
    {
      if (want == CUDAFX_BACKEND_CUDA)
        pin_images (src, dst);
      s = cudafx_run_filter (filter, p, src, dst, o, result);
      snprintf (why, why_size, p->backend != CUDAFX_BACKEND_AUTO ? "%s requested" : "CUDAFX_BACKEND=%s",
                want == CUDAFX_BACKEND_CPU ? "cpu" : "cuda");
      return s;
    }
  if (state == CUDA_READY)
    {
      pin_images (src, dst);
      s = cudafx_run_filter (filter, p, src, dst, o, result);
      if (s == CUDAFX_OK && result->report.backend_used == CUDAFX_BACKEND_CPU)
        snprintf (why, why_size, "CUDA failed, fell back to the CPU: %s", result->report.fallback);
      else
        snprintf (why, why_size, "CUDA ready (started in %.0f ms%s)", ready_ms,
                  waited ? "; in a batch, the file waited for it" : "");
      return s;
    }

  params.backend = CUDAFX_BACKEND_CPU;
  if (state == CUDA_OFF)
    {
      s = cudafx_run_filter (filter, &params, src, dst, o, result);
      snprintf (why, why_size, "CUDA not started: the job's CPU estimate, %.0f ms, is below the "
                "%.0f ms CUDA would add", job_cpu_ms, CUDA_COST_MS);
      return ran_on_cpu (s, result, why);
    }
  if (state == CUDA_UNUSABLE)
    {
      s = cudafx_run_filter (filter, &params, src, dst, o, result);
      snprintf (why, why_size, "CUDA unusable: %s", start_why);
      return ran_on_cpu (s, result, why);
    }

  /* A file that races CUDA's start is among the first it gets: its call is
   * a first call. */
  race r = { cli_now_ms (), gpu_estimate_ms (filter, src) + FIRST_CALL_MS, 0, 0 };
  options.progress = race_progress;
  options.user_data = &r;
  s = cudafx_run_filter (filter, &params, src, dst, &options, result);
  if (s == CUDAFX_ERR_CANCELLED && r.switched)
    {
      s = cudafx_run_filter (filter, p, src, dst, o, result);
      snprintf (why, why_size, "CUDA became ready with the CPU %.0f%% done; moved to CUDA",
                100 * r.fraction);
      return s;
    }
  snprintf (why, why_size, "CUDA still starting; the CPU finished first");
  return ran_on_cpu (s, result, why);
}
