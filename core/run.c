/* Running a filter from the argument table's values: the one place that
 * turns what a host collected (CLI options, GIMP procedure arguments) into
 * the engine's parameter structs and calls the filter. */
#include "engine.h"

#include <limits.h>
#include <string.h>

static double
table_value (int filter, const double *values, const char *name)
{
  const cudafx_filter_desc *f = &cudafx_filters[filter];
  return values[cudafx_arg_find (f, name) - f->args];
}

/* An integer, choice or boolean argument as an int. A value no int holds (a
 * host's bug, NaN) becomes INT_MIN, which every range check rejects, instead
 * of an undefined conversion. */
static int
table_int (int filter, const double *values, const char *name)
{
  double v = table_value (filter, values, name);
  return v >= INT_MIN && v <= INT_MAX ? (int) v : INT_MIN;
}

void
cudafx_filter_params_from_values (int filter, const double *values, const double *kernel,
                                  int kernel_size, cudafx_filter_params *p)
{
#define V(name) table_value (filter, values, name)
#define I(name) table_int (filter, values, name)
  memset (p, 0, sizeof *p);
  p->backend = (cudafx_backend) I ("backend");
  switch (filter)
    {
    case CUDAFX_FILTER_MEDIAN:
      p->median.radius = I ("radius");
      p->median.percentile = V ("percentile");
      p->median.shape = (cudafx_shape) I ("shape");
      break;
    case CUDAFX_FILTER_NLMEANS:
      p->nlmeans.automatic = V ("auto") != 0;
      p->nlmeans.h = V ("h");
      p->nlmeans.patch_radius = I ("patch-radius");
      p->nlmeans.search_radius = I ("search-radius");
      break;
    case CUDAFX_FILTER_QUANTIZE:
      p->quantize.colors = I ("colors");
      p->quantize.color_space = (cudafx_color_space) I ("color-space");
      p->quantize.dither = (cudafx_dither) I ("dither");
      p->quantize.max_iterations = I ("max-iterations");
      p->quantize.seed = (uint32_t) I ("seed");
      break;
    case CUDAFX_FILTER_CONVOLVE:
      p->convolve.preset = (cudafx_preset) I ("preset");
      p->convolve.kernel = kernel;
      p->convolve.kernel_size = kernel_size;
      p->convolve.sigma = V ("sigma");
      p->convolve.divisor = V ("divisor");
      p->convolve.offset = V ("offset");
      p->convolve.border = (cudafx_border) I ("border");
      break;
    }
#undef I
#undef V
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
    }
  return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "unknown filter %d", filter);
}
