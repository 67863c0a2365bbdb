/* The CPU backend: the reference implementation of every filter, and the
 * fallback when CUDA is not built, not usable or fails. Always usable. */
#include "cpu.h"

#include <stdio.h>

static int
cpu_probe (char *name, size_t name_size, char *why, size_t why_size)
{
  if (name_size)
    snprintf (name, name_size, "CPU");
  if (why_size)
    why[0] = '\0';
  return 1;
}

const cudafx_backend_ops cudafx_cpu_backend = {
  .name = "cpu",
  .probe = cpu_probe,
  .median = cudafx_median_cpu,
  .convolve = cudafx_convolve_cpu,
  .nlmeans_open = cudafx_nlmeans_cpu_open,
  .nlmeans_count = cudafx_nlmeans_cpu_count,
  .nlmeans_denoise = cudafx_nlmeans_cpu_denoise,
  .nlmeans_close = cudafx_nlmeans_cpu_close,
  .quantize_open = cudafx_quantize_cpu_open,
  .quantize_seed = cudafx_quantize_cpu_seed,
  .quantize_assign = cudafx_quantize_cpu_assign,
  .quantize_map = cudafx_quantize_cpu_map,
  .quantize_close = cudafx_quantize_cpu_close,
};
