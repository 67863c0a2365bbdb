/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — a GIMP 3 procedure config read back into argument values, walking
 * the procedure's arguments (core/params.c, then the host's in
 * ui/common/procedures.c) by name. */
#include "args.h"

#include "i18n.h"

/* The palette argument's colours as sRGB R'G'B' (GIMP keeps a palette's
 * colours with their own space; the engine maps in the image's values). */
static gboolean
read_palette (GimpProcedureConfig *config, const char *name, cudafx_proc_args *args, GError **error)
{
  GimpPalette *palette = NULL;
  GeglColor  **colors;
  double     (*rgb)[3];
  gchar       *title;
  int          n = 0;
  gboolean     ok;

  g_object_get (config, name, &palette, NULL);
  if (!palette)
    return cudafx_proc_set_palette (args, NULL, 0, NULL, error);
  colors = gimp_palette_get_colors (palette);
  while (colors && colors[n])
    n++;
  rgb = g_malloc0_n ((gsize) MAX (n, 1), sizeof *rgb);
  for (int i = 0; i < n; i++)
    gegl_color_get_pixel (colors[i], babl_format ("R'G'B' double"), rgb[i]);
  title = gimp_resource_get_name (GIMP_RESOURCE (palette));
  ok = cudafx_proc_set_palette (args, (const double (*)[3]) rgb, n, title, error);
  if (ok && n == 0)
    {
      g_set_error (error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG,
                   _("%s: palette \"%s\" has no colors"), cudafx_filters[args->filter].name, title);
      ok = FALSE;
    }
  g_free (title);
  g_free (rgb);
  gimp_color_array_free (colors);
  g_object_unref (palette);
  return ok;
}

gboolean
cudafx_config_uses_palette (GimpProcedureConfig *config)
{
  gboolean use = FALSE;

  if (g_object_class_find_property (G_OBJECT_GET_CLASS (config), CUDAFX_USE_PALETTE))
    g_object_get (config, CUDAFX_USE_PALETTE, &use, NULL);
  return use;
}

gboolean
cudafx_config_read_args (GimpProcedureConfig *config, gboolean with_palette, cudafx_proc_args *args,
                         GError **error)
{
  for (int i = 0; i < cudafx_proc_n_args (args->filter); i++)
    {
      const cudafx_arg *arg = cudafx_proc_arg (args->filter, i);

      switch (arg->type)
        {
        case CUDAFX_ARG_INT:
          {
            gint v;
            g_object_get (config, arg->name, &v, NULL);
            args->values[i] = v;
            break;
          }
        case CUDAFX_ARG_DOUBLE:
          {
            gdouble v;
            g_object_get (config, arg->name, &v, NULL);
            args->values[i] = v;
            break;
          }
        case CUDAFX_ARG_BOOLEAN:
          {
            gboolean v;
            g_object_get (config, arg->name, &v, NULL);
            args->values[i] = v != FALSE;
            break;
          }
        case CUDAFX_ARG_CHOICE:
          args->values[i] = gimp_procedure_config_get_choice_id (config, arg->name);
          break;
        case CUDAFX_ARG_DOUBLE_ARRAY:
          {
            GimpArray     *array = NULL;
            const gdouble *values = NULL;
            gsize          length = 0;
            gboolean       ok;

            g_object_get (config, arg->name, &array, NULL);
            if (array)
              values = gimp_double_array_get_values (array, &length);
            ok = cudafx_proc_set_kernel (args, values, length, error);
            if (array)
              gimp_array_free (array);
            if (!ok)
              return FALSE;
            break;
          }
        case CUDAFX_ARG_PALETTE:
          if (with_palette && !read_palette (config, arg->name, args, error))
            return FALSE;
          break;
        }
    }
  return TRUE;
}
