/* Placeholder: the median filter is being written (issue 2). */
#include "engine.h"

void
cudafx_median_params_init (cudafx_median_params *p)
{
  p->radius = (int) cudafx_arg_default (CUDAFX_FILTER_MEDIAN, "radius");
  p->percentile = cudafx_arg_default (CUDAFX_FILTER_MEDIAN, "percentile");
  p->shape = (cudafx_shape) cudafx_arg_default (CUDAFX_FILTER_MEDIAN, "shape");
}

cudafx_status
cudafx_median (const cudafx_image *src, cudafx_image *dst,
               const cudafx_median_params *p, const cudafx_options *o)
{
  return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "median: not implemented yet");
}
