/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — a GIMP 3 procedure config read back into argument values, walking
 * the procedure's arguments (core/params.c, then the host's in
 * plugin/common/procedures.c) by name. */
#include "args.h"

gboolean
cudafx_config_read_args (GimpProcedureConfig *config, cudafx_proc_args *args, GError **error)
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
        }
    }
  return TRUE;
}
