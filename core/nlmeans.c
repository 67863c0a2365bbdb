/* Placeholder: the nlmeans filter is being written (issue 2). */
#include "engine.h"

void
cudafx_nlmeans_params_init (cudafx_nlmeans_params *p)
{
  p->automatic = (int) cudafx_arg_default (CUDAFX_FILTER_NLMEANS, "auto");
  p->h = cudafx_arg_default (CUDAFX_FILTER_NLMEANS, "h");
  p->patch_radius = (int) cudafx_arg_default (CUDAFX_FILTER_NLMEANS, "patch-radius");
  p->search_radius = (int) cudafx_arg_default (CUDAFX_FILTER_NLMEANS, "search-radius");
}

cudafx_status
cudafx_nlmeans (const cudafx_image *src, cudafx_image *dst, const cudafx_nlmeans_params *p,
                const cudafx_options *o, cudafx_nlmeans_info *info)
{
  return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "nl-means: not implemented yet");
}

cudafx_status
cudafx_nlmeans_estimate (const cudafx_image *src, const cudafx_options *o, cudafx_nlmeans_info *info)
{
  return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "nl-means: not implemented yet");
}
