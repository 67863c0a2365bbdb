/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The operations' properties (operation.h): the argument table's
 * entries as GParamSpecs, values kept by table position, and the noise σ
 * announced to GIMP from the main loop. */
#include "operation.h"

/* "_Median (GPU)..." as a title: "Median (GPU)". */
gchar *
op_plain_label (const char *label)
{
  GString *s = g_string_new (NULL);

  for (const char *p = label; *p; p++)
    if (*p != '_')
      g_string_append_c (s, *p);
  if (g_str_has_suffix (s->str, "..."))
    g_string_truncate (s, s->len - 3);
  return g_string_free (s, FALSE);
}

/* An enum type for a choice argument, named after the filter and argument
 * ("CudafxMedianShape"); values are the choice indices, nicks the table's. */
GType
op_choice_enum (GTypeModule *module, int filter, const cudafx_arg *arg)
{
  GEnumValue *values = g_new0 (GEnumValue, arg->n_choices + 1);
  gchar      *joined = g_strconcat (cudafx_filters[filter].name, "-", arg->name, NULL);
  gchar     **words = g_strsplit (joined, "-", -1);
  GString    *type_name = g_string_new ("Cudafx");
  GType       type;

  g_free (joined);
  for (int i = 0; words[i]; i++)
    if (*words[i])
      {
        words[i][0] = g_ascii_toupper (words[i][0]);
        g_string_append (type_name, words[i]);
      }
  g_strfreev (words);
  for (int i = 0; i < arg->n_choices; i++)
    {
      values[i].value = i;
      values[i].value_name = _(arg->choices[i].label);
      values[i].value_nick = arg->choices[i].nick;
    }
  /* values stay for the life of the type: the module is never unloaded. */
  type = g_type_module_register_enum (module, type_name->str, values);
  g_string_free (type_name, TRUE);
  return type;
}

/* The engine's default kernel in the CLI's text form (preset custom, no taps). */
gchar *
op_default_kernel_text (void)
{
  cudafx_convolve_params p;
  double taps[CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE];
  int size = 0;
  GString *s = g_string_new (NULL);

  cudafx_convolve_params_init (&p);
  p.preset = CUDAFX_PRESET_CUSTOM;
  p.kernel = NULL;
  p.kernel_size = 0;
  if (cudafx_convolve_kernel (&p, taps, &size) != CUDAFX_OK)
    size = 0;
  for (int i = 0; i < size * size; i++)
    g_string_append_printf (s, "%s%g", i == 0 ? "" : i % size ? "," : ";", taps[i]);
  return g_string_free (s, FALSE);
}

/* The choices' enum types, made when GEGL loads the module (not when a
 * class is first used): processes that only read an operation's properties,
 * such as GIMP's plug-ins configuring a filter, must find them by name. */
GType op_choice_types[CUDAFX_N_FILTERS][CUDAFX_PROC_MAX_ARGS];

GParamSpec *
op_arg_pspec (int filter, const cudafx_arg *arg)
{
  const GParamFlags flags = G_PARAM_READWRITE | G_PARAM_CONSTRUCT;
  const char *nick = _(arg->label), *blurb = _(arg->blurb);
  gchar *label = op_plain_label (nick);
  GParamSpec *pspec = NULL;

  switch (arg->type)
    {
    case CUDAFX_ARG_INT:
      pspec = gegl_param_spec_int (arg->name, label, blurb, (int) arg->min, (int) arg->max,
                                   (int) arg->def, (int) arg->min, (int) arg->max, 1.0, flags);
      break;
    case CUDAFX_ARG_DOUBLE:
      pspec = gegl_param_spec_double (arg->name, label, blurb, arg->min, arg->max, arg->def,
                                      arg->min, arg->max, 1.0, flags);
      break;
    case CUDAFX_ARG_BOOLEAN:
      pspec = g_param_spec_boolean (arg->name, label, blurb, arg->def != 0, flags);
      break;
    case CUDAFX_ARG_CHOICE:
      /* GEGL's own enum spec: GIMP passes those to plug-ins (as nicks). */
      pspec = gegl_param_spec_enum (arg->name, label, blurb,
                                 op_choice_types[filter][arg - cudafx_filters[filter].args],
                                 (int) arg->def, flags);
      break;
    case CUDAFX_ARG_DOUBLE_ARRAY:
      {
        gchar *def = op_default_kernel_text ();
        gchar *text_blurb = g_strconcat (blurb, _(", written as rows separated by ';' and "
                                                  "values by ','"), NULL);
        pspec = g_param_spec_string (arg->name, label, text_blurb, def, flags);
        g_free (text_blurb);
        g_free (def);
      }
      break;
    case CUDAFX_ARG_PALETTE:
      {
        gchar *path_blurb = g_strconcat (blurb, _(": the path of a GIMP palette file (.gpl)"), NULL);
        pspec = g_param_spec_string (arg->name, label, path_blurb, "", flags);
        g_free (path_blurb);
      }
      break;
    }
  g_free (label);
  return pspec;
}

/* What an announcement needs, without the operation (see queue_announce). */
typedef struct
{
  GWeakRef    node;
  GParamSpec *pspec; /* the class's noise-sigma: classes are never freed */
} announcement;

/* In the main loop: tells GIMP's filter dialog that noise-sigma changed.
 * The notify goes out on the node, never on the operation: GIMP's dialog
 * follows the node's "notify::NAME" and reads the value back from the
 * operation (gimp_operation_config_connect_node), while GEGL re-renders a
 * node on any notify of its operation. The node is reached through a weak
 * reference: GIMP may have freed it since the σ was found (a notify on the
 * operation then reached the freed node, and GIMP aborted). */
static gboolean
announce_sigma (gpointer data)
{
  announcement *a = data;
  GeglNode     *node = g_weak_ref_get (&a->node);

  if (node)
    {
      g_signal_emit_by_name (node, "notify::noise-sigma", a->pspec);
      g_object_unref (node);
    }
  return G_SOURCE_REMOVE;
}

static void
announcement_free (gpointer data)
{
  announcement *a = data;

  g_weak_ref_clear (&a->node);
  g_free (a);
}

/* Always through the main loop, wherever GEGL runs the operation: a notify
 * there and then would run GIMP's dialog code during the render, on
 * whatever thread that is (g_main_context_invoke too runs it at once when
 * the thread can take the main context, as while the main thread waits for
 * a render). */
void
op_queue_announce (CudafxOp *self)
{
  /* The idle source holds a weak reference to the node, never the
   * operation: in a host without a main loop (the gegl command, scripts)
   * the source is never run, and a reference to the operation kept it
   * and its region memory for ever. One announcement pending at a time;
   * finalize destroys it. */
  GeglNode *node = g_weak_ref_get (&self->node);
  announcement *a;

  if (!node)
    return;
  g_mutex_lock (&self->lock);
  if (!self->announce || g_source_is_destroyed (self->announce))
    {
      a = g_new0 (announcement, 1);
      g_weak_ref_init (&a->node, node);
      a->pspec = g_object_class_find_property (G_OBJECT_GET_CLASS (self), "noise-sigma");
      if (self->announce)
        g_source_unref (self->announce);
      self->announce = g_idle_source_new ();
      g_source_set_priority (self->announce, G_PRIORITY_DEFAULT_IDLE);
      g_source_set_callback (self->announce, announce_sigma, a, announcement_free);
      g_source_attach (self->announce, NULL);
    }
  g_mutex_unlock (&self->lock);
  g_object_unref (node);
}

void
op_set_property (GObject *object, guint prop_id, const GValue *value, GParamSpec *pspec)
{
  CudafxOp *self = CUDAFX_OP (object);
  const cudafx_arg *arg;

  if (prop_id == PROP_NOISE_SIGMA)
    {
      /* An output: see class_init. Whoever wrote another value than the σ
       * found (GIMP's dialog on Reset, or from a preset) hears it again. */
      gboolean differs;

      g_mutex_lock (&self->lock);
      differs = self->shown_source && g_value_get_double (value) != self->sigma_shown;
      g_mutex_unlock (&self->lock);
      if (differs)
        op_queue_announce (self);
      return;
    }
  if (prop_id < 1 || prop_id > (guint) cudafx_filters[FILTER_OF (object)].n_args)
    {
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      return;
    }
  arg = table_arg (FILTER_OF (object), prop_id);
  switch (arg->type)
    {
    case CUDAFX_ARG_INT:
      self->args.values[prop_id - 1] = g_value_get_int (value);
      break;
    case CUDAFX_ARG_DOUBLE:
      self->args.values[prop_id - 1] = g_value_get_double (value);
      break;
    case CUDAFX_ARG_BOOLEAN:
      self->args.values[prop_id - 1] = g_value_get_boolean (value);
      break;
    case CUDAFX_ARG_CHOICE:
      self->args.values[prop_id - 1] = g_value_get_enum (value);
      break;
    case CUDAFX_ARG_DOUBLE_ARRAY:
      /* Kept as given, even when it does not parse: the property reads back
       * what was typed, and the render shows the error pattern with the
       * parser's reason (op_prepare) until the text is a kernel. Keeping
       * the last valid kernel instead would, where the text is given once
       * (GIMP copies a filter's settings onto a new operation, a script),
       * filter with the default identity: a filter that silently does
       * nothing. */
      g_free (self->kernel_text);
      self->kernel_text = g_value_dup_string (value);
      break;
    case CUDAFX_ARG_PALETTE:
      g_free (self->palette_path);
      self->palette_path = g_value_dup_string (value);
      break;
    }
}

void
op_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  CudafxOp *self = CUDAFX_OP (object);
  const cudafx_arg *arg;
  double v;

  if (prop_id == PROP_NOISE_SIGMA)
    {
      g_mutex_lock (&self->lock);
      g_value_set_double (value, self->sigma_shown);
      g_mutex_unlock (&self->lock);
      return;
    }
  if (prop_id < 1 || prop_id > (guint) cudafx_filters[FILTER_OF (object)].n_args)
    {
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      return;
    }
  arg = table_arg (FILTER_OF (object), prop_id);
  v = self->args.values[prop_id - 1];
  switch (arg->type)
    {
    case CUDAFX_ARG_INT:
      g_value_set_int (value, (int) v);
      break;
    case CUDAFX_ARG_DOUBLE:
      g_value_set_double (value, v);
      break;
    case CUDAFX_ARG_BOOLEAN:
      g_value_set_boolean (value, v != 0);
      break;
    case CUDAFX_ARG_CHOICE:
      g_value_set_enum (value, (int) v);
      break;
    case CUDAFX_ARG_DOUBLE_ARRAY:
      g_value_set_string (value, self->kernel_text);
      break;
    case CUDAFX_ARG_PALETTE:
      g_value_set_string (value, self->palette_path);
      break;
    }
}
