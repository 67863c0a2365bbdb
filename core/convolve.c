/* Placeholder: the convolve filter is being written (issue 2). */
#include "engine.h"

void
cudafx_convolve_params_init (cudafx_convolve_params *p)
{
  p->preset = (cudafx_preset) cudafx_arg_default (CUDAFX_FILTER_CONVOLVE, "preset");
  p->kernel = NULL;
  p->kernel_size = 0;
  p->sigma = cudafx_arg_default (CUDAFX_FILTER_CONVOLVE, "sigma");
  p->divisor = cudafx_arg_default (CUDAFX_FILTER_CONVOLVE, "divisor");
  p->offset = cudafx_arg_default (CUDAFX_FILTER_CONVOLVE, "offset");
  p->border = (cudafx_border) cudafx_arg_default (CUDAFX_FILTER_CONVOLVE, "border");
}

cudafx_status
cudafx_convolve (const cudafx_image *src, cudafx_image *dst, const cudafx_convolve_params *p,
                 const cudafx_options *o)
{
  return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "convolve: not implemented yet");
}

cudafx_status
cudafx_convolve_kernel (const cudafx_convolve_params *p, double *taps, int *size)
{
  return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "convolve: not implemented yet");
}
