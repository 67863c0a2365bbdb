/* SPDX-License-Identifier: GPL-3.0-or-later */
/* CUDA-backend machinery, run by `make check-gpu` on a machine with a GPU:
 * striping under a device-memory cap, injected faults falling back to the
 * CPU (auto) or failing cleanly (cuda forced), and the report. The filters'
 * own accuracy tests run from tests/unit with CUDAFX_TEST_BACKEND=cuda. */
#include "../unit/harness.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef cudafx_status (*run_fn) (const cudafx_image *src, cudafx_image *dst, const cudafx_options *o);

static cudafx_status
run_median (const cudafx_image *src, cudafx_image *dst, const cudafx_options *o)
{
  cudafx_median_params p;
  cudafx_median_params_init (&p);
  p.radius = 6;
  p.percentile = 40;
  return cudafx_median (src, dst, &p, o);
}

static cudafx_status
run_convolve (const cudafx_image *src, cudafx_image *dst, const cudafx_options *o)
{
  static const double kernel[25] = { 1, -2, 3, 0, 1, 2, 5, -1, 0, 2, 0, 1, 8, 1, 0,
                                     2, 0, -1, 5, 2, 1, 0, 3, -2, 1 };
  cudafx_convolve_params p;
  cudafx_convolve_params_init (&p);
  p.preset = CUDAFX_PRESET_CUSTOM;
  p.kernel = kernel;
  p.kernel_size = 5;
  p.border = CUDAFX_BORDER_MIRROR;
  return cudafx_convolve (src, dst, &p, o);
}

static cudafx_status
run_quantize (const cudafx_image *src, cudafx_image *dst, const cudafx_options *o)
{
  cudafx_quantize_params p;
  cudafx_quantize_params_init (&p);
  p.colors = 16;
  p.max_iterations = 8;
  return cudafx_quantize (src, dst, &p, o, NULL);
}

static cudafx_status
run_nlmeans (const cudafx_image *src, cudafx_image *dst, const cudafx_options *o)
{
  cudafx_nlmeans_params p;
  cudafx_nlmeans_params_init (&p);
  p.automatic = 0;
  p.h = 15;
  p.patch_radius = 1; /* halo 3: a stripe fits under the 64K cap below */
  p.search_radius = 2;
  return cudafx_nlmeans (src, dst, &p, o, NULL);
}

/* tolerance: the largest difference from the CPU allowed on u8, share: the
 * largest share of u8 values that may differ (docs/TESTING.md; nl-means:
 * tests/gpu/test_gpu_nlmeans.c's NLM_SHARE and why; none differ here). */
static const struct { const char *name; run_fn run; double tolerance, share; } gpu_filters[] = {
  { "median", run_median, 0, 0 },
  { "convolve", run_convolve, 0, 0 },
  { "nl-means", run_nlmeans, 1, 0.001 },
  { "quantize", run_quantize, 0, 0 },
};

/* Where compare_on's images live: the harness's plain memory, or
 * cudafx_host_alloc's (pinned once CUDA has started) for src, dst or both. */
enum { PLAIN = 0, HOST_SRC = 1, HOST_DST = 2 };

/* img's pixels moved into cudafx_host_alloc memory, the layout kept. */
static void
into_host_memory (cudafx_image *img)
{
  size_t bytes = img->stride * img->height;
  void *p = cudafx_host_alloc (bytes);
  if (!p)
    {
      fprintf (stderr, "test-gpu: out of host memory\n");
      exit (2);
    }
  memcpy (p, img->data, bytes);
  harness_image_free (img);
  img->data = p;
}

static void
free_image (cudafx_image *img, int in_host_memory)
{
  if (in_host_memory)
    cudafx_host_free (img->data);
  else
    harness_image_free (img);
}

/* Runs every GPU filter on a random image of `type` with `backend` on
 * options.device `device`, its images in `memory`, and checks the status,
 * the backend reported and (on success) equality with the CPU. */
static void
compare_in (int memory, cudafx_type type, int device, cudafx_backend backend, cudafx_status expect,
            cudafx_backend expect_used, const char *fallback_part)
{
  harness_rng rng = { 7 };
  const char *type_name = type == CUDAFX_F32 ? "f32" : "u8", *stripes = cudafx_test_switch ("CUDAFX_CUDA_STRIPES");
  const int pad = type == CUDAFX_F32 ? 8 : 5; /* row padding, a whole number of elements */
  cudafx_image src = harness_image_new (301, 203, 3, 0, type, pad);
  cudafx_image ref = harness_image_new (301, 203, 3, 0, type, pad);
  cudafx_image out = harness_image_new (301, 203, 3, 0, type, pad);
  harness_image_random (&src, &rng);
  if (memory & HOST_SRC)
    into_host_memory (&src);
  if (memory & HOST_DST)
    into_host_memory (&out);
  for (size_t i = 0; i < sizeof gpu_filters / sizeof gpu_filters[0]; i++)
    {
      cudafx_options cpu = harness_cpu_options ();
      CHECK (gpu_filters[i].run (&src, &ref, &cpu) == CUDAFX_OK, "%s on CPU failed", gpu_filters[i].name);
      cudafx_report report;
      memset (&report, 0, sizeof report);
      cudafx_options o = harness_cpu_options ();
      o.backend = backend;
      o.report = &report;
      o.device = device;
      harness_image_poison (&out);
      cudafx_status s = gpu_filters[i].run (&src, &out, &o);
      CHECK (s == expect, "%s %s device %d: status %d, expected %d (%s)", gpu_filters[i].name, type_name,
             device, s, expect, cudafx_error_message ());
      if (s != CUDAFX_OK)
        continue;
      CHECK (report.backend_used == expect_used, "%s %s: backend used %d", gpu_filters[i].name, type_name,
             report.backend_used);
      CHECK (strstr (report.fallback, fallback_part) != NULL, "%s %s: fallback '%s' lacks '%s'",
             gpu_filters[i].name, type_name, report.fallback, fallback_part);
      /* A CPU fallback must equal the CPU exactly; the GPU within tolerance,
       * on the harness's 0..255 scale: f32 within 1e-5 of a 0..1 value, u8
       * within the filter's tolerance and share (nl-means: within 1 of 255,
       * docs/TESTING.md, Determinism, and few values off). */
      const int cpu_ran = report.backend_used == CUDAFX_BACKEND_CPU;
      double tolerance = cpu_ran ? 0 : type == CUDAFX_F32 ? 1e-5 * 255 : gpu_filters[i].tolerance;
      double diff = harness_max_diff (&ref, &out);
      double share = type == CUDAFX_U8 ? harness_diff_share (&ref, &out, 0) : 0;
      CHECK (diff <= tolerance && share <= (cpu_ran ? 0 : gpu_filters[i].share),
             "%s %s device %d, %s stripes, memory %d: differs from the CPU by %g in %.3g %% of the values",
             gpu_filters[i].name, type_name, device, stripes ? stripes : "default", memory, diff, 100 * share);
    }
  free_image (&src, memory & HOST_SRC);
  harness_image_free (&ref);
  free_image (&out, memory & HOST_DST);
}

static void
compare_on (cudafx_type type, int device, cudafx_backend backend, cudafx_status expect, cudafx_backend expect_used,
            const char *fallback_part)
{
  compare_in (PLAIN, type, device, backend, expect, expect_used, fallback_part);
}

static void
compare_with_cpu (cudafx_backend backend, cudafx_status expect, cudafx_backend expect_used,
                  const char *fallback_part)
{
  compare_on (CUDAFX_U8, 0, backend, expect, expect_used, fallback_part);
}

TEST (gpu_device_is_used)
{
  compare_with_cpu (CUDAFX_BACKEND_CUDA, CUDAFX_OK, CUDAFX_BACKEND_CUDA, "");
  compare_with_cpu (CUDAFX_BACKEND_AUTO, CUDAFX_OK, CUDAFX_BACKEND_CUDA, "");
}

TEST (gpu_stripes_under_memory_cap)
{
  /* ~20 rows per stripe: many stripes, each with halo rows from its neighbours. */
  setenv ("CUDAFX_CUDA_MEM_LIMIT", "64K", 1);
  compare_with_cpu (CUDAFX_BACKEND_CUDA, CUDAFX_OK, CUDAFX_BACKEND_CUDA, "");
  setenv ("CUDAFX_CUDA_MEM_LIMIT", "1K", 1); /* not even one stripe fits */
  compare_with_cpu (CUDAFX_BACKEND_AUTO, CUDAFX_OK, CUDAFX_BACKEND_CPU, "out of memory");
  compare_with_cpu (CUDAFX_BACKEND_CUDA, CUDAFX_ERR_CUDA, CUDAFX_BACKEND_CUDA, "");
  unsetenv ("CUDAFX_CUDA_MEM_LIMIT");
}

TEST (gpu_pipelined_stripes_match_the_cpu)
{
  /* The image fits, so its stripes overlap copies and kernels; one stripe,
   * two, and more than the halos of the largest filters span. */
  const char *stripes[] = { "1", "2", "7", "16" };
  for (int i = 0; i < 4; i++)
    {
      setenv ("CUDAFX_CUDA_STRIPES", stripes[i], 1);
      compare_on (CUDAFX_U8, 0, CUDAFX_BACKEND_CUDA, CUDAFX_OK, CUDAFX_BACKEND_CUDA, "");
      compare_on (CUDAFX_F32, 0, CUDAFX_BACKEND_CUDA, CUDAFX_OK, CUDAFX_BACKEND_CUDA, "");
    }
  unsetenv ("CUDAFX_CUDA_STRIPES");
}

TEST (gpu_pipelined_stripe_fault)
{
  /* A stripe in the middle fails: auto falls back, cuda fails cleanly. */
  harness_rng rng = { 3 };
  cudafx_image src = harness_image_new (301, 203, 3, 0, CUDAFX_U8, 5);
  cudafx_image out = harness_image_new (301, 203, 3, 0, CUDAFX_U8, 5);
  harness_image_random (&src, &rng);
  setenv ("CUDAFX_CUDA_STRIPES", "16", 1);
  setenv ("CUDAFX_CUDA_FAIL", "stripe3", 1);
  for (int i = 0; i < 3; i++) /* the filters that run in stripes: median, convolve, nl-means */
    {
      cudafx_report report;
      memset (&report, 0, sizeof report);
      cudafx_options o = harness_cpu_options ();
      o.backend = CUDAFX_BACKEND_AUTO;
      o.report = &report;
      CHECK (gpu_filters[i].run (&src, &out, &o) == CUDAFX_OK && report.backend_used == CUDAFX_BACKEND_CPU &&
               strstr (report.fallback, "injected"),
             "%s: auto with a failing stripe: backend %d, fallback '%s'", gpu_filters[i].name, report.backend_used,
             report.fallback);
      o.backend = CUDAFX_BACKEND_CUDA;
      CHECK (gpu_filters[i].run (&src, &out, &o) == CUDAFX_ERR_CUDA, "%s: cuda with a failing stripe did not fail",
             gpu_filters[i].name);
    }
  unsetenv ("CUDAFX_CUDA_FAIL");
  unsetenv ("CUDAFX_CUDA_STRIPES");
  harness_image_free (&src);
  harness_image_free (&out);
}

TEST (gpu_every_device_and_a_missing_one)
{
  int n = cudafx_cuda_devices ();
  CHECK (n >= 1, "%d CUDA devices", n);
  for (int d = 1; d <= n; d++)
    compare_on (CUDAFX_U8, d, CUDAFX_BACKEND_CUDA, CUDAFX_OK, CUDAFX_BACKEND_CUDA, "");
  compare_on (CUDAFX_U8, n + 1, CUDAFX_BACKEND_AUTO, CUDAFX_OK, CUDAFX_BACKEND_CPU, "not among");
  compare_on (CUDAFX_U8, n + 1, CUDAFX_BACKEND_CUDA, CUDAFX_ERR_NO_DEVICE, CUDAFX_BACKEND_CUDA, "");
}

/* One of several threads at once, as the CLI's workers run: the first
 * `filters` of gpu_filters, four times, on its device and lane. */
typedef struct {
  const cudafx_image *src;
  cudafx_image        out[4];
  int                 device, lane, filters;
  cudafx_status       status[4];
  cudafx_report       report[4];
} worker_job;

static void *
worker_run (void *arg)
{
  worker_job *w = arg;
  for (int round = 0; round < 4; round++)
    for (int i = 0; i < w->filters; i++)
      {
        cudafx_options o = harness_cpu_options ();
        o.backend = CUDAFX_BACKEND_CUDA;
        o.device = w->device;
        o.lane = w->lane;
        o.report = &w->report[i];
        w->status[i] = gpu_filters[i].run (w->src, &w->out[i], &o);
      }
  return NULL;
}

/* Three threads at once, thread t on device t % devices + 1 (all on one
 * device where there is one): median and convolve. */
TEST (gpu_threads_on_devices_match_the_cpu)
{
  enum { THREADS = 3 };
  harness_rng rng = { 11 };
  int n = cudafx_cuda_devices ();
  cudafx_image src = harness_image_new (640, 480, 4, 1, CUDAFX_U8, 0);
  cudafx_image ref[2];
  harness_image_random (&src, &rng);
  worker_job jobs[THREADS];
  pthread_t threads[THREADS];
  for (int i = 0; i < 2; i++)
    {
      cudafx_options cpu = harness_cpu_options ();
      ref[i] = harness_image_new (640, 480, 4, 1, CUDAFX_U8, 0);
      CHECK (gpu_filters[i].run (&src, &ref[i], &cpu) == CUDAFX_OK, "%s on CPU failed", gpu_filters[i].name);
    }
  for (int t = 0; t < THREADS; t++)
    {
      memset (&jobs[t], 0, sizeof jobs[t]);
      jobs[t].src = &src;
      jobs[t].device = n > 0 ? t % n + 1 : 0;
      jobs[t].filters = 2;
      for (int i = 0; i < 2; i++)
        jobs[t].out[i] = harness_image_new (640, 480, 4, 1, CUDAFX_U8, 0);
      CHECK (pthread_create (&threads[t], NULL, worker_run, &jobs[t]) == 0, "thread %d", t);
    }
  for (int t = 0; t < THREADS; t++)
    {
      pthread_join (threads[t], NULL);
      for (int i = 0; i < 2; i++)
        {
          CHECK (jobs[t].status[i] == CUDAFX_OK && jobs[t].report[i].backend_used == CUDAFX_BACKEND_CUDA,
                 "thread %d %s: status %d backend %d", t, gpu_filters[i].name, jobs[t].status[i],
                 jobs[t].report[i].backend_used);
          CHECK (harness_max_diff (&ref[i], &jobs[t].out[i]) == 0, "thread %d (device %d) %s differs from the CPU",
                 t, jobs[t].device, gpu_filters[i].name);
          harness_image_free (&jobs[t].out[i]);
        }
    }
  for (int i = 0; i < 2; i++)
    harness_image_free (&ref[i]);
  harness_image_free (&src);
}

/* Two lanes of one device at once (options.lane, as the CLI's two workers
 * a device run): two threads on each lane, every filter, each output equal
 * to the same filter's output on lane 0 alone (quantize, which always takes
 * lane 0, included). Also a lane past the last wraps, a negative one is
 * refused. */

TEST (gpu_lanes_match_one_lane)
{
  enum { THREADS = 4, W = 1280, H = 960 };
  harness_rng rng = { 29 };
  cudafx_image src = harness_image_new (W, H, 3, 0, CUDAFX_U8, 0);
  cudafx_image ref[4];
  harness_image_random (&src, &rng);
  for (int i = 0; i < 4; i++)
    {
      cudafx_options o = harness_cpu_options ();
      o.backend = CUDAFX_BACKEND_CUDA;
      ref[i] = harness_image_new (W, H, 3, 0, CUDAFX_U8, 0);
      CHECK (gpu_filters[i].run (&src, &ref[i], &o) == CUDAFX_OK, "%s on lane 0 failed: %s", gpu_filters[i].name,
             cudafx_error_message ());
    }
  worker_job jobs[THREADS];
  pthread_t threads[THREADS];
  for (int t = 0; t < THREADS; t++)
    {
      memset (&jobs[t], 0, sizeof jobs[t]);
      jobs[t].src = &src;
      jobs[t].lane = t == 3 ? CUDAFX_CUDA_LANES + 1 : t % CUDAFX_CUDA_LANES; /* the last wraps to lane 1 */
      jobs[t].filters = 4;
      for (int i = 0; i < 4; i++)
        {
          jobs[t].out[i] = harness_image_new (W, H, 3, 0, CUDAFX_U8, 0);
          harness_image_poison (&jobs[t].out[i]);
        }
      CHECK (pthread_create (&threads[t], NULL, worker_run, &jobs[t]) == 0, "thread %d", t);
    }
  for (int t = 0; t < THREADS; t++)
    {
      pthread_join (threads[t], NULL);
      for (int i = 0; i < 4; i++)
        {
          CHECK (jobs[t].status[i] == CUDAFX_OK, "thread %d (lane %d) %s: status %d", t, jobs[t].lane,
                 gpu_filters[i].name, jobs[t].status[i]);
          CHECK (harness_max_diff (&ref[i], &jobs[t].out[i]) == 0, "thread %d (lane %d) %s differs from lane 0 alone",
                 t, jobs[t].lane, gpu_filters[i].name);
          harness_image_free (&jobs[t].out[i]);
        }
    }
  cudafx_options o = harness_cpu_options ();
  o.backend = CUDAFX_BACKEND_CUDA;
  o.lane = -1;
  CHECK (gpu_filters[0].run (&src, &ref[0], &o) == CUDAFX_ERR_INVALID_ARG, "lane -1 accepted");
  CHECK (strstr (cudafx_error_message (), "lane -1") != NULL, "lane -1: message '%s'", cudafx_error_message ());
  for (int i = 0; i < 4; i++)
    harness_image_free (&ref[i]);
  harness_image_free (&src);
}

TEST (gpu_faults_fall_back_to_cpu)
{
  /* the first stripe, a middle one, the allocation, a kernel launch */
  const char *points[] = { "alloc", "launch", "stripe0", "stripe1", "stripe3" };
  setenv ("CUDAFX_CUDA_MEM_LIMIT", "64K", 1); /* several stripes, so stripe3 exists */
  for (int i = 0; i < 5; i++)
    {
      setenv ("CUDAFX_CUDA_FAIL", points[i], 1);
      compare_with_cpu (CUDAFX_BACKEND_AUTO, CUDAFX_OK, CUDAFX_BACKEND_CPU, "injected");
      compare_with_cpu (CUDAFX_BACKEND_CUDA, CUDAFX_ERR_CUDA, CUDAFX_BACKEND_CUDA, "");
    }
  unsetenv ("CUDAFX_CUDA_FAIL");
  unsetenv ("CUDAFX_CUDA_MEM_LIMIT");
  /* and the device works again afterwards */
  compare_with_cpu (CUDAFX_BACKEND_CUDA, CUDAFX_OK, CUDAFX_BACKEND_CUDA, "");
}

/* A host's own memory pinned (cudafx_host_pin, as the CLI's batch pool
 * does): pinned within its bounds, a second pin of it harmless, freed and
 * unpinned by cudafx_host_free; memory in 2 MB pages too. */
TEST (gpu_host_pin_pins_plain_memory)
{
  const size_t n = (3 << 20) + 5;
  cudafx_backend_warm_up ();
  for (int aligned = 0; aligned < 2; aligned++)
    {
      void *v = NULL;
      CHECK (aligned ? !posix_memalign (&v, 2 << 20, 4 << 20) : (v = malloc (n)) != NULL, "out of memory");
      unsigned char *p = v;
      memset (p, 7, n);
      CHECK (cudafx_host_pin (p, n), "plain memory could not be pinned");
      CHECK (cudafx_host_pinned (p, n) && cudafx_host_pinned (p + 1, n - 1) && !cudafx_host_pinned (p, n + 1),
             "a pinned block's bounds are not what cudafx_host_pinned says");
      CHECK (cudafx_host_pin (p, n) && cudafx_host_pinnable (), "pinning a pinned block again failed");
      CHECK (p[0] == 7 && p[n - 1] == 7, "pinning changed the memory");
      cudafx_host_free (p);
      CHECK (!cudafx_host_pinned (p, 1), "a freed block still pinned");
    }
}

/* Images in cudafx_host_alloc memory, pinned once CUDA has started, go to
 * and from the device without staging: equal to the CPU in one stripe or
 * many, pipelined or under a memory cap, with the border's made-up rows at
 * both ends (every border), src or dst alone in it too. */
TEST (gpu_host_memory_is_pinned_and_matches_the_cpu)
{
  static const char *const stripes[] = { "1", "2", "7", "16" };
  const size_t n = 1 << 20;
  cudafx_backend_warm_up ();
  CHECK (cudafx_host_pinnable (), "CUDA started, yet cudafx_host_alloc would not pin");
  unsigned char *p = cudafx_host_alloc (n);
  CHECK (p && cudafx_host_pinned (p, n) && cudafx_host_pinned (p + 1, n - 1) && !cudafx_host_pinned (p, n + 1) &&
           !cudafx_host_pinned (p + 1, n) && !cudafx_host_pinned (p - 1, 2),
         "a pinned block's bounds are not what cudafx_host_pinned says");
  cudafx_host_free (p);
  CHECK (!cudafx_host_pinned (p, 1), "a freed block still pinned");

  for (int memory = HOST_SRC; memory <= (HOST_SRC | HOST_DST); memory++)
    {
      compare_in (memory, CUDAFX_U8, 0, CUDAFX_BACKEND_CUDA, CUDAFX_OK, CUDAFX_BACKEND_CUDA, "");
      setenv ("CUDAFX_CUDA_STRIPES", "7", 1);
      compare_in (memory, CUDAFX_U8, 0, CUDAFX_BACKEND_CUDA, CUDAFX_OK, CUDAFX_BACKEND_CUDA, "");
      unsetenv ("CUDAFX_CUDA_STRIPES");
      setenv ("CUDAFX_CUDA_MEM_LIMIT", "64K", 1);
      compare_in (memory, CUDAFX_U8, 0, CUDAFX_BACKEND_CUDA, CUDAFX_OK, CUDAFX_BACKEND_CUDA, "");
      unsetenv ("CUDAFX_CUDA_MEM_LIMIT");
    }
  for (int i = 0; i < 4; i++)
    {
      setenv ("CUDAFX_CUDA_STRIPES", stripes[i], 1);
      compare_in (HOST_SRC | HOST_DST, CUDAFX_U8, 0, CUDAFX_BACKEND_CUDA, CUDAFX_OK, CUDAFX_BACKEND_CUDA, "");
      compare_in (HOST_SRC | HOST_DST, CUDAFX_F32, 0, CUDAFX_BACKEND_CUDA, CUDAFX_OK, CUDAFX_BACKEND_CUDA, "");
    }
  unsetenv ("CUDAFX_CUDA_STRIPES");

  /* Every border, its made-up rows wider than a tall kernel's reach. */
  harness_rng rng = { 29 };
  cudafx_image src = harness_image_new (97, 41, 4, 1, CUDAFX_U8, 3);
  cudafx_image ref = harness_image_new (97, 41, 4, 1, CUDAFX_U8, 3);
  cudafx_image out = harness_image_new (97, 41, 4, 1, CUDAFX_U8, 3);
  harness_image_random (&src, &rng);
  into_host_memory (&src);
  into_host_memory (&out);
  static const cudafx_border borders[] = { CUDAFX_BORDER_CLAMP, CUDAFX_BORDER_MIRROR, CUDAFX_BORDER_WRAP,
                                           CUDAFX_BORDER_BLACK };
  for (int b = 0; b < 4; b++)
    for (int s = 0; s < 2; s++)
      {
        cudafx_convolve_params cp;
        cudafx_convolve_params_init (&cp);
        cp.preset = CUDAFX_PRESET_GAUSSIAN;
        cp.sigma = 4; /* a 25-row kernel */
        cp.border = borders[b];
        setenv ("CUDAFX_CUDA_STRIPES", stripes[s * 2 + 1], 1);
        cudafx_options cpu = harness_cpu_options (), gpu = harness_cpu_options ();
        gpu.backend = CUDAFX_BACKEND_CUDA;
        harness_image_poison (&out);
        CHECK (cudafx_convolve (&src, &ref, &cp, &cpu) == CUDAFX_OK &&
                 cudafx_convolve (&src, &out, &cp, &gpu) == CUDAFX_OK && harness_max_diff (&ref, &out) == 0,
               "convolve border %d, %s stripes, in host memory: not the CPU's pixels (%s)", (int) borders[b],
               stripes[s * 2 + 1], cudafx_error_message ());
      }
  unsetenv ("CUDAFX_CUDA_STRIPES");
  free_image (&src, 1);
  harness_image_free (&ref);
  free_image (&out, 1);
}

/* One layout on both backends; 1 when the CUDA result differs from the CPU's. */
static int
differs_from_cpu (int w, int h, int channels, int alpha, cudafx_type type, const void *params,
                  cudafx_status (*run) (const cudafx_image *, cudafx_image *, const void *,
                                        const cudafx_options *),
                  harness_rng *rng, const char *what)
{
  cudafx_image src = harness_image_new (w, h, channels, alpha, type, 12);
  cudafx_image ref = harness_image_new (w, h, channels, alpha, type, 12);
  cudafx_image out = harness_image_new (w, h, channels, alpha, type, 12);
  harness_image_random (&src, rng);
  harness_image_poison (&out);
  cudafx_options cpu = harness_cpu_options (), gpu = harness_cpu_options ();
  gpu.backend = CUDAFX_BACKEND_CUDA;
  cudafx_status s1 = run (&src, &ref, params, &cpu), s2 = run (&src, &out, params, &gpu);
  double diff = s1 || s2 ? -1 : harness_max_diff (&ref, &out);
  CHECK (diff == 0, "%s, %dx%d c%d%s %s: status %d/%d, differs from the CPU by %g", what, w, h,
         channels, alpha ? "+alpha" : "", type == CUDAFX_U8 ? "u8" : "f32", s1, s2, diff);
  harness_image_free (&src);
  harness_image_free (&ref);
  harness_image_free (&out);
  return diff != 0;
}

static cudafx_status
median_with (const cudafx_image *src, cudafx_image *dst, const void *p, const cudafx_options *o)
{
  return cudafx_median (src, dst, p, o);
}

static cudafx_status
convolve_with (const cudafx_image *src, cudafx_image *dst, const void *p, const cudafx_options *o)
{
  return cudafx_convolve (src, dst, p, o);
}

/* Images wider and taller than the kernels' blocks (tiles, halo words, the
 * column kernels' rows), every channel layout, bit for bit against the CPU:
 * median networks for every rank of 3x3 and the median of 5x5 and 7x7 (and
 * the fallbacks for other ranks), the tiled direct and fixed-point
 * convolutions with every border. */
TEST (gpu_median_and_convolve_match_cpu_bit_exactly)
{
  static const int layouts[][2] = { { 1, 0 }, { 2, 1 }, { 3, 0 }, { 4, 0 }, { 4, 1 } };
  harness_rng rng = { 5 };
  char what[96];
  for (int r = 1; r <= 7; r += r == 3 ? 4 : 1)
    for (int pi = 0; pi <= 8; pi++)
      for (int li = 0; li < 5; li++)
        {
          double percentile = r == 1 ? pi * 12.5 : pi % 2 ? 37.5 : 50;
          if (r > 1 && pi > 3)
            continue;
          cudafx_median_params p = { r, percentile, pi == 3 ? CUDAFX_SHAPE_CIRCLE : CUDAFX_SHAPE_SQUARE };
          snprintf (what, sizeof what, "median r%d p%g %s", r, percentile, pi == 3 ? "circle" : "square");
          if (differs_from_cpu (517 - 40 * li, 83, layouts[li][0], layouts[li][1],
                                pi == 2 ? CUDAFX_F32 : CUDAFX_U8, &p, median_with, &rng, what)
              && harness_failures () > 5)
            return;
        }
  static double k[15 * 15];
  for (int v = 0; v < 20; v++)
    {
      cudafx_convolve_params p;
      cudafx_convolve_params_init (&p);
      int n = v % 4 < 2 ? 5 : 15, li = v % 5;
      p.border = v % 4;
      if (v < 10)
        {
          for (int i = 0; i < n * n; i++)
            k[i] = harness_uniform (&rng) * 2 - 0.7;
          p.preset = CUDAFX_PRESET_CUSTOM;
          p.kernel = k;
          p.kernel_size = n;
          p.offset = v % 3 * 20;
          snprintf (what, sizeof what, "convolve custom %dx%d border %d", n, n, p.border);
        }
      else
        {
          p.preset = CUDAFX_PRESET_GAUSSIAN;
          p.sigma = v % 2 ? 5 : 1.5;
          snprintf (what, sizeof what, "convolve gaussian sigma %g border %d", p.sigma, p.border);
        }
      if (differs_from_cpu (331 + 50 * li, 97, layouts[li][0], layouts[li][1],
                            v % 3 == 2 ? CUDAFX_F32 : CUDAFX_U8, &p, convolve_with, &rng, what)
          && harness_failures () > 5)
        return;
    }
}

/* The tiled convolutions at the edges of their shapes, bit for bit against
 * the CPU: direct kernels of 1x1 to 31x31, with and without zero taps (which
 * f32 must skip), the fixed-point path from 3 to its largest 127 taps, and images
 * narrower or shorter than one block, a kernel or a group of four pixels. */
TEST (gpu_convolve_sizes_match_cpu_bit_exactly)
{
  static const int layouts[][2] = { { 1, 0 }, { 2, 1 }, { 3, 0 }, { 4, 0 }, { 4, 1 }, { 2, 0 } };
  static const int sizes[][2] = { { 1, 1 }, { 3, 2 }, { 7, 5 }, { 130, 9 }, { 263, 70 }, { 517, 41 } };
  static const int custom_n[] = { 1, 3, 7, 31 };
  /* the fixed-point horizontal pass's tap slots: 8, 16, 32 at a time, 24 */
  static const double sigmas[] = { 0.3, 2, 21, 3.5 };
  harness_rng rng = { 9 };
  static double k[31 * 31];
  char what[96];
  for (int v = 0; v < 42; v++)
    {
      cudafx_convolve_params p;
      cudafx_convolve_params_init (&p);
      const int li = v % 6, si = (v + v / 6) % 6;
      p.border = v % 4;
      if (v < 24)
        {
          int n = custom_n[v % 4];
          for (int i = 0; i < n * n; i++)
            k[i] = v % 2 == 0 && harness_uniform (&rng) < 0.3 ? 0 : harness_uniform (&rng) * 2 - 0.6;
          p.preset = CUDAFX_PRESET_CUSTOM;
          p.kernel = k;
          p.kernel_size = n;
          p.offset = v % 3 * 10;
          snprintf (what, sizeof what, "convolve custom %dx%d border %d", n, n, p.border);
        }
      else if (v < 36)
        {
          p.preset = CUDAFX_PRESET_GAUSSIAN;
          p.sigma = sigmas[v % 4];
          p.offset = v / 4 % 2 ? 0.4 : 0; /* 0: the vertical pass's integer result */
          snprintf (what, sizeof what, "convolve gaussian sigma %g border %d", p.sigma, p.border);
        }
      else
        {
          p.preset = v % 2 ? CUDAFX_PRESET_MEAN_3X3 : CUDAFX_PRESET_BLUR_5X5;
          snprintf (what, sizeof what, "convolve preset %d border %d", p.preset, p.border);
        }
      if (differs_from_cpu (sizes[si][0], sizes[si][1], layouts[li][0], layouts[li][1],
                            v % 7 == 3 ? CUDAFX_F32 : CUDAFX_U8, &p, convolve_with, &rng, what)
          && harness_failures () > 5)
        return;
    }
}

/* Non-finite f32 values (NaN, ±Inf, one element in 20, and along the
 * edges): the GPU's fix-up (core/convolve.h's convolve_fix_pixel) gives the
 * CPU's values bit for bit, over the small, direct (15x15, zero taps, alpha)
 * and separable kernels, every border, in one stripe and in several (the
 * halo rows' values too). */
TEST (gpu_convolve_non_finite_matches_cpu_bit_exactly)
{
  static const int layouts[][2] = { { 1, 0 }, { 2, 1 }, { 3, 0 }, { 4, 0 }, { 4, 1 } };
  static const double bad[] = { NAN, INFINITY, -INFINITY };
  static double k[15 * 15];
  harness_rng rng = { 67 };
  for (int v = 0; v < 40; v++)
    {
      cudafx_convolve_params p;
      cudafx_convolve_params_init (&p);
      const int li = v % 5, n = v % 4 == 0 ? 3 : v % 4 == 1 ? 5 : 15;
      p.border = v % 4;
      if (v % 8 < 4)
        {
          for (int i = 0; i < n * n; i++) /* 5x5: some zero taps */
            k[i] = n == 5 && harness_uniform (&rng) < 0.3 ? 0 : harness_uniform (&rng) * 2 - 0.6;
          p.preset = CUDAFX_PRESET_CUSTOM;
          p.kernel = k;
          p.kernel_size = n;
          p.offset = v % 3 * 10;
        }
      else
        {
          p.preset = v % 8 == 4 ? CUDAFX_PRESET_SOBEL_HORIZONTAL : CUDAFX_PRESET_GAUSSIAN;
          p.sigma = v % 2 ? 5 : 1.5;
        }
      const int w = 263 + 40 * li, h = 61, ch = layouts[li][0];
      cudafx_image src = harness_image_new (w, h, ch, layouts[li][1], CUDAFX_F32, 12);
      cudafx_image ref = harness_image_new (w, h, ch, layouts[li][1], CUDAFX_F32, 12);
      cudafx_image out = harness_image_new (w, h, ch, layouts[li][1], CUDAFX_F32, 12);
      harness_image_random (&src, &rng);
      for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
          for (int c = 0; c < ch; c++)
            if (harness_rand (&rng) % (x == 0 || y == 0 || x == w - 1 || y == h - 1 ? 4 : 20) == 0)
              harness_set (&src, x, y, c, bad[harness_rand (&rng) % 3]);
      harness_image_poison (&out);
      if (v % 2)
        setenv ("CUDAFX_CUDA_STRIPES", "3", 1);
      cudafx_options cpu = harness_cpu_options (), gpu = harness_cpu_options ();
      gpu.backend = CUDAFX_BACKEND_CUDA;
      cudafx_status s1 = cudafx_convolve (&src, &ref, &p, &cpu), s2 = cudafx_convolve (&src, &out, &p, &gpu);
      unsetenv ("CUDAFX_CUDA_STRIPES");
      int differ = 0;
      for (int y = 0; y < h && !s1 && !s2; y++)
        for (int x = 0; x < w; x++)
          for (int c = 0; c < ch; c++)
            {
              const double a = harness_get (&ref, x, y, c), b = harness_get (&out, x, y, c);
              differ += isnan (a) ? !isnan (b) : a != b;
            }
      CHECK (!s1 && !s2 && !differ, "convolve preset %d %dx%d border %d c%d%s%s, non-finite values: status %d/%d, "
             "%d values differ from the CPU's", p.preset, n, n, p.border, ch, layouts[li][1] ? "+alpha" : "",
             v % 2 ? ", 3 stripes" : "", s1, s2, differ);
      harness_image_free (&src);
      harness_image_free (&ref);
      harness_image_free (&out);
      if (harness_failures () > 5)
        return;
    }
}

static size_t
device_free_bytes (void)
{
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo (&free_b, &total_b);
  return free_b;
}

/* What a dialog's preview does: many small calls in one process. The buffer
 * cache grows once and is reused, and a call that faults releases it; either
 * way device memory must not grow with the number of calls. */
TEST (device_memory_over_1000_previews)
{
  harness_rng rng = { 11 };
  cudafx_image src = harness_image_new (512, 384, 4, 1, CUDAFX_U8, 0);
  cudafx_image out = harness_image_new (512, 384, 4, 1, CUDAFX_U8, 0);
  harness_image_random (&src, &rng);
  cudafx_options o = harness_cpu_options ();
  o.backend = CUDAFX_BACKEND_AUTO;
  int n_filters = (int) (sizeof gpu_filters / sizeof gpu_filters[0]);
  for (int i = 0; i < 3 * n_filters; i++) /* warm up: cache at its largest */
    gpu_filters[i % n_filters].run (&src, &out, &o);
  size_t before = device_free_bytes ();
  int failures = 0;
  for (int i = 0; i < 1000; i++)
    {
      /* every 50th call faults (launch), as a preview might on a busy device */
      if (i % 50 == 25)
        setenv ("CUDAFX_CUDA_FAIL", "launch", 1);
      failures += gpu_filters[i % n_filters].run (&src, &out, &o) != CUDAFX_OK;
      unsetenv ("CUDAFX_CUDA_FAIL");
    }
  for (int i = 0; i < n_filters; i++) /* and refill the cache after the last fault */
    gpu_filters[i].run (&src, &out, &o);
  size_t after = device_free_bytes ();
  printf ("  device memory free: %zu MiB before, %zu MiB after 1000 preview calls (%+lld KiB)\n",
          before >> 20, after >> 20, ((long long) after - (long long) before) / 1024);
  CHECK (failures == 0, "%d preview calls failed (auto must fall back)", failures);
  /* 1 MiB of slack for the driver's own bookkeeping */
  CHECK (after + (1 << 20) >= before, "device memory grew by %zu KiB over 1000 calls",
         (before - after) / 1024);
  harness_image_free (&src);
  harness_image_free (&out);
}
