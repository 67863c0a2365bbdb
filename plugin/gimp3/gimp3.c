/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — the GIMP 3 front end: one plug-in executable registering the five
 * procedures from the engine's argument table and the hosts' own arguments
 * (ui/common/procedures.c), reading each run's arguments back from the procedure
 * config (args.c), showing the dialog (dialog.c, a module of its own loaded
 * only then) in interactive runs, and handing pixels to region.c. Quantize
 * can also create a palette resource (which it returns) and convert the image
 * to indexed mode with it.
 * Follows the shape of GIMP 3's own filters (plug-ins/common/despeckle.c). */
#include "i18n.h"
#include <gmodule.h>
#include <libgimp/gimp.h>

#include "args.h"
#include "dialog.h"
#include "live.h"
#include "procedures.h"
#include "region.h"

#define CUDAFX_AUTHOR "cudafx authors"

typedef struct { GimpPlugIn parent_instance; } CudafxPlugIn;
typedef struct { GimpPlugInClass parent_class; } CudafxPlugInClass;

GType cudafx_plug_in_get_type (void);
G_DEFINE_TYPE (CudafxPlugIn, cudafx_plug_in, GIMP_TYPE_PLUG_IN)

/* Set while GIMP registers the plug-in (query_procedures, then
 * create_procedure for each name): only the menus depend on whether GEGL has
 * the module, and GIMP reads them only then. A run creates its procedure
 * without starting GEGL, which loads every GEGL module (about a second here). */
static gboolean registering;

static GList *
cudafx_query_procedures (GimpPlugIn *plug_in)
{
  GList *names = NULL;

  registering = TRUE;
  for (int f = CUDAFX_N_FILTERS - 1; f >= 0; f--)
    names = g_list_prepend (names, g_strdup (cudafx_filters[f].procedure));
  return names;
}

static GimpChoice *
choice_of (const cudafx_arg *arg)
{
  GimpChoice *choice = gimp_choice_new ();

  for (int i = 0; i < arg->n_choices; i++)
    gimp_choice_add (choice, arg->choices[i].nick, i, _(arg->choices[i].label), NULL);
  return choice;
}

/* One procedure argument per table entry, with its range and default. */
static void
add_argument (GimpProcedure *procedure, const cudafx_arg *arg)
{
  const char *nick = _(arg->label), *blurb = _(arg->blurb);

  switch (arg->type)
    {
    case CUDAFX_ARG_INT:
      gimp_procedure_add_int_argument (procedure, arg->name, nick, blurb,
                                       (int) arg->min, (int) arg->max, (int) arg->def,
                                       G_PARAM_READWRITE);
      break;
    case CUDAFX_ARG_DOUBLE:
      gimp_procedure_add_double_argument (procedure, arg->name, nick, blurb,
                                          arg->min, arg->max, arg->def, G_PARAM_READWRITE);
      break;
    case CUDAFX_ARG_BOOLEAN:
      gimp_procedure_add_boolean_argument (procedure, arg->name, nick, blurb,
                                           arg->def != 0, G_PARAM_READWRITE);
      break;
    case CUDAFX_ARG_CHOICE:
      gimp_procedure_add_choice_argument (procedure, arg->name, nick, blurb, choice_of (arg),
                                          arg->choices[(int) arg->def].nick, G_PARAM_READWRITE);
      break;
    case CUDAFX_ARG_DOUBLE_ARRAY:
      gimp_procedure_add_double_array_argument (procedure, arg->name, nick, blurb,
                                                G_PARAM_READWRITE);
      break;
    case CUDAFX_ARG_PALETTE:
      /* none (the default): k-means computes the palette. GIMP's palette
       * chooser always shows a palette (the context's), so the dialog asks
       * with a check box of its own whether to use it; the box is an
       * auxiliary argument: Script-Fu passes a palette or none. */
      gimp_procedure_add_palette_argument (procedure, arg->name, nick, blurb, TRUE, NULL, FALSE,
                                           G_PARAM_READWRITE);
      gimp_procedure_add_boolean_aux_argument (procedure, CUDAFX_USE_PALETTE,
                                               _("Map to a _given palette"),
                                               _("Map the colors to the palette chosen below "
                                                 "instead of computing one"),
                                               FALSE, G_PARAM_READWRITE);
      break;
    }
}

/* Runs the filter's dialog from CUDAFX_DIALOGS_MODULE beside the executable.
 * GIMP starts a plug-in process for every call: linked with libgimpui, every
 * call, Script-Fu's included, would load and link GTK and the rest of the
 * dialogs' 27 libraries, a quarter of a call's CPU time (docs/BENCHMARKS.md,
 * "GIMP plug-in process").
 * *chosen: the user's OK. FALSE with an error when the module cannot load. */
static gboolean
run_dialog (GimpProcedure *procedure, GimpProcedureConfig *config, GimpDrawable *drawable,
            int filter, gboolean *chosen, GError **error)
{
  gchar           *folder = g_path_get_dirname (gimp_get_progname ());
  gchar           *path = g_build_filename (folder, CUDAFX_DIALOGS_MODULE, NULL);
  GModule         *module = g_module_open (path, G_MODULE_BIND_LOCAL);
  cudafx_dialog_fn run = NULL;

  g_free (folder);
  if (!module || !g_module_symbol (module, CUDAFX_DIALOG_SYMBOL, (gpointer *) &run))
    {
      g_set_error (error, CUDAFX_PROC_ERROR, CUDAFX_PROC_ERR_GIMP,
                   _("%s: the dialog could not be loaded from %s (%s); reinstall the plug-in"),
                   cudafx_filters[filter].procedure, path, g_module_error ());
      if (module)
        g_module_close (module);
      g_free (path);
      return FALSE;
    }
  g_free (path);
  /* GTK and its types stay registered: the module is never unloaded. */
  g_module_make_resident (module);
  *chosen = run (procedure, config, drawable, filter);
  return TRUE;
}

static int
show_progress (double fraction, void *user_data)
{
  gimp_progress_update (fraction);
  return 0;
}

static GimpValueArray *
failure (GimpProcedure *procedure, GError *error)
{
  GimpPDBStatusType status = error->domain == CUDAFX_PROC_ERROR
                             && error->code == CUDAFX_ERR_INVALID_ARG
                             ? GIMP_PDB_CALLING_ERROR : GIMP_PDB_EXECUTION_ERROR;

  return gimp_procedure_new_return_values (procedure, status, error);
}

/* A new palette resource of the colours a quantize run found, in the
 * drawable's colour space; NULL with an error if GIMP refuses. */
static GimpPalette *
create_palette (GimpDrawable *drawable, const cudafx_palette *colors, GError **error)
{
  const Babl  *format = babl_format_with_space ("R'G'B' double",
                                                gimp_drawable_get_format (drawable));
  gchar       *name = cudafx_proc_palette_name (colors);
  GimpPalette *palette = gimp_palette_new (name);
  gboolean     ok = palette != NULL;

  g_free (name);
  if (ok)
    gimp_palette_set_columns (palette, MIN (colors->colors, 16));
  for (int i = 0; ok && i < colors->colors; i++)
    {
      GeglColor *color = gegl_color_new (NULL);
      double     rgb[3];
      char       entry_name[8];
      gint       entry;

      cudafx_proc_palette_entry (colors, i, rgb, entry_name);
      gegl_color_set_pixel (color, format, rgb);
      ok = gimp_palette_add_entry (palette, entry_name, color, &entry);
      g_object_unref (color);
    }
  if (!ok)
    {
      g_set_error (error, CUDAFX_PROC_ERROR, CUDAFX_PROC_ERR_GIMP,
                   _("quantize: GIMP could not create the palette: %s"),
                   gimp_pdb_get_last_error (gimp_get_pdb ()));
      /* Resources belong to libgimp: delete, never unref. */
      if (palette)
        gimp_resource_delete (GIMP_RESOURCE (palette));
      palette = NULL;
    }
  return palette;
}

/* Whether GIMP can convert image to indexed mode after filtering: checked
 * first, so that a refusal leaves the image untouched. */
static gboolean
can_convert_indexed (GimpImage *image, GError **error)
{
  GimpLayer **layers = gimp_image_get_layers (image);
  gboolean    groups = FALSE;

  for (int i = 0; layers && layers[i]; i++)
    groups = groups || gimp_item_is_group (GIMP_ITEM (layers[i]));
  g_free (layers);
  return cudafx_proc_check_indexable (groups, error);
}

/* The whole image to 8-bit indexed mode with the palette, without dithering;
 * indexed is 8-bit, so the precision goes first, as Image ▸ Mode ▸ Indexed does. */
static gboolean
convert_indexed (GimpImage *image, GimpPalette *palette, GError **error)
{
  gchar   *name = gimp_resource_get_name (GIMP_RESOURCE (palette));
  gboolean ok;

  ok = (gimp_image_get_precision (image) == GIMP_PRECISION_U8_NON_LINEAR ||
        gimp_image_convert_precision (image, GIMP_PRECISION_U8_NON_LINEAR)) &&
       gimp_image_convert_indexed (image, GIMP_CONVERT_DITHER_NONE, GIMP_CONVERT_PALETTE_CUSTOM,
                                   0, FALSE, FALSE, name);
  g_free (name);
  return ok || cudafx_proc_indexed_failed (gimp_pdb_get_last_error (gimp_get_pdb ()), error);
}

/* Filters the drawable's selection and, when asked, makes the palette of the
 * colours found (*palette, else NULL). On any error nothing is merged and no
 * palette is left, so the image is untouched. */
static gboolean
filter_drawable (GimpDrawable *drawable, const cudafx_proc_args *args, GimpPalette **palette,
                 GError **error)
{
  const cudafx_filter_desc *desc = &cudafx_filters[args->filter];
  GeglRectangle     area;
  GeglBuffer       *source, *shadow;
  cudafx_run_result result;
  gboolean          ok;

  const gboolean group = gimp_item_is_group (GIMP_ITEM (drawable));
  const gboolean indexed = !group && gimp_drawable_is_indexed (drawable);
  /* The selection's bounds only of a drawable that can be filtered. */
  const gboolean touches = group || indexed ||
                           gimp_drawable_mask_intersect (drawable, &area.x, &area.y, &area.width, &area.height);
  if (!cudafx_proc_check_drawable (desc->name, group, indexed, touches, error))
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
    ok = (*palette = create_palette (drawable, &result.palette, error)) != NULL;
  /* merge_shadow applies the selection mask and makes one undo step. */
  if (ok && !gimp_drawable_merge_shadow (drawable, TRUE))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, /* an execution error */
                   _("%s: GIMP did not take the result into the drawable"), desc->name);
      ok = FALSE;
      if (*palette)
        gimp_resource_delete (GIMP_RESOURCE (*palette));
      *palette = NULL;
    }
  if (ok)
    gimp_drawable_update (drawable, area.x, area.y, area.width, area.height);
  gimp_progress_end ();
  return ok;
}

static GimpValueArray *
cudafx_run (GimpProcedure *procedure, GimpRunMode run_mode, GimpImage *image,
            GimpDrawable **drawables, GimpProcedureConfig *config, gpointer run_data)
{
  const cudafx_filter_desc *desc = run_data;
  cudafx_proc_args args;
  GimpPalette     *palette = NULL;
  GimpValueArray  *values;
  GError          *error = NULL;
  gboolean         ok, live = FALSE, available = FALSE, chosen = FALSE;

  if (!drawables || !drawables[0] || drawables[1])
    {
      g_set_error (&error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG,
                   _("%s works on exactly one layer or channel"), desc->procedure);
      return failure (procedure, error);
    }

  /* Interactive runs ask first; the config then holds the chosen values. */
  if (run_mode == GIMP_RUN_INTERACTIVE)
    {
      gegl_init (NULL, NULL); /* the dialog's preview reads the drawable */
      if (!run_dialog (procedure, config, drawables[0], (int) (desc - cudafx_filters), &chosen,
                       &error))
        return failure (procedure, error);
      if (!chosen)
        return gimp_procedure_new_return_values (procedure, GIMP_PDB_CANCEL, NULL);
    }

  cudafx_proc_args_init (&args, (int) (desc - cudafx_filters));
  if (!cudafx_config_read_args (config, TRUE, &args, &error))
    return failure (procedure, error);
  g_object_get (config, "live", &live, NULL);

  /* With the GEGL module, GIMP computes the pixels in its own process: an
   * interactive run (the dialog's settings) and a run asked to stay live add
   * a live filter; otherwise the operation is merged — except on a
   * selection, where a GIMP filter sees only the selection's bounding box
   * while the procedure filters it with the real pixels around it, and for
   * a palette, which only the procedure can make or read. */
  if (!cudafx_proc_creates_palette (&args) && !args.has_palette &&
      (live || run_mode == GIMP_RUN_INTERACTIVE || gimp_selection_is_empty (image)))
    {
      if (!cudafx_live_apply (drawables[0], &args, live || run_mode == GIMP_RUN_INTERACTIVE,
                              &available, &error))
        return failure (procedure, error);
      if (available)
        {
          if (run_mode != GIMP_RUN_NONINTERACTIVE)
            gimp_displays_flush ();
          return gimp_procedure_new_return_values (procedure, GIMP_PDB_SUCCESS, NULL);
        }
    }
  if (live)
    {
      g_set_error (&error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG,
                   cudafx_proc_creates_palette (&args) || args.has_palette
                   ? _("%s: live cannot be combined with palette, create-palette or convert-indexed")
                   : _("%s: live needs the cudafx GEGL module (install.sh installs it)"),
                   desc->procedure);
      return failure (procedure, error);
    }

  /* The procedure reads and writes the pixels itself. */
  gegl_init (NULL, NULL);

  if (cudafx_proc_converts_indexed (&args) && !can_convert_indexed (image, &error))
    return failure (procedure, error);
  /* The filter and the conversion to indexed undo as one step. */
  gimp_image_undo_group_start (image);
  ok = filter_drawable (drawables[0], &args, &palette, &error) &&
       (!cudafx_proc_converts_indexed (&args) || convert_indexed (image, palette, &error));
  gimp_image_undo_group_end (image);
  if (!ok)
    return failure (procedure, error);

  if (run_mode != GIMP_RUN_NONINTERACTIVE)
    gimp_displays_flush ();
  values = gimp_procedure_new_return_values (procedure, GIMP_PDB_SUCCESS, NULL);
  if (desc - cudafx_filters == CUDAFX_FILTER_QUANTIZE)
    GIMP_VALUES_SET_PALETTE (values, 1, palette);
  return values;
}

/* Whether the filter's menu entry is its GEGL operation's (GEGL has the
 * module) rather than the procedure's; quantize keeps its own. */
static gboolean
operation_has_menu (int filter)
{
  if (filter == CUDAFX_FILTER_QUANTIZE)
    return FALSE;
  gegl_init (NULL, NULL);
  return cudafx_live_available (filter);
}

static GimpProcedure *
cudafx_create_procedure (GimpPlugIn *plug_in, const gchar *name)
{
  const cudafx_filter_desc *desc = cudafx_filter_find (name);
  GimpProcedure *procedure;

  if (!desc)
    return NULL;
  /* GIMP queries the labels without calling set_i18n first. */
  g_free (cudafx_proc_bind_translations (gimp_get_progname ()));
  procedure = gimp_image_procedure_new (plug_in, name, GIMP_PDB_PROC_TYPE_PLUGIN, cudafx_run,
                                        (gpointer) desc, NULL);
  gimp_procedure_set_image_types (procedure, "RGB*, GRAY*");
  gimp_procedure_set_sensitivity_mask (procedure, GIMP_PROCEDURE_SENSITIVE_DRAWABLE);
  /* One menu entry per filter: where GEGL has the module, the operation's
   * own entry (gimp:menu-path) opens it as a live filter in GIMP's filter
   * dialog, and the procedure stays for scripts. Quantize keeps its entry
   * (its dialog can also make a palette), and its operation has none. GIMP
   * asks again when the plug-in changes (install.sh installs both). */
  if (registering && !operation_has_menu ((int) (desc - cudafx_filters)))
    {
      gimp_procedure_set_menu_label (procedure, _(desc->menu_label));
      gimp_procedure_add_menu_path (procedure, desc->menu_path);
    }
  gimp_procedure_set_documentation (procedure, _(desc->blurb), _(desc->help), name);
  gimp_procedure_set_attribution (procedure, CUDAFX_AUTHOR, CUDAFX_AUTHOR, "2026");
  for (int i = 0; i < cudafx_proc_n_args (desc - cudafx_filters); i++)
    add_argument (procedure, cudafx_proc_arg (desc - cudafx_filters, i));
  gimp_procedure_add_boolean_argument (procedure, "live", _("_Live filter"),
                                       _("Add the filter as a live layer effect, editable later, "
                                         "instead of applying it (needs the cudafx GEGL module)"),
                                       FALSE, G_PARAM_READWRITE);
  if (desc - cudafx_filters == CUDAFX_FILTER_QUANTIZE)
    gimp_procedure_add_palette_return_value (procedure, "palette", _("Palette"),
                                             _("The palette created (create-palette or "
                                               "convert-indexed), else none"),
                                             G_PARAM_READWRITE);
  return procedure;
}

/* Translations (domain "cudafx") live in locale/ beside the executable when
 * installed with it; without that folder, run untranslated without warnings.
 * libgimp wants the folder relative to the plug-in's own (an absolute one
 * makes it print a warning and disable localization). */
static gboolean
cudafx_set_i18n (GimpPlugIn *plug_in, const gchar *procedure_name, gchar **gettext_domain,
                 gchar **catalog_dir)
{
  gchar *locale = cudafx_proc_bind_translations (gimp_get_progname ());

  if (!locale)
    return FALSE;
  g_free (locale);
  *gettext_domain = g_strdup (CUDAFX_DOMAIN);
  *catalog_dir = g_strdup ("locale");
  return TRUE;
}

static void
cudafx_plug_in_class_init (CudafxPlugInClass *klass)
{
  GimpPlugInClass *plug_in_class = GIMP_PLUG_IN_CLASS (klass);

  plug_in_class->query_procedures = cudafx_query_procedures;
  plug_in_class->create_procedure = cudafx_create_procedure;
  plug_in_class->set_i18n = cudafx_set_i18n;
}

static void
cudafx_plug_in_init (CudafxPlugIn *plug_in)
{
}

GIMP_MAIN (cudafx_plug_in_get_type ())
