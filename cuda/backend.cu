/* The CUDA backend's table (core/backend.h): the launchers of cuda/*.cu.
 * The engine lists it only in builds with nvcc (CUDAFX_HAVE_CUDA). */
#include "cudafx_cuda.h"

extern "C" const cudafx_backend_ops cudafx_cuda_backend = {
  "cuda",
  cudafx_cuda_probe,
  cudafx_median_cuda,
  cudafx_convolve_cuda,
  cudafx_nlmeans_cuda_open,
  cudafx_nlmeans_cuda_count,
  cudafx_nlmeans_cuda_denoise,
  cudafx_nlmeans_cuda_close,
  cudafx_quantize_cuda_open,
  cudafx_quantize_cuda_seed,
  cudafx_quantize_cuda_assign,
  cudafx_quantize_cuda_map,
  cudafx_quantize_cuda_close,
};
