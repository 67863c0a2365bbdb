/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — the GIMP 2.10 front end: one plug-in executable registering the
 * five procedures from the engine's argument table as GimpParamDef arrays
 * (run-mode, image, drawable, then the table's arguments in order), reading
 * a run's values back by table position, and handing pixels to region.c.
 * Follows the shape of GIMP 2.10's own filters (plug-ins/common/despeckle.c).
 *
 * Quantize returns the name of the palette it created (empty if none).
 *
 * The PDB of 2.10 has no choice or boolean types: choices are INT32 indices
 * into the table's choices (listed in the argument's description), booleans
 * INT32 0/1, and the kernel an INT32 count followed by a FLOATARRAY. GIMP
 * does not range-check INT32/FLOAT arguments of plug-ins; the engine does.
 * Interactive runs open the dialog (dialog210.c) on the last values; runs
 * with last values use them as they are. */
#include <string.h>

#include <libgimp/gimp.h>
#include "i18n.h"

#include "dialog210.h"
#include "procedures.h"
#include "region.h"

#define CUDAFX_AUTHOR "cudafx authors"

/* run-mode, image, drawable */
#define N_HOST_PARAMS 3

/* Last values, saved per procedure with gimp_set_data. The version changes
 * whenever cudafx_proc_args changes its layout, so stale data is ignored. */
#define LAST_VALUES_VERSION 2

typedef struct {
  guint32          version;
  cudafx_proc_args args;
} last_values;

static void query (void);
static void run (const gchar *name, gint n_params, const GimpParam *params,
                 gint *n_return_vals, GimpParam **return_vals);

const GimpPlugInInfo PLUG_IN_INFO = { NULL, NULL, query, run };

MAIN ()

/* The argument's description for the PDB browser and Script-Fu users: the
 * table's blurb plus the range, or the integer each choice stands for. */
static gchar *
describe (const cudafx_arg *arg)
{
  GString *text = g_string_new (arg->blurb);

  switch (arg->type)
    {
    case CUDAFX_ARG_INT:
      g_string_append_printf (text, " (%.0f..%.0f, default %.0f)", arg->min, arg->max, arg->def);
      break;
    case CUDAFX_ARG_DOUBLE:
      g_string_append_printf (text, " (%g..%g, default %g)", arg->min, arg->max, arg->def);
      break;
    case CUDAFX_ARG_BOOLEAN:
      g_string_append_printf (text, " (TRUE or FALSE, default %s)", arg->def ? "TRUE" : "FALSE");
      break;
    case CUDAFX_ARG_CHOICE:
      g_string_append (text, " {");
      for (int i = 0; i < arg->n_choices; i++)
        g_string_append_printf (text, "%s %s (%d)", i ? "," : "", arg->choices[i].nick, i);
      g_string_append_printf (text, " }, default %s", arg->choices[(int) arg->def].nick);
      break;
    case CUDAFX_ARG_DOUBLE_ARRAY:
      break;
    case CUDAFX_ARG_PALETTE:
      g_string_append (text, " (the name of a GIMP palette, \"\" for none)");
      break;
    }
  return g_string_free (text, FALSE);
}

/* The PDB parameters of filter, in the procedure's order (ui/common/procedures.h)
 * after the host's three; the array argument takes two (count, values).
 * Returns how many. Descriptions are allocated; free them with free_params. */
static int
fill_params (int filter, GimpParamDef *params)
{
  static const GimpParamDef host[N_HOST_PARAMS] = {
    { GIMP_PDB_INT32,    "run-mode", "The run mode { RUN-INTERACTIVE (0), RUN-NONINTERACTIVE (1) }" },
    { GIMP_PDB_IMAGE,    "image",    "Input image" },
    { GIMP_PDB_DRAWABLE, "drawable", "Input drawable" },
  };
  int n = 0;

  for (; n < N_HOST_PARAMS; n++)
    params[n] = (GimpParamDef) { host[n].type, host[n].name, g_strdup (host[n].description) };
  for (int i = 0; i < cudafx_proc_n_args (filter); i++)
    {
      const cudafx_arg *arg = cudafx_proc_arg (filter, i);

      if (arg->type == CUDAFX_ARG_DOUBLE_ARRAY)
        {
          params[n++] = (GimpParamDef) {
            GIMP_PDB_INT32, "num-kernel",
            g_strdup_printf ("Number of values in kernel: 0 (the default kernel) or n×n, "
                             "n odd from 1 to %d", CUDAFX_MAX_KERNEL_SIZE) };
          params[n++] = (GimpParamDef) { GIMP_PDB_FLOATARRAY, (gchar *) arg->name,
                                         describe (arg) };
        }
      else
        params[n++] = (GimpParamDef) {
          arg->type == CUDAFX_ARG_DOUBLE ? GIMP_PDB_FLOAT
          : arg->type == CUDAFX_ARG_PALETTE ? GIMP_PDB_STRING : GIMP_PDB_INT32,
          (gchar *) arg->name, describe (arg) };
    }
  return n;
}

/* How many PDB parameters fill_params gives filter. */
static int
param_count (int filter)
{
  int n = N_HOST_PARAMS + cudafx_proc_n_args (filter);

  for (int i = 0; i < cudafx_proc_n_args (filter); i++)
    n += cudafx_proc_arg (filter, i)->type == CUDAFX_ARG_DOUBLE_ARRAY;
  return n;
}

static void
free_params (GimpParamDef *params, int n)
{
  for (int i = 0; i < n; i++)
    g_free (params[i].description);
}

static void
query (void)
{
  /* GIMP 2.10 translates the labels and blurbs itself with this domain. */
  gchar *locale = cudafx_proc_bind_translations (gimp_get_progname ());

  if (locale)
    gimp_plugin_domain_register (CUDAFX_DOMAIN, locale);
  g_free (locale);

  for (int f = 0; f < CUDAFX_N_FILTERS; f++)
    {
      static const GimpParamDef palette_return[] = {
        { GIMP_PDB_STRING, "palette",
          "Name of the palette created (create-palette or convert-indexed), else empty" },
      };
      const cudafx_filter_desc *desc = &cudafx_filters[f];
      GimpParamDef params[N_HOST_PARAMS + CUDAFX_PROC_MAX_ARGS + 1];
      int n = fill_params (f, params);
      int n_returns = f == CUDAFX_FILTER_QUANTIZE ? G_N_ELEMENTS (palette_return) : 0;

      gimp_install_procedure (desc->procedure, desc->blurb, desc->help,
                              CUDAFX_AUTHOR, CUDAFX_AUTHOR, "2026", desc->menu_label,
                              "RGB*, GRAY*", GIMP_PLUGIN, n, n_returns, params,
                              n_returns ? palette_return : NULL);
      gimp_plugin_menu_register (desc->procedure, desc->menu_path);
      free_params (params, n);
    }
}

/* The values of a non-interactive call, by table position. Types were
 * checked by the PDB against the registration; ranges are the engine's. */
static gboolean
read_params (const GimpParam *params, gint n_params, cudafx_proc_args *args, GError **error)
{
  const cudafx_filter_desc *desc = &cudafx_filters[args->filter];
  int expected = param_count (args->filter), n = N_HOST_PARAMS;

  if (n_params != expected)
    {
      g_set_error (error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG,
                   _("%s takes %d arguments, not %d"), desc->procedure, expected, n_params);
      return FALSE;
    }
  for (int i = 0; i < cudafx_proc_n_args (args->filter); i++)
    switch (cudafx_proc_arg (args->filter, i)->type)
      {
      case CUDAFX_ARG_DOUBLE:
        args->values[i] = params[n++].data.d_float;
        break;
      case CUDAFX_ARG_DOUBLE_ARRAY:
        {
          gint32 length = params[n++].data.d_int32;

          if (length < 0)
            {
              g_set_error (error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG,
                           _("%s: num-kernel %d is negative"), desc->name, length);
              return FALSE;
            }
          if (!cudafx_proc_set_kernel (args, params[n++].data.d_floatarray, length, error))
            return FALSE;
          break;
        }
      case CUDAFX_ARG_PALETTE:
        if (!cudafx_dialog210_load_palette (params[n++].data.d_string, args, error))
          return FALSE;
        break;
      default:
        args->values[i] = params[n++].data.d_int32;
        break;
      }
  return TRUE;
}

/* The values an interactive or repeated run uses: the last ones saved for
 * this procedure, else the table's defaults. */
static void
load_last_values (cudafx_proc_args *args, const char *procedure)
{
  last_values last;

  if (gimp_get_data_size (procedure) == sizeof last)
    {
      gimp_get_data (procedure, &last);
      if (last.version == LAST_VALUES_VERSION && last.args.filter == args->filter)
        *args = last.args;
    }
}

static void
save_last_values (const cudafx_proc_args *args, const char *procedure)
{
  last_values last = { LAST_VALUES_VERSION, *args };

  gimp_set_data (procedure, &last, sizeof last);
}

static int
show_progress (double fraction, void *user_data)
{
  gimp_progress_update (fraction);
  return 0;
}

/* A new palette of the colours a quantize run found; its name (GIMP makes it
 * unique, free with g_free), or NULL with an error if GIMP refuses. */
static gchar *
create_palette (const cudafx_palette *colors, GError **error)
{
  gchar   *wanted = cudafx_proc_palette_name (colors);
  gchar   *name = gimp_palette_new (wanted);
  gboolean ok = name != NULL;

  g_free (wanted);
  if (ok)
    gimp_palette_set_columns (name, MIN (colors->colors, 16));
  for (int i = 0; ok && i < colors->colors; i++)
    {
      GimpRGB color;
      double  rgb[3];
      char    entry_name[8];
      gint    entry;

      cudafx_proc_palette_entry (colors, i, rgb, entry_name);
      gimp_rgba_set (&color, rgb[0], rgb[1], rgb[2], 1.0);
      ok = gimp_palette_add_entry (name, entry_name, &color, &entry);
    }
  if (!ok)
    {
      g_set_error (error, CUDAFX_PROC_ERROR, CUDAFX_PROC_ERR_GIMP,
                   _("quantize: GIMP could not create the palette: %s"), gimp_get_pdb_error ());
      if (name)
        gimp_palette_delete (name);
      g_clear_pointer (&name, g_free);
    }
  return name;
}

/* Whether GIMP can convert image to indexed mode after filtering: checked
 * first, so that a refusal leaves the image untouched. */
static gboolean
can_convert_indexed (gint32 image, GError **error)
{
  gint     n_layers;
  gint    *layers = gimp_image_get_layers (image, &n_layers);
  gboolean groups = FALSE;

  for (int i = 0; i < n_layers; i++)
    groups = groups || gimp_item_is_group (layers[i]);
  g_free (layers);
  return cudafx_proc_check_indexable (groups, error);
}

/* The whole image to 8-bit indexed mode with the palette, without dithering;
 * indexed is 8-bit, so the precision goes first, as Image ▸ Mode ▸ Indexed does. */
static gboolean
convert_indexed (gint32 image, const gchar *palette, GError **error)
{
  if ((gimp_image_get_precision (image) == GIMP_PRECISION_U8_GAMMA ||
       gimp_image_convert_precision (image, GIMP_PRECISION_U8_GAMMA)) &&
      gimp_image_convert_indexed (image, GIMP_CONVERT_DITHER_NONE, GIMP_CONVERT_PALETTE_CUSTOM,
                                  0, FALSE, FALSE, palette))
    return TRUE;
  return cudafx_proc_indexed_failed (gimp_get_pdb_error (), error);
}

/* Whether desc can filter drawable, and the selection's bounds in it. */
static gboolean
check_drawable (gint32 drawable, const cudafx_filter_desc *desc, GeglRectangle *area,
                GError **error)
{
  if (!gimp_item_is_drawable (drawable))
    {
      g_set_error (error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG,
                   _("%s: drawable %d does not exist"), desc->name, drawable);
      return FALSE;
    }
  const gboolean group = gimp_item_is_group (drawable);
  const gboolean indexed = !group && gimp_drawable_is_indexed (drawable);
  /* The selection's bounds only of a drawable that can be filtered. */
  const gboolean touches = group || indexed ||
                           gimp_drawable_mask_intersect (drawable, &area->x, &area->y, &area->width, &area->height);
  return cudafx_proc_check_drawable (desc->name, group, indexed, touches, error);
}

/* Filters the drawable's selection and, when asked, makes the palette of the
 * colours found (*palette, else NULL). On any error nothing is merged and no
 * palette is left, so the image is untouched. */
static gboolean
filter_drawable (gint32 drawable, const cudafx_proc_args *args, gchar **palette, GError **error)
{
  const cudafx_filter_desc *desc = &cudafx_filters[args->filter];
  GeglRectangle     area;
  GeglBuffer       *source, *shadow;
  cudafx_run_result result;
  gboolean          ok;

  if (!check_drawable (drawable, desc, &area, error))
    return FALSE;

  gimp_progress_init (_(desc->blurb));
  source = gimp_drawable_get_buffer (drawable);
  shadow = gimp_drawable_get_shadow_buffer (drawable);
  ok = cudafx_region_process (source, shadow, &area, args, show_progress, NULL, &result, error);
  g_object_unref (source);
  if (ok)
    gegl_buffer_flush (shadow);
  g_object_unref (shadow);
  if (ok && cudafx_proc_creates_palette (args))
    ok = (*palette = create_palette (&result.palette, error)) != NULL;
  /* merge_shadow applies the selection mask and makes one undo step. */
  if (ok && !gimp_drawable_merge_shadow (drawable, TRUE))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, /* an execution error */
                   _("%s: GIMP did not take the result into the drawable"), desc->name);
      ok = FALSE;
      if (*palette)
        gimp_palette_delete (*palette);
      g_clear_pointer (palette, g_free);
    }
  if (ok)
    gimp_drawable_update (drawable, area.x, area.y, area.width, area.height);
  gimp_progress_end ();
  return ok;
}

static void
run (const gchar *name, gint n_params, const GimpParam *params, gint *n_return_vals,
     GimpParam **return_vals)
{
  /* GIMP reads the return values after run returns: they cannot live on the stack. */
  static GimpParam values[2];
  const cudafx_filter_desc *desc = cudafx_filter_find (name);
  GimpRunMode      run_mode;
  gint32           image, drawable;
  GeglRectangle    area;
  cudafx_proc_args args;
  gchar           *palette = NULL;
  GError          *error = NULL;

  g_free (cudafx_proc_bind_translations (gimp_get_progname ()));
  gimp_plugin_enable_precision ();
  gegl_init (NULL, NULL);

  *n_return_vals = 1;
  *return_vals = values;
  values[0].type = GIMP_PDB_STATUS;
  values[0].data.d_status = GIMP_PDB_SUCCESS;

  if (!desc || n_params < N_HOST_PARAMS)
    {
      values[0].data.d_status = GIMP_PDB_CALLING_ERROR;
      return;
    }
  run_mode = params[0].data.d_int32;
  image = params[1].data.d_image;
  drawable = params[2].data.d_drawable;
  cudafx_proc_args_init (&args, (int) (desc - cudafx_filters));
  if (run_mode == GIMP_RUN_NONINTERACTIVE)
    read_params (params, n_params, &args, &error);
  else
    load_last_values (&args, name);
  /* A dialog only for a drawable the filter can take: its preview shows the result. */
  if (!error && run_mode == GIMP_RUN_INTERACTIVE && check_drawable (drawable, desc, &area, &error)
      && !cudafx_dialog210_run (drawable, &args))
    {
      values[0].data.d_status = GIMP_PDB_CANCEL;
      return;
    }

  if (!error && (!cudafx_proc_converts_indexed (&args) || can_convert_indexed (image, &error)))
    {
      gboolean ok;

      /* The filter and the conversion to indexed undo as one step. */
      gimp_image_undo_group_start (image);
      ok = filter_drawable (drawable, &args, &palette, &error) &&
           (!cudafx_proc_converts_indexed (&args) || convert_indexed (image, palette, &error));
      gimp_image_undo_group_end (image);
      if (ok)
        {
          save_last_values (&args, name);
          if (run_mode != GIMP_RUN_NONINTERACTIVE)
            gimp_displays_flush ();
          if (args.filter == CUDAFX_FILTER_QUANTIZE)
            {
              values[1].type = GIMP_PDB_STRING;
              values[1].data.d_string = palette ? palette : g_strdup ("");
              *n_return_vals = 2;
            }
          return;
        }
    }
  g_free (palette);

  /* GIMP shows the message of an interactive run and passes it to the caller of a scripted one. */
  values[0].data.d_status = error->domain == CUDAFX_PROC_ERROR
                            && error->code == CUDAFX_ERR_INVALID_ARG
                            ? GIMP_PDB_CALLING_ERROR : GIMP_PDB_EXECUTION_ERROR;
  values[1].type = GIMP_PDB_STRING;
  values[1].data.d_string = g_strdup (error->message);
  *n_return_vals = 2;
  g_error_free (error);
}
