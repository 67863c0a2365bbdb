/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The argument table: every procedure's arguments, ranges and defaults,
 * written once. GIMP hosts, dialogs, the CLI and the engine's validation all
 * read it. Strings are msgids (marked N_ for xgettext); hosts translate. */
#include "engine.h"

#include <limits.h>
#include <stddef.h>
#include <string.h>

/* The field an argument is bound to, in cudafx_filter_params; AUTO_FIELD
 * for a value the filter's automatic mode chooses (chosen_by_auto). */
#define FIELD(member, kind) CUDAFX_FIELD_##kind, offsetof (cudafx_filter_params, member), 0
#define AUTO_FIELD(member, kind) CUDAFX_FIELD_##kind, offsetof (cudafx_filter_params, member), 1
/* A filter's own struct in cudafx_filter_params. */
#define PARAMS(member) offsetof (cudafx_filter_params, member), sizeof (((cudafx_filter_params *) 0)->member)

/* Choices are stored through int fields. */
_Static_assert (sizeof (cudafx_shape) == sizeof (int) && sizeof (cudafx_color_space) == sizeof (int)
                && sizeof (cudafx_dither) == sizeof (int) && sizeof (cudafx_preset) == sizeof (int)
                && sizeof (cudafx_border) == sizeof (int) && sizeof (cudafx_backend) == sizeof (int),
                "choice fields are int-sized");

static const cudafx_choice backend_choices[] = {
  { "auto", N_("Automatic (GPU when available)") },
  { "cpu",  N_("CPU") },
  { "cuda", N_("CUDA GPU") },
};

#define BACKEND_ARG                                                            \
  { "backend", N_("_Backend"),                                                 \
    N_("Where to compute: auto uses a CUDA GPU when one is usable, else the CPU"), \
    CUDAFX_ARG_CHOICE, 0, 2, CUDAFX_BACKEND_AUTO, backend_choices, 3, FIELD (backend, INT) }

static const cudafx_choice shape_choices[] = {
  { "square", N_("Square") },
  { "circle", N_("Circle") },
};

static const cudafx_arg median_args[] = {
  { "radius", N_("R_adius"), N_("Window radius: the window is (2r+1)×(2r+1) pixels"),
    CUDAFX_ARG_INT, 1, 100, 3, NULL, 0,
    FIELD (median.radius, INT) },
  { "percentile", N_("Perce_ntile"),
    N_("Rank of the value kept: 50 is the median, 0 the minimum, 100 the maximum"),
    CUDAFX_ARG_DOUBLE, 0, 100, 50, NULL, 0,
    FIELD (median.percentile, DOUBLE) },
  { "shape", N_("Shap_e"), N_("Shape of the window"),
    CUDAFX_ARG_CHOICE, 0, 1, CUDAFX_SHAPE_SQUARE, shape_choices, 2,
    FIELD (median.shape, INT) },
  BACKEND_ARG,
};

static const cudafx_arg nlmeans_args[] = {
  { "auto", N_("_Automatic"),
    N_("Estimate the noise level of the image and choose strength, patch and search radius from it"),
    CUDAFX_ARG_BOOLEAN, 0, 1, 1, NULL, 0,
    FIELD (nlmeans.automatic, INT) },
  { "h", N_("S_trength"), N_("Filtering strength h on the 0–255 scale; larger removes more noise and detail"),
    CUDAFX_ARG_DOUBLE, 0.1, 100, 10, NULL, 0,
    AUTO_FIELD (nlmeans.h, DOUBLE) },
  { "patch-radius", N_("Patch ra_dius"), N_("Radius of the patches compared to weigh neighbours"),
    CUDAFX_ARG_INT, 1, 5, 1, NULL, 0,
    AUTO_FIELD (nlmeans.patch_radius, INT) },
  { "search-radius", N_("S_earch radius"), N_("Radius of the area searched for similar patches"),
    CUDAFX_ARG_INT, 1, 20, 10, NULL, 0,
    AUTO_FIELD (nlmeans.search_radius, INT) },
  BACKEND_ARG,
};

static const cudafx_arg nlbayes_args[] = {
  { "auto", N_("_Automatic"),
    N_("Estimate the noise of the image (its level, and whether it follows brightness as camera noise does)"),
    CUDAFX_ARG_BOOLEAN, 0, 1, 1, NULL, 0,
    FIELD (nlbayes.automatic, INT) },
  { "sigma", N_("_Noise level"),
    N_("Standard deviation of the noise on the 0–255 scale, used when automatic is off"),
    CUDAFX_ARG_DOUBLE, 0.1, 100, 10, NULL, 0,
    AUTO_FIELD (nlbayes.sigma, DOUBLE) },
  { "flat-area", N_("_Flat areas"),
    N_("Replace groups of patches that differ only by noise with their mean: smoother skies and walls"),
    CUDAFX_ARG_BOOLEAN, 0, 1, 1, NULL, 0,
    FIELD (nlbayes.flat_area, INT) },
  BACKEND_ARG,
};

static const cudafx_choice color_space_choices[] = {
  { "oklab", N_("Oklab (perceptual)") },
  { "rgb",   N_("RGB") },
};

static const cudafx_choice dither_choices[] = {
  { "none",            N_("None") },
  { "floyd-steinberg", N_("Floyd–Steinberg") },
  { "floyd-steinberg-reduced-bleeding", N_("Floyd–Steinberg (reduced color bleeding)") },
  { "ordered", N_("Positioned (ordered Bayer matrix)") },
  { "blue-noise", N_("Positioned (blue noise)") },
};

static const cudafx_arg quantize_args[] = {
  { "colors", N_("_Number of colors"), N_("Number of colors in the palette"),
    CUDAFX_ARG_INT, 2, 256, 16, NULL, 0,
    FIELD (quantize.colors, INT) },
  { "color-space", N_("Color spac_e"),
    N_("Space in which colors are clustered: Oklab follows perceived difference, RGB minimises RGB error"),
    CUDAFX_ARG_CHOICE, 0, 1, CUDAFX_SPACE_OKLAB, color_space_choices, 2,
    FIELD (quantize.color_space, INT) },
  { "dither", N_("Di_thering"),
    N_("Diffuse the quantization error to neighbouring pixels, or offset each pixel by a fixed "
       "threshold pattern (positioned)"),
    CUDAFX_ARG_CHOICE, 0, 4, CUDAFX_DITHER_NONE, dither_choices, 5,
    FIELD (quantize.dither, INT) },
  { "max-iterations", N_("_Maximum iterations"), N_("Upper bound on k-means iterations"),
    CUDAFX_ARG_INT, 1, 300, 30, NULL, 0,
    FIELD (quantize.max_iterations, INT) },
  { "seed", N_("See_d"), N_("Random seed of the k-means++ initialisation: same seed, same palette"),
    CUDAFX_ARG_INT, 0, 2147483647.0, 0, NULL, 0,
    FIELD (quantize.seed, UINT32) },
  { "palette", N_("Gi_ven palette"),
    N_("Map to this palette instead of computing one (none: compute a k-means palette of the given number of colors)"),
    CUDAFX_ARG_PALETTE, 0, 0, 0, NULL, 0,
    FIELD (quantize.palette, PALETTE) },
  BACKEND_ARG,
};

static const cudafx_choice preset_choices[] = {
  { "custom",           N_("Custom") },
  { "laplacian-5x5",    N_("Laplacian 5×5") },
  { "sharpen-5x5",      N_("Sharpen 5×5") },
  { "high-pass-5x5",    N_("High-pass 5×5") },
  { "mean-3x3",         N_("Mean 3×3") },
  { "blur-3x3",         N_("Blur 3×3") },
  { "blur-5x5",         N_("Blur 5×5") },
  { "gaussian",         N_("Gaussian") },
  { "sobel-horizontal", N_("Sobel horizontal") },
  { "sobel-vertical",   N_("Sobel vertical") },
};

static const cudafx_choice border_choices[] = {
  { "clamp",  N_("Clamp (repeat edge pixels)") },
  { "mirror", N_("Mirror") },
  { "wrap",   N_("Wrap around") },
  { "black",  N_("Black (zero)") },
};

static const cudafx_arg convolve_args[] = {
  { "preset", N_("Prese_t"), N_("Predefined kernel, or custom to use the kernel matrix"),
    CUDAFX_ARG_CHOICE, 0, 9, CUDAFX_PRESET_GAUSSIAN, preset_choices, 10,
    FIELD (convolve.preset, INT) },
  { "kernel", N_("_Kernel"),
    N_("Custom kernel: n×n values row by row, n odd from 1 to 31 (default: 3×3 identity)"),
    CUDAFX_ARG_DOUBLE_ARRAY, 1, CUDAFX_MAX_KERNEL_SIZE, 0, NULL, 0,
    FIELD (convolve.kernel, KERNEL) },
  { "sigma", N_("S_igma"), N_("Standard deviation of the Gaussian preset, in pixels"),
    CUDAFX_ARG_DOUBLE, 0.1, 50, 2, NULL, 0,
    FIELD (convolve.sigma, DOUBLE) },
  { "divisor", N_("_Divisor"), N_("The sum is divided by this; 0 normalises by the kernel's sum"),
    CUDAFX_ARG_DOUBLE, -1e6, 1e6, 0, NULL, 0,
    FIELD (convolve.divisor, DOUBLE) },
  { "offset", N_("O_ffset"), N_("Added to the result, on the 0–255 scale"),
    CUDAFX_ARG_DOUBLE, -255, 255, 0, NULL, 0,
    FIELD (convolve.offset, DOUBLE) },
  { "border", N_("Bord_er"), N_("How pixels beyond the image edge are made up"),
    CUDAFX_ARG_CHOICE, 0, 3, CUDAFX_BORDER_CLAMP, border_choices, 4,
    FIELD (convolve.border, INT) },
  BACKEND_ARG,
};

#define N_ELEMS(a) ((int) (sizeof (a) / sizeof ((a)[0])))

const cudafx_filter_desc cudafx_filters[CUDAFX_N_FILTERS] = {
  [CUDAFX_FILTER_MEDIAN] = {
    "median", "plug-in-cudafx-median", N_("_Median (GPU)..."), "<Image>/Filters/Blur",
    N_("Median or percentile filter over a square or circular window"),
    N_("Replaces each pixel by a chosen percentile (the median by default) of its "
       "neighbourhood, channel by channel. Removes salt-and-pepper noise while keeping edges."),
    median_args, N_ELEMS (median_args), PARAMS (median) },
  [CUDAFX_FILTER_NLMEANS] = {
    "nl-means", "plug-in-cudafx-nl-means", N_("_Non-Local Means (GPU)..."), "<Image>/Filters/Enhance",
    N_("Denoise with non-local means"),
    N_("Averages each pixel with pixels whose surrounding patches look alike. In automatic "
       "mode the noise level is estimated from the image and the parameters follow from it."),
    nlmeans_args, N_ELEMS (nlmeans_args), PARAMS (nlmeans) },
  [CUDAFX_FILTER_QUANTIZE] = {
    "quantize", "plug-in-cudafx-quantize", N_("Color _Quantize (GPU)..."), "<Image>/Colors",
    N_("Reduce the image to a k-means palette"),
    N_("Finds a palette of the given size with k-means (k-means++ seeding) and maps every "
       "pixel to its nearest palette color, optionally with Floyd–Steinberg dithering. "
       "Fully transparent pixels do not vote; alpha is kept."),
    quantize_args, N_ELEMS (quantize_args), PARAMS (quantize) },
  [CUDAFX_FILTER_CONVOLVE] = {
    "convolve", "plug-in-cudafx-convolve", N_("_Convolution (GPU)..."), "<Image>/Filters/Generic",
    N_("Convolve with a preset or custom kernel"),
    N_("Applies a convolution kernel: Gaussian, Sobel, Laplacian, sharpen and other presets, "
       "or a custom n×n matrix, with divisor, offset and a choice of border handling."),
    convolve_args, N_ELEMS (convolve_args), PARAMS (convolve) },
  [CUDAFX_FILTER_NLBAYES] = {
    "nl-bayes", "plug-in-cudafx-nl-bayes", N_("Non-Local _Bayes (GPU)..."), "<Image>/Filters/Enhance",
    N_("Denoise with non-local Bayes"),
    N_("Groups patches that look alike and restores each group from its own statistics, in two "
       "passes (Lebrun, Buades and Morel's NL-Bayes). Stronger than non-local means on fine texture. "
       "In automatic mode the noise is estimated from the image."),
    nlbayes_args, N_ELEMS (nlbayes_args), PARAMS (nlbayes) },
};

const cudafx_filter_desc *
cudafx_filter_find (const char *name)
{
  for (int i = 0; i < CUDAFX_N_FILTERS; i++)
    if (!strcmp (name, cudafx_filters[i].name) || !strcmp (name, cudafx_filters[i].procedure))
      return &cudafx_filters[i];
  return NULL;
}

const cudafx_arg *
cudafx_arg_find (const cudafx_filter_desc *filter, const char *name)
{
  for (int i = 0; i < filter->n_args; i++)
    if (!strcmp (name, filter->args[i].name))
      return &filter->args[i];
  return NULL;
}

int
cudafx_choice_find (const cudafx_arg *arg, const char *nick)
{
  for (int i = 0; i < arg->n_choices; i++)
    if (!strcmp (nick, arg->choices[i].nick))
      return i;
  return -1;
}

/* ---- walking the table over parameter structs ----------------------------- */

/* The field of arg in a filter's own struct (params points at .median, ...),
 * or NULL when arg lives outside it (backend) or is the kernel. */
static void *
own_field (const cudafx_filter_desc *f, const cudafx_arg *a, const void *params)
{
  if (a->field == CUDAFX_FIELD_NONE || a->field == CUDAFX_FIELD_KERNEL || a->field == CUDAFX_FIELD_PALETTE
      || a->offset < f->params_offset
      || a->offset >= f->params_offset + f->params_size)
    return NULL;
  return (char *) params + (a->offset - f->params_offset);
}

double
cudafx_field_get (const cudafx_arg *a, const void *field)
{
  switch (a->field)
    {
    case CUDAFX_FIELD_INT:
      return *(const int *) field;
    case CUDAFX_FIELD_UINT32:
      return *(const uint32_t *) field;
    case CUDAFX_FIELD_DOUBLE:
      return *(const double *) field;
    default:
      return 0;
    }
}

/* A value no int holds (a host's bug, NaN) becomes INT_MIN (UINT32_MAX), which
 * every range check rejects, instead of an undefined conversion. */
void
cudafx_field_set (const cudafx_arg *a, void *field, double value)
{
  switch (a->field)
    {
    case CUDAFX_FIELD_INT:
      *(int *) field = value >= INT_MIN && value <= INT_MAX ? (int) value : INT_MIN;
      break;
    case CUDAFX_FIELD_UINT32:
      *(uint32_t *) field = value >= 0 && value <= UINT32_MAX ? (uint32_t) value : UINT32_MAX;
      break;
    case CUDAFX_FIELD_DOUBLE:
      *(double *) field = value;
      break;
    default:
      break;
    }
}

void
cudafx_params_defaults (int filter, void *params)
{
  const cudafx_filter_desc *f = &cudafx_filters[filter];
  memset (params, 0, f->params_size);
  for (int i = 0; i < f->n_args; i++)
    {
      void *field = own_field (f, &f->args[i], params);
      if (field)
        cudafx_field_set (&f->args[i], field, f->args[i].def);
    }
}

cudafx_status
cudafx_params_check (int filter, const void *params)
{
  const cudafx_filter_desc *f = &cudafx_filters[filter];
  for (int i = 0; i < f->n_args; i++)
    {
      const cudafx_arg *a = &f->args[i];
      const void *field = own_field (f, a, params);
      /* A boolean is true when nonzero, as C has it. */
      if (!field || a->type == CUDAFX_ARG_BOOLEAN)
        continue;
      double value = cudafx_field_get (a, field);
      if (value >= a->min && value <= a->max) /* also rejects NaN */
        continue;
      if (a->type == CUDAFX_ARG_DOUBLE)
        return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s: %s %g is out of range %g..%g", f->name,
                            a->name, value, a->min, a->max);
      return cudafx_fail (CUDAFX_ERR_INVALID_ARG, "%s: %s %.0f is out of range %.0f..%.0f", f->name,
                          a->name, value, a->min, a->max);
    }
  return CUDAFX_OK;
}
