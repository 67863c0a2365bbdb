/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Running a filter from the argument table's values: the one place that
 * turns what a host collected (CLI options, GIMP procedure arguments) into
 * the engine's parameter structs and calls the filter. */
#include "engine.h"

#include <string.h>

void
cudafx_filter_params_from_values (int filter, const double *values, const double *kernel,
                                  int kernel_size, cudafx_filter_params *p)
{
  const cudafx_filter_desc *f = &cudafx_filters[filter];
  memset (p, 0, sizeof *p);
  for (int i = 0; i < f->n_args; i++)
    {
      const cudafx_arg *a = &f->args[i];
      if (a->field == CUDAFX_FIELD_NONE)
        continue;
      if (a->field == CUDAFX_FIELD_KERNEL)
        {
          p->convolve.kernel = kernel;
          p->convolve.kernel_size = kernel_size;
        }
      else
        cudafx_field_set (a, (char *) p + a->offset, values[i]);
    }
}

size_t
cudafx_filter_params_size (void)
{
  return sizeof (cudafx_filter_params);
}

size_t
cudafx_image_size (void)
{
  return sizeof (cudafx_image);
}

size_t
cudafx_options_size (void)
{
  return sizeof (cudafx_options);
}

size_t
cudafx_run_result_size (void)
{
  return sizeof (cudafx_run_result);
}

cudafx_status
cudafx_run_filter (int filter, const cudafx_filter_params *p, const cudafx_image *src,
                   cudafx_image *dst, const cudafx_options *o, cudafx_run_result *result)
{
  cudafx_run_result local;
  cudafx_options options = *o;
  if (!result)
    result = &local;
  memset (result, 0, sizeof *result);
  options.backend = p->backend;
  options.report = &result->report;
  switch (filter)
    {
    case CUDAFX_FILTER_MEDIAN:
      return cudafx_median (src, dst, &p->median, &options);
    case CUDAFX_FILTER_NLMEANS:
      return cudafx_nlmeans (src, dst, &p->nlmeans, &options, &result->nlmeans);
    case CUDAFX_FILTER_QUANTIZE:
      return cudafx_quantize (src, dst, &p->quantize, &options, &result->palette);
    case CUDAFX_FILTER_CONVOLVE:
      return cudafx_convolve (src, dst, &p->convolve, &options);
    case CUDAFX_FILTER_NLBAYES:
      return cudafx_nlbayes (src, dst, &p->nlbayes, &options, &result->nlbayes);
    }
  return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "unknown filter %d", filter);
}
