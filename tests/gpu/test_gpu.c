/* CUDA-backend machinery, run by `make check-gpu` on a machine with a GPU:
 * striping under a device-memory cap, injected faults falling back to the
 * CPU (auto) or failing cleanly (cuda forced), and the report. The filters'
 * own accuracy tests run from tests/unit with CUDAFX_TEST_BACKEND=cuda. */
#include "../unit/harness.h"

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

static const struct { const char *name; run_fn run; } gpu_filters[] = {
  { "median", run_median },
  { "convolve", run_convolve },
  { "quantize", run_quantize },
};

/* Runs every GPU filter on a random image with `backend`, and checks the
 * status, the backend reported and (on success) equality with the CPU. */
static void
compare_with_cpu (cudafx_backend backend, cudafx_status expect, cudafx_backend expect_used,
                  const char *fallback_part)
{
  harness_rng rng = { 7 };
  cudafx_image src = harness_image_new (301, 203, 3, 0, CUDAFX_U8, 5);
  cudafx_image ref = harness_image_new (301, 203, 3, 0, CUDAFX_U8, 5);
  cudafx_image out = harness_image_new (301, 203, 3, 0, CUDAFX_U8, 5);
  harness_image_random (&src, &rng);
  for (size_t i = 0; i < sizeof gpu_filters / sizeof gpu_filters[0]; i++)
    {
      cudafx_options cpu = harness_cpu_options ();
      CHECK (gpu_filters[i].run (&src, &ref, &cpu) == CUDAFX_OK, "%s on CPU failed", gpu_filters[i].name);
      cudafx_report report;
      memset (&report, 0, sizeof report);
      cudafx_options o = harness_cpu_options ();
      o.backend = backend;
      o.report = &report;
      harness_image_poison (&out);
      cudafx_status s = gpu_filters[i].run (&src, &out, &o);
      CHECK (s == expect, "%s: status %d, expected %d (%s)", gpu_filters[i].name, s, expect,
             cudafx_error_message ());
      if (s != CUDAFX_OK)
        continue;
      CHECK (report.backend_used == expect_used, "%s: backend used %d", gpu_filters[i].name,
             report.backend_used);
      CHECK (strstr (report.fallback, fallback_part) != NULL, "%s: fallback '%s' lacks '%s'",
             gpu_filters[i].name, report.fallback, fallback_part);
      CHECK (harness_max_diff (&ref, &out) == 0, "%s: differs from the CPU", gpu_filters[i].name);
    }
  harness_image_free (&src);
  harness_image_free (&ref);
  harness_image_free (&out);
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

TEST (gpu_faults_fall_back_to_cpu)
{
  const char *points[] = { "alloc", "launch", "stripe1" };
  setenv ("CUDAFX_CUDA_MEM_LIMIT", "64K", 1); /* several stripes, so stripe1 exists */
  for (int i = 0; i < 3; i++)
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
