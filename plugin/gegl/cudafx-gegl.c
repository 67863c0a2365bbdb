/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — the five filters as GEGL operations, one module for gegl-0.4:
 * cudafx:median, cudafx:nl-means, cudafx:quantize, cudafx:convolve and
 * cudafx:nl-bayes. GIMP 3
 * runs them in its own process as live, non-destructive filters; GIMP 2.10's
 * GEGL tool and the `gegl` command use them too.
 *
 * The five types share one class: its class data is the filter, and its
 * properties are made from the engine's argument table (names, ranges,
 * defaults, descriptions; choices as enums), so nothing is declared twice.
 * The custom convolution kernel is a text property spelt as the CLI's
 * --kernel. Values are kept by table position (ui/common/procedures.c) and
 * pixels are read in the format the plug-ins and the CLI read
 * (ui/common/region.c), so every host filters the same values.
 *
 * Whatever GEGL asks for, the pixels equal a whole-image run: area filters
 * read their halo of real neighbours and clamp only at the input's edge;
 * quantize (a palette of the whole input, and error diffusion across it) and
 * the wrap border (the far edge's pixels) compute the whole output once, which
 * GEGL caches; automatic nl-means and nl-bayes estimate the noise σ once on
 * the whole input, cached until that buffer changes, and filter each region
 * with it; GIMP's filter dialog shows that σ (the noise-sigma property).
 * nl-bayes' reference patches lie on a grid of the whole input (the engine's
 * origin_x, origin_y: where the region read lies in it).
 *
 * A zoomed-out view is rendered at a level of detail L > 0 (1/2^L scale):
 * the operation then reads the input and writes the output at that level,
 * as GEGL's level-aware filters do (an operation before it may have computed
 * only that level), and filters the level's pixels with its spatial settings
 * scaled by 2^-L (see levels.c). The pixels then equal a whole-image
 * run on the input scaled to that level with those settings.
 *
 * The engine starts CUDA when an operation is first prepared (on a thread of
 * its own, while GEGL reads the input), never when GEGL loads the module, and
 * falls back to the CPU when CUDA fails.
 *
 * A live filter never silently does nothing. A value GObject can check
 * (a range) is refused where it is set: the property keeps its last valid
 * value and GLib's warning says why. What only a render can find (a kernel
 * text that does not parse, a palette file, a kernel that does not fit its
 * divisor, a colour palette on a grey image, a forced backend that is
 * missing, no memory, an input without bounds) fills the output with the
 * error pattern (error_output.c), never the input, and warns with the
 * reason.
 *
 * The module's files, each one job (operation.h, what they share):
 *   cudafx-gegl.c      the types, their classes and the module's entry points;
 *   properties.c       the properties, and the σ announced to GIMP;
 *   noise.c            automatic mode's noise σ, cached per input buffer;
 *   prepare.c          what GEGL asks before rendering (regions, format, checks);
 *   process.c          a region filtered, its rows moved as the engine asks;
 *   levels.c           levels of detail;
 *   scratch.c          a region's memory kept between calls (huge pages, pinning);
 *   region_move.c      rows moved between buffers and memory on GEGL's threads;
 *   error_output.c     the error pattern;
 *   render_timeline.c  CUDAFX_GEGL_TIMELINE. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>

#include "operation.h"

gpointer op_parent_class;

/* ---- types ---------------------------------------------------------------- */

static void
instance_init (GTypeInstance *instance, gpointer klass)
{
  CudafxOp *self = CUDAFX_OP (instance);

  cudafx_proc_args_init (&self->args, ((CudafxOpClass *) klass)->filter);
  g_mutex_init (&self->lock);
  g_mutex_init (&self->scratch_lock);
  self->shown_level = G_MAXINT;
  g_weak_ref_init (&self->node, NULL);
}

static void
attach (GeglOperation *operation)
{
  GEGL_OPERATION_CLASS (op_parent_class)->attach (operation);
  g_weak_ref_set (&CUDAFX_OP (operation)->node, operation->node);
}

/* nl-means never notifies noise-sigma on the operation: GEGL would render
 * the node again on it, and GIMP writes every property of a filter onto
 * its operation (announce_sigma tells GIMP instead). */
static void
dispatch_properties_changed (GObject *object, guint n_pspecs, GParamSpec **pspecs)
{
  GParamSpec **kept = g_newa (GParamSpec *, n_pspecs);
  guint        n = 0;

  for (guint i = 0; i < n_pspecs; i++)
    if (pspecs[i]->owner_type != G_OBJECT_TYPE (object) || pspecs[i]->param_id != PROP_NOISE_SIGMA)
      kept[n++] = pspecs[i];
  if (n > 0)
    G_OBJECT_CLASS (op_parent_class)->dispatch_properties_changed (object, n, kept);
}

static void
finalize (GObject *object)
{
  CudafxOp *self = CUDAFX_OP (object);

  op_forget_noise (self);
  if (self->announce)
    {
      g_source_destroy (self->announce);
      g_source_unref (self->announce);
    }
  g_weak_ref_clear (&self->node);
  g_mutex_clear (&self->lock);
  g_mutex_clear (&self->scratch_lock);
  cudafx_host_free (self->scratch[0]);
  cudafx_host_free (self->scratch[1]);
  g_free (self->kernel_text);
  g_free (self->palette_path);
  g_free (self->invalid);
  g_free (self->probed_error);
  G_OBJECT_CLASS (op_parent_class)->finalize (object);
}

/* Where each filter goes in GEGL's categories. */
static const char *const categories[CUDAFX_N_FILTERS] = {
  [CUDAFX_FILTER_MEDIAN]   = "blur:noise-reduction",
  [CUDAFX_FILTER_NLMEANS]  = "enhance:noise-reduction",
  [CUDAFX_FILTER_QUANTIZE] = "color",
  [CUDAFX_FILTER_CONVOLVE] = "generic",
  [CUDAFX_FILTER_NLBAYES]  = "enhance:noise-reduction",
};

static void
class_init (gpointer klass, gpointer class_data)
{
  int                       filter = GPOINTER_TO_INT (class_data);
  const cudafx_filter_desc *desc = &cudafx_filters[filter];
  GObjectClass             *object_class = G_OBJECT_CLASS (klass);
  GeglOperationClass       *operation_class = GEGL_OPERATION_CLASS (klass);
  GeglOperationFilterClass *filter_class = GEGL_OPERATION_FILTER_CLASS (klass);
  gchar                    *title = op_plain_label (_(desc->menu_label));
  gchar                     op_name[64];
  const gchar              *name;

  /* GEGL keeps the name's pointer (the other keys it copies). */
  g_snprintf (op_name, sizeof op_name, "cudafx:%s", desc->name);
  name = g_intern_string (op_name);
  op_parent_class = g_type_class_peek_parent (klass);
  ((CudafxOpClass *) klass)->filter = filter;
  object_class->set_property = op_set_property;
  object_class->get_property = op_get_property;
  object_class->finalize = finalize;
  for (int i = 0; i < desc->n_args; i++)
    g_object_class_install_property (object_class, i + 1,
                                     op_arg_pspec (filter, &desc->args[i]));
  /* The σ automatic mode found, an output that GIMP's filter dialog shows
   * greyed out (GIMP's "sensitive" key), in automatic mode only (its
   * "visible" key). Writable all the same, and writing it does nothing:
   * GIMP copies every property of a filter's settings onto its operation
   * (a read-only one made GLib log a critical on each use). Notified
   * through the node (announce_sigma), never the operation, yet not
   * G_PARAM_EXPLICIT_NOTIFY: GIMP's copy of a property keeps its flags, and
   * its settings never notify explicitly, so the dialog would not update. */
  if (op_has_automatic (filter))
    {
      GParamSpec *sigma = gegl_param_spec_double (
        "noise-sigma", _("Noise σ found"),
        _("The noise standard deviation (0–255 scale) that automatic mode found in the whole "
          "input, at the finest zoom shown so far; 0 until the filter has run. Shown only: "
          "writing it has no effect"),
        0, 255, 0, 0, 100, 1.0, G_PARAM_READWRITE);

      gegl_param_spec_double_set_digits (GEGL_PARAM_SPEC_DOUBLE (sigma), 2);
      gegl_param_spec_set_property_key (sigma, "sensitive", "0");
      gegl_param_spec_set_property_key (sigma, "visible", "auto");
      g_object_class_install_property (object_class, PROP_NOISE_SIGMA, sigma);
      object_class->dispatch_properties_changed = dispatch_properties_changed;
    }

  operation_class->attach = attach;
  operation_class->prepare = op_prepare;
  operation_class->get_bounding_box = op_get_bounding_box;
  operation_class->get_required_for_output = op_get_required_for_output;
  /* A cached region makes GEGL keep the node's output in a buffer of its
   * own. Without one, each render's output is a new buffer whose tiles GEGL
   * allocates as the region is set into it, which costs several times a
   * set into tiles that exist; with one, a render sets its rows into the
   * tiles of the render before, and a region drawn again at the same
   * settings (the canvas scrolled back) comes from the cache
   * (docs/BENCHMARKS.md, "GEGL operations: every output cached").
   * The cost is the output's memory, in GEGL's tile cache, which GIMP
   * bounds and swaps. */
  operation_class->get_cached_region = op_get_cached_region;
  /* The engine spreads a region over all cores or the GPU itself: GEGL's
   * splitting it over threads would only add halos and contention. */
  operation_class->threaded = FALSE;
  filter_class->process = op_process;

  gegl_operation_class_set_keys (operation_class,
                                 "name", name,
                                 "title", title,
                                 "categories", categories[filter],
                                 "description", _(desc->blurb),
                                 "gimp:menu-label", _(desc->menu_label),
                                 NULL);
  /* Quantize keeps the procedure's menu entry: its dialog can also make a
   * palette resource and convert the image to indexed mode, which a live
   * filter cannot. */
  if (filter != CUDAFX_FILTER_QUANTIZE)
    gegl_operation_class_set_key (operation_class, "gimp:menu-path", desc->menu_path);
  g_free (title);
}

static const GeglModuleInfo module_info = { GEGL_MODULE_ABI_VERSION };

G_MODULE_EXPORT const GeglModuleInfo *
gegl_module_query (GTypeModule *module)
{
  return &module_info;
}

/* Translations: the catalogs sit in locale/ beside the module, as beside the plug-ins. */
static void
bind_translations (void)
{
  Dl_info where;

  if (dladdr ((void *) bind_translations, &where) && where.dli_fname)
    g_free (cudafx_proc_bind_translations (where.dli_fname));
}

G_MODULE_EXPORT gboolean
gegl_module_register (GTypeModule *module)
{
  static const char *const type_names[CUDAFX_N_FILTERS] = {
    [CUDAFX_FILTER_MEDIAN]   = "CudafxOpMedian",
    [CUDAFX_FILTER_NLMEANS]  = "CudafxOpNlMeans",
    [CUDAFX_FILTER_QUANTIZE] = "CudafxOpQuantize",
    [CUDAFX_FILTER_CONVOLVE] = "CudafxOpConvolve",
    [CUDAFX_FILTER_NLBAYES]  = "CudafxOpNlBayes",
  };

  bind_translations ();
  for (int f = 0; f < CUDAFX_N_FILTERS; f++)
    {
      for (int i = 0; i < cudafx_filters[f].n_args; i++)
        if (cudafx_filters[f].args[i].type == CUDAFX_ARG_CHOICE)
          op_choice_types[f][i] = op_choice_enum (module, f, &cudafx_filters[f].args[i]);
    }
  for (int f = 0; f < CUDAFX_N_FILTERS; f++)
    {
      const GTypeInfo info = {
        sizeof (CudafxOpClass), NULL, NULL, class_init, NULL, GINT_TO_POINTER (f),
        sizeof (CudafxOp), 0, instance_init, NULL
      };
      gegl_module_register_type (module, GEGL_TYPE_OPERATION_AREA_FILTER,
                                 type_names[f], &info, 0);
    }
  return TRUE;
}
