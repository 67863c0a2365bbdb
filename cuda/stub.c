/* CUDA backend stand-in for builds without nvcc: every entry point reports
 * that CUDA was not built, so auto mode uses the CPU (OpenCV's throw_no_cuda). */
#include "cudafx_cuda.h"
#include "../core/engine.h"

#include <stdio.h>

int
cudafx_cuda_probe (char *name, size_t name_size, char *why, size_t why_size)
{
  if (name_size)
    name[0] = '\0';
  snprintf (why, why_size, "built without CUDA");
  return 0;
}

cudafx_status
cudafx_median_cuda (const cudafx_image *src, cudafx_image *dst,
                    const cudafx_median_params *p, const cudafx_options *o)
{
  return cudafx_fail (CUDAFX_ERR_CUDA_NOT_BUILT, "median: built without CUDA");
}

cudafx_status
cudafx_convolve_cuda (const cudafx_image *src, cudafx_image *dst, const convolve_plan *plan,
                      cudafx_border border, const cudafx_options *o)
{
  return cudafx_fail (CUDAFX_ERR_CUDA_NOT_BUILT, "convolve: built without CUDA");
}

cudafx_status
cudafx_nlmeans_cuda (nlmeans_job *job, const cudafx_options *o)
{
  return cudafx_fail (CUDAFX_ERR_CUDA_NOT_BUILT, "nl-means: built without CUDA");
}

cudafx_status
cudafx_quantize_cuda_open (const cudafx_image *src, const quantize_space *space, int everyone_votes,
                           const cudafx_options *o, quantize_device **out)
{
  *out = NULL;
  return cudafx_fail (CUDAFX_ERR_CUDA_NOT_BUILT, "quantize: built without CUDA");
}

cudafx_status
cudafx_quantize_cuda_seed (quantize_device *q, const sample_set *smp, const quantize_seeding *job,
                           int32_t (*centres)[CUDAFX_MAX_COLORS][3], int *found, int64_t *error,
                           int *seeded)
{
  *seeded = 0;
  return cudafx_fail (CUDAFX_ERR_CUDA_NOT_BUILT, "quantize: built without CUDA");
}

cudafx_status
cudafx_quantize_cuda_assign (quantize_device *q, const float (*centre)[3], int k, quantize_sums *sums)
{
  return cudafx_fail (CUDAFX_ERR_CUDA_NOT_BUILT, "quantize: built without CUDA");
}

cudafx_status
cudafx_quantize_cuda_map (quantize_device *q, const quantize_palette *pal, cudafx_image *dst)
{
  return cudafx_fail (CUDAFX_ERR_CUDA_NOT_BUILT, "quantize: built without CUDA");
}

cudafx_status
cudafx_quantize_cuda_dither (quantize_device *q, const quantize_palette *pal, const float (*value)[3],
                             const float lo[3], const float hi[3], cudafx_image *dst)
{
  return cudafx_fail (CUDAFX_ERR_CUDA_NOT_BUILT, "quantize: built without CUDA");
}

void
cudafx_quantize_cuda_close (quantize_device *q)
{
}
