/* Placeholder: the quantize filter is being written (issue 2). */
#include "engine.h"

void
cudafx_quantize_params_init (cudafx_quantize_params *p)
{
  p->colors = (int) cudafx_arg_default (CUDAFX_FILTER_QUANTIZE, "colors");
  p->color_space = (cudafx_color_space) cudafx_arg_default (CUDAFX_FILTER_QUANTIZE, "color-space");
  p->dither = (cudafx_dither) cudafx_arg_default (CUDAFX_FILTER_QUANTIZE, "dither");
  p->max_iterations = (int) cudafx_arg_default (CUDAFX_FILTER_QUANTIZE, "max-iterations");
  p->seed = (uint32_t) cudafx_arg_default (CUDAFX_FILTER_QUANTIZE, "seed");
}

cudafx_status
cudafx_quantize (const cudafx_image *src, cudafx_image *dst, const cudafx_quantize_params *p,
                 const cudafx_options *o, cudafx_palette *palette)
{
  return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "quantize: not implemented yet");
}
