/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The CUDA backend's whole call (pageable host image in, host image out)
 * against the copy it cannot avoid: a bare host->device->host round trip of
 * the same bytes from pinned memory, in the same run (the target:
 * u8 <= 1.2x, f32 <= 1.5x). 12 MP RGB (4000x3000), u8 and f32, median r1
 * and three area filters; median wall times of --runs calls after a warm-up,
 * with the report's kernel and transfer times.
 *   build-gpu/bench-call [--runs N] [--device K] [--host-memory]
 * (K counted from 1 as options.device; --host-memory: the images in
 * cudafx_host_alloc memory, which the backend copies without staging)
 * A benchmark, never a test: nothing is asserted. */
#include "../core/cudafx.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { W = 4000, H = 3000, C = 3, MAX_RUNS = 101 };

static double
now_ms (void)
{
  struct timespec t;
  clock_gettime (CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int
by_value (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return (x > y) - (x < y);
}

static double
median_of (double *v, int n)
{
  qsort (v, (size_t) n, sizeof *v, by_value);
  return v[n / 2];
}

/* Median ms of a pinned host->device->host round trip of `bytes`. */
static double
bare_round_trip (size_t bytes, int device, int runs)
{
  void *h = NULL, *d = NULL;
  double t[MAX_RUNS];
  if (cudaSetDevice (device) != cudaSuccess || cudaMallocHost (&h, bytes) != cudaSuccess ||
      cudaMalloc (&d, bytes) != cudaSuccess)
    {
      fprintf (stderr, "bench-call: CUDA allocation failed\n");
      exit (1);
    }
  memset (h, 1, bytes);
  for (int i = 0; i <= runs; i++)
    {
      double start = now_ms ();
      cudaMemcpy (d, h, bytes, cudaMemcpyHostToDevice);
      cudaMemcpy (h, d, bytes, cudaMemcpyDeviceToHost);
      t[i ? i - 1 : 0] = now_ms () - start; /* run 0 warms up */
    }
  cudaFree (d);
  cudaFreeHost (h);
  return median_of (t, runs);
}

/* The filters timed: median of a radius, a Gaussian of a sigma, or
 * nl-means with 3x3 patches in a 21x21 search (what automatic mode picks
 * for photos at low noise) and h the size: a kernel several times longer
 * than the copies, where the stripes' overlap of copies and kernels shows. */
enum kind { MEDIAN, GAUSSIAN, NLMEANS };
static const struct
{
  const char *name;
  enum kind   kind;
  double      size;
} filters[] = {
  { "median r1", MEDIAN, 1 }, { "median r5", MEDIAN, 5 }, { "convolve gaussian s2", GAUSSIAN, 2 },
  { "nl-means 3x3/21 h8", NLMEANS, 8 },
};

static cudafx_status
run_filter (int f, const cudafx_image *src, cudafx_image *dst, const cudafx_options *o)
{
  if (filters[f].kind == MEDIAN)
    {
      cudafx_median_params p;
      cudafx_median_params_init (&p);
      p.radius = (int) filters[f].size;
      return cudafx_median (src, dst, &p, o);
    }
  if (filters[f].kind == NLMEANS)
    {
      cudafx_nlmeans_params p;
      cudafx_nlmeans_params_init (&p);
      p.automatic = 0;
      p.h = filters[f].size;
      p.patch_radius = 1;
      p.search_radius = 10;
      return cudafx_nlmeans (src, dst, &p, o, NULL);
    }
  cudafx_convolve_params p;
  cudafx_convolve_params_init (&p);
  p.preset = CUDAFX_PRESET_GAUSSIAN;
  p.sigma = filters[f].size;
  return cudafx_convolve (src, dst, &p, o);
}

int
main (int argc, char **argv)
{
  int runs = 15, device = 1, host_memory = 0;
  for (int i = 1; i < argc; i++)
    if (!strcmp (argv[i], "--host-memory"))
      host_memory = 1;
    else if (i + 1 < argc && !strcmp (argv[i], "--runs"))
      runs = atoi (argv[++i]);
    else if (i + 1 < argc && !strcmp (argv[i], "--device"))
      device = atoi (argv[++i]);
  runs = runs < 1 ? 1 : runs > MAX_RUNS - 1 ? MAX_RUNS - 1 : runs;

  char name[128], why[256];
  cudafx_backend_describe (name, sizeof name);
  if (host_memory)
    cudafx_backend_warm_up (); /* then cudafx_host_alloc pins */
  printf ("whole call vs bare pinned round trip, %dx%d RGB, %s (device %d), median of %d runs, images in %s\n", W,
          H, name, device, runs,
          !host_memory ? "plain memory" : cudafx_host_pinnable () ? "pinned cudafx_host_alloc memory"
                                                                  : "cudafx_host_alloc memory, not pinned");
  printf ("%-22s %-4s %9s %9s %9s %9s %7s\n", "filter", "type", "bare ms", "call ms", "kernel", "copies",
          "ratio");
  for (int type = CUDAFX_U8; type <= CUDAFX_F32; type++)
    {
      size_t px = cudafx_type_size ((cudafx_type) type) * C;
      const size_t bytes = (size_t) W * H * px;
      unsigned char *a = host_memory ? cudafx_host_alloc (bytes) : malloc (bytes);
      unsigned char *b = host_memory ? cudafx_host_alloc (bytes) : malloc (bytes);
      if (!a || !b)
        return 1;
      cudafx_image src = { a, W, H, C, 0, (cudafx_type) type, W * px }, dst = src;
      dst.data = b;
      /* a smooth gradient with texture, like a photo's range of values */
      for (size_t i = 0; i < (size_t) W * H * C; i++)
        if (type == CUDAFX_U8)
          a[i] = (unsigned char) ((i / C % W) * 255 / W + (i * 2654435761u >> 28));
        else
          ((float *) a)[i] = (float) ((i / C % W) / (double) W + (double) (i * 2654435761u >> 28) / 255);
      double bare = bare_round_trip ((size_t) W * H * px, device - 1, runs);
      for (int f = 0; f < (int) (sizeof filters / sizeof filters[0]); f++)
        {
          double t[MAX_RUNS];
          cudafx_report report;
          cudafx_options o;
          cudafx_options_init (&o);
          o.backend = CUDAFX_BACKEND_CUDA;
          o.device = device;
          o.report = &report;
          for (int i = 0; i <= runs; i++)
            {
              double start = now_ms ();
              cudafx_status s = run_filter (f, &src, &dst, &o);
              t[i ? i - 1 : 0] = now_ms () - start;
              if (s != CUDAFX_OK)
                {
                  snprintf (why, sizeof why, "%s", cudafx_error_message ());
                  fprintf (stderr, "bench-call: %s failed: %s\n", filters[f].name, why);
                  return 1;
                }
            }
          double call = median_of (t, runs);
          printf ("%-22s %-4s %9.2f %9.2f %9.2f %9.2f %7.2f\n", filters[f].name, type == CUDAFX_U8 ? "u8" : "f32",
                  bare, call, report.kernel_ms, report.transfer_ms, call / bare);
        }
      if (host_memory)
        {
          cudafx_host_free (a);
          cudafx_host_free (b);
        }
      else
        {
          free (a);
          free (b);
        }
    }
  return 0;
}
