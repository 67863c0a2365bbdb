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
 * scaled by 2^-L (see at_level_args). The pixels then equal a whole-image
 * run on the input scaled to that level with those settings.
 *
 * The engine starts CUDA when an operation is first prepared (on a thread of
 * its own, while GEGL reads the input), never when GEGL loads the module, and
 * falls back to the CPU when CUDA fails.
 *
 * A live filter never silently does nothing. A value GObject can check
 * (a range, the kernel's text) is refused where it is set: the property
 * keeps its last valid value and a warning says why. What only a render
 * can find (a palette file, a kernel that does not fit its divisor, a
 * colour palette on a grey image, a forced backend that is missing, no
 * memory, an input without bounds) fills the output with the error
 * pattern (error_output), never the input, and warns with the reason. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>

#include <gegl.h>
#include <gegl-plugin.h>

#include "i18n.h"
#include "procedures.h"
#include "region.h"

typedef struct
{
  GeglOperationAreaFilter parent_instance;

  cudafx_proc_args args;        /* the table's values by position */
  gchar           *kernel_text; /* convolve: "a,b,c;d,e,f;g,h,i", "" for the default */
  gchar           *palette_path; /* quantize: a GIMP palette file (.gpl), "" for none */
  gchar           *invalid;     /* why prepare found the settings unusable, else NULL */
  const Babl      *format;      /* what the engine reads and writes (prepare) */

  /* Automatic nl-means and nl-bayes: the noise σ and model of the input buffer
   * noise_source (held weakly; cleared when it changes or goes), and the σ
   * that the noise-sigma property shows: the one found at the finest level
   * of detail rendered on shown_source (an identity, never dereferenced;
   * shown_level G_MAXINT once that buffer changed or went), so that zooming
   * out keeps the full-size image's σ and zooming in refines it. */
  GMutex           lock;
  GeglBuffer      *noise_source;
  GeglRectangle    noise_extent; /* at noise_level */
  int              noise_level;
  double           noise_sigma;
  cudafx_noise_model noise_model;
  gulong           noise_changed;
  double           sigma_shown;
  gconstpointer    shown_source;
  int              shown_level;

  /* The node this operation is attached to, for announcing a new σ from
   * the main loop: weak, because GIMP may free the node (and with it drop
   * this operation) before the main loop runs (see announce_sigma). */
  GWeakRef         node;
  /* Whether the whole input of this extent (level 0) was found not to fit
   * in memory (whole_fits, or a run that ran out), so that GEGL is asked
   * for the regions wanted only; under lock. */
  gboolean         whole_failed;
  GeglRectangle    whole_failed_box;

  /* The pending announcement (see queue_announce), NULL or destroyed when none. */
  GSource         *announce;

  /* The settings and format prepare last checked with a one-pixel run
   * (probe_settings), and what it found: NULL or why they cannot run. */
  cudafx_proc_args probed_args;
  const Babl      *probed_format;
  gboolean         probed;
  gchar           *probed_error;

  /* The region's pixels in and out, kept between calls: a large region's
   * fresh memory costs its page faults on every call (on a 12 MP image,
   * more than the GPU's work), and pinning it (cudafx_host_alloc, once CUDA
   * has started) lets the GPU copy it without staging. Taken with a
   * try-lock; a second caller at the same time allocates its own. */
  GMutex           scratch_lock;
  guint8          *scratch[2];
  gsize            scratch_size[2];
  gboolean         scratch_pinnable[2]; /* whether pinning was possible when taken */
  gboolean         scratch_pinned_late; /* pin_scratch has run */
} CudafxOp;

typedef struct
{
  GeglOperationAreaFilterClass parent_class;
  int                          filter;
} CudafxOpClass;

/* Property ids: table position + 1, then the noise σ automatic mode found. */
#define PROP_NOISE_SIGMA (CUDAFX_PROC_MAX_ARGS + 1)

static gpointer parent_class;

#define CUDAFX_OP(obj) ((CudafxOp *) (obj))
#define FILTER_OF(obj) (((CudafxOpClass *) G_OBJECT_GET_CLASS (obj))->filter)

static const cudafx_arg *
table_arg (int filter, guint prop_id)
{
  return &cudafx_filters[filter].args[prop_id - 1];
}

/* ---- properties ------------------------------------------------------------ */

/* "_Median (GPU)..." as a title: "Median (GPU)". */
static gchar *
plain_label (const char *label)
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
static GType
choice_enum (GTypeModule *module, int filter, const cudafx_arg *arg)
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
static gchar *
default_kernel_text (void)
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
static GType choice_types[CUDAFX_N_FILTERS][CUDAFX_PROC_MAX_ARGS];

static GParamSpec *
arg_pspec (int filter, const cudafx_arg *arg)
{
  const GParamFlags flags = G_PARAM_READWRITE | G_PARAM_CONSTRUCT;
  const char *nick = _(arg->label), *blurb = _(arg->blurb);
  gchar *label = plain_label (nick);
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
                                 choice_types[filter][arg - cudafx_filters[filter].args],
                                 (int) arg->def, flags);
      break;
    case CUDAFX_ARG_DOUBLE_ARRAY:
      {
        gchar *def = default_kernel_text ();
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
static void
queue_announce (CudafxOp *self)
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

static void
set_property (GObject *object, guint prop_id, const GValue *value, GParamSpec *pspec)
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
        queue_announce (self);
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
      {
        /* Refused where it is set, as GObject refuses a number out of its
         * range: the kernel keeps its last valid text. */
        const gchar *text = g_value_get_string (value);
        double       taps[CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE];
        int          size = 0;

        if (text && *text && cudafx_kernel_parse (text, taps, &size) != CUDAFX_OK)
          {
            g_warning ("cudafx:%s: %s; the kernel stays \"%s\"",
                       cudafx_filters[FILTER_OF (object)].name, cudafx_error_message (),
                       self->kernel_text ? self->kernel_text : "");
            break;
          }
        g_free (self->kernel_text);
        self->kernel_text = g_strdup (text);
      }
      break;
    case CUDAFX_ARG_PALETTE:
      g_free (self->palette_path);
      self->palette_path = g_value_dup_string (value);
      break;
    }
}

static void
get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
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

/* ---- the noise σ of automatic nl-means and nl-bayes --------------------------- */

static void
noise_source_gone (gpointer data, GObject *where_it_was)
{
  CudafxOp *self = data;

  g_mutex_lock (&self->lock);
  self->noise_source = NULL;
  self->shown_level = G_MAXINT;
  g_mutex_unlock (&self->lock);
}

/* Called with the lock held. */
static void
forget_noise (CudafxOp *self)
{
  if (self->noise_source)
    {
      g_signal_handler_disconnect (self->noise_source, self->noise_changed);
      g_object_weak_unref (G_OBJECT (self->noise_source), noise_source_gone, self);
      self->noise_source = NULL;
    }
}

static void
noise_source_changed (GeglBuffer *buffer, const GeglRectangle *rect, CudafxOp *self)
{
  g_mutex_lock (&self->lock);
  forget_noise (self);
  self->shown_level = G_MAXINT;
  g_mutex_unlock (&self->lock);
}

/* The noise σ and model of the whole input at level (what a whole-image run
 * on that level's pixels estimates; extent is in its coordinates), from the
 * cache when input, level and extent are those it was found on. memory:
 * room for extent's pixels (the region's scratch, whose pages the first
 * region then reuses), or NULL to take fresh memory. */
static gboolean
noise_sigma (CudafxOp *self, GeglBuffer *input, const GeglRectangle *extent, int level,
             guint8 *memory, double *sigma, cudafx_noise_model *model, GError **error)
{
  gboolean ok = TRUE, announce = FALSE;

  g_mutex_lock (&self->lock);
  if (self->noise_source != input || self->noise_level != level
      || !gegl_rectangle_equal (&self->noise_extent, extent))
    {
      cudafx_image        image;
      cudafx_options      options;
      cudafx_nlmeans_info info;
      cudafx_status       status;

      forget_noise (self);
      if (memory)
        cudafx_region_read_into (input, extent, level, self->format, memory, &image);
      else
        ok = cudafx_region_read_as (input, extent, level, self->format, &image, error);
      if (ok)
        {
          cudafx_options_init (&options);
          status = cudafx_nlmeans_estimate (&image, &options, &info);
          if (!memory)
            g_free (image.data);
          if (status != CUDAFX_OK)
            {
              g_set_error_literal (error, CUDAFX_PROC_ERROR, status, cudafx_error_message ());
              ok = FALSE;
            }
        }
      if (ok)
        {
          self->noise_source = input;
          self->noise_extent = *extent;
          self->noise_level = level;
          self->noise_sigma = info.sigma;
          self->noise_model = info.noise;
          g_object_weak_ref (G_OBJECT (input), noise_source_gone, self);
          self->noise_changed = gegl_buffer_signal_connect (input, "changed",
                                                            G_CALLBACK (noise_source_changed),
                                                            self);
          if (input != self->shown_source || level <= self->shown_level)
            {
              /* The first always: GIMP's dialog may start with another σ. */
              announce = !self->shown_source || info.sigma != self->sigma_shown;
              self->sigma_shown = info.sigma;
              self->shown_source = input;
              self->shown_level = level;
            }
        }
    }
  *sigma = self->noise_sigma;
  *model = self->noise_model;
  g_mutex_unlock (&self->lock);
  if (announce)
    queue_announce (self);
  return ok;
}

/* An engine message without the filter's name in front ("convolve: ..."),
 * which the operation's own "cudafx:convolve: " already says. */
static const gchar *
without_name (int filter, const gchar *message)
{
  gsize n = strlen (cudafx_filters[filter].name);

  if (!strncmp (message, cudafx_filters[filter].name, n) && !strncmp (message + n, ": ", 2))
    return message + n + 2;
  return message;
}

/* ---- what GEGL asks ---------------------------------------------------------- */

/* Whether the filter has an automatic mode (nl-means, nl-bayes: their
 * "auto" argument), whose noise estimate this operation makes on the whole
 * input. */
static gboolean
has_automatic (int filter)
{
  return cudafx_proc_arg_index (filter, "auto") >= 0;
}

static gboolean
automatic_noise (CudafxOp *self, int filter)
{
  return has_automatic (filter) && self->args.values[cudafx_proc_arg_index (filter, "auto")] != 0;
}

/* Whether every region reads the whole input: for the noise estimate, and
 * for nl-bayes, whose halo at a level of detail can be more than the
 * level-0 halo GEGL prepared at that scale (its plan follows the noise,
 * not the scale). */
static gboolean
whole_input (CudafxOp *self, int filter)
{
  return automatic_noise (self, filter) || filter == CUDAFX_FILTER_NLBAYES;
}

/* Whether each output pixel depends on the whole input: the whole output is
 * then computed at once, and GEGL caches all of it. */
static gboolean
whole_output (CudafxOp *self, int filter)
{
  return filter == CUDAFX_FILTER_QUANTIZE
         || (filter == CUDAFX_FILTER_CONVOLVE
             && self->args.values[cudafx_proc_arg_index (filter, "border")]
                  == CUDAFX_BORDER_WRAP);
}

static gpointer
warm_up (gpointer data)
{
  cudafx_backend_warm_up ();
  return NULL;
}

/* The engine's start-up (for CUDA a few hundred milliseconds) on a thread
 * of its own, once per process, so that it overlaps what GEGL does before
 * the first region reaches the engine; that call waits for it to finish. */
static void
start_engine (void)
{
  static gsize started = 0;

  if (g_once_init_enter (&started))
    {
      GThread *thread = g_thread_try_new ("cudafx-warm-up", warm_up, NULL, NULL);

      if (thread)
        g_thread_unref (thread);
      g_once_init_leave (&started, 1);
    }
}

/* The largest input a filter that computes its whole output at once (or
 * automatic nl-means, which estimates the noise on all of it) takes: GIMP's
 * own largest image side, and a gigapixel. Beyond them, and for an input
 * without bounds (gegl:checkerboard, say), the output is the error
 * pattern at once, instead of a render that copies or allocates for
 * minutes, or for ever. */
#define WHOLE_MAX_SIDE   524288
#define WHOLE_MAX_PIXELS ((gint64) 1 << 30)

/* Why a whole-input filter cannot take an input of box, or NULL. Free with g_free. */
static gchar *
unbounded_input (CudafxOp *self, const GeglRectangle *box)
{
  int filter = FILTER_OF (self);

  if (!box || !(whole_output (self, filter) || whole_input (self, filter)))
    return NULL;
  if (gegl_rectangle_is_infinite_plane (box))
    return g_strdup_printf (_("cudafx:%s: the input has no bounds (an endless source such as "
                              "gegl:checkerboard), and this filter needs all of it: crop it first"),
                            cudafx_filters[filter].name);
  if (box->width > WHOLE_MAX_SIDE || box->height > WHOLE_MAX_SIDE
      || (gint64) box->width * box->height > WHOLE_MAX_PIXELS)
    return g_strdup_printf (_("cudafx:%s: the input is %d×%d pixels; this filter computes the "
                              "whole of it at once, at most %d pixels a side and %d megapixels"),
                            cudafx_filters[filter].name, box->width, box->height, WHOLE_MAX_SIDE,
                            (int) (WHOLE_MAX_PIXELS / 1000000));
  return NULL;
}

/* Whether a filter that reads its whole input (whole_output, automatic
 * nl-means) can take all of box at once: memory for its input and output
 * regions can be had (address space, as ulimit -v limits it: taking it
 * without touching it costs nothing). Asked by get_required_for_output,
 * whose answer holds for the render (whole_failed): when it cannot, GEGL
 * is asked for the region wanted only, and process fills that with the
 * error pattern, so that neither the input nor the pattern is made larger
 * than what was wanted (filling a whole large image could need the memory
 * that was missing). */
static gboolean
whole_fits (CudafxOp *self, const GeglRectangle *box)
{
  const Babl *format = self->format ? self->format : babl_format ("R'G'B'A float");
  gsize       bytes;
  gpointer    room = NULL;

  gboolean    fits = FALSE;

  if (g_size_checked_mul (&bytes, (gsize) box->width * 2,
                          (gsize) box->height * babl_format_get_bytes_per_pixel (format)))
    {
      /* The scratch kept from an earlier render is reused: memory that
       * is already there need not be found again. A glance without the
       * lock: at worst memory is asked for that was not needed. */
      fits = self->scratch_size[0] >= bytes / 2 && self->scratch_size[1] >= bytes / 2;
      if (!fits && (room = g_try_malloc (bytes)))
        fits = TRUE;
      g_free (room);
    }
  g_mutex_lock (&self->lock);
  self->whole_failed = !fits;
  self->whole_failed_box = *box;
  g_mutex_unlock (&self->lock);
  return fits;
}

/* Whether the whole of box was found not to fit (whole_fits, or a run that
 * ran out of memory). */
static gboolean
whole_failed (CudafxOp *self, const GeglRectangle *box)
{
  gboolean failed;

  g_mutex_lock (&self->lock);
  failed = self->whole_failed && gegl_rectangle_equal (&self->whole_failed_box, box);
  g_mutex_unlock (&self->lock);
  return failed;
}

/* Whether the kernel text is the default one (the identity), by its taps:
 * any other is a kernel given. */
static gboolean
default_kernel (const gchar *text)
{
  double taps[CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE];
  double def[CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE];
  int    size = 0, def_size = 0;
  gchar *def_text = default_kernel_text ();
  gboolean same;

  same = !text || !*text
         || (cudafx_kernel_parse (text, taps, &size) == CUDAFX_OK
             && cudafx_kernel_parse (def_text, def, &def_size) == CUDAFX_OK && size == def_size
             && memcmp (taps, def, sizeof taps[0] * size * size) == 0);
  g_free (def_text);
  return same;
}

/* The settings run on one pixel of format, on the CPU: the engine's own
 * checks of what depends on more than one value (a divisor too small for
 * the kernel, a colour palette on a grey image), found when the settings
 * are made rather than by each region. Remembered for the settings and
 * format last probed. NULL, or why they cannot run (free with g_free). */
static gchar *
probe_settings (CudafxOp *self, const Babl *format)
{
  int              filter = FILTER_OF (self);
  cudafx_proc_args args = self->args;
  float            in[4] = { 0.5f, 0.5f, 0.5f, 1 }, out[4];
  guint8           in8[4] = { 128, 128, 128, 255 }, out8[4];
  gboolean         u8 = babl_format_get_type (format, 0) == babl_type ("u8");
  cudafx_image     src = { 0 }, dst;
  cudafx_options   options;
  GError          *error = NULL;

  if (filter != CUDAFX_FILTER_CONVOLVE && filter != CUDAFX_FILTER_QUANTIZE)
    return NULL;
  args.values[cudafx_proc_arg_index (filter, "backend")] = CUDAFX_BACKEND_CPU;
  if (self->probed && self->probed_format == format
      && memcmp (&self->probed_args, &args, sizeof args) == 0)
    return g_strdup (self->probed_error);
  src.data = u8 ? (void *) in8 : (void *) in;
  src.width = src.height = 1;
  src.channels = babl_format_get_n_components (format);
  src.has_alpha = babl_format_has_alpha (format);
  src.type = u8 ? CUDAFX_U8 : CUDAFX_F32;
  src.stride = (gsize) babl_format_get_bytes_per_pixel (format);
  dst = src;
  dst.data = u8 ? (void *) out8 : (void *) out;
  cudafx_options_init (&options);
  options.threads = 1;
  g_free (self->probed_error);
  self->probed_error = NULL;
  if (!cudafx_proc_run (&args, &src, &dst, &options, NULL, &error))
    {
      self->probed_error = g_strdup (error->message);
      g_error_free (error);
    }
  self->probed_args = args;
  self->probed_format = format;
  self->probed = TRUE;
  return g_strdup (self->probed_error);
}

static void
prepare (GeglOperation *operation)
{
  CudafxOp                *self = CUDAFX_OP (operation);
  GeglOperationAreaFilter *area = GEGL_OPERATION_AREA_FILTER (operation);
  const Babl              *source = gegl_operation_get_source_format (operation, "input");
  GError                  *error = NULL;
  int                      halo = 0;

  start_engine ();
  g_clear_pointer (&self->invalid, g_free);
  self->format = cudafx_region_format_of (source ? source : babl_format ("R'G'B'A float"),
                                          &error);
  if (!self->format)
    self->format = babl_format ("R'G'B'A float");
  if (!error && FILTER_OF (self) == CUDAFX_FILTER_CONVOLVE
      && self->args.values[cudafx_proc_arg_index (CUDAFX_FILTER_CONVOLVE, "preset")] != CUDAFX_PRESET_CUSTOM
      && !default_kernel (self->kernel_text))
    {
      /* As the CLI's --kernel with another --preset: the kernel would be
       * ignored without a word. */
      const cudafx_arg *preset = cudafx_arg_find (&cudafx_filters[CUDAFX_FILTER_CONVOLVE], "preset");

      g_set_error (&error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG,
                   _("a kernel is given with preset %s, which has its own: set preset to custom to "
                     "use the kernel, or the kernel back to its default to use the preset"),
                   preset->choices[(int) self->args.values[preset - cudafx_filters[CUDAFX_FILTER_CONVOLVE].args]].nick);
    }
  if (!error && FILTER_OF (self) == CUDAFX_FILTER_CONVOLVE)
    {
      double taps[CUDAFX_MAX_KERNEL_SIZE * CUDAFX_MAX_KERNEL_SIZE];
      int    size = 0;

      if (self->kernel_text && *self->kernel_text
          && cudafx_kernel_parse (self->kernel_text, taps, &size) != CUDAFX_OK)
        g_set_error_literal (&error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG,
                             cudafx_error_message ());
      else
        cudafx_proc_set_kernel (&self->args, taps, (gsize) size * size, &error);
    }
  self->args.has_palette = FALSE;
  if (!error && FILTER_OF (self) == CUDAFX_FILTER_QUANTIZE && self->palette_path && *self->palette_path)
    {
      if (cudafx_gpl_load (self->palette_path, &self->args.palette) != CUDAFX_OK)
        g_set_error_literal (&error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG, cudafx_error_message ());
      else
        self->args.has_palette = TRUE;
    }
  if (!error)
    cudafx_proc_halo (&self->args, &halo, &error);
  if (!error)
    {
      gchar *why = probe_settings (self, self->format);

      if (why)
        g_set_error_literal (&error, CUDAFX_PROC_ERROR, CUDAFX_ERR_INVALID_ARG, why);
      g_free (why);
    }
  if (error)
    {
      self->invalid = g_strdup_printf ("cudafx:%s: %s", cudafx_filters[FILTER_OF (self)].name,
                                       without_name (FILTER_OF (self), error->message));
      g_error_free (error);
      halo = 0;
    }
  area->left = area->right = area->top = area->bottom = halo;
  gegl_operation_set_format (operation, "input", self->format);
  gegl_operation_set_format (operation, "output", self->format);
}

static GeglRectangle
get_required_for_output (GeglOperation *operation, const gchar *input_pad,
                         const GeglRectangle *roi)
{
  CudafxOp      *self = CUDAFX_OP (operation);
  GeglRectangle *in_box = gegl_operation_source_get_bounding_box (operation, "input");

  gchar         *unbounded = unbounded_input (self, in_box);

  /* An input it cannot take is never asked for whole (process refuses it). */
  if (unbounded)
    {
      g_free (unbounded);
      return *roi;
    }
  if (in_box && (whole_output (self, FILTER_OF (self)) || whole_input (self, FILTER_OF (self))))
    return whole_fits (self, in_box) ? *in_box : *roi;
  return GEGL_OPERATION_CLASS (parent_class)->get_required_for_output (operation, input_pad, roi);
}

/* The input's extent: the filters keep the image's size (an area filter's
 * default would grow it by the halo). */
static GeglRectangle
get_bounding_box (GeglOperation *operation)
{
  GeglRectangle *in_box = gegl_operation_source_get_bounding_box (operation, "input");

  return in_box ? *in_box : (GeglRectangle) { 0, 0, 0, 0 };
}

/* The region GEGL keeps: all of the output where it is computed whole,
 * else the region asked for. */
static GeglRectangle
get_cached_region (GeglOperation *operation, const GeglRectangle *roi)
{
  CudafxOp      *self = CUDAFX_OP (operation);
  GeglRectangle  box = gegl_operation_get_bounding_box (operation);
  gchar         *unbounded = unbounded_input (self, &box);


  /* Caching the whole output makes GEGL ask process for all of it. */
  if (!whole_output (self, FILTER_OF (self)) || unbounded || !whole_fits (self, &box))
    {
      g_free (unbounded);
      return *roi;
    }
  return box;
}

/* ---- levels of detail ------------------------------------------------------ */

/* r (level-0 coordinates) at level: both ends rounded down, as GEGL's own
 * level-aware filters (gblur-1d) do, so that the chunks of a region tile
 * that level's rectangle. */
static GeglRectangle
at_level (const GeglRectangle *r, int level)
{
  int x0 = r->x >> level, y0 = r->y >> level;

  return (GeglRectangle) { x0, y0, ((r->x + r->width) >> level) - x0,
                           ((r->y + r->height) >> level) - y0 };
}

/* The settings of args for the pixels of level L: window radii scaled by
 * 2^-L and rounded down, which keeps each window inside what GEGL prepared
 * for the level-0 halo (a rectangle grown by h at level 0 covers the level
 * rectangle grown by h >> L): an operation before this one may have
 * computed only that much. FALSE when nothing is left of the window at
 * that scale: the level's input is then its output. Automatic nl-means
 * picks its radii from the noise it finds at the level (the whole input is
 * read, so any radius fits); nl-bayes too, and manual nl-bayes filters the
 * noise its σ leaves at the level (each level halves the one before in both
 * directions, averaging four pixels: σ / 2^L), reading the whole input too;
 * quantize has no window. A convolution's
 * Gaussian preset scales σ (reduced, if need be, until its kernel fits);
 * other kernels are per pixel whatever the scale and keep their taps, so
 * they read their own radius at the level (exact on a layer, whose pixels
 * GEGL gives at every level). */
static gboolean
at_level_args (cudafx_proc_args *args, int level, int halo)
{
  int          f = args->filter;
  double      *v = args->values;
  const double scale = 1.0 / (1 << level);
  const int    budget = halo >> level;

  if (level == 0)
    return TRUE;
  switch (f)
    {
    case CUDAFX_FILTER_MEDIAN:
      {
        int r = cudafx_proc_arg_index (f, "radius");

        v[r] = (int) v[r] >> level;
        return v[r] >= 1;
      }
    case CUDAFX_FILTER_NLMEANS:
      {
        int p = cudafx_proc_arg_index (f, "patch-radius");
        int s = cudafx_proc_arg_index (f, "search-radius");

        if (v[cudafx_proc_arg_index (f, "auto")] != 0)
          return TRUE;
        v[p] = MAX (1, (int) v[p] >> level);
        v[s] = MIN ((int) v[s] >> level, budget - (int) v[p]);
        return v[s] >= 1;
      }
    case CUDAFX_FILTER_NLBAYES:
      {
        int g = cudafx_proc_arg_index (f, "sigma");

        v[g] = MAX (v[g] * scale, cudafx_proc_arg (f, g)->min);
        return TRUE;
      }
    case CUDAFX_FILTER_CONVOLVE:
      {
        int    g = cudafx_proc_arg_index (f, "sigma");
        double sigma;

        if (v[cudafx_proc_arg_index (f, "preset")] != CUDAFX_PRESET_GAUSSIAN)
          return TRUE;
        if (budget < 1)
          return FALSE;
        /* The engine's Gaussian reaches ceil (3σ) pixels. */
        sigma = MAX (v[g] * scale, cudafx_proc_arg (f, g)->min);
        if (ceil (3 * sigma) > budget)
          sigma = budget / 3.0;
        while (ceil (3 * sigma) > budget)
          sigma = nextafter (sigma, 0);
        v[g] = sigma;
        return TRUE;
      }
    }
  return TRUE;
}

/* Copies roi (level-0 coordinates) of input to output at level: what a
 * setting that does nothing at that level (a radius of 0 pixels once
 * scaled) gives. FALSE if there was no memory for it. */
static gboolean
pass_through (GeglBuffer *input, GeglBuffer *output, const GeglRectangle *roi, int level)
{
  GeglRectangle r = at_level (roi, level);
  const Babl   *format = gegl_buffer_get_format (input);
  guint8       *pixels;

  if (level == 0)
    {
      gegl_buffer_copy (input, roi, GEGL_ABYSS_NONE, output, roi);
      return TRUE;
    }
  if (gegl_rectangle_is_empty (&r))
    return TRUE;
  pixels = g_try_malloc ((gsize) r.width * r.height * babl_format_get_bytes_per_pixel (format));
  if (!pixels)
    return FALSE;
  gegl_buffer_get (input, &r, 1.0 / (1 << level), format, pixels, GEGL_AUTO_ROWSTRIDE,
                   GEGL_ABYSS_NONE);
  gegl_buffer_set (output, &r, level, format, pixels, GEGL_AUTO_ROWSTRIDE);
  g_free (pixels);
  return TRUE;
}

/* The error pattern's cells: ERROR_CELL pixels square, opaque magenta and
 * black, on the level's pixel grid. */
#define ERROR_CELL 16
/* Pixels of error pattern written at most where memory failed: 64 MB of
 * R'G'B'A u8. */
#define ERROR_FILL_MAX ((gint64) 16 << 20)

static inline int
error_cell (int v)
{
  return (v >= 0 ? v : v - (ERROR_CELL - 1)) / ERROR_CELL;
}

/* Pixels x, y of the pattern (level coordinates) into rgba, as R'G'B'A float. */
static void
error_pixels (float *rgba, int x, int y, int width, int height)
{
  static const float magenta[4] = { 1, 0, 1, 1 }, black[4] = { 0, 0, 0, 1 };

  for (int j = 0; j < height; j++)
    for (int i = 0; i < width; i++)
      memcpy (rgba + ((gsize) j * width + i) * 4,
              (error_cell (x + i) + error_cell (y + j)) & 1 ? black : magenta, sizeof magenta);
}

/* Fills roi (level-0 coordinates) of output at level with the error
 * pattern: a filter that cannot run shows that it did not, where GIMP's
 * canvas and a saved file show it, instead of the unfiltered input that
 * looks like a filter doing nothing (GEGL's own gegl:load likewise shows a
 * message in place of a file it cannot read). Needs little memory, since
 * memory may be what failed. */
static void
error_output (GeglBuffer *output, const GeglRectangle *roi, int level)
{
  GeglRectangle r = at_level (roi, level);
  const Babl   *rgba = babl_format ("R'G'B'A float");
  float        *band;
  int           rows = ERROR_CELL;

  if (gegl_rectangle_is_empty (&r))
    return;
  if (level == 0)
    {
      /* A tile of the pattern repeated: GEGL copies it tile by tile, quick
       * even over a whole-output filter's region of hundreds of megapixels. */
      gint          tile_width = 0, tile_height = 0;
      GeglRectangle tile = { 0, 0, 2 * ERROR_CELL, 2 * ERROR_CELL };
      float        *pixels;

      g_object_get (output, "tile-width", &tile_width, "tile-height", &tile_height, NULL);
      if (tile_width > 0 && tile_width % (2 * ERROR_CELL) == 0 && tile_width <= 4096)
        tile.width = tile_width;
      if (tile_height > 0 && tile_height % (2 * ERROR_CELL) == 0 && tile_height <= 4096)
        tile.height = tile_height;
      pixels = g_try_malloc ((gsize) tile.width * tile.height * 4 * sizeof (float));
      if (pixels)
        {
          GeglBuffer *pattern = gegl_buffer_new (&tile, gegl_buffer_get_format (output));

          error_pixels (pixels, 0, 0, tile.width, tile.height);
          gegl_buffer_set (pattern, &tile, 0, rgba, pixels, GEGL_AUTO_ROWSTRIDE);
          g_free (pixels);
          gegl_buffer_set_pattern (output, &r, pattern, 0, 0);
          g_object_unref (pattern);
          return;
        }
    }
  /* At a level of detail (or without memory for a tile): a band of rows at a time. */
  band = g_try_malloc ((gsize) r.width * rows * 4 * sizeof (float));
  if (!band && (rows = 1))
    band = g_try_malloc ((gsize) r.width * 4 * sizeof (float));
  if (!band)
    return;
  for (int y = r.y; y < r.y + r.height; y += rows)
    {
      int           n = MIN (rows, r.y + r.height - y);
      GeglRectangle part = { r.x, y, r.width, n };

      error_pixels (band, r.x, y, r.width, n);
      gegl_buffer_set (output, &part, level, rgba, band, GEGL_AUTO_ROWSTRIDE);
    }
  g_free (band);
}

/* CUDAFX_GEGL_TIMELINE=1: one line on stderr per region filtered, the
 * milliseconds from its start to each step (the σ, the read, the engine's
 * start, each band written as the engine reports rows, the engine's end),
 * to see where an operation's time goes beyond the GPU's work and the
 * movement it cannot avoid. */
typedef struct
{
  gboolean on;
  gint64   t0;
  GString *line;
} timeline;

static void
timeline_start (timeline *t, const char *filter, const GeglRectangle *roi)
{
  static int on = -1;

  if (on < 0)
    on = g_getenv ("CUDAFX_GEGL_TIMELINE") != NULL;
  t->on = on;
  if (!on)
    return;
  t->t0 = g_get_monotonic_time ();
  t->line = g_string_new (NULL);
  g_string_printf (t->line, "cudafx-timeline %s %dx%d+%d+%d:", filter, roi->width, roi->height,
                   roi->x, roi->y);
}

static void
timeline_mark (timeline *t, const char *what)
{
  if (t->on)
    g_string_append_printf (t->line, " %s %.2f", what, (g_get_monotonic_time () - t->t0) / 1000.0);
}

/* The engine's progress as marks ("p0.42 3.10": the fraction it reported
 * and when), so that a call's own steps (quantize's seeding, its Lloyd
 * passes) show between the read and the first rows. The engine calls it on
 * the calling thread. */
static int
timeline_progress (double fraction, void *data)
{
  char what[16];

  g_snprintf (what, sizeof what, "p%.2f", fraction);
  timeline_mark (data, what);
  return 0;
}

static void
timeline_end (timeline *t)
{
  if (!t->on)
    return;
  timeline_mark (t, "end");
  g_printerr ("%s\n", t->line->str);
  g_string_free (t->line, TRUE);
}

typedef struct
{
  guint8 *p;
  gsize   bytes;
} region_span;

/* Huge pages: cudafx_host_alloc_plain's memory is made of them where the
 * system gives them. */
#define HUGE_PAGE ((guintptr) 2 << 20)

/* Huge pages that bytes (> 0) at p touch. */
static guintptr
huge_pages (const region_span *s)
{
  return ((guintptr) s->p + s->bytes - 1) / HUGE_PAGE + 1 - (guintptr) s->p / HUGE_PAGE;
}

/* Thread i of n: its share of the huge pages under s, each page cleared by
 * one thread only. */
static void
clear_part (gint i, gint n, gpointer data)
{
  const region_span *s = data;
  guintptr           start = (guintptr) s->p, end = start + s->bytes, first = start / HUGE_PAGE;
  guintptr           a = MAX (start, (first + huge_pages (s) * i / n) * HUGE_PAGE);
  guintptr           b = MIN (end, (first + huge_pages (s) * (i + 1) / n) * HUGE_PAGE);

  if (b > a)
    memset ((void *) a, 0, b - a);
}

/* Bytes at p cleared on GEGL's threads, a huge page or more each, so that
 * registering them with the driver then only pins pages already there,
 * several times quicker than pages it must make itself, and GEGL's threads
 * clear them several times faster than one (docs/BENCHMARKS.md,
 * "GEGL operations: region memory and the first call"). */
static void
clear_region (guint8 *p, gsize bytes)
{
  region_span s = { p, bytes };

  if (bytes)
    gegl_parallel_distribute ((gint) MIN (huge_pages (&s), (guintptr) G_MAXINT), clear_part, &s);
}

/* Memory as cudafx_host_alloc makes it once CUDA has started (pinned, or
 * plain if pinning fails), its pages cleared on GEGL's threads. */
static guint8 *
pinned_memory (gsize bytes)
{
  guint8 *p = cudafx_host_alloc_plain (bytes);

  if (p)
    {
      clear_region (p, bytes);
      cudafx_host_pin (p, bytes);
    }
  return p;
}

/* bytes of scratch i when the caller holds scratch_lock, else fresh memory
 * (*fresh set); NULL if there is not enough memory. Plain scratch grows to
 * whole bytes (the input's at that level) at once, when the system has
 * them: GIMP asks for a merge in chunks of growing size, and memory taken
 * anew for each chunk costs its page faults again, while pages never
 * touched cost nothing (pinned memory is all taken at once: it grows as
 * asked). Scratch taken before CUDA started is pinned in place once it has
 * (pin_scratch), or else taken again, pinned (once: if pinning then fails,
 * the plain memory stays). */
static guint8 *
region_memory (CudafxOp *self, int i, gboolean locked, gsize bytes, gsize whole, gboolean *fresh)
{
  *fresh = !locked;
  if (!locked)
    return g_try_malloc (bytes);
  if (self->scratch_size[i] < bytes || (!self->scratch_pinnable[i] && cudafx_host_pinnable ()))
    {
      cudafx_host_free (self->scratch[i]);
      self->scratch_pinnable[i] = cudafx_host_pinnable ();
      self->scratch[i] = NULL;
      /* The whole input's size when it can be had, else (memory short)
       * only what this region needs. */
      if (whole > bytes && !self->scratch_pinnable[i]
          && (self->scratch[i] = cudafx_host_alloc_plain (whole)))
        bytes = whole;
      if (!self->scratch[i])
        self->scratch[i] = self->scratch_pinnable[i] ? pinned_memory (bytes) : cudafx_host_alloc_plain (bytes);
      self->scratch_size[i] = self->scratch[i] ? bytes : 0;
    }
  return self->scratch[i];
}

/* A node's first call takes its scratch before CUDA has started (the
 * warm-up thread starts it when the node is prepared): plain memory, into
 * which the input is read while CUDA starts. The call then waits here for
 * the start (a second cudafx_backend_warm_up waits for the first: the
 * driver starts once, and the first holds the context's lock) and pins
 * that memory in place, the rows not read yet and the output cleared first
 * on GEGL's threads: far less than the engine spent making pinned staging
 * of the image's size for this call and copying through it, after which
 * the node's next call took its scratch again, pinned (docs/BENCHMARKS.md,
 * "GEGL operations: region memory and the first call"). Once a
 * node, under scratch_lock; TRUE when src and dst are then pinned. */
static gboolean
pin_scratch (CudafxOp *self, const cudafx_image *src, const cudafx_image *dst, gsize bytes, gsize src_written)
{
  gsize written[2] = { src_written, 0 };

  if (self->scratch_pinned_late)
    return FALSE;
  self->scratch_pinned_late = TRUE;
  cudafx_backend_warm_up ();
  if (!cudafx_host_pinnable ())
    return FALSE;
  for (int i = 0; i < 2; i++)
    if (!self->scratch_pinnable[i])
      {
        clear_region (self->scratch[i] + written[i], bytes - written[i]);
        if (cudafx_host_pin (self->scratch[i], bytes))
          self->scratch_size[i] = bytes; /* what is pinned: larger asks take pinned memory anew */
        self->scratch_pinnable[i] = TRUE;
      }
  return cudafx_host_pinned (src->data, bytes) && cudafx_host_pinned (dst->data, bytes);
}

/* A region's rows moved between a buffer and memory. With the GPU's work
 * a millisecond or two, these moves take most of a call: spread over
 * GEGL's threads they run several times faster than one thread's
 * gegl_buffer_get or _set. Each thread takes whole columns of the buffer's
 * tiles, so that no tile is shared: a band of rows a few tall on each
 * thread, as the GPU's stripes written one by one would have it, had
 * several threads write each tile of a new buffer and took twice as long
 * as the whole region at once (docs/BENCHMARKS.md, "GEGL operations:
 * moving rows").
 * On the CPU, where the filter keeps every core busy and the moves are a
 * small part, one thread moves them: threads making the tiles of a new
 * output buffer contend, and on a busy machine of few cores that set took
 * ten times longer (docs/BENCHMARKS.md, "GEGL operations: moving rows"). */
typedef struct
{
  GeglBuffer          *buffer;
  const GeglRectangle *rect;   /* at level */
  int                  level;
  const Babl          *format;
  guint8              *pixels; /* rect's first pixel */
  gsize                stride;
  gboolean             to_buffer;
  int                  tile_width, first_column, columns; /* rect's tile columns */
} region_move;

static void
move_band (const GeglRectangle *band, const region_move *m)
{
  int     bpp = babl_format_get_bytes_per_pixel (m->format);
  guint8 *p = m->pixels + (gsize) (band->y - m->rect->y) * m->stride
              + (gsize) (band->x - m->rect->x) * bpp;

  if (m->to_buffer)
    gegl_buffer_set (m->buffer, band, m->level, m->format, p, m->stride);
  else
    gegl_buffer_get (m->buffer, band, 1.0 / (1 << m->level), m->format, p, m->stride,
                     GEGL_ABYSS_NONE);
}

/* Thread i of n: its share of the tile columns. */
static void
move_columns (gint i, gint n, gpointer data)
{
  const region_move   *m = data;
  const GeglRectangle *r = m->rect;
  int x0 = MAX (r->x, (m->first_column + m->columns * i / n) * m->tile_width);
  int x1 = MIN (r->x + r->width, (m->first_column + m->columns * (i + 1) / n) * m->tile_width);
  GeglRectangle band = { x0, r->y, x1 - x0, r->height };

  if (x1 > x0)
    move_band (&band, m);
}

/* a / b rounded down, b > 0. */
static int
floor_div (int a, int b)
{
  return a / b - (a % b < 0);
}

/* Pixels per thread below which another thread costs more than it saves. */
#define MOVE_THREAD_COST (64 * 1024)

static void
move_region (GeglBuffer *buffer, const GeglRectangle *rect, int level, const Babl *format,
             guint8 *pixels, gsize stride, gboolean to_buffer, gboolean threaded)
{
  region_move m = { buffer, rect, level, format, pixels, stride, to_buffer, 1, 0, 1 };
  gint64      n = 1;

  if (threaded)
    {
      g_object_get (buffer, "tile-width", &m.tile_width, NULL);
      m.tile_width = MAX (m.tile_width, 1);
      m.first_column = floor_div (rect->x, m.tile_width);
      m.columns = floor_div (rect->x + rect->width - 1, m.tile_width) + 1 - m.first_column;
      n = MIN ((gint64) m.columns, (gint64) rect->width * rect->height / MOVE_THREAD_COST);
    }
  if (n > 1)
    gegl_parallel_distribute ((gint) n, move_columns, &m);
  else
    move_band (rect, &m);
}

/* The region's rows in and out: the input's rows read as the engine asks for
 * them (its rows_needed), so that with the GPU each stripe's rows are read
 * while the stripes above are computed, and the engine's finished rows
 * written into the output as they come (its rows_ready), each stripe while
 * the stripes below it are still computed and copied back; the operation then
 * takes little more than its reading and writing, or its GPU work
 * (docs/BENCHMARKS.md, "GEGL operations: rows as the GPU asks for them and
 * finishes them"). Rows move whole tile rows at a time, the rest with the
 * next ask or report: a tile moved in two parts costs its copy twice.
 * Finished rows are set an eighth of the region at a time at the least: each
 * set is a round of GEGL's threads, and one per stripe (16 on a large region)
 * cost the whole call more than the later start of the first
 * (docs/BENCHMARKS.md, "GEGL operations: rows as the GPU asks for them and
 * finishes them"). Where the engine needs all of the input first (the CPU,
 * the wrap border, quantize but of a large u8 region without alpha, which it
 * asks for in a few pieces), it asks for all rows at once. */
typedef struct
{
  GeglBuffer          *input, *output;
  const GeglRectangle *out;     /* what is written, at level */
  const GeglRectangle *read;    /* what the engine's rows are, at level */
  int                  level;
  const Babl          *format;
  const cudafx_image  *src, *dst;
  int                  in_tile_height, tile_height;
  int                  in_rows; /* read's rows above this one (from read's top) are in src */
  int                  written; /* out's rows above this row are in output */
  int                  min_set; /* rows a set takes at the least, but the last one */
  gboolean             threaded;
  timeline            *timeline;
} region_rows;

/* A tile row's start (tiles from row 0) at or below row y. */
static int
tile_row_up (int y, int tile_height)
{
  return y + (tile_height - (y % tile_height + tile_height) % tile_height) % tile_height;
}

static int
read_rows (int y, void *data)
{
  region_rows  *r = data;
  int           end = MIN (tile_row_up (r->read->y + y, r->in_tile_height), r->read->y + r->read->height);
  GeglRectangle rows = { r->read->x, r->read->y + r->in_rows, r->read->width, end - r->read->y - r->in_rows };

  if (rows.height <= 0)
    return 0;
  move_region (r->input, &rows, r->level, r->format, (guint8 *) r->src->data + (gsize) r->in_rows * r->src->stride,
               r->src->stride, FALSE, r->threaded);
  timeline_mark (r->timeline, "read");
  r->in_rows = end - r->read->y;
  return 0;
}

static void
write_rows (int y0, int y1, void *data)
{
  region_rows  *w = data;
  int           bpp = babl_format_get_bytes_per_pixel (w->format);
  int           end = w->read->y + y1, out_end = w->out->y + w->out->height;
  GeglRectangle rows;

  if (y0 == 0)
    w->written = w->out->y; /* the first report, or the engine's start again on the CPU */
  if (end < out_end)
    end -= (end % w->tile_height + w->tile_height) % w->tile_height; /* a tile row's start (tiles from row 0) */
  else
    end = out_end;
  timeline_mark (w->timeline, "rows");
  if (end <= w->written || (end < out_end && end - w->written < w->min_set))
    return;
  rows = (GeglRectangle) { w->out->x, w->written, w->out->width, end - w->written };
  move_region (w->output, &rows, w->level, w->format,
               (guint8 *) w->dst->data + (gsize) (rows.y - w->read->y) * w->dst->stride
                                       + (gsize) (rows.x - w->read->x) * bpp,
               w->dst->stride, TRUE, w->threaded);
  timeline_mark (w->timeline, "set");
  w->written = end;
}

/* Filters area of the input (all of it for whole outputs) with its halo of
 * real neighbours, cut only at the input's edge, and writes roi; all of it
 * at level (rectangles in that level's coordinates). *identity: the
 * settings leave nothing to do at that level (nothing written). */
static gboolean
filter_region (CudafxOp *self, GeglBuffer *input, GeglBuffer *output, const GeglRectangle *roi,
               const GeglRectangle *in_box, int level, gboolean *identity, GError **error)
{
  int              filter = FILTER_OF (self);
  cudafx_proc_args args = self->args;
  GeglRectangle    area, read, grown, out;
  cudafx_image     src = { 0 }, dst = { 0 };
  cudafx_options   options;
  timeline         tl;
  region_rows      rows = { .input = input, .output = output, .out = &out, .read = &read, .level = level,
                            .format = self->format, .src = &src, .dst = &dst, .timeline = &tl };
  int              halo = GEGL_OPERATION_AREA_FILTER (self)->left;
  int              bpp = babl_format_get_bytes_per_pixel (self->format);
  gboolean         ok = FALSE, locked, src_fresh = FALSE, dst_fresh = FALSE, threaded;
  gsize            stride, bytes, whole;

  *identity = !at_level_args (&args, level, halo);
  if (*identity)
    return TRUE;
  if (level > 0 && !cudafx_proc_halo (&args, &halo, error))
    return FALSE;
  area = whole_output (self, filter) ? *in_box : *roi;
  if (!gegl_rectangle_intersect (&area, &area, in_box) || !gegl_rectangle_intersect (&out, roi, &area))
    return TRUE;
  timeline_start (&tl, cudafx_filters[filter].name, &area);
  locked = g_mutex_trylock (&self->scratch_lock);
  if (!g_size_checked_mul (&whole, (gsize) in_box->width * bpp, (gsize) in_box->height))
    whole = 0;
  if (automatic_noise (self, filter)
      && !noise_sigma (self, input, in_box, level,
                       locked && whole ? region_memory (self, 0, TRUE, whole, whole, &src_fresh)
                                       : NULL,
                       &args.nlmeans_sigma, &args.nlmeans_noise, error))
    goto out;
  /* The whole input is there: the halo the settings and the noise found need. */
  if (whole_input (self, filter) && !cudafx_proc_halo (&args, &halo, error))
    goto out;
  timeline_mark (&tl, "sigma");
  grown = (GeglRectangle) { area.x - halo, area.y - halo, area.width + 2 * halo,
                            area.height + 2 * halo };
  gegl_rectangle_intersect (&read, &grown, in_box);
  args.origin_x = read.x - in_box->x;
  args.origin_y = read.y - in_box->y;
  if (!g_size_checked_mul (&stride, (gsize) read.width, (gsize) bpp) ||
      !g_size_checked_mul (&bytes, stride, (gsize) read.height) ||
      !(src.data = region_memory (self, 0, locked, bytes, whole, &src_fresh)) ||
      !(dst.data = region_memory (self, 1, locked, bytes, whole, &dst_fresh)))
    {
      g_set_error (error, CUDAFX_PROC_ERROR, CUDAFX_ERR_NO_MEMORY,
                   _("not enough memory for a %d×%d region"), read.width, read.height);
      goto out;
    }
  /* Pinned memory: the CUDA backend has started (and runs the filter unless it fails). */
  threaded = cudafx_host_pinned (src.data, bytes) && cudafx_host_pinned (dst.data, bytes);
  rows.threaded = threaded;
  timeline_mark (&tl, "memory");
  src.width = read.width;
  src.height = read.height;
  src.channels = babl_format_get_n_components (self->format);
  src.has_alpha = babl_format_has_alpha (self->format);
  src.type = babl_format_get_type (self->format, 0) == babl_type ("u8") ? CUDAFX_U8 : CUDAFX_F32;
  src.stride = stride;
  {
    void *d = dst.data;
    dst = src;
    dst.data = d;
  }
  cudafx_options_init (&options);
  /* A parallel region ends when its last thread does: on a busy machine of
   * few cores, a thread waiting to be scheduled held up the engine's call on
   * the small chunks GIMP's merge starts with many times longer than one
   * thread takes for them (docs/BENCHMARKS.md, "GEGL operations: moving rows"). */
  if ((gint64) read.width * read.height < 2 * MOVE_THREAD_COST)
    options.threads = 1;
  g_object_get (output, "tile-height", &rows.tile_height, NULL);
  g_object_get (input, "tile-height", &rows.in_tile_height, NULL);
  rows.tile_height = MAX (rows.tile_height, 1);
  rows.in_tile_height = MAX (rows.in_tile_height, 1);
  /* nl-means' kernels take several times longer than reading its input: the
   * engine asks for the rows stripe by stripe and the read hides behind them.
   * Quantize asks for a large region in a few pieces, each uploaded and
   * sampled while the next is read. Median's and the convolutions' kernels
   * are shorter than the read and hide nothing, while a read per stripe costs
   * more than one read of the region (docs/BENCHMARKS.md, "GEGL operations:
   * rows as the GPU asks for them and finishes them"), so they read it all
   * first. */
  if (filter == CUDAFX_FILTER_NLMEANS || filter == CUDAFX_FILTER_QUANTIZE)
    options.rows_needed = read_rows;
  else
    read_rows (read.height, &rows);
  if (locked && !threaded
      && pin_scratch (self, &src, &dst, bytes, (gsize) rows.in_rows * stride))
    {
      rows.threaded = TRUE;
      timeline_mark (&tl, "pinned");
    }
  rows.min_set = tile_row_up (read.height / 8, rows.tile_height);
  options.rows_ready = write_rows;
  options.rows_user = &rows;
  /* Not for nl-means: its kernels wait for each progress report (cancel
   * answers between them), which would slow what the timeline shows. */
  if (tl.on && filter != CUDAFX_FILTER_NLMEANS)
    {
      options.progress = timeline_progress;
      options.user_data = &tl;
    }
  ok = cudafx_proc_run (&args, &src, &dst, &options, NULL, error);
out:
  timeline_end (&tl);
  if (src_fresh)
    g_free (src.data);
  if (dst_fresh)
    g_free (dst.data);
  if (locked)
    g_mutex_unlock (&self->scratch_lock);
  return ok;
}

static gboolean
process (GeglOperation *operation, GeglBuffer *input, GeglBuffer *output,
         const GeglRectangle *roi, gint level)
{
  CudafxOp      *self = CUDAFX_OP (operation);
  GeglRectangle *source_box = gegl_operation_source_get_bounding_box (operation, "input");
  GeglRectangle  in_box, at;
  GError        *error = NULL;
  gboolean       identity = FALSE;
  gchar         *unbounded;

  if (!source_box || gegl_rectangle_is_empty (source_box))
    return TRUE;
  in_box = at_level (source_box, level);
  at = at_level (roi, level);
  if (gegl_rectangle_is_empty (&in_box) || gegl_rectangle_is_empty (&at))
    return TRUE;
  if (self->invalid)
    {
      g_warning ("%s", self->invalid);
      error_output (output, roi, level);
      return TRUE;
    }
  unbounded = unbounded_input (self, source_box);
  if (unbounded)
    {
      g_warning ("%s", unbounded);
      g_free (unbounded);
      error_output (output, roi, level);
      return TRUE;
    }
  if ((whole_output (self, FILTER_OF (self)) || whole_input (self, FILTER_OF (self)))
      && whole_failed (self, source_box))
    {
      /* GEGL was asked for roi only: the input outside it is not there. */
      g_warning (_("cudafx:%s: not enough memory for the whole %d×%d input, which this filter "
                   "needs at once"),
                 cudafx_filters[FILTER_OF (self)].name, in_box.width, in_box.height);
      error_output (output, roi, level);
      return TRUE;
    }
  if (!filter_region (self, input, output, &at, &in_box, level, &identity, &error))
    {
      /* The whole output of a large input, asked for at once because it is
       * cached whole, would take as much memory to fill with the pattern
       * as what was missing: it is left empty (transparent) this once, and
       * GEGL asks for the regions it wants from now on. */
      gboolean too_large = error->code == CUDAFX_ERR_NO_MEMORY
                           && (gint64) at.width * at.height > ERROR_FILL_MAX;

      if (error->code == CUDAFX_ERR_NO_MEMORY
          && (whole_output (self, FILTER_OF (self)) || whole_input (self, FILTER_OF (self))))
        {
          g_mutex_lock (&self->lock);
          self->whole_failed = TRUE;
          self->whole_failed_box = *source_box;
          g_mutex_unlock (&self->lock);
        }
      if (too_large)
        g_warning (_("cudafx:%s: %s; the output is left empty"), cudafx_filters[FILTER_OF (self)].name,
                   without_name (FILTER_OF (self), error->message));
      else
        g_warning ("cudafx:%s: %s", cudafx_filters[FILTER_OF (self)].name,
                   without_name (FILTER_OF (self), error->message));
      g_error_free (error);
      if (!too_large)
        error_output (output, roi, level);
      return TRUE;
    }

  if (identity && !pass_through (input, output, roi, level))
    {
      g_warning (_("cudafx:%s: not enough memory for a %d×%d region"),
                 cudafx_filters[FILTER_OF (self)].name, at.width, at.height);
      error_output (output, roi, level);
    }
  return TRUE;
}

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
  GEGL_OPERATION_CLASS (parent_class)->attach (operation);
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
    G_OBJECT_CLASS (parent_class)->dispatch_properties_changed (object, n, kept);
}

static void
finalize (GObject *object)
{
  CudafxOp *self = CUDAFX_OP (object);

  forget_noise (self);
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
  G_OBJECT_CLASS (parent_class)->finalize (object);
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
  gchar                    *title = plain_label (_(desc->menu_label));
  gchar                     op_name[64];
  const gchar              *name;

  /* GEGL keeps the name's pointer (the other keys it copies). */
  g_snprintf (op_name, sizeof op_name, "cudafx:%s", desc->name);
  name = g_intern_string (op_name);
  parent_class = g_type_class_peek_parent (klass);
  ((CudafxOpClass *) klass)->filter = filter;
  object_class->set_property = set_property;
  object_class->get_property = get_property;
  object_class->finalize = finalize;
  for (int i = 0; i < desc->n_args; i++)
    g_object_class_install_property (object_class, i + 1,
                                     arg_pspec (filter, &desc->args[i]));
  /* The σ automatic mode found, an output that GIMP's filter dialog shows
   * greyed out (GIMP's "sensitive" key), in automatic mode only (its
   * "visible" key). Writable all the same, and writing it does nothing:
   * GIMP copies every property of a filter's settings onto its operation
   * (a read-only one made GLib log a critical on each use). Notified
   * through the node (announce_sigma), never the operation, yet not
   * G_PARAM_EXPLICIT_NOTIFY: GIMP's copy of a property keeps its flags, and
   * its settings never notify explicitly, so the dialog would not update. */
  if (has_automatic (filter))
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
  operation_class->prepare = prepare;
  operation_class->get_bounding_box = get_bounding_box;
  operation_class->get_required_for_output = get_required_for_output;
  /* A cached region makes GEGL keep the node's output in a buffer of its
   * own. Without one, each render's output is a new buffer whose tiles GEGL
   * allocates as the region is set into it, which costs several times a
   * set into tiles that exist; with one, a render sets its rows into the
   * tiles of the render before, and a region drawn again at the same
   * settings (the canvas scrolled back) comes from the cache
   * (docs/BENCHMARKS.md, "GEGL operations: every output cached").
   * The cost is the output's memory, in GEGL's tile cache, which GIMP
   * bounds and swaps. */
  operation_class->get_cached_region = get_cached_region;
  /* The engine spreads a region over all cores or the GPU itself: GEGL's
   * splitting it over threads would only add halos and contention. */
  operation_class->threaded = FALSE;
  filter_class->process = process;

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
          choice_types[f][i] = choice_enum (module, f, &cudafx_filters[f].args[i]);
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
