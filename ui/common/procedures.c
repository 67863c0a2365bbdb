/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — host-neutral procedure glue: argument values by table position,
 * engine parameter structs built from them, the halo each filter needs, and
 * the engine call. Shared by the GIMP 3 and 2.10 front ends; GLib only. */
#include "procedures.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "i18n.h"

G_DEFINE_QUARK (cudafx-proc-error-quark, cudafx_proc_error)

/* The host arguments, after each filter's table arguments; msgids as in
 * core/params.c. Quantize's in the order of the enum below. */
static const cudafx_arg quantize_host_args[] = {
  { "create-palette", N_("Create p_alette"),
    N_("Also create a GIMP palette of the colors found, named \"cudafx N colors\" "
       "(GIMP makes the name unique); quantize returns it"),
    CUDAFX_ARG_BOOLEAN, 0, 1, 0, NULL, 0, CUDAFX_FIELD_NONE, 0, 0 },
  { "convert-indexed", N_("Convert to _indexed"),
    N_("Then convert the whole image to 8-bit indexed mode with that palette (creating it), "
       "without dithering, as Image ▸ Mode ▸ Indexed does: every layer is converted, pixels "
       "outside a selection become their nearest palette color, and partial transparency "
       "becomes opaque or transparent"),
    CUDAFX_ARG_BOOLEAN, 0, 1, 0, NULL, 0, CUDAFX_FIELD_NONE, 0, 0 },
  { "remove-unused", N_("Remove _unused colors"),
    N_("Leave out of the palette created (and so of the indexed image's color map) the colors "
       "no pixel of the filtered area takes"),
    CUDAFX_ARG_BOOLEAN, 0, 1, 0, NULL, 0, CUDAFX_FIELD_NONE, 0, 0 },
};

static const struct {
  const cudafx_arg *args;
  int               n_args;
} host_args[CUDAFX_N_FILTERS] = {
  [CUDAFX_FILTER_QUANTIZE] = { quantize_host_args, G_N_ELEMENTS (quantize_host_args) },
};

static const cudafx_filter_desc *
desc_of (const cudafx_proc_args *args)
{
  return &cudafx_filters[args->filter];
}

int
cudafx_proc_n_args (int filter)
{
  return cudafx_filters[filter].n_args + host_args[filter].n_args;
}

const cudafx_arg *
cudafx_proc_arg (int filter, int index)
{
  const cudafx_filter_desc *desc = &cudafx_filters[filter];

  g_return_val_if_fail (index >= 0 && index < cudafx_proc_n_args (filter), NULL);
  return index < desc->n_args ? &desc->args[index] : &host_args[filter].args[index - desc->n_args];
}

int
cudafx_proc_arg_index (int filter, const char *name)
{
  for (int i = 0; i < cudafx_proc_n_args (filter); i++)
    if (!strcmp (cudafx_proc_arg (filter, i)->name, name))
      return i;
  return -1;
}

/* Positions of quantize's host arguments among its procedure arguments. */
enum { CREATE_PALETTE, CONVERT_INDEXED, REMOVE_UNUSED };

static double
host_value (const cudafx_proc_args *args, int host_index)
{
  return args->values[desc_of (args)->n_args + host_index];
}

/* The table argument bound to a field of cudafx_filter_params, and its position. */
#define BOUND(field) offsetof (cudafx_filter_params, field)
static int
bound_index (const cudafx_proc_args *args, size_t offset)
{
  const cudafx_filter_desc *desc = desc_of (args);
  for (int i = 0; i < desc->n_args; i++)
    if (desc->args[i].field != CUDAFX_FIELD_NONE && desc->args[i].field != CUDAFX_FIELD_KERNEL
        && desc->args[i].offset == offset)
      return i;
  g_return_val_if_reached (0);
}

/* A bound value clamped to the table's range: only for sizing the halo, so
 * that an out-of-range value reaches the engine (which names it) instead of
 * allocating a huge region first. */
static int
clamped (const cudafx_proc_args *args, size_t offset)
{
  int i = bound_index (args, offset);
  const cudafx_arg *arg = &desc_of (args)->args[i];
  return (int) CLAMP (args->values[i], arg->min, arg->max);
}

static int
bound_max (const cudafx_proc_args *args, size_t offset)
{
  return (int) desc_of (args)->args[bound_index (args, offset)].max;
}

void
cudafx_proc_args_init (cudafx_proc_args *args, int filter)
{
  int n = cudafx_proc_n_args (filter);

  g_return_if_fail (n <= CUDAFX_PROC_MAX_ARGS);
  memset (args, 0, sizeof *args);
  args->filter = filter;
  for (int i = 0; i < n; i++)
    args->values[i] = cudafx_proc_arg (filter, i)->def;
}

gboolean
cudafx_proc_set_kernel (cudafx_proc_args *args, const double *values, gsize length,
                        GError **error)
{
  if (length > G_N_ELEMENTS (args->kernel))
    {
      g_set_error (error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG,
                   _("%s: kernel has %lu values, more than %d×%d"),
                   desc_of (args)->name, (unsigned long) length, CUDAFX_MAX_KERNEL_SIZE,
                   CUDAFX_MAX_KERNEL_SIZE);
      return FALSE;
    }
  if (length > 0)
    memcpy (args->kernel, values, length * sizeof *values);
  args->kernel_length = (int) length;
  return TRUE;
}

static gboolean
engine_error (cudafx_status status, GError **error)
{
  const char *message = cudafx_error_message ();

  g_set_error_literal (error, CUDAFX_PROC_ERROR, status,
                       *message ? message : cudafx_status_string (status));
  return FALSE;
}

/* The engine's parameters from the values. The kernel's n comes from the
 * count of values: a count that is not a square has no n, so it is rejected
 * here; n itself (odd, 1..31) is the engine's to check. No values: the
 * engine's default kernel (the table cannot hold an array default). */
static gboolean
filter_params (const cudafx_proc_args *args, cudafx_filter_params *p, GError **error)
{
  int n = (int) lround (sqrt ((double) args->kernel_length));

  if (n * n != args->kernel_length)
    {
      g_set_error (error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG,
                   _("%s: kernel has %d values, not n×n"), desc_of (args)->name,
                   args->kernel_length);
      return FALSE;
    }
  /* Ranges checked on the values as the host gave them: once stored, a
   * value no field holds is changed (a seed of -1 became 4294967295 in
   * the engine's message). */
  for (int i = 0; i < desc_of (args)->n_args; i++)
    {
      const cudafx_arg *a = &desc_of (args)->args[i];
      double            v = args->values[i];

      if ((a->type != CUDAFX_ARG_INT && a->type != CUDAFX_ARG_DOUBLE) || (v >= a->min && v <= a->max))
        continue;
      if (a->type == CUDAFX_ARG_DOUBLE)
        g_set_error (error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG, _("%s: %s %g is out of range %g..%g"),
                     desc_of (args)->name, a->name, v, a->min, a->max);
      else
        g_set_error (error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG,
                     _("%s: %s %.0f is out of range %.0f..%.0f"), desc_of (args)->name, a->name, v,
                     a->min, a->max);
      return FALSE;
    }
  cudafx_filter_params_from_values (args->filter, args->values, n ? args->kernel : NULL, n, p);
  if (args->filter == CUDAFX_FILTER_NLMEANS)
    {
      p->nlmeans.sigma = args->nlmeans_sigma;
      p->nlmeans.noise = args->nlmeans_noise;
    }
  if (args->filter == CUDAFX_FILTER_NLBAYES)
    {
      p->nlbayes.estimate = args->nlmeans_sigma;
      p->nlbayes.noise = args->nlmeans_noise;
      p->nlbayes.origin_x = args->origin_x;
      p->nlbayes.origin_y = args->origin_y;
    }
  if (args->filter == CUDAFX_FILTER_QUANTIZE && args->has_palette)
    p->quantize.palette = &args->palette;
  return TRUE;
}

gboolean
cudafx_proc_halo (const cudafx_proc_args *args, int *halo, GError **error)
{
  switch (args->filter)
    {
    case CUDAFX_FILTER_MEDIAN:
      *halo = clamped (args, BOUND (median.radius));
      return TRUE;

    case CUDAFX_FILTER_NLMEANS:
      if (clamped (args, BOUND (nlmeans.automatic)) != 0)
        /* Automatic mode picks the radii from the noise it finds: allow
         * for the largest it may pick. */
        *halo = bound_max (args, BOUND (nlmeans.patch_radius))
                + bound_max (args, BOUND (nlmeans.search_radius));
      else
        *halo = clamped (args, BOUND (nlmeans.patch_radius))
                + clamped (args, BOUND (nlmeans.search_radius));
      return TRUE;

    case CUDAFX_FILTER_QUANTIZE:
      *halo = 0;
      return TRUE;

    case CUDAFX_FILTER_NLBAYES:
      {
        cudafx_filter_params p;

        if (!filter_params (args, &p, error))
          return FALSE;
        /* The image's colour channels are not known here: the larger of
         * grey's halo and colour's (GIMP's images have one or three). */
        *halo = MAX (cudafx_nlbayes_halo (&p.nlbayes, 1), cudafx_nlbayes_halo (&p.nlbayes, 3));
        return TRUE;
      }

    case CUDAFX_FILTER_CONVOLVE:
      {
        double taps[CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE];
        int size;
        cudafx_filter_params p;

        /* The Gaussian preset reaches ceil (3σ) pixels (core/convolve.c),
         * up to the table's largest σ: more than the n×n matrix below
         * holds (31×31, σ 5), which is only what a dialog's grid shows. */
        if (!filter_params (args, &p, error))
          return FALSE;
        if (p.convolve.preset == CUDAFX_PRESET_GAUSSIAN)
          {
            const cudafx_arg *sigma = cudafx_arg_find (desc_of (args), "sigma");

            /* Out of range: the engine's message for it. */
            if (!(p.convolve.sigma >= sigma->min && p.convolve.sigma <= sigma->max))
              return engine_error (cudafx_convolve_kernel (&p.convolve, taps, &size), error);
            *halo = (int) ceil (3 * p.convolve.sigma);
            return TRUE;
          }
        if (!cudafx_proc_kernel (args, taps, &size, error))
          return FALSE;
        *halo = size / 2;
        return TRUE;
      }
    }
  g_return_val_if_reached (FALSE);
}

gboolean
cudafx_proc_halo_follows_noise (const cudafx_proc_args *args)
{
  return args->filter == CUDAFX_FILTER_NLBAYES && !(args->nlmeans_sigma > 0)
         && args->values[bound_index (args, BOUND (nlbayes.automatic))] != 0;
}

gboolean
cudafx_proc_kernel (const cudafx_proc_args *args, double *taps, int *size, GError **error)
{
  cudafx_filter_params p;
  cudafx_status status;

  g_return_val_if_fail (args->filter == CUDAFX_FILTER_CONVOLVE, FALSE);
  if (!filter_params (args, &p, error))
    return FALSE;
  status = cudafx_convolve_kernel (&p.convolve, taps, size);
  return status == CUDAFX_OK ? TRUE : engine_error (status, error);
}

gboolean
cudafx_proc_run (const cudafx_proc_args *args, const cudafx_image *src, cudafx_image *dst,
                 const cudafx_options *options, cudafx_run_result *result,
                 GError **error)
{
  cudafx_filter_params p;
  cudafx_status status;

  if (!filter_params (args, &p, error))
    return FALSE;
  status = cudafx_run_filter (args->filter, &p, src, dst, options, result);
  return status == CUDAFX_OK ? TRUE : engine_error (status, error);
}

gboolean
cudafx_proc_converts_indexed (const cudafx_proc_args *args)
{
  return args->filter == CUDAFX_FILTER_QUANTIZE && host_value (args, CONVERT_INDEXED) != 0;
}

gboolean
cudafx_proc_creates_palette (const cudafx_proc_args *args)
{
  return args->filter == CUDAFX_FILTER_QUANTIZE
         && (host_value (args, CREATE_PALETTE) != 0 || cudafx_proc_converts_indexed (args));
}

gboolean
cudafx_proc_removes_unused (const cudafx_proc_args *args)
{
  return args->filter == CUDAFX_FILTER_QUANTIZE && host_value (args, REMOVE_UNUSED) != 0;
}

gboolean
cudafx_proc_check_drawable (const char *filter, gboolean is_group, gboolean is_indexed, gboolean touches,
                            GError **error)
{
  if (is_group)
    g_set_error (error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG,
                 _("%s: a layer group has no pixels of its own to filter; select a layer "
                   "inside the group"), filter);
  else if (is_indexed)
    g_set_error (error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG,
                 _("%s: indexed images are not supported; convert the image to RGB or "
                   "grayscale first (Image ▸ Mode)"), filter);
  else if (!touches)
    g_set_error (error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG,
                 _("%s: the selection does not touch the layer: nothing to filter"), filter);
  return !is_group && !is_indexed && touches;
}

gboolean
cudafx_proc_check_indexable (gboolean has_groups, GError **error)
{
  if (has_groups)
    g_set_error_literal (error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG,
                         _("quantize: convert-indexed needs an image without layer groups "
                           "(indexed mode cannot hold them)"));
  return !has_groups;
}

gboolean
cudafx_proc_indexed_failed (const char *gimp_error, GError **error)
{
  g_set_error (error, CUDAFX_PROC_ERROR, CUDAFX_PROC_ERR_GIMP,
               _("quantize: GIMP could not convert the image to indexed mode: %s"), gimp_error);
  return FALSE;
}

gboolean
cudafx_proc_set_palette (cudafx_proc_args *args, const double (*rgb)[3], int count, const char *name,
                         GError **error)
{
  args->has_palette = count > 0;
  if (count > CUDAFX_MAX_COLORS)
    {
      g_set_error (error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG,
                   _("%s: palette \"%s\" has %d colors; at most %d can be mapped to"),
                   desc_of (args)->name, name, count, CUDAFX_MAX_COLORS);
      return FALSE;
    }
  memset (&args->palette, 0, sizeof args->palette);
  g_strlcpy (args->palette_name, count > 0 && name ? name : "", sizeof args->palette_name);
  args->palette.colors = count;
  args->palette.channels = 3;
  for (int i = 0; i < count; i++)
    for (int c = 0; c < 3; c++)
      args->palette.entries[i][c] = rgb[i][c] * 255.0;
  return TRUE;
}

/* Whether pixel x of row holds palette entry e, as the engine writes it
 * (u8: the entry; f32: the entry / 255 as a float). */
static gboolean
holds_entry (const cudafx_image *image, const guint8 *row, int x, const cudafx_palette *palette, int e)
{
  int dims = image->channels - image->has_alpha;
  for (int c = 0; c < dims; c++)
    {
      gsize at = (gsize) x * image->channels + c;
      double want = palette->entries[e][palette->channels == 1 ? 0 : c];
      if (image->type == CUDAFX_U8 ? row[at] != want : ((const float *) row)[at] != (float) (want / 255.0))
        return FALSE;
    }
  return TRUE;
}

int
cudafx_proc_palette_keep_used (cudafx_palette *palette, const cudafx_image *image)
{
  gboolean used[CUDAFX_MAX_COLORS] = { FALSE };
  int      last = 0, kept = 0;

  for (int y = 0; y < image->height; y++)
    {
      const guint8 *row = (const guint8 *) image->data + (gsize) y * image->stride;
      for (int x = 0; x < image->width; x++)
        {
          /* runs of one colour are common: the last entry found first (it
           * is the first of its equals, as the one the engine takes) */
          int e = holds_entry (image, row, x, palette, last) ? last : -1;
          for (int j = 0; j < palette->colors && e < 0; j++)
            if (holds_entry (image, row, x, palette, j))
              e = j;
          if (e >= 0)
            used[last = e] = TRUE;
        }
    }
  for (int e = 0; e < palette->colors; e++)
    if (used[e])
      memmove (palette->entries[kept++], palette->entries[e], sizeof palette->entries[e]);
  int dropped = palette->colors - kept;
  palette->colors = kept;
  return dropped;
}

gchar *
cudafx_proc_palette_name (const cudafx_palette *palette)
{
  return g_strdup_printf ("cudafx %d colors", palette->colors);
}

void
cudafx_proc_palette_entry (const cudafx_palette *palette, int index, double rgb[3], char name[8])
{
  int bytes[3];

  for (int k = 0; k < 3; k++)
    {
      double v = CLAMP (palette->entries[index][palette->channels == 1 ? 0 : k], 0.0, 255.0);

      rgb[k] = v / 255.0;
      bytes[k] = (int) lround (v);
    }
  g_snprintf (name, 8, "#%02x%02x%02x", bytes[0], bytes[1], bytes[2]);
}

gchar *
cudafx_proc_bind_translations (const gchar *executable)
{
  gchar *folder = g_path_get_dirname (executable);
  gchar *locale = g_build_filename (folder, "locale", NULL);

  g_free (folder);
  if (!g_file_test (locale, G_FILE_TEST_IS_DIR))
    {
      g_free (locale);
      return NULL;
    }
  bindtextdomain (CUDAFX_DOMAIN, locale);
  bind_textdomain_codeset (CUDAFX_DOMAIN, "UTF-8");
  return locale;
}
