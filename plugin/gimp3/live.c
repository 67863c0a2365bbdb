/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — GIMP 3 procedures through the GEGL operations: the procedure's
 * values set on a GimpDrawableFilter of cudafx:NAME by the table's names. */
#include "live.h"

#include <math.h>

#include "i18n.h"

static gchar *
operation_name (int filter)
{
  return g_strconcat ("cudafx:", cudafx_filters[filter].name, NULL);
}

gboolean
cudafx_live_available (int filter)
{
  gchar   *name = operation_name (filter);
  gboolean known = gegl_has_operation (name);

  g_free (name);
  return known;
}

/* The kernel as the operation's text, "a,b,c;d,e,f;g,h,i", exact to the last bit. */
static gchar *
kernel_text (const cudafx_proc_args *args)
{
  int      n = (int) lround (sqrt ((double) args->kernel_length));
  GString *s = g_string_new (NULL);
  char     number[G_ASCII_DTOSTR_BUF_SIZE];

  for (int i = 0; i < args->kernel_length; i++)
    {
      if (i)
        g_string_append_c (s, i % n ? ',' : ';');
      g_string_append (s, g_ascii_dtostr (number, sizeof number, args->kernel[i]));
    }
  return g_string_free (s, FALSE);
}

gboolean
cudafx_live_apply (GimpDrawable *drawable, const cudafx_proc_args *args, gboolean keep_live,
                   gboolean *available, GError **error)
{
  const cudafx_filter_desc *desc = &cudafx_filters[args->filter];
  GimpPlugIn               *plug_in = gimp_get_plug_in ();
  GimpPDBErrorHandler       handler = gimp_plug_in_get_pdb_error_handler (plug_in);
  GimpDrawableFilter       *filter;
  GimpDrawableFilterConfig *config;
  gchar                    *name = operation_name (args->filter);
  int                       halo;

  /* What the engine would reject before filtering (a kernel that is not
   * n×n, or too large), rejected here too: the operation would only warn. */
  if (!cudafx_proc_halo (args, &halo, error))
    {
      g_free (name);
      return FALSE;
    }
  /* Without the module GIMP refuses the operation's name: that answer is
   * ours to handle (the procedure then filters by itself), not an error
   * for GIMP to show. */
  gimp_plug_in_set_pdb_error_handler (plug_in, GIMP_PDB_ERROR_HANDLER_PLUGIN);
  filter = gimp_drawable_filter_new (drawable, name, _(desc->blurb));
  gimp_plug_in_set_pdb_error_handler (plug_in, handler);
  g_free (name);
  *available = filter != NULL;
  if (!filter)
    return TRUE;
  config = gimp_drawable_filter_get_config (filter);
  for (int i = 0; i < desc->n_args; i++)
    {
      const cudafx_arg *arg = &desc->args[i];
      double            v = args->values[i];

      switch (arg->type)
        {
        case CUDAFX_ARG_INT:
          g_object_set (config, arg->name, (gint) v, NULL);
          break;
        case CUDAFX_ARG_DOUBLE:
          g_object_set (config, arg->name, (gdouble) v, NULL);
          break;
        case CUDAFX_ARG_BOOLEAN:
          g_object_set (config, arg->name, (gboolean) (v != 0), NULL);
          break;
        case CUDAFX_ARG_CHOICE:
          /* GIMP hands a GEGL enum to plug-ins as its nick. */
          g_object_set (config, arg->name, arg->choices[(int) v].nick, NULL);
          break;
        case CUDAFX_ARG_DOUBLE_ARRAY:
          /* Only for the custom preset, the one that filters with it: the
           * operation refuses a kernel beside another preset, which the
           * procedure ignores (a grid edited, then a preset chosen). */
          if (args->kernel_length > 0
              && args->values[cudafx_proc_arg_index (args->filter, "preset")] == CUDAFX_PRESET_CUSTOM)
            {
              gchar *text = kernel_text (args);
              g_object_set (config, arg->name, text, NULL);
              g_free (text);
            }
          break;
        case CUDAFX_ARG_PALETTE:
          break; /* a given palette is never live (cudafx_run takes the procedure's way) */
        }
    }
  /* Appending and merging send the config to GIMP themselves. */
  if (keep_live)
    gimp_drawable_append_filter (drawable, filter);
  else
    gimp_drawable_merge_filter (drawable, filter);
  return TRUE;
}
